"""Lag and preflight rules, on hand-made snapshots of the table and of Kafka."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from include.contract.offsets import Gap, PartitionState, TopicState
from include.contract.preflight import (
    BLOCKING,
    LagReport,
    lag_decision,
    measure_lag,
    preflight,
)

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def kafka(topic_id: str = "id-1", **parts: tuple[int, int]) -> dict[str, TopicState]:
    return {"t": TopicState("t", topic_id, {int(p[1:]): PartitionState(*v) for p, v in parts.items()})}


# --------------------------------------------------------------------------- lag


def test_lag_per_partition_and_total():
    report = measure_lag({"t": {0: 5, 1: 10}}, kafka(p0=(0, 8), p1=(0, 10)), table_version=3)
    assert [(p.partition, p.lag, p.lost) for p in report.partitions] == [(0, 3, 0), (1, 0, 0)]
    assert report.total_lag == 3
    assert report.to_json()["table_version"] == 3


def test_lag_without_table_counts_from_earliest():
    report = measure_lag(None, kafka(p0=(4, 10), p1=(0, 0)))
    assert report.total_lag == 6
    assert report.total_lost == 0  # a first run starts where Kafka starts: nothing lost


def test_lag_without_table_starting_latest_is_zero():
    assert measure_lag(None, kafka(p0=(4, 10)), starting_offsets="latest").total_lag == 0


def test_lag_counts_lost_records_apart_from_readable_ones():
    report = measure_lag({"t": {0: 5}}, kafka(p0=(12, 20)))
    assert (report.total_lag, report.total_lost) == (8, 7)


def test_new_partition_of_a_known_topic_lags_from_earliest():
    report = measure_lag({"t": {0: 5}}, kafka(p0=(0, 5), p1=(0, 4)))
    assert report.total_lag == 4


@pytest.mark.parametrize(
    "lag_parts,min_records,age_s,action",
    [
        ({"p0": (0, 10)}, 1, None, "proceed"),
        ({"p0": (0, 10)}, 10, 30, "wait"),
        ({"p0": (0, 10)}, 10, 600, "proceed"),
        ({"p0": (5, 5)}, 1, None, "skip"),
        ({"p0": (9, 9)}, 1000, None, "proceed"),  # lost records: preflight must see them
    ],
)
def test_lag_decision(lag_parts, min_records, age_s, action):
    report = measure_lag({"t": {0: 5}}, kafka(**lag_parts))
    if age_s is not None:
        report = type(report)(report.partitions, report.table_version, NOW - timedelta(seconds=age_s))
    decision = lag_decision(report, min_records=min_records, max_wait_s=300, now=NOW)
    assert decision.action == action, decision.reason


def test_summary_line_names_numbers():
    report = measure_lag({"t": {0: 5, 1: 0}}, kafka(p0=(0, 8), p1=(0, 0)))
    report = type(report)(report.partitions, None, NOW - timedelta(seconds=42))
    assert report.summary_line(NOW) == "lag 3 records over 1/2 partitions, oldest pending record 42s old"


# --------------------------------------------------------------------------- preflight


def run(table, k, *, ids=None, topics=("t",), policy="fail"):
    return preflight(table_next=table, recorded_topic_ids=ids or {}, kafka=k,
                     configured_topics=topics, policy=policy)  # fmt: skip


def test_clean_continuation_has_no_findings():
    report = run({"t": {0: 5, 1: 7}}, kafka(p0=(0, 9), p1=(3, 7)), ids={"t": "id-1"})
    assert report.ok and report.findings == ()
    assert report.topic_ids == {"t": "id-1"}
    assert report.summary_line() == "preflight: ok, every partition continues where the table stands"


def test_data_loss_fails_by_default_and_names_partition_and_count():
    report = run({"t": {0: 5, 1: 7}}, kafka(p0=(0, 9), p1=(10, 12)))
    assert not report.ok
    (finding,) = report.blocking
    assert finding.kind == "data_loss" and finding.partition == 1
    assert finding.numbers == {"from": 7, "until": 10, "lost": 3}
    assert "t-1: 3 records (offsets 7 to 9) were deleted" in finding.message
    # tells the operator what to do: the recorded form action first, with the exact command, then the file
    ack = finding.message.index("the trigger form's action 'acknowledge_gap' (airflow dags trigger <dag_id> -c")
    assert ack < finding.message.index("record_and_continue")
    assert report.accepted_gaps == ()
    assert "t-1: 3 records" in report.failure_message("orders")


def test_data_loss_with_record_and_continue_becomes_a_gap():
    report = run({"t": {0: 5, 1: 7}}, kafka(p0=(0, 9), p1=(10, 12)), policy="record_and_continue")
    assert report.ok
    assert report.accepted_gaps == (Gap("t", 1, 7, 10, "deleted by Kafka before it was read"),)
    assert report.job_file()["accepted_gaps"][0] == {
        "topic": "t", "partition": 1, "from": 7, "until": 10, "reason": "deleted by Kafka before it was read"
    }  # fmt: skip


def test_topic_recreated_is_blocking_whatever_the_policy():
    report = run({"t": {0: 5}}, kafka("id-2", p0=(0, 50)), ids={"t": "id-1"}, policy="record_and_continue")
    assert [f.kind for f in report.blocking] == ["topic_recreated"]
    assert "id-1" in report.blocking[0].message and "id-2" in report.blocking[0].message


def test_offsets_going_backwards_is_blocking():
    report = run({"t": {0: 50}}, kafka(p0=(0, 3)))
    (finding,) = report.blocking
    assert finding.kind == "offsets_backwards"
    assert "latest offset 3 is below the table's next offset 50" in finding.message


def test_partition_gone_is_blocking():
    report = run({"t": {0: 5, 1: 5}}, kafka(p0=(0, 5)))
    assert [(f.kind, f.partition) for f in report.blocking] == [("partition_gone", 1)]


def test_partition_added_is_info_unless_records_are_already_gone():
    report = run({"t": {0: 5}}, kafka(p0=(0, 5), p1=(0, 2)))
    assert report.ok and [f.kind for f in report.findings] == ["partition_added"]
    report = run({"t": {0: 5}}, kafka(p0=(0, 5), p1=(4, 6)))
    assert [(f.kind, f.numbers.get("lost")) for f in report.blocking] == [("data_loss", 4)]


def test_configured_topic_missing_in_kafka_is_blocking():
    report = run(None, {}, topics=("t",))
    assert [f.kind for f in report.blocking] == ["topic_missing"]


def test_pattern_topic_gone_is_blocking_and_new_topic_is_info():
    k = {"u": TopicState("u", "id-u", {0: PartitionState(0, 1)})}
    report = run({"t": {0: 5}}, k, topics=())
    assert [(f.kind, f.severity) for f in report.findings] == [("topic_gone", BLOCKING), ("topic_added", "info")]


def test_first_run_has_no_findings_even_when_retention_already_deleted_records():
    assert run(None, kafka(p0=(100, 200))).findings == ()


def test_a_start_below_the_ledgers_last_end_is_refused_with_both_numbers():
    from include.contract.preflight import ledger_overlap

    finding = ledger_overlap({"t": {0: 100, 1: 250}}, {"t": {0: 100, 1: 300}}, run="'r9'", fix="ACTION")
    assert finding is not None and finding.severity == BLOCKING and finding.kind == "ledger_ahead"
    assert "t-1 table 250 < ledger 300" in finding.message and "t-0" not in finding.message
    assert finding.message.endswith("trigger ACTION")
    assert finding.numbers["partitions"] == [{"topic": "t", "partition": 1, "table": 250, "ledger": 300}]
    assert ledger_overlap({"t": {0: 100, 1: 300}}, {"t": {0: 100, 1: 300}}, run="r", fix="A") is None
    assert ledger_overlap({"t": {0: 120, 1: 300}}, {"t": {0: 100, 1: 300}}, run="r", fix="A") is None  # a gap moved on
    lost = ledger_overlap(None, {"t": {0: 5}}, run="r", fix="A")
    assert lost is not None and "t-0 table none < ledger 5" in lost.message


def test_an_unfixed_latest_start_or_an_unusable_position_proceeds_to_the_preflight():
    from datetime import UTC, datetime

    from include.contract.preflight import LagReport, lag_decision

    now = datetime.now(UTC)
    unfixed = LagReport((), None, start_unfixed=True)
    assert lag_decision(unfixed, min_records=10, max_wait_s=60, now=now).action == "proceed"
    assert "starting position 'latest' is not fixed" in unfixed.summary_line(now)
    broken = LagReport((), 3, position_problem="restored")
    assert lag_decision(broken, min_records=10, max_wait_s=60, now=now).action == "proceed"
    assert lag_decision(LagReport((), 3), min_records=10, max_wait_s=60, now=now).action == "skip"


def test_records_silver_has_not_applied_are_work_whatever_kafka_and_min_records_say():
    # A transform that failed (a poison value, a registry outage, a crash): Kafka has nothing new, but bronze
    # holds records silver never got. The run used to be skipped ("no new records"), and silver stayed behind.
    now = datetime(2026, 3, 1, tzinfo=UTC)
    behind = LagReport((), 3, silver_pending=101)
    decision = lag_decision(behind, min_records=1000, max_wait_s=60, now=now)
    assert decision.action == "proceed" and "silver lag 101 records" in decision.reason
    assert "silver lag 101 records (in bronze, not applied to silver)" in behind.summary_line(now)
    assert behind.to_json()["silver_pending"] == 101
    assert lag_decision(LagReport((), 3, silver_pending=0), min_records=1, max_wait_s=60, now=now).action == "skip"
