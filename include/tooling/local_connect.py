"""A Kafka Connect standalone worker running Debezium's PostgreSQL connector, for the change-data-capture tests.

The worker is Apache Kafka's own (``ConnectStandalone`` from the ``kafka`` bundle's ``connect-runtime``);
the connector is Debezium's (the ``debezium`` bundle), loaded from a plugin folder so that its libraries
(protobuf-java 3, the PostgreSQL driver) stay in a class loader of their own. Source offsets are kept in a
file, so stopping the worker (or killing it) and starting it again on the same folder resumes where the
connector last recorded, as a Connect cluster does, re-sending what it had not recorded yet.

Values are Connect's ``JsonConverter`` output, with or without schemas: the records exactly as a
Debezium deployment writes them to Kafka.
"""

from __future__ import annotations

import json
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from include.contract.errors import PipelineError
from include.ports import free_port
from include.tooling import java_server


class ConnectError(PipelineError, RuntimeError):
    """The Connect worker or its connector did not start or failed; the message carries the log's tail."""


@dataclass
class PostgresSource:
    """What the connector captures: one database's tables, under ``topic_prefix`` (topics
    ``<topic_prefix>.<schema>.<table>``)."""

    port: int
    tables: tuple[str, ...]
    topic_prefix: str
    database: str = "postgres"
    user: str = "postgres"
    partitions: int = 3
    schemas: bool = False
    #: Debezium's own settings on top of the ones below (e.g. ``snapshot.mode``).
    extra: dict[str, str] = field(default_factory=dict)

    def connector_properties(self) -> dict[str, str]:
        """The connector's configuration: pgoutput, every operation (truncates too), transaction metadata,
        decimals as text, and the topics created with ``partitions`` partitions."""
        slot = self.topic_prefix.lower().replace("-", "_").replace(".", "_")
        return {
            "name": f"{self.topic_prefix}-source",
            "connector.class": "io.debezium.connector.postgresql.PostgresConnector",
            "tasks.max": "1",
            "database.hostname": "127.0.0.1",
            "database.port": str(self.port),
            "database.user": self.user,
            "database.password": "unused",  # the test server trusts local connections
            "database.dbname": self.database,
            "topic.prefix": self.topic_prefix,
            "table.include.list": ",".join(self.tables),
            "plugin.name": "pgoutput",
            "slot.name": f"{slot}_slot",
            "publication.name": f"{slot}_publication",
            "publication.autocreate.mode": "filtered",
            "provide.transaction.metadata": "true",
            "skipped.operations": "none",
            "decimal.handling.mode": "string",
            "topic.creation.default.replication.factor": "1",
            "topic.creation.default.partitions": str(self.partitions),
            **self.extra,
        }


@dataclass
class LocalConnect:
    """A running standalone worker."""

    folder: Path
    rest_port: int
    process: subprocess.Popen
    log: Path
    connector: str

    def status(self) -> dict:
        """The connector's status from the worker's REST API."""
        url = f"http://127.0.0.1:{self.rest_port}/connectors/{self.connector}/status"
        with urllib.request.urlopen(url, timeout=5) as answer:
            return json.load(answer)

    def running(self) -> bool:
        """The connector and its one task are RUNNING (raises :class:`ConnectError` if the task FAILED)."""
        state = self.status()
        tasks = state.get("tasks", [])
        failed = [t for t in tasks if t.get("state") == "FAILED"]
        if failed:
            raise ConnectError(f"connector {self.connector} failed: {failed[0].get('trace', '')[:3000]}")
        return state["connector"]["state"] == "RUNNING" and bool(tasks) and tasks[0]["state"] == "RUNNING"

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop the worker (SIGTERM: it records its offsets first); the folder stays for a restart."""
        java_server.stop(self.process, timeout_s)

    def kill(self) -> None:
        """SIGKILL the worker: offsets since the last flush are not recorded, and a restart re-sends them."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def start(folder: Path, bootstrap_servers: str, source: PostgresSource, *, flush_interval_ms: int = 1000,
          timeout_s: float = 120.0) -> LocalConnect:  # fmt: skip
    """Start a worker in ``folder`` (kept across restarts: its offsets file is there) and wait until the
    connector's task runs. The worker records the connector's offsets every ``flush_interval_ms`` (and when
    stopped): what a kill loses since the last record, a restart sends again."""
    from include.spark import jvm_deps

    folder.mkdir(parents=True, exist_ok=True)
    plugins = folder / "plugins"
    plugins.mkdir(exist_ok=True)
    link = plugins / "debezium-connector-postgres"
    if not link.exists():
        link.symlink_to(jvm_deps.resolve("debezium")[0].parent, target_is_directory=True)
    rest_port = free_port()
    schemas = "true" if source.schemas else "false"
    worker = {
        "bootstrap.servers": bootstrap_servers,
        "key.converter": "org.apache.kafka.connect.json.JsonConverter",
        "value.converter": "org.apache.kafka.connect.json.JsonConverter",
        "key.converter.schemas.enable": schemas,
        "value.converter.schemas.enable": schemas,
        "offset.storage.file.filename": str(folder / "connect.offsets"),
        "offset.flush.interval.ms": str(flush_interval_ms),
        "listeners": f"http://127.0.0.1:{rest_port}",
        "plugin.path": str(plugins),
    }
    worker_file, connector_file = folder / "worker.properties", folder / "connector.properties"
    worker_file.write_text("".join(f"{k}={v}\n" for k, v in worker.items()))
    properties = source.connector_properties()
    connector_file.write_text("".join(f"{k}={v}\n" for k, v in properties.items()))
    log = folder / "connect.log"
    cmd = [java_server.java(), "-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1",
           java_server.log_to_file(folder / "log4j2.properties", log),
           "-cp", jvm_deps.kafka_classpath(), "org.apache.kafka.connect.cli.ConnectStandalone",
           str(worker_file), str(connector_file)]  # fmt: skip
    worker_process = java_server.launch(cmd, cwd=folder, log=folder / "connect.out")
    connect = LocalConnect(folder, rest_port, worker_process, log, properties["name"])
    try:
        java_server.wait_ready(worker_process, connect.running, name="Kafka Connect", port=rest_port, log=log,
                               timeout_s=timeout_s, error=ConnectError, interval_s=0.5)  # fmt: skip
    except ConnectError:
        connect.stop()
        raise
    return connect
