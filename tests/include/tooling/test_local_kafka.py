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
