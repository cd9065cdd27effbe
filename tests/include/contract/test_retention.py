"""The retention forecast's rules (:mod:`include.contract.retention`) and the lag sensor's use of it.

Pure: settings as the broker reports them, timestamps and sizes as the reader
hands them. The same against a real broker is in
``tests/include/readers/test_kafka_state.py`` and, through a DAG run, in
``tests/integration/test_pipeline_dag.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from include.contract.errors import ContractError
from include.contract.preflight import LagReport, PartitionLag, lag_decision
from include.contract.retention import (
    RECORD_OVERHEAD_BYTES,
    PartitionForecast,
    TopicRetention,
    duration_text,
    forecast,
    soonest,
)

NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
DAY_MS = 86_400_000


def _policy(ms: str = "-1", size: str = "-1", cleanup: str = "delete") -> TopicRetention:
    return TopicRetention.from_configs("orders", {"cleanup.policy": cleanup, "retention.ms": ms,
                                                  "retention.bytes": size})  # fmt: skip


def test_settings_as_the_broker_reports_them():
    assert _policy(str(DAY_MS), "1000") == TopicRetention("orders", True, DAY_MS, 1000)
    assert _policy() == TopicRetention("orders", True, None, None)  # -1 is unlimited
    assert _policy(cleanup="compact").deletes is False
    assert _policy(cleanup="compact, delete").deletes is True
    assert TopicRetention.from_configs("orders", {}).deletes is True  # Kafka's default policy
    assert _policy(str(DAY_MS)).describe() == "retention.ms 86400000, retention.bytes unlimited"
    with pytest.raises(ContractError, match=r"topic 'orders': the broker gave retention.ms = 'soon'; expected an "
                                            r"integer \(-1 for unlimited\)"):  # fmt: skip
        _policy("soon")


def test_by_time_the_oldest_unread_record_lives_its_retention_from_its_own_timestamp():
    got = forecast(_policy(str(DAY_MS)), 3, unread=10, oldest_unread_at=NOW - timedelta(hours=20),
                   record_size=100, now=NOW)  # fmt: skip
    assert (got.topic, got.partition, got.unread, got.bound) == ("orders", 3, 10, "retention.ms")
    assert got.left_s == pytest.approx(4 * 3600)
    # Past its retention and not deleted yet (Kafka deletes whole segments, on its own schedule): none left.
    old = forecast(_policy(str(DAY_MS)), 3, unread=10, oldest_unread_at=NOW - timedelta(days=2), record_size=100,
                   now=NOW)  # fmt: skip
    assert old.left_s == 0.0


def test_by_size_the_room_left_is_filled_at_the_rate_the_unread_records_came_in():
    size = 1000 - RECORD_OVERHEAD_BYTES  # 1,000 bytes a record with Kafka's framing
    # 500 records in 100 s (5 a second, 5,000 bytes a second) and 500,000 of 1,000,000 bytes taken: 100 s.
    got = forecast(_policy(str(DAY_MS), "1000000"), 0, unread=500, oldest_unread_at=NOW - timedelta(seconds=100),
                   record_size=size, now=NOW)  # fmt: skip
    assert (got.left_s, got.bound, got.rate_per_s) == (pytest.approx(100.0), "retention.bytes", 5.0)
    # Already more unread bytes than the retention keeps: the next segment roll may delete them.
    full = forecast(_policy(size="400000"), 0, unread=500, oldest_unread_at=NOW - timedelta(seconds=100),
                    record_size=size, now=NOW)  # fmt: skip
    assert (full.left_s, full.bound) == (0.0, "retention.bytes")
    # The size bound needs the record's size; the time bound still holds without it.
    unknown = forecast(_policy(str(DAY_MS), "1000"), 0, unread=5, oldest_unread_at=NOW, record_size=None, now=NOW)
    assert unknown.bound == "retention.ms"


def test_no_bound_when_the_topic_keeps_everything_or_only_compacts():
    for policy in (_policy(), _policy(str(DAY_MS), "1000", cleanup="compact")):
        got = forecast(policy, 0, unread=5, oldest_unread_at=NOW - timedelta(days=30), record_size=10, now=NOW)
        assert (got.left_s, got.bound) == (None, None)


def test_soonest_is_the_least_bounded_time_left_and_forecasts_survive_json():
    a = PartitionForecast("a", 0, 1, NOW, 50.0, "retention.ms", 1.0)
    b = PartitionForecast("b", 1, 1, NOW, 20.0, "retention.bytes", 1.0)
    none = PartitionForecast("c", 0, 1, NOW, None, None, 1.0)
    assert soonest((a, b, none)) == b
    assert soonest((none,)) is None and soonest(()) is None
    assert PartitionForecast.from_json(b.to_json()) == b


@pytest.mark.parametrize(("seconds", "text"), [(45, "45 s"), (720, "12 min"), (12240, "3.4 h"),
                                               (181440, "2.1 days")])  # fmt: skip
def test_duration_text(seconds, text):
    assert duration_text(seconds) == text


# --------------------------------------------------------------------------- the lag sensor's decision


def _report(left_s: float | None, lag: int = 5) -> LagReport:
    forecasts = (PartitionForecast("orders", 2, lag, NOW - timedelta(minutes=1), left_s, "retention.ms", 0.1),)
    return LagReport((PartitionLag("orders", 2, 0, 0, lag),), 3, oldest_pending=NOW - timedelta(minutes=1),
                     retention=forecasts if left_s is not None else ())  # fmt: skip


def test_the_sensor_proceeds_under_min_records_when_retention_is_within_the_margin():
    decision = lag_decision(_report(600.0), min_records=100, max_wait_s=3600, now=NOW, retention_margin_s=1200)
    assert decision.action == "proceed"
    assert decision.reason == ("lag 5 < min_records 100, but Kafka's retention (retention.ms) may delete unread "
                               "records of orders partition 2 in 10 min, within the retention margin of 20 min")  # fmt: skip


@pytest.mark.parametrize(("left_s", "margin_s"), [(1300.0, 1200), (None, 1200), (600.0, None)])
def test_the_sensor_waits_for_min_records_when_retention_leaves_room_or_is_unknown(left_s, margin_s):
    decision = lag_decision(_report(left_s), min_records=100, max_wait_s=3600, now=NOW, retention_margin_s=margin_s)
    assert decision.action == "wait"


def test_min_records_reached_keeps_its_own_reason_and_nothing_new_still_skips():
    assert lag_decision(_report(600.0, lag=100), min_records=100, max_wait_s=3600, now=NOW,
                        retention_margin_s=1200).reason == "lag 100 >= min_records 100"  # fmt: skip
    empty = LagReport((PartitionLag("orders", 2, 0, 0, 0),), 3)
    assert lag_decision(empty, min_records=1, max_wait_s=60, now=NOW, retention_margin_s=1200).action == "skip"


def test_the_summary_says_how_long_retention_leaves_and_why_it_is_unknown():
    line = _report(600.0).summary_line(NOW)
    assert line.endswith("; Kafka's retention (retention.ms) may delete unread records of orders partition 2 in "
                         "10 min at the soonest")  # fmt: skip
    assert _report(600.0).to_json(NOW)["retention_left_s"] == 600.0
    unknown = LagReport((), None, retention_note="the topics' retention settings were not read: denied")
    assert unknown.summary_line(NOW).endswith(
        "; time left before retention deletes unread records unknown: the topics' retention settings were not "
        "read: denied")  # fmt: skip
    assert unknown.to_json(NOW)["retention_left_s"] is None
