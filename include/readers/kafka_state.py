"""Kafka state the Airflow side reads and writes, with confluent-kafka (no JVM).

The lag sensor, the preflight check, the continuity check and the
consumer-group mirror need a handful of answers from Kafka: each partition's
log start and read_committed end, the topic's id, the timestamp and size of
the oldest pending record, the topic's retention settings, how many committed
records a range holds, and a group's committed offsets (read and set).

Every call takes a librdkafka client config (``bootstrap.servers`` plus any
security settings) and a timeout, opens short-lived clients and closes them
before returning. A broker that does not answer raises
:class:`KafkaUnavailableError` after about ``timeout_s``; errors name the
bootstrap servers and never other config values, which may be secrets.
A call that the client library itself never returns from (seen once: a
lag sensor's poke stuck inside ``AdminClient.list_offsets``, spinning) ends
the same way a little later, instead of holding its task forever.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from confluent_kafka import (
    TIMESTAMP_NOT_AVAILABLE,
    Consumer,
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaError,
    KafkaException,
    Message,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import OffsetSpec

from include.contract import retention
from include.contract.errors import ContractError
from include.contract.offsets import TopicState
from include.contract.preflight import PartitionLag
from include.contract.retention import PartitionForecast
from include.readers.kafka_calls import (
    MISSING_CODES,
    Call,
    KafkaRangeError,
    KafkaUnavailableError,
    bounded,
    error_code,
    kafka_topic_id,
    list_offsets,
)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Offset-commit errors a group with live members answers to an admin commit.
_GROUP_ACTIVE_CODES = frozenset({
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
})  # fmt: skip




# --- public API --------------------------------------------------------------------------------


@bounded
def read_topics(config: Mapping[str, str], *, topics: Sequence[str] = (), pattern: str | None = None,
                timeout_s: float = 10.0) -> dict[str, TopicState]:  # fmt: skip
    """Id and per-partition ``[earliest, latest)`` of the named topics and those matching ``pattern``.

    ``latest`` is the last stable offset (the read_committed end), so an open
    transaction holds it back. Named topics that do not exist are absent from
    the result; the caller decides whether that is an error. ``pattern`` is a
    Python regular expression that must match a whole topic name; internal
    topics (``__consumer_offsets``, ...) never match it.
    """
    call = Call(config, timeout_s, "reading topic state")
    names = list(dict.fromkeys(topics))
    with call.admin() as admin:
        if pattern is not None:
            regex = re.compile(pattern)
            cluster = call.list_topics(admin)
            matched = sorted(t for t in cluster.topics if not t.startswith("__") and regex.fullmatch(t))
            names = list(dict.fromkeys(names + matched))
        if not names:
            return {}
        described = {}
        futures = admin.describe_topics(TopicCollection(names), request_timeout=call.remaining())
        for name, future in futures.items():
            try:
                described[name] = call.result(future, f"topic {name}")
            except RuntimeError as exc:
                if error_code(exc.__cause__) not in MISSING_CODES:
                    raise
        partitions = [(name, p.id) for name, d in described.items() for p in d.partitions]
        # A topic deleted between the two requests is as absent as one that never existed.
        states = list_offsets(call, admin, partitions, missing_ok=True)
    result = {}
    for name, description in described.items():
        parts = {p.id: states.get((name, p.id)) for p in description.partitions}
        # A topic only with the offsets of every partition (``known`` then holds them all).
        known = {p: state for p, state in parts.items() if state is not None}
        if len(known) == len(parts):
            result[name] = TopicState(
                name, kafka_topic_id(description.topic_id), dict(sorted(known.items()))
            )
    return result


@dataclass(frozen=True)
class FirstRecord:
    """The first committed record at or after an offset: its Kafka timestamp and its size."""

    #: UTC; ``None`` for a record of a pre-0.10 message format, which has no timestamp.
    at: datetime | None
    #: Key, value and header bytes as the consumer hands them (uncompressed, without Kafka's framing).
    size: int


@bounded
def first_records(config: Mapping[str, str], positions: Mapping[tuple[str, int], int], *,
                  timeout_s: float = 10.0) -> dict[tuple[str, int], FirstRecord | None]:  # fmt: skip
    """The first committed record at or after each ``(topic, partition) -> offset`` (:class:`FirstRecord`).

    ``None`` where there is no such record yet: the offset is at or past the
    read_committed end, or only transaction markers and aborted records lie
    between it and that end. An offset below the log start means the log
    start's first record. Reads with a throwaway read_committed consumer
    (assign + seek, nothing committed); the whole call takes at most about
    ``timeout_s``.
    """
    if not positions:
        return {}
    call = Call(config, timeout_s, "reading record timestamps")
    result: dict[tuple[str, int], datetime | None] = {}
    sizes: dict[tuple[str, int], int] = {}
    with call.admin() as admin:
        states = list_offsets(call, admin, positions)
    start: dict[tuple[str, int], int] = {}
    for key, offset in positions.items():
        state = states[key]
        if offset >= state.latest:
            result[key] = None
        else:
            start[key] = max(offset, state.earliest)
    if start:
        _read_first_records(call, start, result, sizes)
    return {key: FirstRecord(result[key], sizes[key]) if key in sizes else None for key in positions}


def record_timestamps(config: Mapping[str, str], positions: Mapping[tuple[str, int], int], *,
                      timeout_s: float = 10.0) -> dict[tuple[str, int], datetime | None]:  # fmt: skip
    """Kafka timestamp (UTC) of the first committed record at or after each ``(topic, partition) -> offset``:
    :func:`first_records`' timestamps, ``None`` where it found no record or the record has none."""
    return {key: first.at if first else None
            for key, first in first_records(config, positions, timeout_s=timeout_s).items()}  # fmt: skip


#: The topic settings that say when Kafka deletes a partition's oldest records.
RETENTION_CONFIGS = ("cleanup.policy", "retention.ms", "retention.bytes")


@bounded
def topic_retention(config: Mapping[str, str], topics: Iterable[str], *,
                    timeout_s: float = 10.0) -> dict[str, dict[str, str]]:  # fmt: skip
    """Each topic's effective :data:`RETENTION_CONFIGS`, as the broker resolves them (the topic's own
    setting, else the broker's, else Kafka's default). A topic the broker does not know is left out."""
    from confluent_kafka.admin import ConfigResource, ResourceType

    names = sorted(set(topics))
    if not names:
        return {}
    call = Call(config, timeout_s, "reading topic retention settings")
    result: dict[str, dict[str, str]] = {}
    with call.admin() as admin:
        futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, n) for n in names],
                                         request_timeout=call.remaining())  # fmt: skip
        for resource, future in futures.items():
            try:
                entries = call.result(future, f"topic {resource.name}'s settings")
            except RuntimeError as exc:
                if error_code(exc.__cause__) not in MISSING_CODES:
                    raise
                continue
            result[resource.name] = {k: entries[k].value for k in RETENTION_CONFIGS if k in entries}
    return result


def retention_forecasts(config: Mapping[str, str], partitions: Iterable[PartitionLag],
                        first: Mapping[tuple[str, int], FirstRecord | None], *, now: datetime,
                        timeout_s: float = 10.0) -> tuple[tuple[PartitionForecast, ...], str | None]:  # fmt: skip
    """Per partition with unread records (a lag report's ``partitions``), the time left before Kafka's
    retention may delete them (:func:`include.contract.retention.forecast`), from ``first``, the oldest
    unread record of each (:func:`first_records`), and the topics' settings read now.

    Returns the forecasts and, when the settings could not be read (an ACL without DescribeConfigs,
    say), no forecast and why: the lag read before stays right without them.
    """
    unread = {(p.topic, p.partition): p.lag for p in partitions if p.lag}
    try:
        settings = topic_retention(config, {t for t, _ in unread}, timeout_s=timeout_s)
        policies = {t: retention.TopicRetention.from_configs(t, c) for t, c in settings.items()}
    except (RuntimeError, ContractError) as exc:
        return (), f"the topics' retention settings were not read: {exc}"
    forecasts = tuple(
        retention.forecast(policies[topic], partition, unread=unread[(topic, partition)],
                           oldest_unread_at=record.at, record_size=record.size, now=now)
        for (topic, partition), record in sorted(first.items())
        if record is not None and record.at is not None and topic in policies and unread.get((topic, partition))
    )  # fmt: skip
    return forecasts, None


def _read_first_records(call: Call, start: dict[tuple[str, int], int],
                        result: dict[tuple[str, int], datetime | None],
                        sizes: dict[tuple[str, int], int] | None = None) -> None:  # fmt: skip
    """Fill ``result`` with the timestamp of the first committed record at or after each ``start``.

    A ``start`` the log start has passed since it was listed (retention or
    ``delete_records`` in between) is moved to the new log start: such a
    partition's first record is the log start's, as for any offset below it.
    """
    with call.reader() as consumer:
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in start.items()])
        _read_first(call, consumer, start, result, {} if sizes is None else sizes)


def _read_first(call: Call, consumer: Consumer, start: dict[tuple[str, int], int],
                result: dict[tuple[str, int], datetime | None], sizes: dict[tuple[str, int], int]) -> None:  # fmt: skip
    pending = set(start)
    while pending:
        if call.expired():
            waiting = ", ".join(f"{t}[{p}]@{start[(t, p)]}" for t, p in sorted(pending))
            raise call.unavailable(f"no record or end of partition yet for {waiting}")
        msg = consumer.poll(min(1.0, call.remaining()))
        if msg is None:
            continue
        key = (msg.topic(), msg.partition())
        if key not in pending:
            continue
        error = msg.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                result[key] = None
            elif error.code() in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                with call.admin() as admin:
                    state = list_offsets(call, admin, [key])[key]
                if state.earliest <= start[key]:  # not the log start moving: say what Kafka said
                    raise call.failed(KafkaException(error), f"{key[0]} partition {key[1]} at {start[key]}")
                start[key] = state.earliest
                if state.earliest < state.latest:
                    # A partition in this error state refuses seek(): assign it again instead.
                    consumer.incremental_unassign([TopicPartition(*key)])
                    consumer.incremental_assign([TopicPartition(key[0], key[1], state.earliest)])
                    continue
                result[key] = None
            else:
                raise call.failed(KafkaException(error), f"{key[0]} partition {key[1]} at {start[key]}")
        elif _offset(msg) < start[key]:
            continue
        else:
            ts_type, ts_ms = msg.timestamp()
            # Only pre-0.10 message formats lack timestamps; there is no age to report.
            result[key] = (
                None if ts_type == TIMESTAMP_NOT_AVAILABLE else _EPOCH + timedelta(milliseconds=ts_ms)
            )
            sizes[key] = _record_size(msg)
        pending.discard(key)
        # Its later records are of no use; fetching them would only slow the others.
        consumer.pause([TopicPartition(*key)])


def _record_size(msg: Message) -> int:
    """Key, value and header bytes of a record, as the consumer hands them."""
    headers = msg.headers() or []
    pairs = headers.items() if isinstance(headers, dict) else headers
    return len(msg.key() or b"") + len(msg.value() or b"") + sum(len(k) + len(v or b"") for k, v in pairs)


def _offset(msg: Message) -> int:
    """The offset of a record (a message without an error).

    confluent-kafka types it optional: only an error event has none. A record without one would have
    failed the comparison it is read for with a :class:`TypeError`, which this raises instead.
    """
    offset = msg.offset()
    if offset is None:
        raise TypeError(f"Kafka gave a record of {msg.topic()} partition {msg.partition()} without an offset")
    return offset


def epoch_ms(when: datetime) -> int:
    """Whole milliseconds since the epoch of an aware datetime, exactly (Kafka's timestamp unit).

    Whole timedeltas, not float seconds * 1000: past 2038-01-19 that came out
    1 ms early for about 1 time in 50. Airflow hands pendulum datetimes, whose
    difference (a pendulum Interval) cannot be divided by a timedelta, so the
    plain fields are taken first.
    """
    plain = datetime(when.year, when.month, when.day, when.hour, when.minute, when.second, when.microsecond,
                     tzinfo=when.tzinfo)  # fmt: skip
    return (plain - _EPOCH) // timedelta(milliseconds=1)


@bounded
def offsets_for_times(config: Mapping[str, str], partitions: Iterable[tuple[str, int]], when: datetime, *,
                      timeout_s: float = 10.0) -> dict[tuple[str, int], int | None]:  # fmt: skip
    """Per partition, the earliest offset whose Kafka timestamp is at or after ``when`` (UTC).

    ``None`` where no record is that new yet (Kafka answers -1): the caller
    reads up to the partition's end. Kafka's own index lookup (ListOffsets by
    timestamp, read_committed), so nothing is consumed.
    """
    keys = list(dict.fromkeys(partitions))
    if not keys:
        return {}
    if when.tzinfo is None:
        raise ContractError(f"offsets_for_times: {when!r} has no time zone")
    ms = epoch_ms(when)
    call = Call(config, timeout_s, f"looking up offsets for time {when.isoformat()}")
    result: dict[tuple[str, int], int | None] = {}
    with call.admin() as admin:
        futures = admin.list_offsets(
            {TopicPartition(t, p): OffsetSpec.for_timestamp(ms) for t, p in keys},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=call.remaining(),
        )
        for tp, future in futures.items():
            offset = call.result(future, f"offset for time of {tp.topic} partition {tp.partition}").offset
            result[(tp.topic, tp.partition)] = None if offset < 0 else offset
    return {key: result[key] for key in keys}


@bounded
def commit_group_offsets(config: Mapping[str, str], group_id: str, positions: Mapping[tuple[str, int], int], *,
                         timeout_s: float = 10.0) -> None:  # fmt: skip
    """Set ``group_id``'s committed offsets of the given partitions to ``positions``.

    Partitions not in ``positions`` keep whatever the group had. The group
    must have no active members (Kafka only lets an admin move an empty
    group's offsets); otherwise this raises :class:`RuntimeError` naming it.
    """
    for (topic, partition), offset in positions.items():
        if offset < 0:
            raise ContractError(f"offset for {topic} partition {partition} must be >= 0, got {offset}")
    if not positions:
        return
    call = Call(config, timeout_s, f"committing offsets of consumer group {group_id!r}")
    with call.admin() as admin:
        while True:
            future = admin.describe_consumer_groups([group_id], request_timeout=call.remaining())[group_id]
            try:
                description = call.result(future, f"consumer group {group_id!r}")
                break
            except KafkaUnavailableError:
                # A broker's first group waits for __consumer_offsets to be created and its
                # coordinator to load; ask again within the bound.
                if call.remaining() < 1.0:
                    raise
                time.sleep(0.5)
        if description.members:
            raise _group_active(group_id, f"{len(description.members)} active member(s)")
        request = ConsumerGroupTopicPartitions(
            group_id, [TopicPartition(t, p, offset) for (t, p), offset in positions.items()]
        )
        future = admin.alter_consumer_group_offsets([request], request_timeout=call.remaining())[group_id]
        answer = call.result(future, f"consumer group {group_id!r}")
    for tp in answer.topic_partitions:
        if tp.error is None:
            continue
        if tp.error.code() in _GROUP_ACTIVE_CODES:
            # A member joined between the check and the commit.
            raise _group_active(group_id, f"the broker answered {tp.error.name()}")
        raise call.failed(KafkaException(tp.error), f"{tp.topic} partition {tp.partition}")


def _group_active(group_id: str, why: str) -> RuntimeError:
    return RuntimeError(
        f"consumer group {group_id!r} is in use ({why}); its offsets can only be set while "
        "no consumer is a member: stop its consumers first"
    )


@bounded
def group_offsets(config: Mapping[str, str], group_id: str, partitions: Iterable[tuple[str, int]], *,
                  timeout_s: float = 10.0) -> dict[tuple[str, int], int | None]:  # fmt: skip
    """``group_id``'s committed offset of each partition; ``None`` where it has none.

    A group that does not exist has none anywhere. Pending transactional
    offset commits are waited for (``require_stable``), so the answer is what
    a new member of the group would start from.
    """
    keys = list(dict.fromkeys(partitions))
    if not keys:
        return {}
    call = Call(config, timeout_s, f"reading offsets of consumer group {group_id!r}")
    with call.admin() as admin:
        request = ConsumerGroupTopicPartitions(group_id, [TopicPartition(t, p) for t, p in keys])
        future = admin.list_consumer_group_offsets(
            [request], require_stable=True, request_timeout=call.remaining()
        )[group_id]
        answer = call.result(future, f"consumer group {group_id!r}")
    result: dict[tuple[str, int], int | None] = {}
    for tp in answer.topic_partitions:
        if tp.error is not None:
            raise call.failed(KafkaException(tp.error), f"{tp.topic} partition {tp.partition}")
        result[(tp.topic, tp.partition)] = tp.offset if tp.offset >= 0 else None
    return {key: result.get(key) for key in keys}


@bounded
def count_records(config: Mapping[str, str], topic: str, partition: int, from_offset: int, until_offset: int, *,
                  timeout_s: float = 30.0) -> int:  # fmt: skip
    """How many committed records ``topic``'s ``partition`` holds in ``[from_offset, until_offset)``.

    Reads the range with read_committed, so transaction markers and aborted
    records are not counted: a range with fewer records than offsets has only
    such holes if this agrees with what was ingested. Raises
    :class:`RuntimeError` if the range is not fully readable: its start was
    removed (retention, delete-records) or its end is past the read_committed
    end. The whole call takes at most about ``timeout_s``.
    """
    if from_offset < 0 or until_offset < from_offset:
        raise ContractError(f"invalid range [{from_offset}, {until_offset}) of {topic} partition {partition}")
    where = f"{topic} partition {partition} [{from_offset}, {until_offset})"
    call = Call(config, timeout_s, f"counting records of {where}")
    with call.admin() as admin:
        states = list_offsets(call, admin, [(topic, partition)])
    state = states[(topic, partition)]
    if from_offset < state.earliest:
        raise _range_gone(topic, partition, where, f"the partition now starts at offset {state.earliest}")
    if until_offset > state.latest:
        raise KafkaRangeError(f"{where} is not fully readable yet: its read_committed end is {state.latest}",
                              topic=topic, partition=partition)
    if until_offset == from_offset:
        return 0
    with call.reader() as consumer:
        consumer.assign([TopicPartition(topic, partition, from_offset)])
        return _count(call, consumer, where, from_offset, until_offset)


def _count(call: Call, consumer: Consumer, where: str, from_offset: int, until_offset: int) -> int:
    count = 0
    position = from_offset
    while True:
        if call.expired():
            raise call.unavailable(f"read {count} records up to offset {position}, not all of {where}")
        # consume() returns when it has this many messages or at its timeout: ask for no more
        # than can come before the answer (a record at or past the end, or the partition's end),
        # and wait briefly, so a range with holes does not cost a full second per call.
        wanted = min(10_000, until_offset - position + 1)
        for msg in consumer.consume(wanted, timeout=min(0.1, call.remaining())):
            error = msg.error()
            if error is None:
                offset = _offset(msg)
                if offset >= until_offset:
                    return count
                count += 1
                position = offset + 1
            elif error.code() == KafkaError._PARTITION_EOF:
                # The end is at or past until_offset (checked before reading).
                return count
            elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                raise _range_gone(msg.topic(), msg.partition(), where, "records were removed while it was being read")
            else:
                raise call.failed(KafkaException(error), where)


def _range_gone(topic: str | None, partition: int | None, where: str, why: str) -> KafkaRangeError:
    return KafkaRangeError(f"{where} is no longer fully available in Kafka: {why}", topic=topic, partition=partition)
