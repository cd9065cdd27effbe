"""The Airflow side's calls to Kafka, bounded: short-lived clients, Kafka's error codes, the family's Kafka errors.

Every call of :mod:`include.readers.kafka_state` goes through a :class:`Call`
(one deadline, clients opened and always closed) inside :func:`bounded` (a
call the client library never returns from ends as
:class:`KafkaUnavailableError` a little after its timeout). A broker that does
not answer raises :class:`KafkaUnavailableError`; one that refuses the
credentials :class:`KafkaAuthenticationError`; errors name the bootstrap
servers and never other config values, which may be secrets.
"""

from __future__ import annotations

import base64
import concurrent.futures
import functools
import inspect
import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from include.contract.errors import ContractError, PipelineError
from include.contract.offsets import PartitionState
from include.readers.kafka_refusals import advice

log = logging.getLogger(__name__)


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

#: "No such topic or partition": per partition when others in the request
#: exist, a local "no leaders found" when none of them does.
MISSING_CODES = frozenset({
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


def bounded(func: _F) -> _F:
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


def _is_refusal(error: KafkaError) -> bool:
    """Whether ``error`` is the broker refusing this client for good: a refused login or handshake, or a TLS
    alert it sent (under TLS 1.3 a refused client certificate arrives as an alert after the handshake, which
    librdkafka reports as a failed receive)."""
    if error.code() in _REFUSED_CODES:
        return True
    text = error.str().lower()
    return error.code() == KafkaError._TRANSPORT and "ssl" in text and " alert " in text and "close notify" not in text


#: How often a waiting call looks for such an error.
_REFUSAL_CHECK_S = 0.25


# --- clients -----------------------------------------------------------------------------------


def _servers(config: Mapping[str, Any]) -> str:
    return str(
        config.get("bootstrap.servers") or config.get("metadata.broker.list") or "<no bootstrap.servers>"
    )


class Call:
    """One public call: its deadline, its clients' config, and errors worded for it."""

    def __init__(self, config: Mapping[str, Any], timeout_s: float, what: str) -> None:
        if timeout_s <= 0:
            raise ContractError(f"timeout_s must be positive, got {timeout_s}")
        self.servers = _servers(config)
        self.timeout_s = timeout_s
        self.what = what
        self.deadline = time.monotonic() + timeout_s
        self.last_error: KafkaError | None = None
        #: The Airflow connection the settings came from (kafka_client_config's), for refusals to name.
        self.connection_id: str | None = getattr(config, "connection_id", None)
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
        if self.last_error is not None and _is_refusal(self.last_error):
            error = self.last_error
            raise KafkaAuthenticationError(
                f"Kafka at {self.servers} refused the client while {self.what}: {error.str()}. "
                + advice(self.connection_id, self._config, error.name(), error.str())
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
                if self.expired() or error_code(exc) != KafkaError._TIMED_OUT:
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


def error_code(exc: BaseException | None) -> int | None:
    error = _kafka_error(exc)
    return error.code() if error is not None else None


def kafka_topic_id(topic_id: Any) -> str:
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


def list_offsets(call: Call, admin: AdminClient, partitions: Iterable[tuple[str, int]],
                  *, missing_ok: bool = False) -> dict[tuple[str, int], PartitionState]:  # fmt: skip
    """:func:`_list_offsets_once`, asked again while leadership moves and the call's time lasts."""
    keys = list(dict.fromkeys(partitions))
    while True:
        try:
            return _list_offsets_once(call, admin, keys, missing_ok=missing_ok)
        except RuntimeError as exc:
            if error_code(exc.__cause__) not in _LEADER_MOVING_CODES or call.expired():
                raise
            time.sleep(0.2)


def _list_offsets_once(call: Call, admin: AdminClient, partitions: Iterable[tuple[str, int]],
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
                code = error_code(exc.__cause__)
                if code not in MISSING_CODES:
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
