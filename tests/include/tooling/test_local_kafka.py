"""The local broker restarted on its own folder and port: clients keep their address, the log survives."""

from __future__ import annotations

import socket

import pytest

from include.readers.kafka_admin import create_topic, watermarks
from include.tooling import local_kafka
from tests.kafka_helpers import produce, read_all

pytestmark = pytest.mark.integration


def _jvm_flags(pid: int) -> set[str]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return {a.decode() for a in f.read().split(b"\0") if a.startswith(b"-XX:")}


def test_a_broker_restarted_on_its_port_keeps_its_address_topics_and_records(tmp_path):
    broker = local_kafka.start(tmp_path / "kafka")
    try:
        # A broker for tests and the demo runs C1 and the serial collector; the benchmark's keeps Java's defaults.
        assert _jvm_flags(broker.pid) >= {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}
        create_topic(broker.bootstrap_servers, "bounced", 2)
        produce(broker.bootstrap_servers, "bounced", [(0, b"k", b"before-1"), (1, b"k", b"before-2")])
        port = int(broker.bootstrap_servers.rsplit(":", 1)[1])
        broker.stop()
        broker = local_kafka.start(tmp_path / "kafka", port=port, short_jit=False)
        assert not _jvm_flags(broker.pid) & {"-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"}
        assert broker.bootstrap_servers == f"127.0.0.1:{port}"
        produce(broker.bootstrap_servers, "bounced", [(0, b"k", b"after")])
        assert watermarks(broker.bootstrap_servers, "bounced") == {0: (0, 2), 1: (0, 1)}
        assert {v for _, _, v in read_all(broker.bootstrap_servers, "bounced")} == {b"before-1", b"before-2", b"after"}
    finally:
        broker.stop()


def test_a_port_in_use_is_refused_naming_the_port_and_the_fix(tmp_path):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(local_kafka.BrokerError) as err:
            local_kafka.start(tmp_path / "kafka", port=port)
    assert f"on port {port}: something listens there" in str(err.value)
    assert "start without a port" in str(err.value)
    assert local_kafka.status(tmp_path / "kafka") is None


def _maps(pid: int, path) -> bool:
    with open(f"/proc/{pid}/maps") as f:
        return str(path) in f.read()


@pytest.mark.full
def test_the_class_sharing_archive_is_built_mapped_by_brokers_and_a_foreign_one_is_harmless(tmp_path, monkeypatch):
    from include import settings

    # The archive in a folder of the test's (the jars stay where setup put them: no Maven here).
    monkeypatch.setattr(local_kafka, "archive_path", lambda classpath=None: tmp_path / "cds" / "kafka-test.jsa")
    monkeypatch.delenv(settings.CDS_ENV, raising=False)
    assert not any("SharedArchiveFile" in f for f in local_kafka._short_flags())  # not built yet

    path = local_kafka.build_archive()
    assert path == tmp_path / "cds" / "kafka-test.jsa" and path.stat().st_size > 0
    broker = local_kafka.start(tmp_path / "kafka")
    try:
        assert _maps(broker.pid, path), "the broker started without mapping the archive"
        port = int(broker.bootstrap_servers.rsplit(":", 1)[1])
        broker.stop()
        broker = local_kafka.start(tmp_path / "kafka", port=port, short_jit=False)  # measured: Java's defaults
        assert not _maps(broker.pid, path) and f"-XX:SharedArchiveFile={path}" not in _jvm_flags(broker.pid)
        broker.stop()

        # An archive Java refuses (another JVM's, or damaged) only costs the speed: the broker starts and serves.
        path.chmod(0o644)
        path.write_bytes(b"not an archive" * 1000)
        broker = local_kafka.start(tmp_path / "kafka", port=port)
        assert f"-XX:SharedArchiveFile={path}" in _jvm_flags(broker.pid) and not _maps(broker.pid, path)
        create_topic(broker.bootstrap_servers, "after-a-bad-archive", 1)
        produce(broker.bootstrap_servers, "after-a-bad-archive", [(0, b"k", b"v")])
        assert watermarks(broker.bootstrap_servers, "after-a-bad-archive") == {0: (0, 1)}
    finally:
        broker.stop()

    monkeypatch.setenv(settings.CDS_ENV, "off")
    assert local_kafka._short_flags() == ["-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC"]


def test_the_command_line_refuses_a_folder_for_archive_and_none_for_start(capsys):
    for argv, message in ((["archive", "somewhere"], "archive takes no folder"),
                          (["start"], "start needs the broker's folder")):  # fmt: skip
        with pytest.raises(SystemExit) as done:
            local_kafka.main(argv)
        assert done.value.code == 2 and message in capsys.readouterr().err


def test_the_archive_is_keyed_to_the_kafka_jars_and_kept_in_the_cache(tmp_path, monkeypatch):
    from include import settings
    from include.spark import jvm_deps

    monkeypatch.setattr(settings, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(jvm_deps, "kafka_classpath", lambda: "/jars/kafka_2.13-4.1.0.jar")
    path = local_kafka.archive_path()
    assert path.parent == tmp_path / "cds" and path.name.startswith("kafka-") and path.suffix == ".jsa"
    monkeypatch.setattr(jvm_deps, "kafka_classpath", lambda: "/jars/kafka_2.13-4.2.0.jar")
    assert local_kafka.archive_path() != path  # other jars: the old archive is not named
