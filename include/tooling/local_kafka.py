"""A real single-node Apache Kafka broker (KRaft) on 127.0.0.1, for tests and the demo.

The broker runs from the official Apache Kafka jars (resolved by
:mod:`include.spark.jvm_deps`), on free ports, with its state in one folder:

    python -m include.tooling.local_kafka start var/kafka   # prints the bootstrap address
    python -m include.tooling.local_kafka stop var/kafka

Kafka's own command-line tools run from the same jars through
:func:`run_kafka_tool`, e.g. ``ConsumerGroupCommand`` for consumer lag.
``python -m include.tooling.local_kafka archive`` (``make setup``) builds a
class-data-sharing archive the broker and the tools then map
(:func:`build_archive`).

By default clients connect in PLAINTEXT. ``start(..., sasl_user=SaslPlainUser(name, password))``
(or ``start DIR --sasl-plain-user NAME`` with the password in
``$KDE_KAFKA_SASL_PASSWORD``) makes the client listener SASL_PLAINTEXT with
mechanism PLAIN and that one user; the controller listener stays PLAINTEXT
on 127.0.0.1. Clients then need :meth:`SaslPlainUser.client_config`, Kafka's
tools a ``--command-config`` file from :func:`write_tool_config`.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from include import settings
from include.contract.errors import PipelineError
from include.ports import free_port, port_free
from include.readers.connections import jaas_config, jaas_quote
from include.spark import jvm_cds, jvm_deps
from include.tooling import java_server, jvm_cds_build

#: Environment variable the command line reads the SASL user's password from (never an argument).
#: A JAAS option name is ``user_<name>``; other characters would end the name.
_SASL_USERNAME = re.compile(r"^[A-Za-z0-9_-]+$")

#: Main classes of Kafka's command-line tools (what the bin/*.sh scripts run).
KAFKA_TOOLS = {
    "configs": "kafka.admin.ConfigCommand",
    "consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "consumer-perf-test": "org.apache.kafka.tools.ConsumerPerformance",
    "producer-perf-test": "org.apache.kafka.tools.ProducerPerformance",
    "topics": "org.apache.kafka.tools.TopicCommand",
    "storage": "kafka.tools.StorageTool",
}


class BrokerError(PipelineError, RuntimeError):
    """The local broker could not be started or stopped."""


@dataclass(frozen=True)
class SaslPlainUser:
    """The one SASL/PLAIN user of a broker started with ``sasl_user``: its name and password."""

    username: str
    password: str = field(repr=False)

    def __post_init__(self) -> None:
        if not _SASL_USERNAME.fullmatch(self.username):
            raise ValueError(f"SASL username: expected letters, digits, '_' or '-', got {self.username!r}")
        if not self.password:
            raise ValueError(f"SASL user {self.username!r}: expected a non-empty password")

    def client_config(self) -> dict[str, str]:
        """librdkafka (confluent-kafka) settings that authenticate as this user; add ``bootstrap.servers``."""
        return {
            "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN",
            "sasl.username": self.username,
            "sasl.password": self.password,
        }

    def jaas_config(self) -> str:
        """The Java clients' ``sasl.jaas.config`` for this user."""
        return jaas_config("PLAIN", self.username, self.password)


@dataclass(frozen=True)
class LocalBroker:
    """A started broker: where it listens and which process it is."""

    bootstrap_servers: str
    pid: int
    data_dir: Path
    #: What clients speak on ``bootstrap_servers``: PLAINTEXT, or SASL_PLAINTEXT (mechanism PLAIN).
    security_protocol: str = "PLAINTEXT"

    def stop(self, timeout_s: float = 20.0) -> None:
        """Stop this broker (SIGTERM, then SIGKILL after ``timeout_s``)."""
        stop(self.data_dir, timeout_s)


def _java() -> str:
    java_home = os.environ.get("JAVA_HOME")
    return str(Path(java_home) / "bin" / "java") if java_home else "java"


#: C1 and the serial collector, for a JVM whose speed nobody measures: a command-line tool lives a second,
#: and a broker for tests, the demo and the UI serves a few thousand records. Both then start sooner and
#: use about a third less CPU than with the full JIT, which would pay off only in a long-lived broker.
_SHORT_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def archive_path(classpath: str | None = None) -> Path | None:
    """Where the class-data-sharing archive of Kafka's JVMs for this Java and these jars lives (it may
    not exist); ``None`` without Java or jars. ``classpath``: Kafka's, when the caller resolved it already."""
    if classpath is None:
        try:
            classpath = jvm_deps.kafka_classpath()
        except Exception:  # noqa: BLE001 - no jars yet: nothing to archive against
            return None
    key = jvm_cds.java_fingerprint(classpath)
    return settings.CACHE_DIR / "cds" / f"kafka-{key}.jsa" if key else None


def _short_flags(classpath: str | None = None) -> list[str]:
    # The archive only beside the short flags: the benchmark's broker and consumer-perf-test, whose
    # speed is measured, keep Java's defaults. One archive serves the broker and the tools (Java matches
    # it by class path): ``storage format`` 0.75 s of CPU without it.
    return [*_SHORT_JVM_FLAGS, *jvm_cds.sharing_flags(archive_path(classpath))]


def run_kafka_tool(tool: str, *args: str, timeout_s: float = 120.0, short: bool = True) -> subprocess.CompletedProcess:
    """Run one of Kafka's command-line tools (see :data:`KAFKA_TOOLS`) and capture its output.

    ``short=False`` keeps Java's default JIT and collector, for a tool whose
    speed is measured (the benchmark's ``consumer-perf-test``).
    """
    main_class = KAFKA_TOOLS.get(tool, tool)
    classpath = jvm_deps.kafka_classpath()
    flags = _short_flags(classpath) if short else ()
    cmd = [_java(), "-Xmx512m", *flags, "-cp", classpath, main_class, *args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)


def _state_file(data_dir: Path) -> Path:
    return data_dir / "broker.json"


def _properties_value(value: str) -> str:
    """``value`` escaped for a ``.properties`` file (read as ISO-8859-1, backslash escapes)."""
    out = []
    for i, ch in enumerate(value):
        if ch == "\\":
            out.append("\\\\")
        elif ch == " " and i == 0:
            out.append("\\ ")
        elif ch in "\n\r\t\f":
            out.append({"\n": "\\n", "\r": "\\r", "\t": "\\t", "\f": "\\f"}[ch])
        elif not " " <= ch <= "~":
            out.extend(f"\\u{unit:04x}" for unit in _utf16_units(ch))
        else:
            out.append(ch)
    return "".join(out)


def _utf16_units(ch: str) -> list[int]:
    data = ch.encode("utf-16-be")
    return [int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2)]


def _sasl_properties(port: int, controller_port: int, user: SaslPlainUser) -> dict[str, str]:
    """What differs from the PLAINTEXT broker: the client (and inter-broker) listener speaks SASL/PLAIN."""
    # The broker authenticates to itself as the same user (inter-broker traffic).
    jaas = user.jaas_config().removesuffix(";") + f" user_{user.username}={jaas_quote(user.password)};"
    return {
        "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": _properties_value(jaas),
    }


def _server_properties(data_dir: Path, port: int, controller_port: int, sasl_user: SaslPlainUser | None = None,
                       extra: Mapping[str, str] | None = None) -> str:  # fmt: skip
    props = {
        "process.roles": "broker,controller",
        "node.id": "1",
        "controller.quorum.voters": f"1@127.0.0.1:{controller_port}",
        "listeners": f"PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}",
        "advertised.listeners": f"PLAINTEXT://127.0.0.1:{port}",
        "controller.listener.names": "CONTROLLER",
        "inter.broker.listener.name": "PLAINTEXT",
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
        "log.dirs": str(data_dir / "logs"),
        "num.partitions": "1",
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": "4",
        "transaction.state.log.replication.factor": "1",
        "transaction.state.log.min.isr": "1",
        "transaction.state.log.num.partitions": "4",
        "share.coordinator.state.topic.replication.factor": "1",
        "share.coordinator.state.topic.min.isr": "1",
        "group.initial.rebalance.delay.ms": "0",
        # A pipeline naming a topic that does not exist must get an error, not
        # a new empty topic.
        "auto.create.topics.enable": "false",
        "delete.topic.enable": "true",
        # Retention checks run often so tests can see deleted segments quickly.
        "log.retention.check.interval.ms": "1000",
    }
    if sasl_user is not None:
        props.update(_sasl_properties(port, controller_port, sasl_user))
    props.update(extra or {})
    return "".join(f"{k}={v}\n" for k, v in props.items())


def write_tool_config(path: Path, user: SaslPlainUser) -> Path:
    """A ``--command-config`` file (owner-only) for Kafka's tools to reach a SASL broker as ``user``."""
    text = (
        "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
        f"sasl.jaas.config={_properties_value(user.jaas_config())}\n"
    )
    _write_private(Path(path), text)
    return Path(path)


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as f:
        f.write(text)


def _wait_until_ready(bootstrap: str, proc: subprocess.Popen, log: Path, timeout_s: float,
                      client_config: dict[str, str] | None = None) -> None:  # fmt: skip
    from confluent_kafka.admin import AdminClient

    host, port = bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout_s
    last_error: Exception | None = None
    admin = None
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:] if log.exists() else ""
            raise BrokerError(f"Kafka broker exited with code {proc.returncode}; log {log}:\n{tail}")
        try:
            # Probe the port first: librdkafka would log every refused connection.
            with socket.create_connection((host, int(port)), timeout=1):
                pass
            admin = admin or AdminClient({"bootstrap.servers": bootstrap, **(client_config or {})})
            if admin.list_topics(timeout=2).brokers:
                return
        except Exception as exc:  # noqa: BLE001 - any failure means "not ready yet"
            last_error = exc
        time.sleep(0.3)
    raise BrokerError(f"Kafka broker at {bootstrap} not ready after {timeout_s:.0f}s: {last_error}")


def _existing_cluster_id(data_dir: Path) -> str | None:
    """A restarted broker keeps its data: reuse the cluster id it was formatted with."""
    meta = data_dir / "logs" / "meta.properties"
    if not meta.exists():
        return None
    for line in meta.read_text().splitlines():
        if line.startswith("cluster.id="):
            return line.split("=", 1)[1].strip()
    return None


def start(data_dir: Path, *, heap: str = "1g", timeout_s: float = 90.0,
          sasl_user: SaslPlainUser | None = None, port: int | None = None,
          short_jit: bool = True, jvm_flags: tuple[str, ...] = (),
          properties: Mapping[str, str] | None = None, controller_port: int | None = None) -> LocalBroker:  # fmt: skip
    """Start a broker on free ports with its storage in ``data_dir`` (formatted on first use).

    A folder that held a broker before keeps its topics and offsets.

    ``port``: the client port to listen on instead of a free one, e.g. the
    port of the broker just stopped on this folder, so that clients keep
    their bootstrap address across a restart. A port in use is refused.

    Refuses to start a second broker on a folder whose broker is still alive.

    With ``sasl_user`` clients must authenticate with SASL/PLAIN as that user
    (``server.properties`` then holds the password and is owner-only).

    ``properties`` are broker settings over these defaults, e.g. listeners of a
    test's own beside the PLAINTEXT one on ``port`` (then the file is owner-only
    too: such settings may hold key passwords). ``port`` stays the address the
    broker is probed on and clients bootstrap from; ``controller_port`` is the
    controller listener's, for ``properties`` that name every listener.

    ``short_jit=False`` keeps Java's default JIT and collector, and no
    class-data-sharing archive, for a broker whose throughput is measured
    (the benchmark's). ``jvm_flags`` are added to the broker's JVM (the
    archive's training run, :func:`build_archive`).
    """
    data_dir = Path(data_dir).resolve()
    existing = status(data_dir)
    if existing is not None:
        raise BrokerError(
            f"a broker from {data_dir} is already running (pid {existing.pid}, "
            f"{existing.bootstrap_servers}); stop it first"
        )
    data_dir.mkdir(parents=True, exist_ok=True)
    if port is None:
        port = free_port()
    elif not port_free(port):
        raise BrokerError(f"cannot start the broker of {data_dir} on port {port}: something listens there; "
                          "stop it, or start without a port to take a free one")  # fmt: skip
    controller_port = controller_port or free_port()
    config = data_dir / "server.properties"
    text = _server_properties(data_dir, port, controller_port, sasl_user, properties)
    if sasl_user is None and not properties:
        config.write_text(text)
    else:
        _write_private(config, text)
    log = data_dir / "broker.log"
    log_flag = java_server.log_to_file(data_dir / "log4j2.properties", log)
    # A folder formatted before (a restart) keeps its storage: `format --ignore-formatted` would
    # change nothing there, so its JVM is not started at all.
    if _existing_cluster_id(data_dir) is None:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        fmt = run_kafka_tool(
            # "--cluster-id=": an id may start with "-" (URL-safe base64), which the
            # tool would otherwise take for an option.
            "storage", "format", f"--cluster-id={cluster_id}", "-c", str(config), "--ignore-formatted"
        )
        if fmt.returncode != 0:
            raise BrokerError(f"formatting Kafka storage in {data_dir} failed: {fmt.stderr or fmt.stdout}")

    classpath = jvm_deps.kafka_classpath()
    cmd = [
        _java(), f"-Xmx{heap}", f"-Xms{heap}", *(_short_flags(classpath) if short_jit else ()), *jvm_flags,
        log_flag,
        "-cp", classpath, "kafka.Kafka", str(config),
    ]  # fmt: skip
    with open(data_dir / "broker.out", "ab") as out:
        # Own session: a Ctrl-C in the terminal that started it does not kill
        # the broker under a running test or demo; stop() does.
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    bootstrap = f"127.0.0.1:{port}"
    state = {"pid": proc.pid, "bootstrap_servers": bootstrap}
    if sasl_user is not None:
        state["security_protocol"] = "SASL_PLAINTEXT"  # never the password
    _state_file(data_dir).write_text(json.dumps(state))
    try:
        _wait_until_ready(bootstrap, proc, log, timeout_s, sasl_user.client_config() if sasl_user else None)
    except BaseException:
        stop(data_dir)
        raise
    return LocalBroker(bootstrap, proc.pid, data_dir, state.get("security_protocol", "PLAINTEXT"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A zombie child of this very process still answers kill(0); reap it.
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        return done == 0
    except ChildProcessError:
        return True


def status(data_dir: Path) -> LocalBroker | None:
    """The broker started from ``data_dir``, if its process is still alive."""
    state = _state_file(Path(data_dir))
    if not state.exists():
        return None
    info = json.loads(state.read_text())
    if not _alive(info["pid"]):
        return None
    return LocalBroker(info["bootstrap_servers"], info["pid"], Path(data_dir).resolve(),
                       info.get("security_protocol", "PLAINTEXT"))


def stop(data_dir: Path, timeout_s: float = 20.0) -> bool:
    """Stop the broker started from ``data_dir`` by its recorded PID. True if one was running."""
    state = _state_file(Path(data_dir))
    if not state.exists():
        return False
    pid = json.loads(state.read_text())["pid"]
    was_running = _alive(pid)
    if was_running:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        while _alive(pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)
            while _alive(pid):
                time.sleep(0.1)
    state.unlink()
    return was_running


def build_archive(*, force: bool = False) -> Path | None:
    """Build the class-data-sharing archive of Kafka's JVMs if it is missing; its path, or ``None`` with the
    reason printed. Never raises: a broker without the archive only starts slower.

    Training: a broker on a temporary folder creates a topic, takes records from a producer and a consumer
    group, and stops; Java writes the classes it loaded at its exit. A broker mapping it is ready sooner and
    spends about a third less CPU getting there.
    """
    return jvm_cds_build.build_archive(archive_path(), _train, what="local_kafka (broker and tools)", force=force)


def _train(partial: Path, tmp: Path) -> str | None:
    try:
        broker = start(tmp / "broker", jvm_flags=(f"-XX:ArchiveClassesAtExit={partial}",))
        try:
            _exercise(broker.bootstrap_servers)
        finally:
            broker.stop(timeout_s=60)  # the archive is written as the JVM exits
    except Exception as exc:  # noqa: BLE001 - setup goes on without the archive
        return str(exc)
    return None


def _exercise(bootstrap: str) -> None:
    """What a test or demo broker does: a topic, produced to, read by a group that commits."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})  # held: a client freed early fails its futures
    admin.create_topics([NewTopic("cds-training", 2, 1)])["cds-training"].result(timeout=30)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": "cds-training"})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(100):
        producer.produce("cds-training", value=b"x", partition=i % 2)
    producer.commit_transaction(30)
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "cds-training", "auto.offset.reset": "earliest",
                         "isolation.level": "read_committed"})  # fmt: skip
    try:
        consumer.subscribe(["cds-training"])
        got, deadline = 0, time.monotonic() + 30
        while got < 100 and time.monotonic() < deadline:
            got += len(consumer.consume(100, timeout=1))
        consumer.commit(asynchronous=False)
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    """Command line: ``start DIR [--sasl-plain-user NAME]`` prints the bootstrap address; ``stop DIR``; ``status DIR``;
    ``archive`` builds the class-data-sharing archive (``make setup``)."""
    parser = argparse.ArgumentParser(prog="python -m include.tooling.local_kafka", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("action", choices=["start", "stop", "status", "archive"])
    parser.add_argument("data_dir", type=Path, nargs="?", help="the broker's folder (not for archive)")
    parser.add_argument("--sasl-plain-user", metavar="NAME", default=None,
                        help=f"start with a SASL_PLAINTEXT listener (PLAIN) for this user; password from ${settings.KAFKA_SASL_PASSWORD_ENV}")  # fmt: skip
    args = parser.parse_args(argv)
    if (args.action == "archive") != (args.data_dir is None):
        parser.error("archive takes no folder" if args.action == "archive" else f"{args.action} needs the broker's folder")
    if args.action == "archive":
        path = build_archive()
        if path is not None:
            print(f"local_kafka: class-data-sharing archive {path} ({path.stat().st_size // 2**20} MiB)")
        return 0
    if args.action == "start":
        user = None
        if args.sasl_plain_user:
            password = settings.kafka_sasl_password()
            if not password:
                parser.error(f"--sasl-plain-user needs the password in ${settings.KAFKA_SASL_PASSWORD_ENV}")
            user = SaslPlainUser(args.sasl_plain_user, password)
        broker = start(args.data_dir, sasl_user=user)
        print(broker.bootstrap_servers)
    elif args.action == "stop":
        print("stopped" if stop(args.data_dir) else "not running")
    else:
        broker = status(args.data_dir)
        print(broker.bootstrap_servers if broker else "not running")
        return 0 if broker else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
