"""A real YARN for the tests of profile ``existing_master`` on ``yarn``: Hadoop's ResourceManager and a
NodeManager in one JVM (``MiniYARNCluster``), whose containers are real processes on this machine.

Started by the suite's own main (``tests/java/MiniYarn.java``, run from source by ``java``) from the ``yarn``
JVM bundle (resolved on first use), with the NodeManager's advertised memory and vcores fitted to this
machine and the tests' HDFS as its default filesystem, where Spark stages an application. The client side is
pyspark's own ``spark-yarn``, pointed at the cluster with ``HADOOP_CONF_DIR`` (:attr:`MiniYarn.conf_dir`).
"""

from __future__ import annotations

import json
import os
import subprocess
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from include.spark import jvm_deps
from include.spark.spark_submit import spark_home
from include.tooling import java_server
from tests.processes import java_processes_in

_MAIN = Path(__file__).resolve().parent / "java" / "MiniYarn.java"


@dataclass(frozen=True)
class MiniYarn:
    """A started YARN: the client configuration folder it wrote, its ResourceManager's web address, the folder
    its NodeManager's containers run in, and its process."""

    conf_dir: Path
    web: str
    folder: Path
    proc: subprocess.Popen

    def apps(self) -> list[dict]:
        """Every application the ResourceManager knows (its REST API's ``/ws/v1/cluster/apps``)."""
        with urllib.request.urlopen(f"http://{self.web}/ws/v1/cluster/apps", timeout=10) as answer:
            return (json.loads(answer.read()).get("apps") or {}).get("app") or []

    def executors(self) -> list[int]:
        """Pids of the Spark executors running in the NodeManager's containers (each container's folder is
        under the NodeManager's local dirs, inside :attr:`folder`)."""
        return java_processes_in(self.folder, b"YarnCoarseGrainedExecutorBackend")

    @staticmethod
    def executor_stderr(pid: int) -> Path:
        """The executor's stderr file: in its container's log folder, which Spark passes it as a property."""
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return Path("/nonexistent")
        prefix = b"-Dspark.yarn.app.container.log.dir="
        folder = next((a[len(prefix):].decode() for a in args if a.startswith(prefix)), "/nonexistent")
        return Path(folder) / "stderr"

    def stop(self) -> None:
        """Stop the ResourceManager and NodeManager (their shutdown hook stops what they run)."""
        java_server.stop(self.proc, timeout_s=30)


def start(folder: Path, default_fs: str, *, memory_mb: int = 4096, vcores: int = 4,
          timeout_s: float = 240) -> MiniYarn:  # fmt: skip
    """Start a ResourceManager and one NodeManager advertising ``memory_mb`` and ``vcores``, with
    ``default_fs`` as the default filesystem; returns once the NodeManager has registered."""
    folder.mkdir(parents=True, exist_ok=True)
    conf_dir, log = folder / "conf", folder / "yarn.log"
    # The ResourceManager logs through log4j 1's API: pyspark's bridge to log4j 2 carries it.
    log4j = [p for pattern in ("log4j-1.2-api-*.jar", "log4j-api-*.jar", "log4j-core-*.jar")
             for p in sorted((spark_home() / "jars").glob(pattern))]  # fmt: skip
    classpath = ":".join(str(j) for j in [*jvm_deps.resolve("yarn"), *log4j])
    java = java_server.java()
    # Containers start $JAVA_HOME/bin/java: the NodeManager hands them its own JAVA_HOME.
    java_home = os.environ.get("JAVA_HOME") or str(Path(os.path.realpath(java)).parent.parent)
    proc = java_server.launch(
        [java, "-Xmx768m", "-XX:TieredStopAtLevel=1", "-cp", classpath, str(_MAIN), str(conf_dir), default_fs,
         str(memory_mb), str(vcores), "1"],
        cwd=folder, log=log, env={**os.environ, "JAVA_HOME": java_home})  # fmt: skip
    ready = conf_dir / "ready"
    java_server.wait_ready(proc, ready.exists, name="the mini YARN", port=0, log=log, timeout_s=timeout_s,
                           error=RuntimeError)  # fmt: skip
    return MiniYarn(conf_dir, ready.read_text().strip(), folder, proc)
