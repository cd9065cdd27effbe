"""Manual operations from the trigger form, through real DAG runs against the real broker, Spark and Delta.

Each test triggers the pipeline's DAG with a run config (``airflow dags test -c``),
as the trigger form does, and checks bronze, the ledger and the Delta log.
"""

from __future__ import annotations

import time

import pytest

from include.contract.offsets import BackfillCommit
from include.tooling import airflow_local
from tests.integration.dag_helpers import (
    ORDERS_TRANSFORM,
    Pipeline,
    assert_no_cluster_left,
    assert_ok,
    order_at_10h,
)
from tests.kafka_helpers import delete_records, produce, produce_at, produce_numbered

pytestmark = pytest.mark.integration


def _bronze(p: Pipeline):
    from deltalake import DeltaTable

    return DeltaTable(str(p.lake / p.name / "bronze"))


def _delete_from_bronze(p: Pipeline, predicate: str) -> int:
    """Delete rows from bronze with delta-rs (as a mistaken cleanup would); returns how many."""
    return int(_bronze(p).delete(predicate)["num_deleted_rows"])


def _backfill_commits(p: Pipeline) -> list[BackfillCommit]:
    found = []
    for entry in _bronze(p).history():
        commit = BackfillCommit.from_user_metadata(entry.get("userMetadata"))
        if commit is not None:
            found.append(commit)
    return found


@pytest.mark.full
def test_backfill_by_offsets_inserts_only_missing_records_and_the_transform_picks_them_up(pipeline, bootstrap):
    p = pipeline
    p.write(transform=ORDERS_TRANSFORM)
    produce(bootstrap, p.topic, [(i % 3, f"o{i}".encode(), order_at_10h(f"o{i}", i % 60, i)) for i in range(150)])
    assert_ok(*p.run())
    removed = _delete_from_bronze(p, '"partition" = 1 AND "offset" >= 10 AND "offset" < 30')
    assert removed == 20 and len(p.bronze_keys()) == 130
    # The files the DELETE replaced are vacuumed: the backfill reads Kafka and bronze's current files only.
    vacuumed = _bronze(p).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    assert vacuumed, "VACUUM removed no file"

    conf = {
        "action": "backfill_offsets",
        "reason": "restore rows a cleanup deleted by mistake",
        "offset_ranges": [{"topic": p.topic, "partition": 0, "from": 0, "until": 50},  # all still there
                          {"topic": p.topic, "partition": 1, "from": 0, "until": 50}],  # 20 of them gone
    }  # fmt: skip
    proc, log = p.run(conf)
    assert_ok(proc, log)
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 150
    row = p.ledger()[0]
    assert (row["outcome"], row["action"], row["request_reason"], row["rows"], row["continuity"]) == (
        "success", "backfill_offsets", "restore rows a cleanup deleted by mistake", 20, "CONTINUOUS",
    )  # fmt: skip
    assert row["continuity_json"]["backfill"]["read"] == 100 and row["continuity_json"]["backfill"]["inserted"] == 20
    assert row["request_json"]["ranges"][1] == {"topic": p.topic, "partition": 1, "from": 0, "until": 50,
                                                "read": 0, "inserted": 0}  # fmt: skip
    lines = airflow_local.summary_lines(log)
    assert any("backfill re-read 100 records in 2 ranges, inserted 20 missing from bronze, 80 were there" in line
               for line in lines), lines  # fmt: skip
    # the transform read exactly the returned rows; silver already had them, so nothing changed there
    assert row["silver_read"] == 20 and row["silver_upserted"] == 0 and row["transform_json"]["check"]["ok"]
    (commit,) = _backfill_commits(p)
    assert (commit.run_type, commit.action, commit.read, commit.inserted) == ("manual", "backfill_offsets", 100, 20)
    assert {(r.partition, r.from_offset, r.until_offset, r.inserted) for r in commit.ranges} == {(0, 0, 50, 0),
                                                                                                  (1, 0, 50, 20)}

    version = _bronze(p).version()
    assert_ok(*p.run(conf))  # the same backfill again
    again = p.ledger()[0]
    assert (again["outcome"], again["rows"], again["continuity_json"]["backfill"]["read"]) == ("success", 0, 100)
    assert _bronze(p).version() == version, "a backfill with nothing missing writes no commit"
    assert len(p.bronze_keys()) == 150
    assert_no_cluster_left(p)


def test_backfill_by_time_reinserts_exactly_the_records_stamped_in_the_window(pipeline, bootstrap):
    p = pipeline
    hour = 3_600_000
    base = (int(time.time() * 1000) // hour - 4) * hour
    records = []
    for part in range(3):
        for off in range(30):
            ts = base + (off // 10) * hour + (off % 10) * 1000
            if off == 15:
                ts = base + 500  # a late record: stamped in the first hour, written in the second
            records.append((part, f"{part}-{off}".encode(), f"v{off}".encode(), ts))
    produce_at(bootstrap, p.topic, records)
    assert_ok(*p.run())
    assert _delete_from_bronze(p, '"offset" < 20') == 60

    start, end = base + hour, base + 2 * hour
    iso = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(start / 1000))
    iso_end = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(end / 1000))
    proc, log = p.run({"action": "backfill_time", "reason": "re-load the second hour", "from_time": iso,
                       "to_time": iso_end})  # fmt: skip
    assert_ok(proc, log)
    expected = {(part, off) for part in range(3) for off in range(10, 20) if off != 15} | {
        (part, off) for part in range(3) for off in range(20, 30)
    }
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) and set(keys) == expected
    row = p.ledger()[0]
    assert (row["action"], row["rows"], row["continuity"]) == ("backfill_time", 27, "CONTINUOUS")
    assert row["request_json"]["time_range"]["from"].startswith(iso[:19])
    (commit,) = _backfill_commits(p)
    assert commit.time_range == row["request_json"]["time_range"] and commit.inserted == 27
    assert {(r.partition, r.from_offset, r.until_offset) for r in commit.ranges} == {(q, 10, 20) for q in range(3)}


@pytest.mark.full
def test_rebuild_checkpoint_then_normal_run_loses_and_duplicates_nothing(pipeline, bootstrap):
    p = pipeline
    produce_numbered(bootstrap, p.topic, 3, 300)
    assert_ok(*p.run())
    produce_numbered(bootstrap, p.topic, 3, 300, start=300)
    proc, log = p.run({"action": "rebuild_checkpoint", "reason": "checkpoint folder restored from an old backup"})
    assert_ok(proc, log)
    rebuilt = p.ledger()[0]
    assert (rebuilt["action"], rebuilt["epoch"], rebuilt["rows"], rebuilt["continuity"]) == (
        "rebuild_checkpoint", 2, 300, "CONTINUOUS",
    )  # fmt: skip
    assert "checkpoint rebuilt: rebuild requested: asked" in log
    assert "checkpoint folder restored from an old backup" in log

    produce_numbered(bootstrap, p.topic, 3, 300, start=600)
    assert_ok(*p.run())
    last = p.ledger()[0]
    assert (last["action"], last["epoch"], last["rows"], last["continuity"]) == ("normal", 2, 300, "CONTINUOUS")
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == 900
    epochs = sorted(d.name for d in (p.lake / p.name / "_checkpoints" / "bronze").iterdir() if d.is_dir())
    assert epochs == ["epoch=1", "epoch=2"]


def test_data_loss_gap_acknowledged_through_the_form_is_recorded_with_its_reason(pipeline, bootstrap):
    p = pipeline
    produce_numbered(bootstrap, p.topic, 3, 60)
    assert_ok(*p.run())
    produce_numbered(bootstrap, p.topic, 3, 30, start=60)  # offsets 20..29 of each partition
    delete_records(bootstrap, p.topic, 1, 25)

    proc, log = p.run()
    assert proc.returncode == 1
    assert "5 records (offsets 20 to 24) were deleted" in p.ledger()[0]["reason"]
    assert f"""airflow dags trigger {p.name} -c '{{"action": "acknowledge_gap", """ in p.ledger()[0]["reason"]

    proc, log = p.run({"action": "acknowledge_gap", "reason": "INC-42: broker disk lost, accepted by data owner"})
    assert_ok(proc, log)
    acked = p.ledger()[0]
    assert (acked["outcome"], acked["action"], acked["lost"], acked["rows"], acked["continuity"]) == (
        "success", "acknowledge_gap", 5, 25, "CONTINUOUS",
    )  # fmt: skip
    (gap,) = acked["gaps_json"]
    assert (gap["partition"], gap["from"], gap["until"]) == (1, 20, 25)
    assert gap["reason"].endswith("acknowledged by dag_test: INC-42: broker disk lost, accepted by data owner")
    recorded = [g for part in acked["continuity_json"]["partitions"] for g in part["gaps"]]
    assert recorded == [gap]

    produce_numbered(bootstrap, p.topic, 3, 30, start=90)
    assert_ok(*p.run())
    after = p.ledger()[0]
    assert (after["outcome"], after["action"], after["rows"], after["continuity"]) == ("success", "normal", 30,
                                                                                       "CONTINUOUS")  # fmt: skip
    keys = set(p.bronze_keys())
    assert len(keys) == 115 and not {(1, o) for o in range(20, 25)} & keys


def test_skip_offsets_passes_what_ingest_cannot_read_recorded_as_a_gap_and_nothing_else(pipeline, bootstrap):
    """The remedy for a record ingest cannot read. The failure itself is not made here: the Kafka client
    allocates a value's declared size before any of the project's code sees it, and a small compressed batch
    can declare gigabytes, more than this machine holds. What is checked is that the skip passes exactly the
    offsets asked for, from where ingest stands, recorded as a gap that continuity and the ledger follow."""
    p = pipeline
    t = p.topic
    produce_numbered(bootstrap, t, 3, 60)  # offsets 0..19 of each partition
    assert_ok(*p.run())
    produce_numbered(bootstrap, t, 3, 30, start=60)  # offsets 20..29 of each partition
    folders = p.run_dirs()
    skip = {"action": "skip_offsets", "reason": "INC-7: a value ingest cannot allocate at offset 20"}
    for ranges, message in [
        ([{"topic": t, "partition": 1, "from": 22, "until": 23}],
         f"offset_ranges[0] {t}-1: from is 22, but ingest stands at offset 20 on this partition"),
        ([{"topic": t, "partition": 1, "from": 20, "until": 99}],
         f"offset_ranges[0] {t}-1: until is 99, past what Kafka holds (offsets up to 30, exclusive)"),
        ([{"topic": t, "from": 20, "until": 22}], "skips records of one partition at a time"),
    ]:  # fmt: skip
        proc, log = p.run({**skip, "offset_ranges": ranges})
        assert proc.returncode == 1 and message in log, (ranges, log[-4000:])
        assert p.ledger()[0]["outcome"] == "failed" and message in p.ledger()[0]["reason"]
    assert p.run_dirs() == folders, "a refused skip started a cluster"
    assert len(p.bronze_keys()) == 60

    assert_ok(*p.run({**skip, "offset_ranges": [{"topic": t, "partition": 1, "from": 20, "until": 22}]}))
    row = p.ledger()[0]
    assert (row["outcome"], row["action"], row["lost"], row["rows"], row["continuity"]) == (
        "success", "skip_offsets", 2, 28, "CONTINUOUS")  # fmt: skip
    (gap,) = row["gaps_json"]
    assert (gap["partition"], gap["from"], gap["until"]) == (1, 20, 22)
    assert gap["reason"] == "skipped at ingest by dag_test: INC-7: a value ingest cannot allocate at offset 20"
    assert [g for part in row["continuity_json"]["partitions"] for g in part["gaps"]] == [gap]
    keys = set(p.bronze_keys())
    assert len(keys) == 88 and not {(1, 20), (1, 21)} & keys and {(1, 22), (0, 20), (2, 20)} <= keys

    produce_numbered(bootstrap, t, 3, 30, start=90)
    assert_ok(*p.run())
    after = p.ledger()[0]
    assert (after["outcome"], after["rows"], after["lost"], after["continuity"]) == ("success", 30, 0, "CONTINUOUS")
    assert len(p.bronze_keys()) == 118


def _refusal(p: Pipeline, conf: dict, monkeypatch) -> str:
    """What ``check_request`` makes of ``conf``: the same two calls as the task, against the real broker and table."""
    from include import settings
    from include.config import load_pipeline
    from include.contract import actions, manual_ops
    from include.orchestration import request_plan

    monkeypatch.setenv(settings.LAKEHOUSE_ROOT_ENV, str(p.lake))
    cfg = load_pipeline(p.dir / f"{p.name}.yaml")
    with pytest.raises(actions.RequestError) as refused:
        request = manual_ops.parse_request(conf, run_type="manual", requested_by="test")
        request_plan.plan_request(cfg, {"bootstrap.servers": p.bootstrap}, request)
    return str(refused.value)


@pytest.mark.full
def test_a_dry_run_says_what_the_backfill_then_does_or_the_refusal_it_then_meets(pipeline, bootstrap):
    p = pipeline
    produce_numbered(bootstrap, p.topic, 3, 150)  # offsets 0..49 of each partition
    assert_ok(*p.run())
    assert _delete_from_bronze(p, '"partition" = 1 AND "offset" >= 10 AND "offset" < 30') == 20
    _bronze(p).vacuum(retention_hours=0, enforce_retention_duration=False, dry_run=False)
    delete_records(bootstrap, p.topic, 2, 5)  # retention took offsets 0..4 of partition 2 (bronze has them)
    version, folders = _bronze(p).version(), p.run_dirs()

    # Records retention took: the dry run meets the real run's refusal, word for word.
    lost = {"action": "backfill_offsets", "reason": "check what retention left",
            "offset_ranges": [{"topic": p.topic, "partition": 2, "from": 0, "until": 10}]}  # fmt: skip
    proc, log = p.run({**lost, "dry_run": True})
    assert_ok(proc, log)
    dry = p.ledger()[0]
    refusal = dry["request_json"]["dry_run"]["refused"]
    assert dry["outcome"] == "dry_run" and f"partition {p.topic}-2 from 0 is below Kafka's earliest offset 5" in refusal
    assert dry["reason"] == f"dry run of backfill_offsets: the run would be refused: {refusal}"
    proc, log = p.run(lost)
    assert proc.returncode == 1
    assert p.ledger()[0]["reason"] == f"failed at check_request: {refusal}"

    # Records bronze has and records a cleanup deleted from it: the dry run counts what the backfill inserts.
    conf = {"action": "backfill_offsets", "reason": "restore rows a cleanup deleted",
            "offset_ranges": [{"topic": p.topic, "partition": 0, "from": 0, "until": 50},
                              {"topic": p.topic, "partition": 1, "from": 0, "until": 50}]}  # fmt: skip
    proc, log = p.run({**conf, "dry_run": True})
    assert_ok(proc, log)
    dry = p.ledger()[0]
    report = dry["request_json"]["dry_run"]
    assert [(r["partition"], r["offsets"], r["held"], r["in_bronze"], r["would_insert"]) for r in report["ranges"]] \
        == [(0, 50, 50, 50, 0), (1, 50, 50, 30, 20)]  # fmt: skip
    assert (dry["outcome"], dry["action"], dry["rows"], dry["reason"]) == ("dry_run", "backfill_offsets", 0,
                                                                           report["summary"])  # fmt: skip
    assert report["summary"].startswith("dry run of backfill_offsets: would insert 20 records into bronze: 2 "
                                        "range(s) of 100 offsets, 100 held by Kafka, 80 already in bronze; ")
    # Sized as the real run will be: 100 offsets, a backlog the defaults keep in local mode.
    assert report["cluster"].startswith("local[") and "in the driver: backlog 100 records <= " in report["cluster"]
    lines = airflow_local.summary_lines(log)
    assert any(line.startswith("check_request: dry run of backfill_offsets: would insert 20 records") and
               line.endswith("; no lock taken, nothing runs") for line in lines), lines  # fmt: skip
    assert _bronze(p).version() == version and p.run_dirs() == folders, "a dry run wrote or started something"

    proc, log = p.run(conf)
    assert_ok(proc, log)
    real = p.ledger()[0]
    assert (real["outcome"], real["rows"]) == ("success", report["would_insert"])
    assert real["continuity_json"]["backfill"]["inserted"] == report["would_insert"]
    assert len(p.bronze_keys()) == 150
    assert_no_cluster_left(p)


def test_invalid_params_are_refused_before_any_spark_process_starts(pipeline, bootstrap, monkeypatch):
    p = pipeline
    produce_numbered(bootstrap, p.topic, 3, 60)  # offsets 0..19 of each partition
    assert_ok(*p.run())
    delete_records(bootstrap, p.topic, 2, 5)
    t = p.topic
    below_earliest = (
        {"action": "backfill_offsets", "reason": "r", "offset_ranges": [{"topic": t, "partition": 2, "from": 0, "until": 10}]},
        f"partition {t}-2 from 0 is below Kafka's earliest offset 5 (older records were deleted by retention); "
        "Kafka holds offsets [5, 20)",
    )  # fmt: skip
    no_reason = ({"action": "rebuild_checkpoint"}, "reason: required for action 'rebuild_checkpoint'")
    cases = [
        ({"action": "backfill_offsets", "reason": "r", "offset_ranges": [{"topic": "nope", "from": 0, "until": 5}]},
         f"topic 'nope' is not one pipeline {p.name!r} has ingested (its topics: {t})"),
        ({"action": "backfill_offsets", "reason": "r",
          "offset_ranges": [{"topic": t, "partition": 7, "from": 0, "until": 5}]},
         f"topic {t!r} has no partition 7 (it has partitions 0, 1, 2)"),
        ({"action": "backfill_offsets", "reason": "r", "offset_ranges": [{"topic": t, "from": 9, "until": 3}]},
         "from 9 is not below until 3"),
        below_earliest,
        ({"action": "backfill_offsets", "reason": "r",
          "offset_ranges": [{"topic": t, "partition": 0, "from": 0, "until": 999}]},
         f"partition {t}-0 until 999 is past Kafka's end 20"),
        ({"action": "backfill_time", "reason": "r", "from_time": "2020-01-01T00:00:00Z",
          "to_time": "2020-01-02T00:00:00Z"},
         "no record the table has passed has a Kafka timestamp in [2020-01-01T00:00:00+00:00, 2020-01-02"),
        no_reason,
    ]  # fmt: skip
    # Every refusal of check_request, through the task's own calls (no DAG run each).
    for conf, message in cases:
        assert message in _refusal(p, conf, monkeypatch), conf

    # Through DAG runs: a refusal of the params alone, one that needed Kafka and the table (both at
    # check_request) and one of the preflight: each fails the run, is in the ledger, starts no cluster.
    folders = p.run_dirs()
    dag_cases = [
        no_reason,
        below_earliest,
        ({"action": "acknowledge_gap", "reason": "r"}, "the preflight finds no data loss to acknowledge now"),
    ]
    for conf, message in dag_cases:
        proc, log = p.run(conf)
        assert proc.returncode == 1, conf
        assert message in log, (conf, log[-4000:])
        row = p.ledger()[0]
        assert row["outcome"] == "failed" and message in row["reason"], row["reason"]
        assert p.run_dirs() == folders, f"{conf}: a cluster was started"
        assert_no_cluster_left(p)
    # the form's own JSON-schema check refuses an unknown action before any run exists
    runs = len(p.ledger())
    proc, log = p.run({"action": "explode"})
    assert proc.returncode != 0 and "explode" in log
    assert len(p.ledger()) == runs
    assert len(p.bronze_keys()) == 60


def test_replay_quarantine_through_the_form_applies_what_a_fixed_pipeline_file_now_allows(
    pipeline, bootstrap, monkeypatch
):
    from deltalake import DeltaTable

    p = pipeline
    currency = {"type": "string", "allowed": ["EUR"]}
    transform = {**ORDERS_TRANSFORM, "schema": {**ORDERS_TRANSFORM["schema"], "currency": currency}}
    p.write(transform=transform)
    produce(bootstrap, p.topic, [
        (0, b"o1", order_at_10h("o1", 5, 10, currency="EUR")),
        (0, b"o1", order_at_10h("o1", 1, 11, currency="GBP")),  # older than what silver holds for o1
        (1, b"o2", order_at_10h("o2", 2, 12, currency="GBP")),
        (2, b"o3", order_at_10h("o3", 3, -1, currency="EUR")),  # quarantined for another reason
    ])  # fmt: skip
    assert_ok(*p.run())
    conf = {"action": "replay_quarantine", "reason": "GBP is a currency now", "quarantine_field": "currency"}
    nothing = {**conf, "quarantine_reason": "no problem says this"}
    assert "holds 3 records and none is among the quarantined records not replayed yet" in _refusal(
        p, nothing, monkeypatch)  # fmt: skip

    p.write(transform={**transform, "schema": {**transform["schema"], "currency": {**currency,
                                                                                  "allowed": ["EUR", "GBP"]}}})
    # The dry run first: what the replay takes and why those records were quarantined, nothing replayed.
    assert_ok(*p.run({**conf, "dry_run": True}))
    dry = p.ledger()[0]
    replay = dry["request_json"]["dry_run"]["replay"]
    assert dry["outcome"] == "dry_run" and replay["rows"] == 2 and sum(replay["reasons"].values()) == 2
    assert all("currency" in reason for reason in replay["reasons"]), replay
    assert dry["reason"].startswith("dry run of replay_quarantine: would replay 2 quarantined records; ")
    proc, log = p.run(conf)
    assert_ok(proc, log)
    lines = airflow_local.summary_lines(log)
    assert any("2 quarantined records to replay" in line for line in lines), lines
    assert any("quarantine replay: 2 selected: 1 applied, 1 superseded" in line for line in lines), lines
    silver = {r["order_id"]: r for r in DeltaTable(str(p.lake / p.name / "silver")).to_pyarrow_table().to_pylist()}
    assert {k: (r["currency"], float(r["amount"])) for k, r in silver.items()} == {"o1": ("EUR", 10.0),
                                                                                  "o2": ("GBP", 12.0)}  # fmt: skip
    held = DeltaTable(str(p.lake / p.name / "quarantine")).to_pyarrow_table().to_pylist()
    assert sorted((bytes(r["key"]).decode(), r["replay_outcome"]) for r in held) == [
        ("o1", "superseded"), ("o2", "applied"), ("o3", None)]  # fmt: skip
    row = p.ledger()[0]
    assert (row["outcome"], row["action"], row["request_reason"]) == ("success", "replay_quarantine",
                                                                     "GBP is a currency now")  # fmt: skip
