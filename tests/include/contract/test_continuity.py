"""Continuity rules on hand-made bronze commits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from include.contract.continuity import check_run
from include.contract.offsets import BronzeCommit, OffsetRange
from include.contract.silver_stand import BronzePosition, SilverCommit, SilverRestore, SilverStand
from include.contract.transform_check import check_transform


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
        "t-0: Delta version 5 range [12, 15) does not continue at 10: gap of 2 offsets; if bronze lacks those "
        "records, trigger the trigger form's action 'backfill_offsets' (airflow dags trigger <dag_id> -c "
        '\'{"action": "backfill_offsets", "reason": "<why>", "offset_ranges": [{"topic": "t", "partition": 0, '
        '"from": 10, "until": 12}]}\')'
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
    assert report.violations == ["the job reported 6 rows but its commits in this run hold 5"]


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


# --------------------------------------------------------------------------- the transform's batches


def _silver(batch: int, start: int, end: int, read: int, epoch: int = 0, **counts: int) -> SilverCommit:
    full = {"upserted": 0, "deleted": 0, "quarantined": 0, "superseded": 0, "replayed": 0, **counts}
    return SilverCommit(
        pipeline="p", run_id="r", epoch=epoch, batch_id=batch, bronze_start=BronzePosition(start),
        bronze_end=BronzePosition(end), read=read, counts=full, quarantine_fields={}, version=10 + batch,
    )  # fmt: skip


def _check_transform(commits, previous=None, bronze_rows=None, bronze_version=None, quarantine=None, **kw):
    return check_transform(
        previous=previous, commits=commits, bronze_rows=bronze_rows or {}, bronze_version=bronze_version,
        quarantine_rows=quarantine or {}, **kw,
    )  # fmt: skip


def test_transform_batches_that_account_for_every_bronze_record_pass():
    previous = _silver(0, 0, 2, 5, upserted=5)
    commits = [_silver(1, 2, 4, 10, upserted=6, quarantined=2, superseded=2), _silver(2, 4, 5, 3, deleted=3)]
    result = _check_transform(commits, previous, {2: 4, 3: 6, 4: 3}, 4, {(0, 1): 2})
    assert result.ok, result.violations
    assert (result.read, result.counts["upserted"], result.counts["quarantined"]) == (13, 6, 2)
    assert "13 read in 2 batches" in result.summary_line()


def test_a_batch_whose_counts_do_not_add_up_is_a_violation():
    result = _check_transform([_silver(0, 0, 1, 10, upserted=7, quarantined=2)], None, {0: 10}, 0, {(0, 0): 2})
    assert not result.ok
    assert "read 10 bronze records but accounts for 9" in result.violations[0]


def test_transform_batches_must_chain_and_reach_the_end_of_bronze():
    previous = _silver(0, 0, 2, 5, upserted=5)
    skipped = _check_transform([_silver(1, 3, 4, 2, upserted=2)], previous, {3: 2}, 3)
    assert any("starts at bronze {'version': 3, 'index': -1} but the previous batch ended at" in v
               for v in skipped.violations)  # fmt: skip
    behind = _check_transform([_silver(1, 2, 3, 2, upserted=2)], previous, {2: 2, 3: 4}, 3)
    assert any("bronze is at version 3: records in bronze were not transformed" in v for v in behind.violations)


def test_records_read_must_equal_what_bronze_holds_in_those_versions():
    result = _check_transform([_silver(0, 0, 2, 9, upserted=9)], None, {0: 5, 1: 5}, 1)
    assert any("read 9 records but bronze versions 0..1 hold 10" in v for v in result.violations)


def test_quarantine_must_hold_what_the_batch_quarantined():
    commits = [_silver(0, 0, 1, 4, upserted=1, quarantined=3)]
    assert any("quarantined 3 records but the quarantine commit holds 2" in v
               for v in _check_transform(commits, None, {0: 4}, 0, {(0, 0): 2}).violations)  # fmt: skip
    written_earlier = _check_transform(commits, None, {0: 4}, 0, {})
    assert written_earlier.ok and "an earlier attempt wrote it" in written_earlier.notes[0]


def test_a_rebuilt_epoch_may_restart_at_the_version_silver_stood_at():
    previous = _silver(4, 0, 3, 5, epoch=0, upserted=5)
    result = _check_transform([_silver(0, 3, 4, 2, epoch=1, upserted=2)], previous, {3: 2}, 3)
    assert result.ok, result.violations
    assert "starts a new checkpoint epoch" in result.notes[0]


def test_job_totals_must_match_the_commits():
    commits = [_silver(0, 0, 1, 4, upserted=4)]
    expected = {"read": 5, "upserted": 5, "batches": [{"skipped_replay": False}]}
    result = _check_transform(commits, None, {0: 4}, 0, expected=expected)
    assert any("the job reported" in v for v in result.violations)


def test_rows_a_backfill_put_back_count_as_read_even_when_silver_already_had_them():
    # bronze version 3 is a backfill commit re-inserting 20 deleted rows; silver holds them already
    previous = _silver(0, 0, 3, 30, upserted=30)
    ok = _check_transform([_silver(1, 3, 4, 20, replayed=20)], previous, {3: 20}, 3)
    assert ok.ok, ok.violations
    short = _check_transform([_silver(1, 3, 4, 15, replayed=15)], previous, {3: 20}, 3)
    assert short.violations == ["the run's batches read 15 records but bronze versions 3..3 hold 20"]


def test_after_log_cleanup_the_first_batch_chains_to_silvers_state_by_version():
    # Batch 3 ended inside bronze version 4 (file 2); its commit was cleaned away, the state keeps version 4.
    stand = SilverStand(0, 3, BronzePosition(4), "state")
    first = replace(_silver(4, 4, 6, 5, upserted=5), bronze_start=BronzePosition(4, 2))
    chained = _check_transform([first], None, {4: 7, 5: 3}, 5, stand_before=stand)
    assert chained.ok, chained.violations
    assert any("no longer in its log (log cleanup)" in n and "bronze version 4" in n for n in chained.notes)
    # Without the state the same run cannot be chained: it is refused, never taken as continuous.
    assert not _check_transform([first], None, {4: 7, 5: 3}, 5).ok
    # A batch that does not follow the state's batch, or starts in another version, is a violation.
    for wrong in (replace(first, batch_id=6), replace(first, bronze_start=BronzePosition(3, 2))):
        result = _check_transform([wrong], None, {3: 1, 4: 7, 5: 3}, 5, stand_before=stand)
        assert any("but the previous batch ended at {'version': 4, 'index': -1}" in v for v in result.violations)
    # A new epoch from the state's version is a note, as after a lost checkpoint.
    rebuilt = replace(_silver(0, 4, 6, 10, epoch=1, upserted=10))
    result = _check_transform([rebuilt], None, {4: 7, 5: 3}, 5, stand_before=stand)
    assert result.ok and any("starts a new checkpoint epoch at bronze version 4" in n for n in result.notes)


def test_after_a_restore_of_silver_the_run_must_reread_from_where_silver_stood_then():
    restore = SilverRestore(version=20, restored_to="version 11", bronze_from=BronzePosition(2))
    stand = SilverStand(0, 2, BronzePosition(5), "both", restore=restore)
    previous = _silver(2, 4, 5, 3, upserted=3)
    reread = _silver(0, 2, 6, 12, epoch=1, upserted=3, replayed=9)
    result = _check_transform([reread], previous, {2: 4, 3: 5, 4: 3, 5: 0}, 5, stand_before=stand)
    assert result.ok, result.violations
    assert any("silver was restored to version 11" in n and "bronze from version 2" in n for n in result.notes)
    # A run that went on from the old position after the RESTORE is caught.
    went_on = _silver(0, 5, 6, 0, epoch=0)
    assert not _check_transform([replace(went_on, batch_id=3)], previous, {5: 0}, 5, stand_before=stand).ok


# --------------------------------------------------------------------------- every try of a run counts


def _two_tries():
    """Try 1 of the run committed version 5 and died before it reported; try 2 (Airflow's retry) committed 6."""
    return [
        (5, commit([("t", 0, 10, 15, 5)], {"t": {0: 15, 1: 20}})),
        (6, commit([("t", 0, 15, 18, 3), ("t", 1, 20, 22, 2)], {"t": {0: 18, 1: 22}}, batch_id=1)),
    ]


def test_rows_an_earlier_try_committed_count_for_the_run_and_the_last_try_answers_for_its_own():
    report = check_run(run_id="run-2", start=START, commits=_two_tries(), checkpoint_position={"t": {0: 18, 1: 22}},
                       expected_rows=5, job_versions={6})  # fmt: skip
    assert report.ok, report.violations
    assert (report.rows, report.earlier_tries_rows, report.earlier_tries_commits) == (10, 5, 1)
    assert "Delta version(s) 5 (5 rows in 1 commits) were written by an earlier try" in report.notes[0]
    assert report.to_json()["earlier_tries_rows"] == 5


def test_without_the_tries_versions_a_retried_run_reads_as_a_broken_one():
    # What a run retried by Airflow was judged by before every try counted: a false alarm.
    report = check_run(run_id="run-2", start=START, commits=_two_tries(), checkpoint_position={"t": {0: 18, 1: 22}},
                       expected_rows=5)  # fmt: skip
    assert report.violations == ["the job reported 5 rows but its commits in this run hold 10"]


def test_a_retried_try_that_committed_nothing_new_still_accounts_for_the_earlier_tries_commits():
    report = check_run(run_id="run-2", start=START, commits=_two_tries(), checkpoint_position={"t": {0: 18, 1: 22}},
                       expected_rows=0, job_versions=set())  # fmt: skip
    assert report.ok, report.violations
    assert (report.rows, report.earlier_tries_rows, report.earlier_tries_commits) == (10, 10, 2)


def test_an_earlier_tries_commit_after_the_reporting_tries_first_is_a_second_driver():
    tries = _two_tries()
    tries.append((7, commit([("t", 0, 18, 19, 1)], {"t": {0: 19, 1: 22}}, batch_id=2)))
    report = check_run(run_id="run-2", start=START, commits=tries, checkpoint_position={"t": {0: 19, 1: 22}},
                       expected_rows=5, job_versions={6})  # fmt: skip
    assert report.violations == [
        "Delta version(s) 7 of this run were committed after the reporting try's first commit (version 6) by "
        "another driver of the run: an earlier try was still writing"
    ]


def test_silver_batches_an_earlier_try_committed_are_accounted_and_the_job_answers_for_its_own():
    earlier, mine = _silver(0, 0, 1, 4, upserted=4), _silver(1, 1, 2, 3, upserted=2, superseded=1)
    expected = {"read": 3, "upserted": 2, "superseded": 1,
                "batches": [{"batch_id": 1, "skipped_replay": False, "silver_version": mine.version}]}  # fmt: skip
    result = _check_transform([earlier, mine], None, {0: 4, 1: 3}, 1, expected=expected)
    assert result.ok, result.violations
    assert (result.read, result.counts["upserted"]) == (7, 6)
    assert any("silver version(s) 10 (4 bronze records read) were written by an earlier try" in n for n in result.notes)
    # the same totals against every commit of the run: what a retried transform was judged by before
    unnamed = {**expected, "batches": [{"batch_id": 1, "skipped_replay": False}]}
    assert not _check_transform([earlier, mine], None, {0: 4, 1: 3}, 1, expected=unnamed).ok
