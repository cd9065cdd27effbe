"""The backfill's commit record (include/contract/offsets.py) and its check after the run (include/contract/continuity.py)."""

from __future__ import annotations

import json

import pytest

from include.contract.backfill_check import BackfillCheck, check_backfill
from include.contract.continuity import ContinuityReport
from include.contract.offsets import (
    BACKFILL_FORMAT,
    BackfillCommit,
    BackfillRange,
    BronzeCommit,
    CommitMetadataError,
    OffsetError,
    OffsetRange,
)

TIME_RANGE = {"from": "2026-11-20T00:00:00+00:00", "to": "2026-11-21T00:00:00+00:00"}


def bcommit(*ranges: tuple, run_id: str = "run-b", time_range: dict | None = None) -> BackfillCommit:
    return BackfillCommit("orders", run_id, "manual", "backfill_offsets", "replay", "alice",
                          tuple(BackfillRange("orders", *r) for r in ranges), time_range)  # fmt: skip


class Counter:
    """``count_records`` answering from a table; records the questions."""

    def __init__(self, held: dict | None = None, error: Exception | None = None) -> None:
        self.held, self.error, self.asked = held or {}, error, []

    def __call__(self, topic: str, partition: int, frm: int, until: int) -> int:
        self.asked.append((topic, partition, frm, until))
        if self.error:
            raise self.error
        return self.held[(topic, partition, frm, until)]


def check(commits, expected=None, counter=None) -> BackfillCheck:
    return check_backfill(run_id="run-b", commits=commits, expected=expected, count_records=counter)


# --------------------------------------------------------------------------- check_backfill


def test_backfill_confirmed_by_delta_and_the_job():
    commit = bcommit((0, 10, 20, 10, 3), (1, 0, 5, 5, 0))
    result = check([(7, commit, {"numTargetRowsInserted": "3"})], expected={"inserted": 3, "read": 15})
    assert result.ok
    assert (result.commits, result.read, result.inserted) == (1, 15, 3)
    assert result.violations == [] and result.notes == []
    assert result.summary_line() == "backfill confirmed: 15 records re-read, 3 inserted, 12 were there already"
    assert result.to_json() == {"ok": True, "commits": 1, "read": 15, "inserted": 3, "earlier_tries_inserted": 0, "earlier_tries_commits": 0, "present": 12,
                                "violations": [], "notes": []}  # fmt: skip


@pytest.mark.parametrize(("metrics", "said"), [({"numTargetRowsInserted": "2"}, "2"), ({}, "None")])
def test_commit_disagreeing_with_deltas_metrics_is_a_violation(metrics, said):
    result = check([(7, bcommit((0, 10, 20, 10, 3)), metrics)])
    assert result.violations == [f"Delta version 7 says it inserted 3 rows but Delta's metrics say {said}"]
    assert not result.ok
    assert result.summary_line().startswith("backfill NOT CONFIRMED: 10 records re-read, 3 inserted")


def test_two_commits_of_one_run_is_a_violation():
    metrics = {"numTargetRowsInserted": "1"}
    result = check([(7, bcommit((0, 10, 20, 10, 1)), metrics), (8, bcommit((1, 0, 5, 5, 1)), metrics)])
    assert result.violations == ["the run wrote 2 backfill commits (versions 7, 8); expected at most one"]
    assert (result.commits, result.read, result.inserted) == (2, 15, 2)


def test_another_runs_backfill_is_noted_not_counted():
    other = bcommit((0, 0, 10, 10, 10), run_id="run-a")
    mine = bcommit((1, 0, 5, 5, 2))
    result = check([(6, other, {"numTargetRowsInserted": "10"}), (7, mine, {"numTargetRowsInserted": "2"})],
                   expected={"inserted": 2})  # fmt: skip
    assert result.ok, result.violations
    assert result.notes == ["Delta version 6 is a backfill of another run (run-a)"]
    assert (result.commits, result.read, result.inserted) == (1, 5, 2)


def test_job_reporting_other_inserts_than_the_commit_is_a_violation():
    result = check([(7, bcommit((0, 10, 20, 10, 3)), {"numTargetRowsInserted": "3"})], expected={"inserted": 4})
    assert result.violations == ["the job reported 4 rows inserted but its backfill commits in this run hold 3"]


def test_nothing_missing_means_no_commit_and_the_jobs_ranges_are_checked():
    counter = Counter()
    expected = {"inserted": 0, "read": 12, "ranges": [
        {"topic": "orders", "partition": 0, "from": 10, "until": 20, "read": 10, "inserted": 0},
        {"topic": "orders", "partition": 1, "from": 0, "until": 2, "read": 2, "inserted": 0},
    ]}  # fmt: skip
    result = check([], expected=expected, counter=counter)
    assert result.ok
    assert (result.commits, result.read, result.inserted) == (0, 12, 0)
    assert result.notes == ["nothing was missing, so the backfill wrote no commit"]
    assert counter.asked == []  # every offset came back: no holes to count
    assert result.summary_line() == "backfill confirmed: 12 records re-read, 0 inserted, 12 were there already"


def test_job_claiming_inserts_without_a_commit_is_a_violation():
    result = check([], expected={"inserted": 2, "read": 5, "ranges": []})
    assert result.violations == ["the job reported 2 rows inserted but its backfill commits in this run hold 0"]
    assert not result.ok
    assert (result.commits, result.read, result.inserted) == (0, 5, 0)


def test_job_claiming_inserts_without_a_commit_is_not_noted_as_nothing_missing():
    result = check([], expected={"inserted": 2, "read": 5, "ranges": []})
    assert result.notes == []


def test_range_with_holes_confirmed_by_kafka():
    counter = Counter({("orders", 0, 10, 20): 8})
    result = check([(7, bcommit((0, 10, 20, 8, 8)), {"numTargetRowsInserted": "8"})], counter=counter)
    assert result.ok
    assert result.notes == []
    assert counter.asked == [("orders", 0, 10, 20)]


def test_range_with_fewer_records_than_kafka_holds_is_a_violation():
    counter = Counter({("orders", 0, 10, 20): 10})
    result = check([(7, bcommit((0, 10, 20, 8, 1)), {"numTargetRowsInserted": "1"})], counter=counter)
    assert result.violations == [
        "orders-0 [10, 20): Delta version 7 holds 8 rows but Kafka holds 10 committed records in that range "
        "(records missing)"
    ]


def test_holes_in_the_jobs_ranges_are_checked_without_a_commit():
    counter = Counter({("orders", 2, 0, 10): 9})
    expected = {"inserted": 0, "read": 8,
                "ranges": [{"topic": "orders", "partition": 2, "from": 0, "until": 10, "read": 8}]}  # fmt: skip
    result = check([], expected=expected, counter=counter)
    assert result.violations == ["orders-2 [0, 10): the backfill holds 8 rows but Kafka holds 9 committed records "
                                 "in that range (records missing)"]  # fmt: skip


def test_holes_without_a_counter_are_noted():
    result = check([(7, bcommit((0, 10, 20, 8, 0)), {"numTargetRowsInserted": "0"})])
    assert result.ok
    assert result.notes == ["orders-0 [10, 20): 2 offset holes not verified against Kafka"]


def test_holes_kafka_cannot_count_are_noted():
    counter = Counter(error=RuntimeError("broker down"))
    result = check([(7, bcommit((0, 10, 20, 8, 0)), {"numTargetRowsInserted": "0"})], counter=counter)
    assert result.ok
    assert result.notes == ["orders-0 [10, 20): offset holes not verified against Kafka: broker down"]


def test_backfill_by_time_is_not_recounted():
    counter = Counter()
    commit = bcommit((0, 10, 20, 4, 4), time_range=TIME_RANGE)
    result = check([(7, commit, {"numTargetRowsInserted": "4"})], counter=counter)
    assert result.ok
    assert result.notes == ["Delta version 7: records inside the time window were not recounted in Kafka"]
    assert counter.asked == []


def test_failed_backfill_check_fails_the_continuity_report():
    backfill = check([(7, bcommit((0, 10, 20, 10, 3)), {"numTargetRowsInserted": "2"})])
    report = ContinuityReport("run-b", 0, 0, [], [], [], backfill=backfill)
    assert not report.ok
    assert report.to_json()["violations"] == ["Delta version 7 says it inserted 3 rows but Delta's metrics say 2"]
    assert report.summary_line() == ("continuity: BROKEN (0 violations): 0 commits, 0 rows over 0 partitions; "
                                     "backfill NOT CONFIRMED: 10 records re-read, 3 inserted, 7 were there "
                                     "already")  # fmt: skip


# --------------------------------------------------------------------------- BackfillRange / BackfillCommit


def test_backfill_commit_round_trips_through_user_metadata():
    commit = BackfillCommit("orders", "run-b", "backfill", "airflow_backfill", "airflow backfill", None,
                            (BackfillRange("orders", 1, 0, 5, 5, 1), BackfillRange("orders", 0, 10, 20, 9, 2)),
                            TIME_RANGE)  # fmt: skip
    text = commit.to_user_metadata()
    data = json.loads(text)
    assert (data["format"], data["version"]) == (BACKFILL_FORMAT, 1)
    assert [r["partition"] for r in data["ranges"]] == [0, 1]  # stored sorted
    parsed = BackfillCommit.from_user_metadata(text, version=7)
    assert parsed == BackfillCommit("orders", "run-b", "backfill", "airflow_backfill", "airflow backfill", None,
                                    (BackfillRange("orders", 0, 10, 20, 9, 2), BackfillRange("orders", 1, 0, 5, 5, 1)),
                                    TIME_RANGE)  # fmt: skip
    assert (parsed.read, parsed.inserted) == (14, 3)
    assert [r.present for r in parsed.ranges] == [7, 4]


def test_bronze_and_backfill_metadata_are_not_mistaken_for_each_other():
    bronze = BronzeCommit("orders", "run-1", "scheduled", 1, 0, (OffsetRange("orders", 0, 0, 10, 10),),
                          {"orders": {0: 10}})  # fmt: skip
    backfill = bcommit((0, 0, 10, 10, 0))
    assert BronzeCommit.from_user_metadata(backfill.to_user_metadata()) is None
    assert BackfillCommit.from_user_metadata(bronze.to_user_metadata()) is None
    assert BronzeCommit.from_user_metadata(bronze.to_user_metadata()) == bronze
    assert BackfillCommit.from_user_metadata(backfill.to_user_metadata()) == backfill


@pytest.mark.parametrize("text", [None, "", "OPTIMIZE", "[1, 2]", '{"format": "someone-else"}'])
def test_metadata_that_is_not_a_backfills_is_skipped(text):
    assert BackfillCommit.from_user_metadata(text, version=3) is None


@pytest.mark.parametrize(("version", "where"), [(9, "Delta commit version 9"), (None, "commit metadata")])
def test_unsupported_backfill_format_version_raises(version, where):
    text = json.dumps({"format": BACKFILL_FORMAT, "version": 2, "ranges": []})
    with pytest.raises(CommitMetadataError, match=rf"^{where}: backfill commit format version 2 is not supported "
                                                  r"\(expected 1\)$"):  # fmt: skip
        BackfillCommit.from_user_metadata(text, version=version)


@pytest.mark.parametrize(
    ("change", "detail"),
    [
        ({"ranges": None}, "TypeError"),
        ({"ranges": [{"topic": "orders", "partition": "zero", "from": 0, "until": 5}]}, "ValueError"),
        ({"ranges": [{"topic": "orders", "partition": 0, "from": 5, "until": 5}]}, "OffsetError"),
        ({"ranges": [{"topic": "orders", "partition": 0, "from": 0, "until": 5, "read": 6}]}, "cannot have read 6"),
    ],
    ids=["ranges-not-a-list", "partition-not-a-number", "empty-range", "read-more-than-offsets"],
)
def test_malformed_backfill_metadata_raises_naming_the_version(change, detail):
    data = json.loads(bcommit((0, 0, 10, 10, 0)).to_user_metadata()) | change
    with pytest.raises(CommitMetadataError, match=rf"^Delta commit version 4: malformed backfill commit metadata: "
                                                  rf".*{detail}"):  # fmt: skip
        BackfillCommit.from_user_metadata(json.dumps(data), version=4)


@pytest.mark.parametrize("key", ["ranges", "action", "run_id"])
def test_backfill_metadata_missing_a_key_raises(key):
    data = json.loads(bcommit((0, 0, 10, 10, 0)).to_user_metadata())
    del data[key]
    with pytest.raises(CommitMetadataError, match=rf"malformed backfill commit metadata: KeyError\('{key}'\)"):
        BackfillCommit.from_user_metadata(json.dumps(data))


def test_backfill_range_from_json_defaults_counts_to_zero():
    r = BackfillRange.from_json({"topic": "orders", "partition": "2", "from": "3", "until": 9})
    assert r == BackfillRange("orders", 2, 3, 9, 0, 0)
    assert r.to_json() == {"topic": "orders", "partition": 2, "from": 3, "until": 9, "read": 0, "inserted": 0}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((-1, 5), r"orders-0: backfill range \[-1, 5\) is not a valid offset range \(expected 0 <= from < until\)"),
        ((5, 5), r"orders-0: backfill range \[5, 5\) is not a valid offset range"),
        ((6, 5), r"orders-0: backfill range \[6, 5\) is not a valid offset range"),
        ((0, 10, 11, 0), r"orders-0: backfill range \[0, 10\) cannot have read 11 records and inserted 0"),
        ((0, 10, 3, 4), r"orders-0: backfill range \[0, 10\) cannot have read 3 records and inserted 4"),
        ((0, 10, 3, -1), r"cannot have read 3 records and inserted -1"),
    ],
    ids=["negative-from", "empty", "reversed", "read-too-many", "inserted-more-than-read", "negative-inserted"],
)
def test_invalid_backfill_ranges_raise(args, message):
    with pytest.raises(OffsetError, match=message):
        BackfillRange("orders", 0, *args)


def test_a_backfill_try_that_died_after_its_commit_counts_and_the_retried_try_answers_for_its_own():
    # Try 1 inserted 3 rows at version 7 and died; try 2 found them there, inserted nothing, wrote no commit.
    expected = {"inserted": 0, "read": 10, "bronze_version": None, "ranges": [
        {"topic": "orders", "partition": 0, "from": 10, "until": 20, "read": 10, "inserted": 0}]}  # fmt: skip
    result = check([(7, bcommit((0, 10, 20, 10, 3)), {"numTargetRowsInserted": "3"})], expected=expected)
    assert result.ok, result.violations
    assert (result.inserted, result.earlier_tries_inserted, result.earlier_tries_commits) == (3, 3, 1)
    assert "3 rows were inserted by an earlier try of this run's backfill" in result.notes[0]
    # judged against every commit of the run, as before every try counted, the same run is broken
    assert not check([(7, bcommit((0, 10, 20, 10, 3)), {"numTargetRowsInserted": "3"})],
                     expected={k: v for k, v in expected.items() if k != "bronze_version"}).ok
