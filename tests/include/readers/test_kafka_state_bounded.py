"""The hard bound around kafka_state's public calls (``kafka_calls.bounded``): pure logic, no broker.

A call stuck inside librdkafka cannot be made on purpose against a real broker, so a function
that blocks stands in for it; the calls against the real broker are in test_kafka_state.py.
"""

from __future__ import annotations

import threading
import time

import pytest

from include.readers import kafka_calls


def test_a_call_that_never_returns_fails_with_the_reason_instead_of_hanging(monkeypatch):
    monkeypatch.setattr(kafka_calls, "_HUNG_GRACE_S", 0.2)
    release = threading.Event()

    @kafka_calls.bounded
    def list_offsets(config, *, timeout_s: float = 0.1) -> int:
        release.wait()  # as a C call that never returns would
        return 1

    started = time.monotonic()
    try:
        with pytest.raises(kafka_calls.KafkaUnavailableError) as err:
            list_offsets({"bootstrap.servers": "broker-a:9092"})
    finally:
        release.set()
    assert time.monotonic() - started < 5
    message = str(err.value)
    assert "broker-a:9092" in message and "list_offsets within 0.4s" in message
    assert "stuck inside librdkafka" in message and "run it again" in message


def test_a_call_runs_on_its_own_thread_and_what_it_returns_or_raises_reaches_the_caller_unchanged():
    ran_on: list[str] = []

    @kafka_calls.bounded
    def answer(config, value, *, timeout_s: float = 5.0) -> object:
        ran_on.append(threading.current_thread().name)
        if isinstance(value, Exception):
            raise value
        return value

    assert answer({}, {"a": 1}) == {"a": 1}
    # Not the caller's thread: only then can the caller stop waiting for a call that never returns.
    assert ran_on == ["kafka-answer"] and threading.current_thread().name != "kafka-answer"
    boom = kafka_calls.KafkaAuthenticationError("refused")
    with pytest.raises(kafka_calls.KafkaAuthenticationError) as err:
        answer({}, boom, timeout_s=1)
    assert err.value is boom
