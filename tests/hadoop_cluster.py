"""A real HDFS for the tests of a lakehouse on ``hdfs://``: Hadoop's own NameNode and DataNode in one JVM.

Started from ``hadoop-client-minicluster`` (the ``hadoop`` JVM bundle, resolved on first use) with its
cluster manager, on a free NameNode port and with its storage in one folder. The clients are the real
ones: Spark's Hadoop client (pyspark's jars), delta-rs's ``hdfs-native`` and the run lock's.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from include.spark import jvm_deps

_MAIN = "org.apache.hadoop.mapreduce.MiniHadoopClusterManager"


@dataclass(frozen=True)
class MiniHdfs:
    """A started HDFS: its ``hdfs://127.0.0.1:<port>`` address, its process and its folder."""

    uri: str
    proc: subprocess.Popen
    folder: Path

    def stop(self, timeout_s: float = 30) -> None:
        """Stop the NameNode and DataNode (SIGTERM to the JVM's process group, then SIGKILL)."""
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def _java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home else "java"


def start(folder: Path, timeout_s: float = 240) -> MiniHdfs:
    """Start an HDFS of one DataNode with its state in ``folder``; returns once the NameNode answers."""
    folder.mkdir(parents=True, exist_ok=True)
    details = folder / "details.json"
    jars = jvm_deps.resolve("hadoop")
    cmd = [_java(), "-Xmx768m", "-XX:TieredStopAtLevel=1", "-cp", ":".join(str(j) for j in jars), _MAIN,
           "-nomr", "-format", "-datanodes", "1", "-nnport", "0", "-writeDetails", str(details)]  # fmt: skip
    with open(folder / "hdfs.log", "ab") as log:
        # Its data lands under the working folder (target/test/data); its own session, so a test's
        # Ctrl-C does not kill it under the other tests, and stop() reaches the whole JVM.
        proc = subprocess.Popen(cmd, cwd=folder, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = (folder / "hdfs.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"the mini HDFS exited with code {proc.returncode}; log {folder / 'hdfs.log'}:\n{tail}")
        if details.exists() and details.stat().st_size:
            port = int(json.loads(details.read_text())["namenode_port"])
            with socket.create_connection(("127.0.0.1", port), timeout=5):
                return MiniHdfs(f"hdfs://127.0.0.1:{port}", proc, folder)
        time.sleep(0.5)
    MiniHdfs("", proc, folder).stop()
    raise RuntimeError(f"the mini HDFS did not start within {timeout_s:g}s; log {folder / 'hdfs.log'}")
