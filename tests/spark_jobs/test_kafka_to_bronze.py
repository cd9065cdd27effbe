"""Tests of spark_jobs/kafka_to_bronze.py's parts that need no SparkSession: the run summary, and the entry point's
refusal of bad arguments.

The job itself runs for real in tests/integration/test_ingest_bronze.py; its
plan (offsets, checkpoints, arguments) is unit-tested in test_ingest_plan.py.
"""

from __future__ import annotations

import pytest

from include.contract import summaries as contract
from include.contract.offsets import OffsetRange
from spark_jobs import job_common, kafka_to_bronze
from spark_jobs.kafka_to_bronze import BatchRecord, RunSummary


def _summary() -> RunSummary:
    """Three batches: partition 0 over two of them, a replayed batch (already committed), then partition 1."""
    return RunSummary(
        pipeline="orders", run_id="r1", run_type="scheduled", epoch=2, checkpoint_rebuilt=None,
        start_offsets={"t": {0: 10, 1: 0}}, next_offsets={"t": {0: 25, 1: 4}},
        batches=[
            BatchRecord(0, 5, [OffsetRange("t", 0, 10, 15, 5)], 7, False, 1.23456, {"write": 0.5}),
            BatchRecord(1, 5, [OffsetRange("t", 0, 10, 15, 5)], None, True, 0.1),
            BatchRecord(2, 14, [OffsetRange("t", 0, 15, 25, 10), OffsetRange("t", 1, 0, 4, 4)], 8, False, 2.0),
        ],
        duration_s=3.33333, phases_s={"kafka": 0.12345},
    )  # fmt: skip


def test_a_replayed_batch_counts_no_rows_and_no_commit():
    summary = _summary()
    assert summary.rows == 19
    data = summary.to_json()
    assert (data["rows"], data["commits"], data["bronze_version"]) == (19, 2, 8)
    assert [b["skipped_replay"] for b in data["batches"]] == [False, True, False]


def test_each_partition_spans_its_ranges_over_all_batches():
    data = _summary().to_json()
    assert data["partitions"] == {"t": {"0": {"from": 10, "until": 25, "rows": 15},
                                        "1": {"from": 0, "until": 4, "rows": 4}}}  # fmt: skip
    assert (data["start_offsets"], data["next_offsets"]) == ({"t": {"0": 10, "1": 0}}, {"t": {"0": 25, "1": 4}})
    assert (data["duration_s"], data["phases_s"], data["batches"][0]["duration_s"]) == (3.333, {"kafka": 0.123}, 1.235)
    assert data["batches"][0]["ranges"] == [{"topic": "t", "partition": 0, "from": 10, "until": 15, "rows": 5}]


def test_a_run_without_batches_has_no_bronze_version_and_the_task_side_reads_it():
    empty = RunSummary(pipeline="orders", run_id="r1", run_type="manual", epoch=0, checkpoint_rebuilt=None,
                       start_offsets={}, next_offsets={})  # fmt: skip
    data = empty.to_json()
    assert (data["rows"], data["commits"], data["bronze_version"], data["partitions"]) == (0, 0, None, {})
    # The job writes its summary through the contract class the task reads it with: both shapes must pass.
    for summary in (empty, _summary()):
        read = contract.IngestSummary.from_json(summary.to_json())
        assert (read.rows, read.bronze_version, read.epoch) == (summary.rows, summary.to_json()["bronze_version"],
                                                                summary.epoch)  # fmt: skip


def test_the_result_line_names_epoch_rows_batches_and_duration():
    assert kafka_to_bronze.STEP.describe(_summary()) == "epoch=2 rows=19 batches=3 duration=3.3s"


def test_a_bad_argument_exits_2_before_any_session(monkeypatch, capsys):
    def no_session(name: str):
        raise AssertionError("a session was started for a bad argument")

    monkeypatch.setattr(job_common, "build_session", no_session)
    assert kafka_to_bronze.main(["--pipeline=orders"]) == 2
    assert "kafka_to_bronze: bad argument: " in capsys.readouterr().err
    with pytest.raises(SystemExit) as done:
        kafka_to_bronze.main(["--help"])
    assert done.value.code == 0
