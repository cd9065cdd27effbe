"""Continuity rules on hand-made bronze commits."""

from __future__ import annotations

import pytest

from include.continuity import check_run
from include.offsets import BronzeCommit, OffsetRange


def commit(ranges, next_offsets, *, run_id="run-2", batch_id=0, extra=None) -> BronzeCommit:
    return BronzeCommit("orders", run_id, "scheduled", 1, batch_id,
                        tuple(OffsetRange(*r) for r in ranges), next_offsets, extra or {})  # fmt: skip


START = {"t": {0: 10, 1: 20}}


def check(commits, *, start=START, checkpoint="final", expected_rows=None, counter=None):
    if checkpoint == "final":
        checkpoint = commits[-1][1].next_offsets if commits else start
    return check_run(run_id="run-2", start=start, commits=commits, checkpoint_position=checkpoint,
                     expected_rows=expected_rows, count_records=counter)  # fmt: skip


def test_two_chained_batches_are_continuous():
    report = check([
        (5, commit([("t", 0, 10, 15, 5), ("t", 1, 20, 22, 2)], {"t": {0: 15, 1: 22}})),
        (6, commit([("t", 0, 15, 18, 3)], {"t": {0: 18, 1: 22}}, batch_id=1)),
    ], expected_rows=10)  # fmt: skip
    assert report.ok, report.violations
    p0, p1 = report.partitions
    assert (p0.from_offset, p0.until_offset, p0.rows, p0.ranges) == (10, 18, 8, 2)
    assert (p1.from_offset, p1.until_offset, p1.rows) == (20, 22, 2)
    assert report.summary_line() == "continuity: CONTINUOUS: 2 commits, 10 rows over 2 partitions"


def test_gap_between_runs_is_a_violation_with_numbers():
    report = check([(5, commit([("t", 0, 12, 15, 3)], {"t": {0: 15, 1: 20}}))])
    assert report.violations == [
        "t-0: Delta version 5 range [12, 15) does not continue at 10: gap of 2 offsets"
    ]


def test_overlap_within_the_run_is_a_violation():
    report = check([
        (5, commit([("t", 0, 10, 15, 5)], {"t": {0: 15, 1: 20}})),
        (6, commit([("t", 0, 14, 16, 2)], {"t": {0: 16, 1: 20}}, batch_id=1)),
    ])  # fmt: skip
    assert report.violations == ["t-0: Delta version 6 range [14, 16) does not continue at 15: overlap of 1 offsets"]


def test_recorded_gap_is_accepted_and_reported():
    gap = {"topic": "t", "partition": 1, "from": 20, "until": 30, "reason": "retention"}
    report = check([(5, commit([("t", 1, 30, 32, 2)], {"t": {0: 10, 1: 32}}, extra={"gaps": [gap]}))])
    assert report.ok, report.violations
    assert report.partitions[0].gaps == [gap]
    assert "1 recorded gaps" in report.summary_line()


def test_recorded_gap_that_does_not_start_at_the_table_is_a_violation():
    gap = {"topic": "t", "partition": 1, "from": 25, "until": 30}
    report = check([(5, commit([("t", 1, 30, 32, 2)], {"t": {0: 10, 1: 32}}, extra={"gaps": [gap]}))])
    assert "records a gap [25, 30) but the table stood at 20" in report.violations[0]


def test_next_offsets_not_matching_ranges_is_a_violation():
    report = check([(5, commit([("t", 0, 10, 15, 5)], {"t": {0: 16, 1: 20}}))])
    assert report.violations == ["t-0: Delta version 5 records next offset 16 but its ranges end at 15"]


def test_commit_of_another_run_is_a_violation():
    report = check([(5, commit([("t", 0, 10, 15, 5)], {"t": {0: 15, 1: 20}}, run_id="other"))])
    assert "written by run 'other'" in report.violations[0]


def test_job_rows_must_match_the_commits():
    report = check([(5, commit([("t", 0, 10, 15, 5)], {"t": {0: 15, 1: 20}}))], expected_rows=6)
    assert report.violations == ["the job reported 6 rows but the run's commits hold 5"]


def test_checkpoint_behind_the_table_is_a_violation():
    report = check([(5, commit([("t", 0, 10, 15, 5)], {"t": {0: 15, 1: 20}}))], checkpoint={"t": {0: 10, 1: 20}})
    assert report.violations == [
        "the Spark checkpoint does not stand where the table does: t-0 table 15 vs checkpoint 10"
    ]


def test_unreadable_checkpoint_is_a_note_not_a_violation():
    report = check([(5, commit([("t", 0, 10, 15, 5)], {"t": {0: 15, 1: 20}}))], checkpoint=None)
    assert report.ok and report.notes == ["Spark checkpoint not compared (not readable from here)"]


def test_holes_confirmed_by_kafka_are_fine():
    calls = []

    def counter(topic, partition, frm, until):
        calls.append((topic, partition, frm, until))
        return 3

    report = check([(5, commit([("t", 0, 10, 15, 3)], {"t": {0: 15, 1: 20}}))], counter=counter)
    assert report.ok and calls == [("t", 0, 10, 15)]
    assert report.partitions[0].holes == 2


@pytest.mark.parametrize("held,word", [(4, "records missing"), (2, "more rows than records")])
def test_holes_not_confirmed_by_kafka_are_violations(held, word):
    report = check([(5, commit([("t", 0, 10, 15, 3)], {"t": {0: 15, 1: 20}}))], counter=lambda *a: held)
    assert report.violations == [
        f"t-0 [10, 15): Delta version 5 holds 3 rows but Kafka holds {held} committed records in that range ({word})"
    ]


def test_holes_kafka_cannot_verify_are_notes():
    def counter(*args):
        raise RuntimeError("range no longer available")

    report = check([(5, commit([("t", 0, 10, 15, 3)], {"t": {0: 15, 1: 20}}))], counter=counter)
    assert report.ok and "range no longer available" in report.notes[0]


def test_new_partition_may_start_anywhere_and_run_without_commits_is_continuous():
    report = check([(5, commit([("t", 2, 0, 4, 4)], {"t": {0: 10, 1: 20, 2: 4}}))])
    assert report.ok, report.violations
    empty = check([])
    assert empty.ok and empty.commits == 0
