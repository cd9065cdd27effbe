"""Table maintenance against real Kafka, Spark and Delta: compaction, VACUUM and checkpoints change no position.

The tables are written by the real ingestion and transform jobs over several
runs; the maintenance step then rewrites them. Every assertion compares with
an independent read of the topic or with where the tables stood before.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from include.contract import transform_check
from include.contract.continuity import check_run
from include.readers import delta_progress, run_ledger, spark_checkpoint
from include.readers.delta_progress import read_progress
from spark_jobs import kafka_backfill, maintain_tables
from tests.integration.job_helpers import bronze_records, ingest, order_after_t0, transform
from tests.kafka_helpers import produce, read_all

pytestmark = pytest.mark.integration


def _maintain(spark, lake: Path, name: str, *extra: str) -> dict:
    args = ["--pipeline", name, *(f"--table={t}={lake / t}" for t in ("bronze", "silver", "quarantine")), *extra]
    return maintain_tables.run(spark, maintain_tables.parse_config(args))


def _silver(spark, lake: Path) -> dict:
    return {r["order_id"]: (str(r["amount"]), r["_deleted"])
            for r in spark.read.format("delta").load(str(lake / "silver")).collect()}  # fmt: skip


@pytest.mark.full
def test_maintenance_compacts_every_table_and_the_next_runs_continue_exactly_once(spark, bootstrap, make_topic,
                                                                                    unique_name, tmp_path):  # fmt: skip
    topic, lake = make_topic(unique_name, partitions=3), tmp_path / "lake"
    sent = 0
    for run in range(2):  # two runs of two micro-batches each: one file per partition per batch
        produce(bootstrap, topic, [(i % 3, f"o{i}".encode(), order_after_t0(f"o{i}", i % 40, i)) for i in range(sent, sent + 120)])
        produce(bootstrap, topic, [(run % 3, b"bad", b"{not json")])
        sent += 120
        ingest(spark, bootstrap, lake, unique_name, topic, per_trigger=70)
        transform(spark, lake, unique_name, run_id=f"run-{run}")
    before = read_progress(lake / "bronze", unique_name)
    silver_before, files = _silver(spark, lake), {t: delta_progress.file_count(lake / t) for t in ("bronze", "silver")}
    assert files["bronze"] >= 9, files  # what maintenance is for

    summary = _maintain(spark, lake, unique_name, "--zorder-by=silver=customer")

    tables = summary["tables"]
    assert set(tables) == {"bronze", "silver", "quarantine"}
    for name, t in tables.items():
        assert t["files_before"] == delta_progress.file_count(lake / name) + t["optimize"]["files_removed"] - \
            t["optimize"]["files_added"], (name, t)  # fmt: skip
        assert t["files_after"] == delta_progress.file_count(lake / name) == 1, (name, t)
        ops = [op for _, op in t["commits"]]
        assert ops[0] == "OPTIMIZE" and "VACUUM END" in ops, ops
        assert (lake / name / "_delta_log" / f"{t['checkpoint']['version']:020d}.checkpoint.parquet").exists()
    assert tables["silver"]["optimize"]["zorder_by"] == ["customer"]
    assert tables["bronze"]["files_before"] == files["bronze"]

    # Position, rows and silver unchanged; no maintenance commit reads as progress.
    after = read_progress(lake / "bronze", unique_name)
    assert (after.next_offsets, after.commit_version, after.epoch) == (before.next_offsets, before.commit_version,
                                                                        before.epoch)  # fmt: skip
    assert after.restore is None
    assert delta_progress.commits_since(lake / "bronze", before.table_version)[1] == []
    assert delta_progress.silver_commits_since(lake / "silver", tables["silver"]["version_before"])[1] == []
    assert _silver(spark, lake) == silver_before

    # The next run (ingest, transform, then maintenance again, as a DAG run does them) reads exactly the new
    # records; its checks, made after its maintenance commits, find its commits chained on from where the
    # tables stood.
    produce(bootstrap, topic, [(i % 3, f"o{i}".encode(), order_after_t0(f"o{i}", 50, i)) for i in range(sent, sent + 90)])
    version = delta_progress.table_version(lake / "bronze")
    silver_version, quarantine_version = (delta_progress.table_version(lake / t) for t in ("silver", "quarantine"))
    stand = delta_progress.silver_stand(lake / "silver", unique_name)
    result = ingest(spark, bootstrap, lake, unique_name, topic, per_trigger=70)
    done = transform(spark, lake, unique_name, run_id="run-after")
    assert (result.rows, done["read"]) == (90, 90)
    again = _maintain(spark, lake, unique_name)["tables"]
    assert all(t["files_after"] == 1 and t["commits"] for t in again.values()), again

    _, commits = delta_progress.commits_since(lake / "bronze", version)
    checkpoint = spark_checkpoint.read_state(max(spark_checkpoint.epoch_dirs(lake / "checkpoints" / "bronze").items())[1])
    report = check_run(run_id="manual", start=before.next_offsets, commits=commits,
                       checkpoint_position=checkpoint.position, expected_rows=result.rows)  # fmt: skip
    assert report.ok, report.violations
    previous, batches = delta_progress.silver_commits_since(lake / "silver", silver_version)
    bronze_version, rows_by_version = delta_progress.bronze_rows_by_version(
        lake / "bronze", min(c.bronze_start.version for c in batches))  # fmt: skip
    assert bronze_version < delta_progress.table_version(lake / "bronze")  # maintenance commits after it
    # Opened once, as the continuity check reads it: the same answers as from the path.
    opened = delta_progress.opened(lake / "bronze")
    assert delta_progress.commits_since(opened, version) == (delta_progress.table_version(lake / "bronze"), commits)
    assert delta_progress.bronze_rows_by_version(opened, min(c.bronze_start.version for c in batches)) == (
        bronze_version, rows_by_version)  # fmt: skip
    assert delta_progress.bronze_data_version(opened) == delta_progress.bronze_data_version(lake / "bronze")
    assert delta_progress.opened(lake / "none") == lake / "none"
    assert delta_progress.commits_since(delta_progress.opened(lake / "none"), None) == (None, [])
    checked = transform_check.check_transform(
        previous=previous, commits=batches, bronze_rows=rows_by_version, bronze_version=bronze_version,
        quarantine_rows=delta_progress.quarantine_rows_since(lake / "quarantine", quarantine_version),
        expected=done, stand_before=stand,
    )  # fmt: skip
    assert checked.ok, checked.violations
    rows = bronze_records(spark, lake / "bronze")
    assert len(rows) == len(set(rows)) and set(rows) == read_all(bootstrap, topic)
    assert len(_silver(spark, lake)) == sent + 90


@pytest.mark.full
def test_a_backfill_by_offsets_works_after_vacuum_deleted_the_compacted_files(spark, bootstrap, make_topic,
                                                                                unique_name, tmp_path):  # fmt: skip
    topic, lake = make_topic(unique_name, partitions=2), tmp_path / "lake"
    produce(bootstrap, topic, [(i % 2, None, f"v{i}".encode()) for i in range(200)])
    ingest(spark, bootstrap, lake, unique_name, topic, per_trigger=50)
    bronze = lake / "bronze"
    spark.sql(f"DELETE FROM delta.`{bronze}` WHERE partition = 0 AND offset < 30")  # rows a backfill must restore
    # A retention of 0 so that VACUUM deletes what OPTIMIZE removed now (the pipeline never allows under 7 days).
    spark.sql(f"ALTER TABLE delta.`{bronze}` SET TBLPROPERTIES ('delta.deletedFileRetentionDuration' = 'interval 0 hours')")
    spark.conf.set("spark.databricks.delta.retentionDurationCheck.enabled", "false")
    try:
        summary = maintain_tables.run(spark, maintain_tables.parse_config(
            ["--pipeline", unique_name, f"--table=bronze={bronze}"]))  # fmt: skip
    finally:
        spark.conf.unset("spark.databricks.delta.retentionDurationCheck.enabled")
    t = summary["tables"]["bronze"]
    assert t["vacuum"]["files_deleted"] >= t["files_before"], t  # the compacted files are gone from storage
    assert len(list(bronze.glob("*.parquet"))) == t["files_after"] == 1

    request = tmp_path / "request.json"
    request.write_text(json.dumps({"action": "backfill_offsets", "reason": "test", "requested_by": "t",
                                   "ranges": [{"topic": topic, "partition": 0, "from": 0, "until": 40}],
                                   "time_range": None}))  # fmt: skip
    result = kafka_backfill.run(spark, kafka_backfill.parse_config([
        "--pipeline", unique_name, "--bootstrap-servers", bootstrap, "--bronze-path", str(bronze),
        "--request-file", str(request), "--run-id", "backfill-1",
    ]))  # fmt: skip
    assert (result["inserted"], result["present"]) == (30, 10)
    rows = bronze_records(spark, lake / "bronze")
    assert len(rows) == len(set(rows)) and set(rows) == read_all(bootstrap, topic)


@pytest.mark.full
def test_a_maintenance_commit_carrying_progress_metadata_fails_the_step(spark, tmp_path):
    path = tmp_path / "t"
    for i in range(3):
        spark.range(i * 5, i * 5 + 5).write.format("delta").mode("append").save(str(path))
    # A session left with a progress commit's metadata (as if a job's own reset had been skipped) must not
    # turn maintenance commits into look-alike progress: the step clears it, and checks what it wrote.
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", '{"pipeline": "x"}')
    try:
        summary = maintain_tables.run(spark, maintain_tables.parse_config(["--pipeline", "x", f"--table=bronze={path}"]))
        assert spark.conf.get("spark.databricks.delta.commitInfo.userMetadata") == '{"pipeline": "x"}'  # restored
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")
    assert summary["tables"]["bronze"]["files_after"] == 1
    # Without the clearing, the OPTIMIZE commit would carry it: the check refuses that.
    for i in range(3):
        spark.range(i * 5, i * 5 + 5).write.format("delta").mode("append").save(str(path))
    cfg = maintain_tables.parse_config(["--pipeline", "x", f"--table=bronze={path}", "--no-vacuum", "--no-checkpoint"])
    spark.conf.set("spark.databricks.delta.commitInfo.userMetadata", '{"pipeline": "x"}')
    try:
        with pytest.raises(maintain_tables.MaintenanceError, match=r"maintenance commit \d+ \(OPTIMIZE\) carries userMetadata"):
            maintain_tables.maintain_table(spark, "bronze", str(path), cfg)
    finally:
        spark.conf.unset("spark.databricks.delta.commitInfo.userMetadata")


def test_ledger_maintenance_compacts_it_and_keeps_every_row(tmp_path):
    path = tmp_path / "_runs"
    from datetime import UTC, datetime, timedelta

    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    for i in range(30):
        run_ledger.append_run(path, {"pipeline": "p", "run_id": f"r{i}", "outcome": "success",
                                     "finished_at": t0 + timedelta(minutes=i)})  # fmt: skip
    rows = run_ledger.read_runs(path)
    result = run_ledger.maintain(path)
    assert (result["files_before"], result["files_after"]) == (30, 1)
    assert result["optimize"]["files_removed"] == 30
    assert run_ledger.read_runs(path) == rows
    assert [r["run_id"] for r in run_ledger.newest_runs(path, files=3)][:3] == ["r29", "r28", "r27"]
    assert delta_progress.file_count(path) == 1
    assert run_ledger.maintain(tmp_path / "none") == {"path": str(tmp_path / "none"), "skipped": "no table yet"}
