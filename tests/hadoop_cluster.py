"""A real HDFS for the tests of a lakehouse on ``hdfs://``: Hadoop's own NameNode and DataNode in one JVM.

Started from ``hadoop-client-minicluster`` (the ``hadoop`` JVM bundle, resolved on first use) with its
cluster manager, on a free NameNode port and with its storage in one folder, as the project's other local
Java servers are (:mod:`include.tooling.java_server`). The clients are the real ones: Spark's Hadoop client
(pyspark's jars), delta-rs's ``hdfs-native`` and the run lock's.
"""

from __future__ import annotations

import socket
import subprocess
from dataclasses import dataclass
from pathlib import Path

from include.ports import free_port
from include.spark import jvm_deps
from include.tooling import java_server

_MAIN = "org.apache.hadoop.mapreduce.MiniHadoopClusterManager"


@dataclass(frozen=True)
class MiniHdfs:
    """A started HDFS: its ``hdfs://127.0.0.1:<port>`` address and its process."""

    uri: str
    proc: subprocess.Popen

    def stop(self) -> None:
        """Stop the NameNode and DataNode."""
        java_server.stop(self.proc, timeout_s=30)


def start(folder: Path, timeout_s: float = 240) -> MiniHdfs:
    """Start an HDFS of one DataNode with its state in ``folder``; returns once the cluster is up."""
    folder.mkdir(parents=True, exist_ok=True)
    details, log, port = folder / "details.json", folder / "hdfs.log", free_port()
    jars = jvm_deps.resolve("hadoop")
    # Its data lands under the working folder (target/test/data). The details file is written once the
    # DataNode has registered, after the NameNode's port already answers.
    proc = java_server.launch(
        [java_server.java(), "-Xmx768m", "-XX:TieredStopAtLevel=1", "-cp", ":".join(str(j) for j in jars), _MAIN,
         "-nomr", "-format", "-datanodes", "1", "-nnport", str(port), "-writeDetails", str(details)],
        cwd=folder, log=log)  # fmt: skip

    def ready() -> bool:
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            return details.exists() and details.stat().st_size > 0

    java_server.wait_ready(proc, ready, name="the mini HDFS", port=port, log=log, timeout_s=timeout_s,
                           error=RuntimeError)  # fmt: skip
    return MiniHdfs(f"hdfs://127.0.0.1:{port}", proc)
