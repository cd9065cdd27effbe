"""The transform job against real Kafka → bronze → silver/quarantine Delta tables.

Records are produced to the session broker, ingested with the real ingestion
job, then transformed; assertions compare silver and quarantine with what was
produced, computed independently here.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import uuid
from datetime import UTC
from decimal import Decimal

import pytest
from confluent_kafka import Producer

from include.contract.silver_stand import SCHEMA_KIND
from include.contract.transform_spec import TransformSpec
from include.readers import delta_progress, spark_checkpoint
from include.readers.delta_progress import read_progress
from include.spark.spark_submit import submit_environment
from include.tooling.job_submit import submit_command
from spark_jobs import bronze_to_silver, kafka_to_bronze, transform_plan
from spark_jobs.ingest_plan import parse_config
from tests.delta_helpers import age_log
from tests.integration.job_helpers import (
    ORDERS_SPEC,
    T0,
    assert_accounted,
    bronze_count,
    ingest,
    ingest_args,
    order_after_t0,
    quarantine,
    run_killed_by_failpoint,
    silver,
    silver_commits,
    transform,
    transform_args,
)
from tests.kafka_helpers import produce

pytestmark = pytest.mark.integration

def test_every_bad_record_lands_in_quarantine_naming_its_field_and_none_is_lost(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=2, **{"max.message.bytes": str(8 * 1024 * 1024)})
    big = b'{"order_id": "big", "note": "' + b"x" * (5 * 1024 * 1024) + b'"}'
    records = [
        (0, b"o1", order_after_t0("o1", 1)),
        (0, b"o2", order_after_t0("o2", 1, customer="c2")),
        (0, b"bad-json", b'{"order_id": "o3", "amount": '),  # offset 2
        (0, b"bad-utf8", b'{"order_id": "o4\xff"}'),  # offset 3
        (0, b"o5", b'{"amount": 1, "event_time": "2026-03-01T00:00:00Z"}'),  # offset 4: no order_id
        (0, b"o6", order_after_t0("o6", 1, amount="lots")),  # offset 5: wrong type
        (0, b"o7", b""),  # offset 6: empty
        (0, b"o1", None),  # offset 7: tombstone for o1
        (0, None, None),  # offset 8: tombstone without a key
        (1, b"o8", order_after_t0("o8", 1)),
    ]
    produce(bootstrap, topic, records)
    producer = Producer({"bootstrap.servers": bootstrap, "message.max.bytes": 8 * 1024 * 1024})
    producer.produce(topic, key=b"big", value=big, partition=1)  # partition 1, offset 1
    assert producer.flush(30) == 0
    assert ingest(spark, bootstrap, lake, unique_name, topic).rows == 11

    result = transform(spark, lake, unique_name)

    # o1's record is superseded by its tombstone later in the same batch
    assert (result["read"], result["upserted"], result["deleted"], result["quarantined"]) == (11, 2, 1, 7)
    assert result["superseded"] == 1 and result["replayed"] == 0
    rows = silver(spark, lake)
    assert set(rows) == {"o1", "o2", "o8"}
    assert rows["o1"]["_deleted"] is True and rows["o1"]["amount"] is None
    assert rows["o2"]["_deleted"] is False and rows["o2"]["amount"] == Decimal("10.00")
    assert rows["o2"]["customer"] == "c2" and rows["o2"]["_kafka_offset"] == 1
    bad = quarantine(spark, lake)
    expected_fields = {
        (0, 2): "value", (0, 3): "value", (0, 4): "order_id", (0, 5): "amount", (0, 6): "value",
        (0, 8): "order_id", (1, 1): "value",
    }  # fmt: skip
    assert {k: v["fields"][0] for k, v in bad.items()} == expected_fields
    assert "not valid JSON" in bad[(0, 2)]["reason"]
    assert "not valid UTF-8" in bad[(0, 3)]["reason"]
    assert "order_id: required, got nothing" in bad[(0, 4)]["reason"]
    assert 'amount: expected decimal(10,2), got a string "lots"' in bad[(0, 5)]["reason"]
    assert "empty value" in bad[(0, 6)]["reason"]
    assert "tombstone deletes the row named by its Kafka key" in bad[(0, 8)]["reason"]
    assert f"expected at most {1024 * 1024} bytes, got {len(big)} bytes" in bad[(1, 1)]["reason"]
    assert bytes(bad[(1, 1)]["value"]) == big and bytes(bad[(1, 1)]["key"]) == b"big"
    assert bytes(bad[(0, 3)]["value"]) == b'{"order_id": "o4\xff"}'
    assert {v["run_id"] for v in bad.values()} == {"run-1"}
    assert result["quarantine_fields"] == {"value": 4, "order_id": 2, "amount": 1}
    assert_accounted(spark, lake)


def newest(produced: list[tuple[str, int, int, int]]) -> dict[str, int]:
    """``{key: minute}`` of the newest record per key: by event minute, then partition offset."""
    best: dict[str, tuple[int, int]] = {}
    for key, minute, _, offset in produced:
        if key not in best or (minute, offset) > best[key]:
            best[key] = (minute, offset)
    return {k: v[0] for k, v in best.items()}


@pytest.mark.full
def test_silver_holds_the_newest_event_per_key_across_batches_and_runs(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=1)
    produced: list[tuple[str, int, int, int]] = []

    def send(events: list[tuple[str, int]]) -> None:
        start = len(produced)
        produce(bootstrap, topic, [(0, k.encode(), order_after_t0(k, m, amount=m)) for k, m in events])
        produced.extend((k, m, 0, start + i) for i, (k, m) in enumerate(events))

    # run 1: out of order within the run, spread over several bronze commits and transform batches
    send([("a", 10), ("b", 5), ("a", 3), ("c", 7), ("b", 9), ("a", 10), ("c", 1), ("b", 2)])
    ingest(spark, bootstrap, lake, unique_name, topic, per_trigger=3)
    first = transform(spark, lake, unique_name, files_per_trigger=1)
    assert len(first["batches"]) >= 3
    # run 2: late events older than silver, one newer, one equal-time later in the log
    send([("a", 4), ("b", 20), ("c", 7), ("d", 1)])
    ingest(spark, bootstrap, lake, unique_name, topic, per_trigger=2)
    second = transform(spark, lake, unique_name, run_id="run-2", files_per_trigger=1)

    rows = silver(spark, lake)
    got = {k: int((v["event_time"].replace(tzinfo=UTC) - T0).total_seconds() // 60) for k, v in rows.items()}
    assert got == newest(produced) == {"a": 10, "b": 20, "c": 7, "d": 1}
    assert {k: float(v["amount"]) for k, v in rows.items()} == {k: float(m) for k, m in got.items()}
    # "c" at 7 twice: the later offset (run 2) holds the row
    assert rows["c"]["_kafka_offset"] == 10 and rows["c"]["_run_id"] == "run-2"
    assert rows["a"]["_kafka_offset"] == 5  # equal time, later offset than 0
    assert second["superseded"] == 1 and second["upserted"] == 3  # a@4 superseded; b, c, d applied
    assert first["read"] + second["read"] == len(produced)
    assert_accounted(spark, lake)
    # A batch of keys silver did not hold is appended; one that changes a held key is a MERGE.
    from delta.tables import DeltaTable

    operations = [r["operation"] for r in DeltaTable.forPath(spark, str(lake / "silver")).history()
                  .orderBy("version").collect() if r["operation"] in ("WRITE", "MERGE")]  # fmt: skip
    assert operations[0] == "WRITE" and "MERGE" in operations, operations


@pytest.mark.full
def test_batch_replayed_after_a_kill_between_silver_and_checkpoint_commits_applies_nothing_twice(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=1)
    events = [(f"k{i % 4}", i) for i in range(12)] + [("k0", 100)]
    values = [(0, k.encode(), order_after_t0(k, m, amount=m)) for k, m in events]
    values += [(0, b"junk", b"not json"), (0, b"k1", None)]
    produce(bootstrap, topic, values)
    ingest(spark, bootstrap, lake, unique_name, topic, per_trigger=4)
    run_killed_by_failpoint("spark_jobs/bronze_to_silver.py", transform_args(lake, unique_name, files_per_trigger=1),
                            "kill-after-silver-commit:2")  # fmt: skip
    # The crash window: batch 2 is in silver, Spark never committed it to the checkpoint.
    assert silver_commits(spark, lake)[-1].batch_id == 2
    state = transform_plan.read_checkpoint(spark_checkpoint.epoch_dir(lake / "checkpoints" / "silver", 0))
    assert (state.last_committed_batch, state.pending_batch) == (1, 2)
    before = silver(spark, lake)

    rerun = transform(spark, lake, unique_name, run_id="run-1-retry", files_per_trigger=1)

    assert rerun["epoch"] == 0 and rerun["checkpoint_rebuilt"] is None
    assert rerun["batches"][0]["skipped_replay"] is True
    commits = silver_commits(spark, lake)
    assert [c.batch_id for c in commits] == list(range(len(commits))), "a batch was committed twice"
    assert before  # batches 0-2 had applied rows before the kill
    rows = silver(spark, lake)
    assert {k: float(v["amount"]) for k, v in rows.items() if not v["_deleted"]} == {
        "k0": 100.0, "k2": 10.0, "k3": 11.0,
    }  # fmt: skip
    assert rows["k1"]["_deleted"] is True
    assert list(quarantine(spark, lake)) == [(0, 13)]
    assert_accounted(spark, lake)


@pytest.mark.full
def test_ten_thousand_distinct_unknown_keys_stay_within_the_caps(spark, bootstrap, make_topic, unique_name, lake):
    """One producer bug, a uuid in a key name of every record: what the run keeps of the names stays small,
    silver gains at most ``transform.limits.new_columns`` columns, and every record is accounted for."""
    from dataclasses import replace

    from include.orchestration.job_summaries import transform_summary_text

    topic = make_topic(unique_name, partitions=1)
    produce(bootstrap, topic, [(0, f"r{i}".encode(), order_after_t0(f"r{i}", 1, **{f"k_{uuid.uuid4().hex}": i}))
                               for i in range(10_000)])  # fmt: skip
    ingest(spark, bootstrap, lake, unique_name, topic)
    adding = TransformSpec(**{**ORDERS_SPEC.__dict__, "new_fields": "add"})
    spec = replace(adding, limits=replace(adding.limits, field_names=5, new_columns=3))
    result = transform(spark, lake, unique_name, spec=spec)

    assert len(result["fields_added"]) == 3 and len(result["fields_ignored"]) <= 5
    assert result["fields_unknown"] >= 9_997
    assert result["read"] == 10_000 and result["upserted"] == 3 and result["quarantined"] == 9_997
    assert result["quarantine_fields"] == {"(new field)": 9_997}
    columns = spark.read.format("delta").load(str(lake / "silver")).columns
    assert sorted(c for c in columns if c.startswith("k_")) == sorted(f["name"] for f in result["fields_added"])
    line = transform_summary_text(result)
    assert len(line) < 2_000, line
    from delta.tables import DeltaTable

    # The batch's commit; the run's table-property commit (silver's owner) after it carries no metadata.
    history = DeltaTable.forPath(spark, str(lake / "silver")).history().where("userMetadata IS NOT NULL")
    newest = history.orderBy("version", ascending=False).collect()[0]["userMetadata"]
    assert len(newest) < 5_000
    reason = next(iter(quarantine(spark, lake).values()))["reason"]
    assert "beyond transform.limits.new_columns (3 new silver columns a run)" in reason


def test_a_new_field_mid_stream_follows_the_evolution_policy(spark, bootstrap, make_topic, unique_name, lake):
    topic = make_topic(unique_name, partitions=1)
    produce(bootstrap, topic, [(0, b"a", order_after_t0("a", 1)), (0, b"b", order_after_t0("b", 1))])
    ingest(spark, bootstrap, lake, unique_name, topic)
    transform(spark, lake, unique_name)
    produce(bootstrap, topic, [(0, b"c", order_after_t0("c", 2, coupon=15, tags=["x"])), (0, b"d", order_after_t0("d", 2))])
    ingest(spark, bootstrap, lake, unique_name, topic)
    added = transform(spark, lake, unique_name, run_id="run-2")
    assert {(f["name"], f["type"]) for f in added["fields_added"]} == {("coupon", "long"), ("tags", "json")}
    # a later value of another type is a type change: quarantine, not a crash or a silent null
    produce(bootstrap, topic, [(0, b"e", order_after_t0("e", 3, coupon="FREE"))])
    ingest(spark, bootstrap, lake, unique_name, topic)
    changed = transform(spark, lake, unique_name, run_id="run-3")

    rows = silver(spark, lake)
    assert (rows["a"]["coupon"], rows["c"]["coupon"], rows["c"]["tags"], rows["d"]["coupon"]) == (None, 15, '["x"]', None)
    assert "e" not in rows and changed["quarantined"] == 1
    assert 'coupon: expected a long (64-bit integer), got a string "FREE"' in quarantine(spark, lake)[(0, 4)]["reason"]
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, str(lake / "silver")).history().collect()
    schema_changes = [json.loads(h["userMetadata"]) for h in history if SCHEMA_KIND in (h["userMetadata"] or "")]
    assert [sorted(f["name"] for f in m["fields_added"]) for m in schema_changes] == [["coupon", "tags"]]
    assert schema_changes[0]["run_id"] == "run-2"

    # the same data under "ignore": no column added, the field reported
    ignoring = TransformSpec(**{**ORDERS_SPEC.__dict__, "new_fields": "ignore"})
    shutil.rmtree(lake / "silver")
    shutil.rmtree(lake / "quarantine")
    shutil.rmtree(lake / "checkpoints" / "silver")
    result = transform(spark, lake, unique_name, spec=ignoring, run_id="run-4")
    assert result["fields_added"] == [] and set(result["fields_ignored"]) == {"coupon", "tags"}
    assert "coupon" not in spark.read.format("delta").load(str(lake / "silver")).columns
    assert result["upserted"] == 5 and result["quarantined"] == 0


def test_lost_checkpoint_restarts_where_silver_stands_with_a_new_epoch(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=2)
    produce(bootstrap, topic, [(i % 2, f"k{i}".encode(), order_after_t0(f"k{i}", i)) for i in range(20)])
    produce(bootstrap, topic, [(0, b"bad-1", b"{not json")])
    ingest(spark, bootstrap, lake, unique_name, topic, per_trigger=6)
    transform(spark, lake, unique_name)
    shutil.rmtree(lake / "checkpoints" / "silver")
    produce(bootstrap, topic, [(i % 2, f"k{i}".encode(), order_after_t0(f"k{i}", 100 + i)) for i in range(15, 25)])
    produce(bootstrap, topic, [(1, b"bad-2", b"[1, 2]")])
    ingest(spark, bootstrap, lake, unique_name, topic)

    # The new epoch's first batch checks its bad records against quarantine (none is there twice).
    result = transform(spark, lake, unique_name, run_id="run-2")

    assert result["epoch"] == 1 and result["checkpoint_rebuilt"]["reason"] == "no checkpoint found"
    assert result["read"] == 11 and result["upserted"] == 10
    assert result["quarantined"] == 1 and result["replayed"] == 0
    quarantined = spark.read.format("delta").load(str(lake / "quarantine")).select("key").collect()
    assert sorted(bytes(r["key"]) for r in quarantined) == [b"bad-1", b"bad-2"]
    rows = silver(spark, lake)
    assert len(rows) == 25
    assert all(float(rows[f"k{i}"]["amount"]) == 10.0 for i in range(25))
    assert_accounted(spark, lake)


@pytest.mark.full
@pytest.mark.parametrize("checkpoint", ["kept", "lost"])
def test_after_silvers_log_cleanup_the_transform_reads_exactly_the_new_records(
    spark, bootstrap, make_topic, unique_name, lake, checkpoint
):
    from deltalake import DeltaTable

    topic = make_topic(unique_name, partitions=2)
    produce(bootstrap, topic, [(i % 2, f"k{i}".encode(), order_after_t0(f"k{i}", i)) for i in range(20)])
    produce(bootstrap, topic, [(0, b"bad-1", b"{not json")])
    ingest(spark, bootstrap, lake, unique_name, topic, per_trigger=6)
    first = transform(spark, lake, unique_name, files_per_trigger=2)
    assert len(first["batches"]) >= 2
    # A quiet month: other writers' commits (OPTIMIZE, VACUUM, maintenance) past Delta's log
    # checkpoint, 31 days, then Delta's expired-log cleanup takes every batch commit away.
    silver_path = lake / "silver"
    while DeltaTable(str(silver_path)).version() < 12:
        spark.sql(f"ALTER TABLE delta.`{silver_path}` SET TBLPROPERTIES ('test.note' = 'x')")
    age_log(silver_path, 31)
    DeltaTable(str(silver_path)).cleanup_metadata()
    assert silver_commits(spark, lake) == [], "silver's batch commits are still in its log"
    stand = transform_plan.read_silver_stand(spark, str(silver_path), unique_name)
    assert stand.source == "state" and (stand.epoch, stand.batch_id) == (0, len(first["batches"]) - 1)
    assert stand.bronze_end.version == first["bronze_end"]["version"]
    assert delta_progress.silver_stand(silver_path, unique_name) == stand  # the Airflow side, no JVM
    if checkpoint == "lost":
        shutil.rmtree(lake / "checkpoints" / "silver")

    produce(bootstrap, topic, [(i % 2, f"k{i}".encode(), order_after_t0(f"k{i}", 100 + i, amount=20.0)) for i in range(15, 25)])
    produce(bootstrap, topic, [(1, b"bad-2", b"[1, 2]")])
    ingest(spark, bootstrap, lake, unique_name, topic)
    second = transform(spark, lake, unique_name, run_id="run-2")

    # Exactly the 11 new bronze records: nothing re-read from the start, nothing skipped.
    assert second["read"] == 11 and second["upserted"] == 10 and second["quarantined"] == 1
    assert second["replayed"] == 0 and second["superseded"] == 0
    assert second["epoch"] == (0 if checkpoint == "kept" else 1)
    assert sorted(bytes(r["key"]) for r in quarantine(spark, lake).values()) == [b"bad-1", b"bad-2"]
    rows = silver(spark, lake)
    assert sorted(rows) == sorted(f"k{i}" for i in range(25))
    assert {k: float(v["amount"]) for k, v in rows.items()} == {
        f"k{i}": 20.0 if i >= 15 else 10.0 for i in range(25)
    }


@pytest.mark.full
def test_after_a_restore_of_silver_the_transform_redoes_exactly_what_the_restore_undid(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=1)
    produce(bootstrap, topic, [(0, k.encode(), order_after_t0(k, 1)) for k in "abcde"] + [(0, b"bad-1", b"{not json")])
    ingest(spark, bootstrap, lake, unique_name, topic)
    first = transform(spark, lake, unique_name)
    produce(bootstrap, topic, [(0, k.encode(), order_after_t0(k, 10, amount=30.0)) for k in "abcf"]
            + [(0, b"d", None), (0, b"bad-2", b"[1]")])  # fmt: skip
    ingest(spark, bootstrap, lake, unique_name, topic)
    transform(spark, lake, unique_name, run_id="run-2")
    # A user undoes run 2 on silver. RESTORE brings back files, not the txn action of silver's position.
    spark.sql(f"RESTORE TABLE delta.`{lake / 'silver'}` TO VERSION AS OF {first['silver_version']}")
    assert sorted(silver(spark, lake)) == list("abcde")
    produce(bootstrap, topic, [(0, b"g", order_after_t0("g", 20))])
    ingest(spark, bootstrap, lake, unique_name, topic)

    third = transform(spark, lake, unique_name, run_id="run-3")

    assert third["epoch"] == 1 and "silver was restored to version" in third["checkpoint_rebuilt"]["reason"]
    # Run 2's six records and g are read; the restore took run 2's effects away, so they apply again.
    assert (third["read"], third["upserted"], third["deleted"], third["quarantined"]) == (7, 5, 1, 0)
    assert third["replayed"] == 1  # bad-2 is in quarantine already: not written twice
    rows = silver(spark, lake)
    assert {k: float(v["amount"]) for k, v in rows.items() if not v["_deleted"]} == {
        "a": 30.0, "b": 30.0, "c": 30.0, "e": 10.0, "f": 30.0, "g": 10.0}
    assert rows["d"]["_deleted"] is True
    assert sorted(bytes(r["key"]) for r in quarantine(spark, lake).values()) == [b"bad-1", b"bad-2"]
    # The next run goes on normally from the new epoch.
    produce(bootstrap, topic, [(0, b"h", order_after_t0("h", 30))])
    ingest(spark, bootstrap, lake, unique_name, topic)
    fourth = transform(spark, lake, unique_name, run_id="run-4")
    assert (fourth["epoch"], fourth["checkpoint_rebuilt"], fourth["read"], fourth["upserted"]) == (1, None, 1, 1)
    # A batch that changes nothing (an older event) still commits its mark and position: an empty append.
    produce(bootstrap, topic, [(0, b"a", order_after_t0("a", 5))])
    ingest(spark, bootstrap, lake, unique_name, topic)
    fifth = transform(spark, lake, unique_name, run_id="run-5")
    assert (fifth["read"], fifth["superseded"], fifth["upserted"]) == (1, 1, 0)
    stand = transform_plan.read_silver_stand(spark, str(lake / "silver"), unique_name)
    assert (stand.source, stand.epoch, stand.batch_id, stand.commit.version) == (
        "both", 1, fifth["batches"][-1]["batch_id"], fifth["silver_version"])


@pytest.mark.full
def test_the_pipelines_retention_is_set_on_every_table_once_and_is_not_progress(
    spark, bootstrap, make_topic, unique_name, lake
):
    from deltalake import DeltaTable

    from include.readers import run_ledger

    retention = {"delta.logRetentionDuration": "interval 90 days",
                 "delta.deletedFileRetentionDuration": "interval 14 days"}  # fmt: skip
    flags = [f"--table-property={k}={v}" for k, v in retention.items()]
    topic = make_topic(unique_name, partitions=2)
    bronze_args = ingest_args(bootstrap, lake, unique_name, topic, checkpoints="checkpoints/bronze")
    versions = []
    for run in range(2):
        produce(bootstrap, topic, [(i % 2, f"k{i}".encode(), order_after_t0(f"k{i}", 10 * run + i)) for i in range(4)]
                + [(0, b"bad", b"{")])  # fmt: skip
        ingested = kafka_to_bronze.run(spark, parse_config([*bronze_args, *flags]))
        done = bronze_to_silver.run(spark, bronze_to_silver.parse_config(
            [*transform_args(lake, unique_name, run_id=f"run-{run}"), *flags])).to_json()  # fmt: skip
        run_ledger.append_run(lake / "ledger", {"run_id": f"run-{run}"}, properties=retention)
        assert (ingested.rows, done["read"], done["quarantined"]) == (5, 5, 1)
        versions.append({t: DeltaTable(str(lake / t)).version() for t in ("bronze", "silver", "quarantine", "ledger")})
    for table in ("bronze", "silver", "quarantine", "ledger"):
        configuration = DeltaTable(str(lake / table)).metadata().configuration
        assert {k: configuration.get(k) for k in retention} == retention, table
    # Set once: the second run adds only its own commits (bronze 1 batch, silver 1, quarantine 1, ledger 1).
    assert {t: versions[1][t] - versions[0][t] for t in versions[0]} == dict.fromkeys(versions[0], 1)
    # The property commits are no progress: the second run read exactly its own records (asserted above),
    # and where bronze stands is its last batch.
    assert read_progress(str(lake / "bronze"), unique_name, {topic: [0, 1]}).next_offsets == {topic: {0: 6, 1: 4}}
    with pytest.raises(bronze_to_silver.TransformError, match="--table-property: expected KEY=VALUE"):
        bronze_to_silver.parse_config([*transform_args(lake, unique_name), "--table-property=x"])


@pytest.mark.full
def test_one_application_runs_ingest_then_transform_and_a_failed_transform_leaves_bronze_and_its_error(
    spark, bootstrap, make_topic, unique_name, lake
):
    """``spark_jobs/run_steps.py``: one spark-submit, both steps; the transform's failure is its own."""
    topic = make_topic(unique_name, partitions=2)
    produce(bootstrap, topic, [(i % 2, f"o{i}".encode(), order_after_t0(f"o{i}", i)) for i in range(40)])
    # Silver exists without the declared fields: the transform must refuse it, after ingest committed.
    spark.createDataFrame([("x",)], "other string").write.format("delta").save(str(lake / "silver"))
    ingest_summary, transform_summary, error = lake / "ingest.json", lake / "transform.json", lake / "error.json"
    steps = {"pipeline": unique_name, "steps": [
        {"job": "kafka_to_bronze", "args": ingest_args(bootstrap, lake, unique_name, topic, "--summary-path",
                                                       str(ingest_summary), checkpoints="checkpoints/bronze")},
        {"job": "bronze_to_silver", "args": [*transform_args(lake, unique_name), "--summary-path",
                                              str(transform_summary)], "error_path": str(error)},
    ]}  # fmt: skip
    steps_file = lake / "steps.json"
    steps_file.write_text(json.dumps(steps))
    cmd = submit_command("spark_jobs/run_steps.py", ["--steps-file", str(steps_file)], master="local[1]",
                         conf={"spark.ui.enabled": "false"})  # fmt: skip
    proc = subprocess.run(cmd, env=submit_environment(), capture_output=True, text=True, timeout=300)
    output = proc.stdout + proc.stderr
    assert proc.returncode == 0, output[-3000:]
    assert json.loads(ingest_summary.read_text())["rows"] == 40
    assert bronze_count(spark, lake) == 40
    assert not transform_summary.exists()
    failure = json.loads(error.read_text())
    assert failure["job"] == "bronze_to_silver"
    assert "silver has no column for declared field(s)" in failure["error"]["text"]
    # The driver speaks at WARN: Spark's INFO lines stay out of the task log.
    spark_info = [ln for ln in output.splitlines() if re.match(r"\d\d/\d\d/\d\d \d\d:\d\d:\d\d INFO ", ln)]
    assert not spark_info, spark_info[:5]
    assert "INFO kafka_to_bronze: batch 0: 40 rows in 2 ranges -> bronze version" in output


def test_records_a_backfill_puts_back_are_quarantined_once_and_counted_as_replayed(
        spark, bootstrap, make_topic, unique_name, lake):  # fmt: skip
    # A backfill re-inserts records bronze lost; the transform reads them again. A bad one among them was
    # quarantined twice (found by the scheduler soak), and a later replay_quarantine failed on it: two
    # source rows of its MERGE matched one record.
    topic = make_topic(unique_name, partitions=1)
    produce(bootstrap, topic, [(0, f"o{i}".encode(), b"not json" if i in (3, 7) else order_after_t0(f"o{i}", i))
                               for i in range(10)])  # fmt: skip
    ingest(spark, bootstrap, lake, unique_name, topic)
    transform(spark, lake, unique_name)
    assert sorted(quarantine(spark, lake)) == [(0, 3), (0, 7)]

    from delta.tables import DeltaTable

    bronze = DeltaTable.forPath(spark, str(lake / "bronze"))
    lost = [r.asDict() for r in bronze.toDF().where("offset >= 2 AND offset < 5").collect()]
    bronze.delete("offset >= 2 AND offset < 5")  # as a bad cleanup would; the backfill puts them back
    spark.createDataFrame(lost, bronze.toDF().schema).write.format("delta").mode("append").save(str(lake / "bronze"))
    second = transform(spark, lake, unique_name, run_id="run-2")
    assert sorted(quarantine(spark, lake)) == [(0, 3), (0, 7)]  # the helper fails on a record held twice
    assert (second["read"], second["quarantined"], second["replayed"]) == (3, 0, 3)
    assert_accounted(spark, lake)


def test_a_batch_killed_between_its_quarantine_append_and_its_silver_commit_counts_its_bad_records_once(
        spark, bootstrap, make_topic, unique_name, lake):  # fmt: skip
    # The retried batch finds its own earlier attempt's quarantine rows: they are its own (the append is
    # skipped by its idempotent-write marker), not records held already, and its silver commit says so.
    # The scheduler soak's replay fault found the check "quarantined 0 but the quarantine commit holds 12".
    topic = make_topic(unique_name, partitions=1)
    produce(bootstrap, topic, [(0, f"o{i}".encode(), b"not json" if i % 4 == 0 else order_after_t0(f"o{i}", i))
                               for i in range(12)])  # fmt: skip
    ingest(spark, bootstrap, lake, unique_name, topic)
    run_killed_by_failpoint("spark_jobs/bronze_to_silver.py", transform_args(lake, unique_name),
                            "kill-after-quarantine-commit:0")
    assert sorted(quarantine(spark, lake)) == [(0, 0), (0, 4), (0, 8)] and silver_commits(spark, lake) == []

    rerun = transform(spark, lake, unique_name, run_id="run-1-retry")
    assert (rerun["quarantined"], rerun["replayed"]) == (3, 0)
    assert sorted(quarantine(spark, lake)) == [(0, 0), (0, 4), (0, 8)]
    from include.readers import delta_progress as dp

    (batch,) = silver_commits(spark, lake)
    held = dp.quarantine_rows_since(str(lake / "quarantine"), None)
    assert held[(batch.epoch, batch.batch_id)] == batch.counts["quarantined"] == 3  # what check_continuity compares
    assert_accounted(spark, lake)
