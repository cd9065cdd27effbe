"""Kafka state the Airflow side reads and writes, with confluent-kafka (no JVM).

The lag sensor, the preflight check, the continuity check and the
consumer-group mirror need a handful of answers from Kafka: each partition's
log start and read_committed end, the topic's id, the timestamp of the oldest
pending record, how many committed records a range holds, and a group's
committed offsets (read and set).

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

import base64
import concurrent.futures
import functools
import inspect
import logging
import re
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

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
from confluent_kafka.admin import AdminClient, OffsetSpec

from include.contract.errors import ContractError, PipelineError
from include.contract.offsets import PartitionState, TopicState

log = logging.getLogger(__name__)

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

#: Errors meaning "Kafka could not answer now" (unreachable, too slow, electing a leader): worth
#: a retry later, unlike an answer that refuses or denies.
_UNAVAILABLE_CODES = frozenset({
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
    KafkaError._ALL_BROKERS_DOWN,
    KafkaError._RESOLVE,
    KafkaError._WAIT_COORD,
    KafkaError._TIMED_OUT_QUEUE,
    KafkaError._DESTROY,
    KafkaError.NETWORK_EXCEPTION,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
    KafkaError.NOT_COORDINATOR,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.NOT_LEADER_FOR_PARTITION,
})  # fmt: skip

#: Offset-commit errors a group with live members answers to an admin commit.
_GROUP_ACTIVE_CODES = frozenset({
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.REBALANCE_IN_PROGRESS,
})  # fmt: skip

#: "No such topic or partition": per partition when others in the request
#: exist, a local "no leaders found" when none of them does.
_MISSING_CODES = frozenset({
    KafkaError.UNKNOWN_TOPIC_OR_PART,
    KafkaError._NOENT,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError._UNKNOWN_PARTITION,
})  # fmt: skip

#: How long past its own request timeout a future may take before we give up on it.
_FUTURE_GRACE_S = 2.0


class KafkaUnavailableError(PipelineError, RuntimeError):
    """Kafka did not answer within the timeout (unreachable, down, or too slow)."""


class KafkaRangeError(PipelineError, RuntimeError):
    """Kafka answered, and the partition or the range of offsets asked for is not there: no such partition,
    records removed, or an end not readable yet. ``topic`` and ``partition`` name it; the message says which."""

    render_where = False  # the message names the partition already


#: How long past twice its timeout a public call may run before it is given up on as hung.
_HUNG_GRACE_S = 30.0

_F = TypeVar("_F", bound=Callable[..., Any])
_T = TypeVar("_T")


def _bounded(func: _F) -> _F:
    """Run ``func`` on a thread of its own and give up on it when it overruns its ``timeout_s``.

    Every wait inside these calls has a deadline, but a call into librdkafka that never returns
    is beyond their reach, and the task that made it would hang with it: Airflow's own timeouts
    are signals, which run only when the C call returns. The caller gets
    :class:`KafkaUnavailableError` instead; the stuck thread is left behind (a daemon, so it
    keeps no process alive) with its client, which cannot be closed while a call is inside it.
    """
    signature = inspect.signature(func)

    @functools.wraps(func)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        limit = 2 * float(bound.arguments["timeout_s"]) + _HUNG_GRACE_S
        outcome: list[tuple[bool, Any]] = []  # (True, its return value) or (False, what it raised)

        def run() -> None:
            try:
                outcome.append((True, func(*args, **kwargs)))
            except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
                outcome.append((False, exc))

        worker = threading.Thread(target=run, name=f"kafka-{func.__name__}", daemon=True)
        worker.start()
        worker.join(limit)
        if not outcome:
            import confluent_kafka

            raise KafkaUnavailableError(
                f"Kafka at {_servers(bound.arguments['config'])}: the Kafka client library did not return from "
                f"{func.__name__} within {limit:g}s, twice the call's timeout and then some; it is stuck inside "
                f"librdkafka {confluent_kafka.libversion()[0]} (its thread is left behind). The task fails rather "
                "than hang: run it again (a retry starts a new process). If it recurs, check the brokers' health "
                "and report the versions above"
            )
        ok, value = outcome[0]
        if not ok:
            raise value
        return value

    return bounded  # type: ignore[return-value]


class KafkaAuthenticationError(KafkaUnavailableError):
    """The broker refused the client's credentials or TLS handshake; raised as soon as it says so."""


#: Errors no retry within the call's bound can mend: wrong credentials, a TLS mismatch.
_REFUSED_CODES = frozenset({KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED, KafkaError._SSL})
#: How often a waiting call looks for such an error.
_REFUSAL_CHECK_S = 0.25


# --- clients -----------------------------------------------------------------------------------


def _servers(config: Mapping[str, Any]) -> str:
    return str(
        config.get("bootstrap.servers") or config.get("metadata.broker.list") or "<no bootstrap.servers>"
    )


class _Call:
    """One public call: its deadline, its clients' config, and errors worded for it."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float, what: str) -> None:
        if timeout_s <= 0:
            raise ContractError(f"timeout_s must be positive, got {timeout_s}")
        self.servers = _servers(config)
        self.timeout_s = timeout_s
        self.what = what
        self.deadline = time.monotonic() + timeout_s
        self.last_error: KafkaError | None = None
        self._config = dict(config)
        self._admin: AdminClient | None = None

    def remaining(self) -> float:
        """Seconds left, never below a small floor so a last request can still be sent."""
        return max(0.5, self.deadline - time.monotonic())

    def expired(self) -> bool:
        return time.monotonic() >= self.deadline

    def _error_cb(self, error: KafkaError) -> None:
        # Kept so a timeout can say why (refused, TLS, SASL) instead of just "timed out";
        # "all brokers down" follows the error that says why, so it does not replace it.
        if self.last_error is None or error.code() != KafkaError._ALL_BROKERS_DOWN:
            self.last_error = error

    def client_config(self, **extra: Any) -> dict[str, Any]:
        timeout_ms = max(1000, int(self.timeout_s * 1000))
        conf = dict(self._config)
        # Without these librdkafka waits 30-60 s per attempt, longer than the caller's budget.
        conf["socket.timeout.ms"] = timeout_ms
        conf["socket.connection.setup.timeout.ms"] = timeout_ms
        # librdkafka would print every refused connection to stderr; Airflow task logs want logging.
        conf.setdefault("logger", log)
        caller_cb = conf.get("error_cb")

        def error_cb(error: KafkaError) -> None:
            self._error_cb(error)
            if caller_cb is not None:
                caller_cb(error)

        conf["error_cb"] = error_cb
        conf.update(extra)
        return conf

    def unavailable(self, detail: str) -> KafkaUnavailableError:
        if self._admin is not None:
            # An admin client delivers error callbacks (and logs) only when polled.
            self._admin.poll(0)
        why = f" (last client error: {self.last_error.str()})" if self.last_error is not None else ""
        return KafkaUnavailableError(
            f"Kafka at {self.servers} did not answer {self.what} within {self.timeout_s:g}s: {detail}{why}"
        )

    def failed(self, exc: BaseException, subject: str) -> Exception:
        """The exception to raise for ``exc``, which happened while asking about ``subject``."""
        error = _kafka_error(exc)
        if isinstance(exc, concurrent.futures.TimeoutError):
            return self.unavailable(f"no answer about {subject}")
        if error is not None and error.code() in _UNAVAILABLE_CODES:
            return self.unavailable(f"{subject}: {error.str()}")
        return RuntimeError(
            f"Kafka at {self.servers}, {self.what}, {subject}: {error.str() if error else exc}"
        )

    def refused(self) -> None:
        """Raise :class:`KafkaAuthenticationError` if the broker has refused the client's credentials."""
        if self._admin is not None:
            self._admin.poll(0)  # an admin client delivers error callbacks only when polled
        if self.last_error is not None and self.last_error.code() in _REFUSED_CODES:
            raise KafkaAuthenticationError(
                f"Kafka at {self.servers} refused the client while {self.what}: {self.last_error.str()}. "
                "Check the security settings (SASL mechanism, username and password, TLS) of the Airflow "
                "connection the pipeline names"
            )

    def result(self, future: concurrent.futures.Future[_T], subject: str) -> _T:
        """``future``'s result; a future that never completes becomes :class:`KafkaUnavailableError`.

        While it waits, a refusal by the broker (wrong credentials, TLS) ends the
        wait at once with the broker's reason instead of at the deadline.
        """
        end = time.monotonic() + self.remaining() + _FUTURE_GRACE_S
        while True:
            try:
                return future.result(timeout=max(0.0, min(_REFUSAL_CHECK_S, end - time.monotonic())))
            except concurrent.futures.TimeoutError as exc:
                self.refused()
                if time.monotonic() >= end:
                    raise self.failed(exc, subject) from exc
            except KafkaException as exc:
                self.refused()
                raise self.failed(exc, subject) from exc

    def list_topics(self, admin: AdminClient) -> Any:
        """The cluster's metadata, asked in short slices so a refusal ends the wait at once."""
        while True:
            try:
                return admin.list_topics(timeout=min(1.0, self.remaining()))
            except KafkaException as exc:
                self.refused()
                if self.expired() or _error_code(exc) != KafkaError._TIMED_OUT:
                    raise self.failed(exc, "the cluster's topic list") from exc

    @contextmanager
    def admin(self) -> Iterator[AdminClient]:
        with AdminClient(self.client_config()) as admin:
            self._admin = admin
            try:
                yield admin
            finally:
                self._admin = None

    @contextmanager
    def reader(self) -> Iterator[Consumer]:
        """A read_committed consumer for assign + seek: no group membership, no commits."""
        consumer = Consumer(self.client_config(**{
            # librdkafka insists on a group id even for assign(); a throwaway one
            # keeps a caller's group.id (maybe a real group) from being touched.
            "group.id": f"kde-state-reader-{uuid.uuid4().hex[:12]}",
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "isolation.level": "read_committed",
            "enable.partition.eof": True,
            # Offsets are checked before reading; a range vanishing mid-read
            # must surface as an error, not as a silent jump.
            "auto.offset.reset": "error",
        }))  # fmt: skip
        try:
            yield consumer
        finally:
            consumer.close()


def _kafka_error(exc: BaseException | None) -> KafkaError | None:
    # None too: callers pass an exception's __cause__, which may be unset (then there is no code).
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def _error_code(exc: BaseException | None) -> int | None:
    error = _kafka_error(exc)
    return error.code() if error is not None else None


def _kafka_topic_id(topic_id: Any) -> str:
    """Kafka's string form of a topic id (what ``kafka-topics --describe`` prints)."""
    # str() of confluent-kafka's Uuid is standard base64 ('+', '/'), which
    # differs from the URL-safe form Kafka's tools and logs use.
    msb = topic_id.get_most_significant_bits() & 0xFFFFFFFFFFFFFFFF
    lsb = topic_id.get_least_significant_bits() & 0xFFFFFFFFFFFFFFFF
    raw = ((msb << 64) | lsb).to_bytes(16, "big")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


#: Errors that mean "ask again in a moment": leadership is moving (a topic just
#: created or recreated, a broker restarting), not that the cluster is down.
_LEADER_MOVING_CODES = frozenset({
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.FENCED_LEADER_EPOCH,
    KafkaError.UNKNOWN_LEADER_EPOCH,
})  # fmt: skip


def _list_offsets(call: _Call, admin: AdminClient, partitions: Iterable[tuple[str, int]],
                  *, missing_ok: bool = False) -> dict[tuple[str, int], PartitionState]:  # fmt: skip
    """:func:`_list_offsets_once`, asked again while leadership moves and the call's time lasts."""
    keys = list(dict.fromkeys(partitions))
    while True:
        try:
            return _list_offsets_once(call, admin, keys, missing_ok=missing_ok)
        except RuntimeError as exc:
            if _error_code(exc.__cause__) not in _LEADER_MOVING_CODES or call.expired():
                raise
            time.sleep(0.2)


def _list_offsets_once(call: _Call, admin: AdminClient, partitions: Iterable[tuple[str, int]],
                       *, missing_ok: bool = False) -> dict[tuple[str, int], PartitionState]:  # fmt: skip
    """Earliest and read_committed latest offsets, one request per spec for all partitions.

    With ``missing_ok``, partitions the broker says do not exist (a topic
    deleted since it was described) are left out instead of raising.
    """
    keys = list(dict.fromkeys(partitions))
    if not keys:
        return {}
    requests = {}
    # confluent-kafka leaves OffsetSpec.earliest() and .latest() unannotated (they return an OffsetSpec).
    for name, spec in (("earliest", OffsetSpec.earliest()), ("latest", OffsetSpec.latest())):  # type: ignore[no-untyped-call]
        requests[name] = admin.list_offsets(
            {TopicPartition(t, p): spec for t, p in keys},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=call.remaining(),
        )
    offsets: dict[str, dict[tuple[str, int], int]] = {"earliest": {}, "latest": {}}
    for name, futures in requests.items():
        for tp, future in futures.items():
            key = (tp.topic, tp.partition)
            try:
                offsets[name][key] = call.result(
                    future, f"{name} offset of {tp.topic} partition {tp.partition}"
                ).offset
            except RuntimeError as exc:
                code = _error_code(exc.__cause__)
                if code not in _MISSING_CODES:
                    raise
                # Only the broker's own answer: librdkafka's local "no leaders found"
                # might also mean a leader election, and that topic is not gone.
                if missing_ok and code == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    continue
                raise KafkaRangeError(
                    f"Kafka at {call.servers}, {call.what}: {tp.topic} partition {tp.partition} does not exist",
                    topic=tp.topic,
                    partition=tp.partition,
                ) from exc.__cause__
    return {
        key: PartitionState(offsets["earliest"][key], offsets["latest"][key])
        for key in keys
        if key in offsets["earliest"] and key in offsets["latest"]
    }


# --- public API --------------------------------------------------------------------------------


@_bounded
def read_topics(config: Mapping[str, str], *, topics: Sequence[str] = (), pattern: str | None = None,
                timeout_s: float = 10.0) -> dict[str, TopicState]:  # fmt: skip
    """Id and per-partition ``[earliest, latest)`` of the named topics and those matching ``pattern``.

    ``latest`` is the last stable offset (the read_committed end), so an open
    transaction holds it back. Named topics that do not exist are absent from
    the result; the caller decides whether that is an error. ``pattern`` is a
    Python regular expression that must match a whole topic name; internal
    topics (``__consumer_offsets``, ...) never match it.
    """
    call = _Call(config, timeout_s, "reading topic state")
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
                if _error_code(exc.__cause__) not in _MISSING_CODES:
                    raise
        partitions = [(name, p.id) for name, d in described.items() for p in d.partitions]
        # A topic deleted between the two requests is as absent as one that never existed.
        states = _list_offsets(call, admin, partitions, missing_ok=True)
    result = {}
    for name, description in described.items():
        parts = {p.id: states.get((name, p.id)) for p in description.partitions}
        # A topic only with the offsets of every partition (``known`` then holds them all).
        known = {p: state for p, state in parts.items() if state is not None}
        if len(known) == len(parts):
            result[name] = TopicState(
                name, _kafka_topic_id(description.topic_id), dict(sorted(known.items()))
            )
    return result


@_bounded
def record_timestamps(config: Mapping[str, str], positions: Mapping[tuple[str, int], int], *,
                      timeout_s: float = 10.0) -> dict[tuple[str, int], datetime | None]:  # fmt: skip
    """Kafka timestamp (UTC) of the first committed record at or after each ``(topic, partition) -> offset``.

    ``None`` where there is no such record yet: the offset is at or past the
    read_committed end, or only transaction markers and aborted records lie
    between it and that end. An offset below the log start means the log
    start's first record. Reads with a throwaway read_committed consumer
    (assign + seek, nothing committed); the whole call takes at most about
    ``timeout_s``.
    """
    if not positions:
        return {}
    call = _Call(config, timeout_s, "reading record timestamps")
    result: dict[tuple[str, int], datetime | None] = {}
    with call.admin() as admin:
        states = _list_offsets(call, admin, positions)
    start: dict[tuple[str, int], int] = {}
    for key, offset in positions.items():
        state = states[key]
        if offset >= state.latest:
            result[key] = None
        else:
            start[key] = max(offset, state.earliest)
    if start:
        _read_first_records(call, start, result)
    return {key: result[key] for key in positions}


def _read_first_records(call: _Call, start: dict[tuple[str, int], int],
                        result: dict[tuple[str, int], datetime | None]) -> None:  # fmt: skip
    """Fill ``result`` with the timestamp of the first committed record at or after each ``start``.

    A ``start`` the log start has passed since it was listed (retention or
    ``delete_records`` in between) is moved to the new log start: such a
    partition's first record is the log start's, as for any offset below it.
    """
    with call.reader() as consumer:
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in start.items()])
        _read_first(call, consumer, start, result)


def _read_first(call: _Call, consumer: Consumer, start: dict[tuple[str, int], int],
                result: dict[tuple[str, int], datetime | None]) -> None:  # fmt: skip
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
                    state = _list_offsets(call, admin, [key])[key]
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
        pending.discard(key)
        # Its later records are of no use; fetching them would only slow the others.
        consumer.pause([TopicPartition(*key)])


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


@_bounded
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
    call = _Call(config, timeout_s, f"looking up offsets for time {when.isoformat()}")
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


@_bounded
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
    call = _Call(config, timeout_s, f"committing offsets of consumer group {group_id!r}")
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


@_bounded
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
    call = _Call(config, timeout_s, f"reading offsets of consumer group {group_id!r}")
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


@_bounded
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
    call = _Call(config, timeout_s, f"counting records of {where}")
    with call.admin() as admin:
        states = _list_offsets(call, admin, [(topic, partition)])
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


def _count(call: _Call, consumer: Consumer, where: str, from_offset: int, until_offset: int) -> int:
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
