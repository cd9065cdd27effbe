"""The whole lakehouse on a store: a real S3-compatible server (s3proxy) or a real HDFS (Hadoop's NameNode
and DataNode), with real Kafka, Spark and Delta.

Bronze, silver, quarantine, the run ledger, both Spark checkpoints and the run
lock live under one ``s3a://`` prefix, reached through the Airflow ``aws``
connection ``aws_test``, or under one ``hdfs://`` folder, which needs no
connection; nothing of the pipeline is written to the worker's disk but its
run folders. Each core guarantee is shown once on each store: exactly once
across a driver killed inside a batch, a RESTORE refused and re-read, Delta's
log cleanup, a backfill and maintenance.
"""

from __future__ import annotations

import time

import pytest

from include.tooling import airflow_local, local_s3
from tests.integration.dag_helpers import (
    ORDERS_TRANSFORM,
    STANDALONE,
    assert_no_cluster_left,
    assert_ok,
    order_at_10h,
)
from tests.kafka_helpers import produce, produce_numbered, read_all

# Full tier: the first use resolves s3proxy and S3A's jars, or Hadoop's mini cluster, from Maven on a fresh machine.
pytestmark = [pytest.mark.integration, pytest.mark.full]


def test_a_driver_killed_inside_a_batch_on_the_store_then_a_rerun_is_exact(lakehouse_pipeline, bootstrap):
    p = lakehouse_pipeline
    # A transient cluster: its executors write the store's files with the keys the driver's session holds.
    p.write(cluster=STANDALONE, transform=ORDERS_TRANSFORM)
    produce(bootstrap, p.topic, [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 60, i)) for i in range(1200)])
    produce(bootstrap, p.topic, [(0, b"bad", b"{not json")])
    proc, log = p.run(KDE_FAILPOINT="kill-driver-after-bronze-commit:1")
    assert proc.returncode == 1
    failed = p.ledger()[0]
    assert failed["outcome"] == "failed" and failed["reason"].startswith("failed at ingest")
    assert 0 < len(p.bronze_keys()) < 1201, "two batches landed before the kill"
    assert_no_cluster_left(p)

    proc, log = p.run()
    assert_ok(proc, log)
    ok = p.ledger()[0]
    assert (ok["outcome"], ok["continuity"]) == ("success", "CONTINUOUS")
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 1201
    assert set(keys) == {(part, off) for part, off, _ in read_all(bootstrap, p.topic)}
    silver = p.table("silver").to_pyarrow_table(columns=["order_id"]).column("order_id").to_pylist()
    assert sorted(silver) == sorted(f"o{i}" for i in range(1200))
    assert p.table("quarantine").to_pyarrow_table().num_rows == 1
    # Both checkpoints and the lock are on the store; the worker's disk holds no table, checkpoint or key.
    assert p.listing("_checkpoints") == ["bronze", "silver"]
    # The rerun resumed the first run's checkpoint on the store: batches 2 and 3 of its epoch.
    assert p.listing("_checkpoints", "bronze", "epoch=1", "commits") == ["0", "1", "2", "3"]
    assert p.listing("_lock")
    assert not p.lake.exists()
    assert local_s3.SECRET_KEY not in log
    assert not list(p.var.glob("runs/*/*/secrets/*")), "a run left its credentials file"
    assert_no_cluster_left(p)


def test_a_restore_on_the_store_is_refused_then_reread_and_a_run_after_log_cleanup_is_exact(lakehouse_pipeline,
                                                                                          bootstrap):  # fmt: skip
    p = lakehouse_pipeline
    p.write(kafka={"connection_id": "kafka_default", "topics": [p.topic], "max_offsets_per_trigger": 300})
    produce_numbered(bootstrap, p.topic, 3, 900)
    assert_ok(*p.run())
    p.table("bronze").restore(1)  # undoes the last of the three batches
    produce_numbered(bootstrap, p.topic, 3, 300, start=900)
    proc, log = p.run()
    assert proc.returncode == 1
    refused = p.ledger()[0]
    assert refused["outcome"] == "failed" and "was restored to version 1" in refused["reason"], refused["reason"]

    assert_ok(*p.run({"action": "reread_after_restore", "reason": "the restore undid good batches"}))
    reread = p.ledger()[0]
    assert (reread["outcome"], reread["continuity"], reread["action"]) == ("success", "CONTINUOUS",
                                                                            "reread_after_restore")  # fmt: skip
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 1200

    # As after a quiet month: past a log checkpoint, Delta's expired-log cleanup takes every batch commit away.
    # The commits expire through the table's own retention, shortened with Delta's API (the files' times on
    # the store are the server's to keep); the next run sets the pipeline's retention back.
    bronze = p.table("bronze")
    bronze.alter.set_table_properties({"delta.logRetentionDuration": "interval 1 seconds"})
    bronze = p.table("bronze")
    bronze.create_checkpoint()
    time.sleep(2)
    bronze.cleanup_metadata()
    assert f"{0:020d}.json" not in p.listing("bronze", "_delta_log"), "the cleanup removed nothing"
    produce_numbered(bootstrap, p.topic, 3, 150, start=1200)
    assert_ok(*p.run())
    after = p.ledger()[0]
    assert (after["outcome"], after["rows"], after["continuity"]) == ("success", 150, "CONTINUOUS")
    assert p.table("bronze").metadata().configuration["delta.logRetentionDuration"] == "interval 30 days"
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 1350
    assert set(keys) == {(part, off) for part, off, _ in read_all(bootstrap, p.topic)}


def test_a_backfill_and_maintenance_on_the_store(lakehouse_pipeline, bootstrap):
    p = lakehouse_pipeline
    p.write(transform=ORDERS_TRANSFORM)
    produce(bootstrap, p.topic, [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 60, i)) for i in range(150)])
    produce(bootstrap, p.topic, [(2, b"bad", b"{not json")])  # quarantine gets a table of its own
    assert_ok(*p.run())
    removed = p.table("bronze").delete('"partition" = 1 AND "offset" >= 10 AND "offset" < 30')
    assert removed["num_deleted_rows"] == 20 and len(p.bronze_keys()) == 131
    assert p.table("bronze").vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)

    conf = {"action": "backfill_offsets", "reason": "restore rows a cleanup deleted by mistake",
            "offset_ranges": [{"topic": p.topic, "partition": 1, "from": 0, "until": 50}]}  # fmt: skip
    proc, log = p.run(conf)
    assert_ok(proc, log)
    row = p.ledger()[0]
    assert (row["outcome"], row["action"], row["rows"], row["continuity"]) == (
        "success", "backfill_offsets", 20, "CONTINUOUS")  # fmt: skip
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 151

    # Maintenance in every run from now: OPTIMIZE, VACUUM and a log checkpoint of each table, on the store.
    p.write(transform=ORDERS_TRANSFORM, maintenance={"every_runs": 1})
    produce(bootstrap, p.topic, [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 60, i)) for i in range(150, 180)])
    proc, log = p.run()
    assert_ok(proc, log)
    done = p.ledger()[0]
    assert (done["outcome"], done["rows"], done["continuity"]) == ("success", 30, "CONTINUOUS")
    maintained = done["maintenance_json"]
    assert {n: maintained["tables"][n]["files_after"] for n in ("bronze", "silver", "quarantine", "ledger")} == {
        "bronze": 1, "silver": 1, "quarantine": 1, "ledger": 1}, maintained  # fmt: skip
    assert maintained["tables"]["bronze"]["files_before"] > 1
    assert [name for name in p.listing("bronze", "_delta_log") if name.endswith(".checkpoint.parquet")]
    assert len(p.bronze_keys()) == 181
    silver = p.table("silver").to_pyarrow_table(columns=["order_id"]).column("order_id").to_pylist()
    assert sorted(silver) == sorted(f"o{i}" for i in range(180))
    assert any(line.startswith("maintain: bronze files ") for line in airflow_local.summary_lines(log)), log[-3000:]
