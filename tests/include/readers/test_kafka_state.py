"""Kafka state reads and writes (include/readers/kafka_state.py) against the real session broker.

Every expectation is checked against what was produced, against Kafka's own
answers (watermarks, ``kafka-topics``, ``kafka-consumer-groups``) or both.
"""

from __future__ import annotations

import base64
import re
import socket
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Consumer, IsolationLevel, KafkaException, Producer, TopicPartition, Uuid
from confluent_kafka.admin import AdminClient, OffsetSpec

from include.contract.offsets import PartitionState
from include.contract.preflight import PartitionLag
from include.ports import free_port
from include.readers import kafka_calls, kafka_state
from include.readers.kafka_admin import create_topic, delete_topic, watermarks
from include.readers.kafka_calls import KafkaUnavailableError, kafka_topic_id
from include.readers.kafka_state import (
    TopicState,
    commit_group_offsets,
    count_records,
    group_offsets,
    read_topics,
    record_timestamps,
)
from include.tooling.local_kafka import run_kafka_tool
from tests.kafka_helpers import delete_records, produce, produce_numbered, produce_transactional

pytestmark = pytest.mark.integration

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
T0 = datetime(2024, 5, 1, 12, 0, 0, 123000, tzinfo=UTC)


def conf(bootstrap: str) -> dict[str, str]:
    return {"bootstrap.servers": bootstrap}


def ms(ts: datetime) -> int:
    return (ts - EPOCH) // timedelta(milliseconds=1)


def wait_for(check: Callable[[], object], what: str, timeout_s: float = 30.0) -> object:
    """``check()``'s first truthy answer; the broker applies some changes asynchronously."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = check()
        if answer:
            return answer
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {timeout_s}s: {what}")
        time.sleep(0.2)


def produce_at(bootstrap: str, topic: str, records: list[tuple[int, datetime]]) -> None:
    """``(partition, timestamp)`` records with explicit create-time timestamps."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for partition, ts in records:
        producer.produce(topic, value=ts.isoformat().encode(), partition=partition, timestamp=ms(ts))
    assert producer.flush(30) == 0


def high_watermark(bootstrap: str, topic: str, partition: int = 0) -> int:
    """The log end, open transactions included (read_uncommitted)."""
    # Not kafka_admin.watermarks: librdkafka consumers default to read_committed,
    # so its "end offset" is the LSO as well.
    admin = AdminClient(conf(bootstrap))
    futures = admin.list_offsets(
        {TopicPartition(topic, partition): OffsetSpec.latest()},
        isolation_level=IsolationLevel.READ_UNCOMMITTED,
    )
    return next(iter(futures.values())).result(timeout=30).offset


def lso(bootstrap: str, topic: str, partition: int = 0) -> int:
    return read_topics(conf(bootstrap), topics=[topic])[topic].partitions[partition].latest


# --------------------------------------------------------------------------- read_topics


def test_read_topics_reports_each_partitions_range_and_delete_records_moves_only_its_start(
    bootstrap, make_topic, unique_name
):
    topic = make_topic(unique_name, partitions=3)
    produce(bootstrap, topic, [(0, None, b"x")] * 5 + [(1, None, b"y")] * 3)
    missing = f"{unique_name}-missing"

    state = read_topics(conf(bootstrap), topics=[topic, missing])

    assert set(state) == {topic}  # a missing topic is simply absent
    assert state[topic].name == topic
    assert state[topic].partitions == {
        0: PartitionState(0, 5),
        1: PartitionState(0, 3),
        2: PartitionState(0, 0),
    }
    ranges = {p: (s.earliest, s.latest) for p, s in state[topic].partitions.items()}
    assert ranges == watermarks(bootstrap, topic)

    delete_records(bootstrap, topic, 0, 2)
    after = read_topics(conf(bootstrap), topics=[topic])[topic]

    assert after.partitions == {0: PartitionState(2, 5), 1: PartitionState(0, 3), 2: PartitionState(0, 0)}
    assert after.topic_id == state[topic].topic_id
    assert read_topics(conf(bootstrap), topics=[missing]) == {}
    assert read_topics(conf(bootstrap)) == {}


def test_read_topics_pattern_fullmatches_names_and_skips_internal_topics(bootstrap, make_topic, unique_name):
    a, b = make_topic(f"{unique_name}-a", 1), make_topic(f"{unique_name}-b", 2)
    longer, named = make_topic(f"{unique_name}-ab", 1), make_topic(f"{unique_name}-named", 1)
    # Makes sure __consumer_offsets exists, so excluding it is actually tested.
    commit_group_offsets(conf(bootstrap), f"{unique_name}-g", {(a, 0): 0})
    assert "__consumer_offsets" in AdminClient(conf(bootstrap)).list_topics(timeout=10).topics

    state = read_topics(conf(bootstrap), pattern=re.escape(unique_name) + "-[ab]")
    assert set(state) == {a, b}  # not "-ab": the pattern must match the whole name
    assert set(state[b].partitions) == {0, 1}

    combined = read_topics(conf(bootstrap), topics=[named, a], pattern=re.escape(unique_name) + "-a.*")
    assert set(combined) == {named, a, longer}

    assert read_topics(conf(bootstrap), pattern="__consumer_offsets") == {}
    everything = read_topics(conf(bootstrap), pattern=".*")
    assert {a, b, longer, named} <= set(everything)
    assert not [t for t in everything if t.startswith("__")]


def test_topic_id_is_kafkas_and_changes_when_the_topic_is_recreated(bootstrap, make_topic, unique_name):
    topic = make_topic(unique_name, partitions=1)
    produce_numbered(bootstrap, topic, 1, 10)
    old = read_topics(conf(bootstrap), topics=[topic])[topic]

    described = run_kafka_tool("topics", "--bootstrap-server", bootstrap, "--describe", "--topic", topic)
    assert described.returncode == 0, described.stderr
    assert f"TopicId: {old.topic_id}\t" in described.stdout

    delete_topic(bootstrap, topic)

    def recreate() -> bool:
        try:
            create_topic(bootstrap, topic, 2)
        except KafkaException:  # still being deleted
            return False
        return True

    def new_state() -> TopicState | None:
        state = read_topics(conf(bootstrap), topics=[topic]).get(topic)
        return state if state is not None and state.topic_id != old.topic_id else None

    wait_for(recreate, f"{topic} recreated")
    new = wait_for(new_state, f"{topic} described with a new id")
    assert new.partitions == {0: PartitionState(0, 0), 1: PartitionState(0, 0)}


def test_topic_id_string_is_kafkas_url_safe_form():
    # confluent-kafka's str(Uuid) uses '+' and '/': a random id shows the
    # difference only about half the time, so check it on fixed bits too.
    topic_id = Uuid(0x0123456789ABCDEF, -0x0123456789ABCDF0)
    assert str(topic_id) == "ASNFZ4mrze/+3LqYdlQyEA"
    assert kafka_topic_id(topic_id) == "ASNFZ4mrze_-3LqYdlQyEA"
    expected = uuid.UUID("01234567-89ab-cdef-fedc-ba9876543210").bytes
    assert base64.urlsafe_b64decode(kafka_topic_id(topic_id) + "==") == expected


def test_latest_is_the_last_stable_offset_while_a_transaction_is_open(bootstrap, make_topic, unique_name):
    # T0 is years old: without this, the broker's 1 s retention check may delete the records mid-test.
    topic = make_topic(unique_name, partitions=1, **{"retention.ms": "-1"})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"open-{topic}"})
    producer.init_transactions(30)
    producer.begin_transaction()
    producer.produce(topic, value=b"committed", partition=0, timestamp=ms(T0))  # offset 0
    producer.commit_transaction(30)  # marker at 1
    producer.begin_transaction()
    producer.produce(topic, value=b"aborted", partition=0, timestamp=ms(T0 + timedelta(seconds=1)))  # 2
    assert producer.flush(30) == 0  # abort_transaction drops what is not sent yet
    producer.abort_transaction(30)  # marker at 3
    producer.begin_transaction()
    for i in range(2):  # 4, 5: left open while the assertions run
        producer.produce(topic, value=b"open", partition=0, timestamp=ms(T0 + timedelta(seconds=2 + i)))
    assert producer.flush(30) == 0
    # The abort marker is written after abort_transaction returns.
    wait_for(lambda: lso(bootstrap, topic) == 4, "LSO at the open transaction's first offset")

    assert high_watermark(bootstrap, topic) == 6
    assert read_topics(conf(bootstrap), topics=[topic])[topic].partitions[0] == PartitionState(0, 4)
    # Nothing committed at or after 1 yet: the aborted record and markers are holes.
    assert record_timestamps(conf(bootstrap), {(topic, 0): 1}) == {(topic, 0): None}
    assert record_timestamps(conf(bootstrap), {(topic, 0): 0}) == {(topic, 0): T0}
    assert count_records(conf(bootstrap), topic, 0, 0, 4) == 1
    with pytest.raises(RuntimeError, match=r"\[0, 6\).*read_committed end is 4"):
        count_records(conf(bootstrap), topic, 0, 0, 6)

    producer.commit_transaction(30)  # marker at 6
    wait_for(lambda: lso(bootstrap, topic) == 7, "LSO past the commit marker")

    assert high_watermark(bootstrap, topic) == 7
    assert record_timestamps(conf(bootstrap), {(topic, 0): 1}) == {(topic, 0): T0 + timedelta(seconds=2)}
    assert count_records(conf(bootstrap), topic, 0, 0, 7) == 3


# --------------------------------------------------------------------------- retention


def _broker_says(bootstrap: str, topic: str, name: str) -> str:
    """The topic's effective setting as Kafka's own ``kafka-configs --describe --all`` prints it."""
    out = run_kafka_tool("configs", "--bootstrap-server", bootstrap, "--describe", "--all", "--entity-type",
                         "topics", "--entity-name", topic).stdout  # fmt: skip
    return re.search(rf"^\s*{re.escape(name)}=(\S+)", out, re.MULTILINE).group(1)


def test_topic_retention_is_the_effective_setting_the_topics_own_or_the_brokers(bootstrap, make_topic, unique_name):
    own = make_topic(f"{unique_name}-own", partitions=1, **{"retention.ms": "7200000", "retention.bytes": "1048576",
                                                           "cleanup.policy": "compact,delete"})  # fmt: skip
    plain = make_topic(f"{unique_name}-plain", partitions=1)
    got = kafka_state.topic_retention(conf(bootstrap), [own, plain, f"{unique_name}-absent"])
    assert got[own] == {"cleanup.policy": "compact,delete", "retention.ms": "7200000", "retention.bytes": "1048576"}
    # The broker's defaults, as Kafka's own tool resolves them; a topic the broker does not know is left out.
    assert got[plain] == {name: _broker_says(bootstrap, plain, name) for name in kafka_state.RETENTION_CONFIGS}
    assert set(got) == {own, plain}
    assert kafka_state.topic_retention(conf(bootstrap), []) == {}


def test_retention_forecast_from_the_brokers_settings_and_the_oldest_unread_records(
    bootstrap, make_topic, unique_name
):
    by_time = make_topic(f"{unique_name}-time", partitions=2, **{"retention.ms": str(2 * 3600 * 1000)})
    # Nothing by time; 100 kB a partition, far above the 10 kB produced, so the broker deletes nothing.
    by_size = make_topic(f"{unique_name}-size", partitions=1, **{"retention.ms": "-1", "retention.bytes": "100000"})
    now = datetime.now(UTC).replace(microsecond=0)
    produce_at(bootstrap, by_time, [(0, now - timedelta(hours=1)), (0, now - timedelta(minutes=30)), (1, now)])
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(10):  # one record every 10 s over the last 100 s, 1,000 value bytes each
        producer.produce(by_size, value=b"x" * 1000, partition=0, timestamp=ms(now - timedelta(seconds=100 - 10 * i)))
    assert producer.flush(30) == 0

    unread = {(by_time, 0): 2, (by_time, 1): 1, (by_size, 0): 10}
    lags = [PartitionLag(t, p, 0, 0, n) for (t, p), n in unread.items()]
    first = kafka_state.first_records(conf(bootstrap), dict.fromkeys(unread, 0))
    assert first[(by_time, 0)] == kafka_state.FirstRecord(now - timedelta(hours=1),
                                                          len((now - timedelta(hours=1)).isoformat()))  # fmt: skip
    assert first[(by_size, 0)] == kafka_state.FirstRecord(now - timedelta(seconds=100), 1000)

    forecasts, note = kafka_state.retention_forecasts(conf(bootstrap), lags, first, now=now)
    assert note is None
    left = {(f.topic, f.partition): (f.bound, f.left_s) for f in forecasts}
    assert left[(by_time, 0)] == ("retention.ms", pytest.approx(3600))
    assert left[(by_time, 1)] == ("retention.ms", pytest.approx(7200))
    # 10 records in 100 s of 1,082 bytes with Kafka's framing: (100,000 - 10,820) bytes at 108.2 a second.
    assert left[(by_size, 0)] == ("retention.bytes", pytest.approx((100_000 - 10_820) / 108.2))


def test_retention_forecast_without_the_settings_says_why_and_leaves_the_lag_alone():
    dead = {"bootstrap.servers": f"127.0.0.1:{free_port()}"}
    first = {("t", 0): kafka_state.FirstRecord(T0, 10)}
    forecasts, note = kafka_state.retention_forecasts(dead, [PartitionLag("t", 0, 0, 0, 1)], first, now=T0,
                                                      timeout_s=1.0)  # fmt: skip
    assert forecasts == ()
    assert note.startswith("the topics' retention settings were not read: ") and "127.0.0.1" in note


# --------------------------------------------------------------------------- record_timestamps


def test_record_timestamps_are_the_produced_ones_and_none_at_the_end(bootstrap, make_topic, unique_name):
    topic = make_topic(unique_name, partitions=3, **{"retention.ms": "-1"})
    stamps = [T0 + timedelta(minutes=i, milliseconds=i) for i in range(4)]
    produce_at(bootstrap, topic, [(0, stamps[0]), (0, stamps[1]), (0, stamps[2]), (1, stamps[3])])

    got = record_timestamps(
        conf(bootstrap),
        {(topic, 0): 1, (topic, 1): 0, (topic, 2): 0},
    )
    assert got == {(topic, 0): stamps[1], (topic, 1): stamps[3], (topic, 2): None}
    assert all(ts is None or ts.tzinfo is not None for ts in got.values())

    at_end = record_timestamps(conf(bootstrap), {(topic, 0): 3, (topic, 1): 1, (topic, 2): 5})
    assert at_end == {(topic, 0): None, (topic, 1): None, (topic, 2): None}

    # Below the log start, the first record still there is the oldest pending one.
    delete_records(bootstrap, topic, 0, 2)
    assert record_timestamps(conf(bootstrap), {(topic, 0): 0}) == {(topic, 0): stamps[2]}
    assert record_timestamps(conf(bootstrap), {}) == {}


def test_record_timestamps_follow_a_log_start_that_moves_after_the_offsets_were_listed(
    bootstrap, make_topic, unique_name
):
    # Retention or delete_records between record_timestamps' offset listing and its read: the read
    # starts below the new log start, which Kafka answers with "offset out of range" (a lag sensor's
    # poke failed on it). Reading from offsets listed before the deletion is that race, made certain.
    topic = make_topic(unique_name, partitions=2, **{"retention.ms": "-1"})
    stamps = [T0 + timedelta(seconds=i) for i in range(4)]
    produce_at(bootstrap, topic, [(0, s) for s in stamps] + [(1, stamps[0])])
    listed = {(topic, 0): 1, (topic, 1): 0}
    delete_records(bootstrap, topic, 0, 3)
    delete_records(bootstrap, topic, 1, 1)

    got: dict = {}
    kafka_state._read_first_records(kafka_calls.Call(conf(bootstrap), 10, "a test"), dict(listed), got)
    assert got == {(topic, 0): stamps[3], (topic, 1): None}


# --------------------------------------------------------------------------- consumer-group offsets


def describe_group(bootstrap: str, group: str) -> dict[tuple[str, int], str]:
    """``{(topic, partition): CURRENT-OFFSET}`` as Kafka's kafka-consumer-groups tool prints it."""
    out = run_kafka_tool("consumer-groups", "--bootstrap-server", bootstrap, "--describe", "--group", group)
    assert out.returncode == 0, out.stderr
    rows = {}
    for line in out.stdout.splitlines():
        cells = line.split()
        if len(cells) >= 4 and cells[0] == group:
            rows[(cells[1], int(cells[2]))] = cells[3]
    return rows


def test_commit_group_offsets_round_trips_and_kafkas_tool_agrees(bootstrap, make_topic, unique_name):
    topic = make_topic(unique_name, partitions=3)
    produce_numbered(bootstrap, topic, 3, 30)
    group = f"{unique_name}-mirror"
    partitions = [(topic, 0), (topic, 1), (topic, 2)]

    assert group_offsets(conf(bootstrap), group, partitions) == {p: None for p in partitions}

    commit_group_offsets(conf(bootstrap), group, {(topic, 0): 3, (topic, 1): 7})
    got = group_offsets(conf(bootstrap), group, partitions)
    assert got == {(topic, 0): 3, (topic, 1): 7, (topic, 2): None}

    # Backwards too; a partition left out keeps its offset.
    commit_group_offsets(conf(bootstrap), group, {(topic, 0): 1, (topic, 2): 10})
    assert group_offsets(conf(bootstrap), group, partitions) == {(topic, 0): 1, (topic, 1): 7, (topic, 2): 10}
    assert describe_group(bootstrap, group) == {(topic, 0): "1", (topic, 1): "7", (topic, 2): "10"}

    assert group_offsets(conf(bootstrap), group, []) == {}
    commit_group_offsets(conf(bootstrap), group, {})  # nothing to do
    with pytest.raises(ValueError, match="partition 1"):
        commit_group_offsets(conf(bootstrap), group, {(topic, 1): -1})


@pytest.fixture
def active_member(bootstrap, make_topic, unique_name) -> Iterator[tuple[str, str]]:
    """A consumer that has joined group ``<name>-live`` on a fresh topic and stays in it."""
    topic = make_topic(unique_name, partitions=1)
    group = f"{unique_name}-live"
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        consumer.subscribe([topic])
        wait_for(lambda: consumer.poll(0.2) or consumer.assignment(), f"{group} has an assignment")
        yield topic, group
    finally:
        consumer.close()


def test_commit_group_offsets_refuses_a_group_with_active_members(bootstrap, active_member):
    topic, group = active_member
    with pytest.raises(RuntimeError, match=f"consumer group '{group}' is in use"):
        commit_group_offsets(conf(bootstrap), group, {(topic, 0): 0})
    assert group_offsets(conf(bootstrap), group, [(topic, 0)]) == {(topic, 0): None}


# --------------------------------------------------------------------------- count_records


def test_count_records_counts_only_committed_records(bootstrap, make_topic, unique_name):
    topic = make_topic(unique_name, partitions=2)
    produce_transactional(bootstrap, topic, [
        (True, [(0, b"a"), (0, b"b")]),               # 0, 1, marker 2
        (False, [(0, b"x"), (0, b"y"), (0, b"z")]),   # 3, 4, 5 aborted, marker 6
        (True, [(0, b"c"), (1, b"other")]),           # 7, marker 8
    ])  # fmt: skip
    wait_for(lambda: lso(bootstrap, topic) == 9, "LSO past the last commit marker")

    assert count_records(conf(bootstrap), topic, 0, 0, 9) == 3
    assert count_records(conf(bootstrap), topic, 0, 0, 2) == 2
    assert count_records(conf(bootstrap), topic, 0, 1, 8) == 2
    assert count_records(conf(bootstrap), topic, 0, 2, 7) == 0  # only holes
    assert count_records(conf(bootstrap), topic, 0, 5, 5) == 0
    assert count_records(conf(bootstrap), topic, 1, 0, 2) == 1

    delete_records(bootstrap, topic, 0, 3)
    gone = rf"{re.escape(topic)} partition 0 \[0, 9\) is no longer fully available"
    with pytest.raises(RuntimeError, match=gone):
        count_records(conf(bootstrap), topic, 0, 0, 9)
    assert count_records(conf(bootstrap), topic, 0, 3, 9) == 1


# --------------------------------------------------------------------------- unreachable broker

SECRET = "s3cret-sentinel-value"
TIMEOUT_S = 2.0

CALLS: dict[str, Callable[[dict[str, str]], object]] = {
    "read_topics": lambda c: read_topics(c, topics=["t"], timeout_s=TIMEOUT_S),
    "read_topics_pattern": lambda c: read_topics(c, pattern="t.*", timeout_s=TIMEOUT_S),
    "record_timestamps": lambda c: record_timestamps(c, {("t", 0): 0}, timeout_s=TIMEOUT_S),
    "commit_group_offsets": lambda c: commit_group_offsets(c, "g", {("t", 0): 1}, timeout_s=TIMEOUT_S),
    "group_offsets": lambda c: group_offsets(c, "g", [("t", 0)], timeout_s=TIMEOUT_S),
    "count_records": lambda c: count_records(c, "t", 0, 0, 10, timeout_s=TIMEOUT_S),
}


@pytest.fixture(params=["refused", "silent"])
def dead_bootstrap(request) -> Iterator[str]:
    """A port where nothing listens, or one that accepts connections and never answers."""
    if request.param == "refused":
        yield f"127.0.0.1:{free_port()}"
        return
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        yield f"127.0.0.1:{listener.getsockname()[1]}"


@pytest.mark.parametrize("name", list(CALLS))
def test_unreachable_broker_raises_within_the_timeout(dead_bootstrap, name):
    config = {"bootstrap.servers": dead_bootstrap, "sasl.username": "user", "sasl.password": SECRET}
    started = time.monotonic()
    with pytest.raises(KafkaUnavailableError) as exc:
        CALLS[name](config)
    elapsed = time.monotonic() - started

    assert elapsed < TIMEOUT_S + 10
    assert dead_bootstrap in str(exc.value)
    assert SECRET not in str(exc.value)


def test_offsets_are_asked_again_while_leadership_moves(monkeypatch):
    """Right after a topic is (re)created the broker may answer NOT_LEADER; that is retried, not fatal."""
    from confluent_kafka import KafkaError

    calls = []

    def once(call, admin, partitions, *, missing_ok=False):
        calls.append(1)
        if len(calls) < 3:
            raise RuntimeError("not leader") from KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return {("t", 0): PartitionState(0, 5)}

    monkeypatch.setattr(kafka_calls, "_list_offsets_once", once)
    call = kafka_calls.Call({"bootstrap.servers": "x:1"}, 5.0, "test")
    assert kafka_calls.list_offsets(call, None, [("t", 0)]) == {("t", 0): PartitionState(0, 5)}
    assert len(calls) == 3

    def broken(call, admin, partitions, *, missing_ok=False):
        raise RuntimeError("gone") from KafkaException(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))

    monkeypatch.setattr(kafka_calls, "_list_offsets_once", broken)
    with pytest.raises(RuntimeError, match="gone"):
        kafka_calls.list_offsets(call, None, [("t", 0)])
