"""Tests of include/orchestration/record.py: the run-ledger row a run's last task builds, and writes.

``build_record`` is pure: task states and XComs in, one row out. ``record_run``
and the ledger reads run for real on Delta tables delta-rs writes under ``tmp_path``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest

from include.orchestration import record
from include.readers import run_ledger


@pytest.fixture
def cfg(make_pipeline):
    return make_pipeline(cluster={"workers": 2, "worker_cores": 2, "worker_memory": "768m"})


T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


def _record(cfg, states, **xcoms):
    return record.build_record(cfg, run_id="r1", run_type="manual", dag_id=cfg.name, states=states, xcoms=xcoms,
                               lag_after={"total_lag": 0, "partitions": []}, started_at=T0,
                               finished_at=T0 + timedelta(seconds=30), params={"reason": ""})  # fmt: skip


def test_record_success_carries_rows_ranges_and_lag(cfg):
    row = _record(
        cfg, {"wait_for_lag": "success", "preflight": "success", "ingest": "success", "record_run": "running"},
        preflight={"lag": {"total_lag": 7, "partitions": [{"topic": "t", "partition": 0, "lag": 7}]},
                   "table_version": 3, "accepted_gaps": [], "findings": []},
        ingest={"rows": 7, "epoch": 1, "bronze_version": 4, "commits": 1, "batches": [{"skipped_replay": False}],
                "partitions": {"t": {"0": {"from": 10, "until": 17, "rows": 7}}}},
        check_continuity={"ok": True, "violations": []},
    )  # fmt: skip
    assert (row["outcome"], row["rows"], row["commits"], row["lag_before"], row["lag_after"]) == ("success", 7, 1, 7, 0)
    assert (row["bronze_version_before"], row["bronze_version_after"], row["duration_s"]) == (3, 4, 30.0)
    assert row["continuity"] == "CONTINUOUS"
    assert row["partitions_json"][0]["from"] == 10 and row["partitions_json"][0]["lag_before"] == 7


def test_record_carries_the_least_time_left_before_retention_and_each_partitions(cfg, tmp_path: Path):
    forecast = {"topic": "t", "partition": 1, "unread": 7, "oldest_unread_at": T0.isoformat(), "left_s": 3600.0,
                "bound": "retention.ms", "rate_per_s": 0.5}  # fmt: skip
    row = _record(
        cfg, {"wait_for_lag": "success", "preflight": "success", "ingest": "success", "record_run": "running"},
        preflight={"lag": {"total_lag": 7, "retention_left_s": 3600.0, "retention": [forecast],
                           "partitions": [{"topic": "t", "partition": 0, "lag": 0},
                                          {"topic": "t", "partition": 1, "lag": 7}]},
                   "table_version": 3, "accepted_gaps": [], "findings": []},
    )  # fmt: skip
    assert row["retention_left_s"] == 3600.0
    assert [p["retention_left_s"] for p in row["partitions_json"]] == [None, 3600.0]
    # A ledger written before the column was added takes it on the next append, null in its older rows.
    from deltalake import write_deltalake

    path = tmp_path / "ledger"
    older = run_ledger.arrow_rows([dict(row, run_id="r0", finished_at=T0)]).drop_columns(["retention_left_s"])
    write_deltalake(str(path), older)
    run_ledger.append_run(path, row)
    assert [(r["run_id"], r["retention_left_s"]) for r in run_ledger.read_runs(path)] == [("r1", 3600.0),
                                                                                        ("r0", None)]  # fmt: skip


def test_a_dry_run_is_recorded_as_one_with_its_report_as_the_reason(cfg):
    report = {"summary": "dry run of backfill_offsets: would insert 3 records into bronze: ...", "would_insert": 3}
    plan = {"action": "backfill_offsets", "reason": "replay", "requested_by": "ann", "dry_run": report}
    states = {"check_request": "success", "wait_for_lag": "skipped", "preflight": "skipped", "record_run": "running"}
    row = _record(cfg, states, check_request=plan)
    assert (row["outcome"], row["reason"], row["action"]) == ("dry_run", report["summary"], "backfill_offsets")
    assert row["request_json"]["dry_run"] == report and row["rows"] == 0


def test_a_run_retried_by_airflow_records_the_rows_of_every_try_and_how_many_tries_each_step_took(cfg):
    # Try 1 of ingest committed [10, 15) and died; try 2 (what the XCom reports) committed [15, 17).
    row = _record(
        cfg, {"wait_for_lag": "success", "preflight": "success", "ingest": "success", "record_run": "running"},
        preflight={"lag": {"total_lag": 7, "partitions": []}, "table_version": 3, "accepted_gaps": [], "findings": []},
        ingest={"rows": 2, "epoch": 1, "bronze_version": 5, "commits": 1, "try_number": 2,
                "batches": [{"skipped_replay": False, "delta_version": 5}],
                "partitions": {"t": {"0": {"from": 15, "until": 17, "rows": 2}}}},
        check_continuity={"ok": True, "violations": [], "earlier_tries_rows": 5, "earlier_tries_commits": 1,
                          "try_number": 1, "partitions": [{"topic": "t", "partition": 0, "from": 10, "until": 17,
                                                           "rows": 7}]},
    )  # fmt: skip
    assert (row["outcome"], row["rows"], row["commits"]) == ("success", 7, 2)
    assert (row["partitions_json"][0]["from"], row["partitions_json"][0]["rows"]) == (10, 7)
    assert (row["tries"], row["tries_json"]) == (2, {"ingest": 2, "check_continuity": 1})


def test_record_failed_names_the_task_and_the_blocking_findings(cfg):
    from include.contract.offsets import PartitionState, TopicState
    from include.contract.preflight import preflight

    kafka = {"t": TopicState("t", "id", {0: PartitionState(0, 9), 1: PartitionState(10, 12), 2: PartitionState(0, 1)})}
    report = preflight(table_next={"t": {0: 5, 1: 5}}, recorded_topic_ids={}, kafka=kafka,
                       configured_topics=("t",), policy="fail")  # fmt: skip
    row = _record(cfg, {"wait_for_lag": "success", "preflight": "failed", "start_cluster": "upstream_failed"},
                  preflight_failed=report.to_json())  # fmt: skip
    assert row["outcome"] == "failed"
    assert row["reason"].startswith("failed at preflight: partition t-1: 5 records (offsets 5 to 9) were deleted")
    assert "t-2" not in row["reason"]  # the new partition is only reported, not a reason to fail
    assert [f["kind"] for f in row["findings_json"]] == ["data_loss", "partition_added"]
    assert row["continuity"] == "not checked"


def test_record_skipped(cfg):
    row = _record(cfg, {"wait_for_lag": "skipped", "preflight": "skipped"},
                  wait_for_lag_skip={"total_lag": 0, "partitions": []})  # fmt: skip
    assert (row["outcome"], row["rows"], row["lag_before"]) == ("skipped", 0, 0)


def test_ledger_round_trip(tmp_path: Path, cfg):
    row = _record(cfg, {"wait_for_lag": "skipped"}, wait_for_lag_skip={"total_lag": 0, "partitions": []})
    path = tmp_path / "ledger"
    assert run_ledger.read_runs(path) == []
    assert run_ledger.append_run(path, row) == 0
    later = dict(row, run_id="r2", finished_at=T0 + timedelta(minutes=5))
    assert run_ledger.append_run(path, later) == 1
    runs = run_ledger.read_runs(path)
    assert [r["run_id"] for r in runs] == ["r2", "r1"]
    assert runs[0]["tasks_json"] == {"wait_for_lag": "skipped"}
    with pytest.raises(ValueError, match="unknown columns \\['rowz'\\]"):
        run_ledger.append_run(path, {"rowz": 1})


def test_ledger_newest_runs_reads_only_the_columns_asked_for(tmp_path: Path, cfg):
    import pyarrow as pa
    from deltalake import write_deltalake

    path = tmp_path / "ledger"
    parts = [{"topic": "t", "partition": 0, "next_offset": 5}]
    run_ledger.append_run(path, _record(cfg, {"wait_for_lag": "success"}, ingest={"rows": 5}))
    run_ledger.append_run(path, dict(_record(cfg, {"wait_for_lag": "success"}), run_id="r2",
                                     finished_at=T0 + timedelta(minutes=5), partitions_json=parts))  # fmt: skip
    rows = run_ledger.newest_runs(path, columns=("run_id", "partitions_json"))
    assert [sorted(r) for r in rows] == [["finished_at", "partitions_json", "run_id"]] * 2
    assert [(r["run_id"], r["partitions_json"]) for r in rows][0] == ("r2", parts)
    assert [sorted(r) for r in run_ledger.runs_since(path, T0, columns=("outcome",))] == [["finished_at", "outcome"]] * 2
    assert set(run_ledger.newest_runs(path)[0]) == set(run_ledger.COLUMNS)
    with pytest.raises(ValueError, match="unknown columns \\['rowz'\\]"):
        run_ledger.newest_runs(path, columns=("rowz",))
    # A ledger written before a column existed: the column reads as missing, not as an error.
    old = tmp_path / "old-ledger"
    write_deltalake(str(old), pa.table({"run_id": ["r0"], "finished_at": pa.array([T0], pa.timestamp("us", "UTC"))}))
    assert run_ledger.newest_runs(old, columns=("run_id", "partitions_json")) == [
        {"finished_at": T0, "run_id": "r0", "partitions_json": None}]  # fmt: skip


class _RecordTI:
    """What ``record_run`` uses of a task instance: the run's task states and the other tasks' XComs."""

    dag_id = "orders"

    def __init__(self, states: dict[str, str], xcoms: dict[tuple[str, str], object]) -> None:
        self.states, self.xcoms = states, xcoms

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict:
        return {run_ids[0]: self.states}

    def xcom_pull(self, task_ids: str, key: str = "return_value") -> object:
        return self.xcoms.get((task_ids, key))


@pytest.mark.parametrize("mirror_state", ["success", "failed"])
def test_record_run_takes_the_lag_after_from_mirror_offsets_only_when_it_succeeded(cfg, tmp_path, monkeypatch,
                                                                                  mirror_state):  # fmt: skip
    states = {"check_request": "success", "wait_for_lag": "success", "preflight": "success", "ingest": "success",
              "check_continuity": "success", "mirror_offsets": mirror_state, "record_run": "running"}  # fmt: skip
    lag_after = {"total_lag": 4, "partitions": [{"topic": "t", "partition": 0, "lag": 4}]}
    ti = _RecordTI(states, {
        ("preflight", "return_value"): {"lag": {"total_lag": 7, "partitions": [{"topic": "t", "partition": 0,
                                                                                  "lag": 7}]},
                                        "table_version": 3, "accepted_gaps": [], "findings": []},
        ("ingest", "return_value"): {"rows": 7, "epoch": 1, "bronze_version": 4, "commits": 1,
                                     "partitions": {"t": {"0": {"from": 10, "until": 17, "rows": 7}}}},
        ("check_continuity", "return_value"): {"ok": True, "violations": []},
        ("mirror_offsets", "return_value"): {"group": "g", "offsets": {"t": {"0": 17}}, "lag_after": lag_after},
    })  # fmt: skip
    context = {"ti": ti, "run_id": "r1", "dag_run": SimpleNamespace(run_type="manual", start_date=T0),
               "params": {}, "outlet_events": {}}  # fmt: skip
    # No Kafka connection is configured: a run that must measure the lag itself records none.
    if mirror_state == "success":
        record.record_run(cfg, [], context)
    else:
        from airflow.sdk.exceptions import AirflowFailException

        with pytest.raises(AirflowFailException, match="failed at mirror_offsets"):
            record.record_run(cfg, [], context)
    row = run_ledger.read_runs(cfg.tables.ledger_path)[0]
    if mirror_state == "success":
        assert row["outcome"] == "success"
        assert (row["lag_after"], row["partitions_json"][0]["lag_after"]) == (4, 4)
    else:  # a failed mirror's XCom (say, from a try before) is not the run's end
        assert row["outcome"] == "failed"
        assert (row["lag_after"], row["partitions_json"][0]["lag_after"]) == (None, None)


def test_record_carries_what_maintenance_did_and_the_next_run_counts_from_it(tmp_path: Path, cfg, monkeypatch):
    from dataclasses import replace

    from include.orchestration import preflight_run

    states = {"wait_for_lag": "success", "preflight": "success", "ingest": "success", "maintain": "success"}
    tables = {"tables": {"bronze": {"files_before": 9, "files_after": 1}}}
    ledger = {"due": "every_runs 2: this is run 2 and it was never done", "result": {"files_before": 1, "files_after": 1}}
    due = {"due": "every_runs 2: this is run 2 and it was never done"}
    row = _record(cfg, states, preflight={"maintenance": due}, maintain=tables, maintain_ledger=ledger)
    assert row["maintenance_json"] == {"due": due["due"], "ledger_due": ledger["due"], "tables": {
        "bronze": {"files_before": 9, "files_after": 1}, "ledger": {"files_before": 1, "files_after": 1}}}  # fmt: skip
    skipped = _record(cfg, {**states, "maintain": "upstream_failed"}, preflight={"maintenance": due})
    assert skipped["maintenance_json"] == {"due": due["due"], "tables": {}, "tables_state": "upstream_failed"}
    assert _record(cfg, states, preflight={"maintenance": None})["maintenance_json"] is None

    # The ledger is where the next runs read when it was last done.
    cfg = replace(cfg, tables=replace(cfg.tables, ledger_path=str(tmp_path / "ledger")),
                  maintenance=replace(cfg.maintenance, every_runs=2))  # fmt: skip
    now = T0 + timedelta(hours=1)
    assert preflight_run.maintenance_due(cfg, "tables", now) is None  # run 1: nothing to count yet
    run_ledger.append_run(cfg.tables.ledger_path, dict(_record(cfg, states), run_id="r0"))
    assert preflight_run.maintenance_due(cfg, "tables", now) == "every_runs 2: this is run 2 and it was never done"
    run_ledger.append_run(cfg.tables.ledger_path, dict(row, finished_at=T0 + timedelta(minutes=5)))
    assert preflight_run.maintenance_due(cfg, "tables", now) is None
    assert preflight_run.maintenance_due(cfg, "ledger", now) is None
    assert preflight_run.maintenance_due(replace(cfg, maintenance=replace(cfg.maintenance, every_runs=None)),
                                        "tables", now) is None  # fmt: skip


def test_record_failed_at_a_job_renders_the_jobs_error_from_its_fields(cfg):
    from include.contract.offsets import OffsetError

    error = OffsetError("batch 1 starts at 5 but the bronze table stands at 4", topic="t", partition=0,
                        offsets=(5, 4), action="rebuild_checkpoint")  # fmt: skip
    row = _record(cfg, {"wait_for_lag": "success", "preflight": "success", "ingest": "failed",
                        "record_run": "running"}, ingest_error=error.to_dict())  # fmt: skip
    assert row["reason"] == "failed at ingest: OffsetError: t-0: batch 1 starts at 5 but the bronze table stands at 4"
    assert row["error_json"]["fields"]["action"] == "rebuild_checkpoint"
    ok = _record(cfg, {"wait_for_lag": "success", "ingest": "success", "record_run": "running"})
    assert ok["error_json"] is None


# --------------------------------------------------------------------------- build_record's reasons and columns


@pytest.mark.parametrize(("action", "reason"), [("normal", "no new records"),
                                                 ("backfill_time", "nothing to backfill in the window")])  # fmt: skip
def test_a_skipped_run_says_whether_there_was_nothing_new_or_nothing_in_the_backfills_window(cfg, action, reason):
    row = _record(cfg, {"check_request": "success", "wait_for_lag": "skipped"}, check_request={"action": action})
    assert (row["outcome"], row["reason"], row["action"]) == ("skipped", reason, action)


def test_a_refused_request_and_a_broken_continuity_are_named_in_the_reason(cfg):
    refused = _record(cfg, {"check_request": "failed", "wait_for_lag": "upstream_failed"},
                      request_refused="ranges must name a configured topic")  # fmt: skip
    assert refused["reason"] == "failed at check_request: ranges must name a configured topic"
    broken = _record(cfg, {"ingest": "success", "check_continuity": "failed", "mirror_offsets": "upstream_failed"},
                     continuity_failed={"ok": False, "violations": ["t-0: gap 5..7", "t-1: overlap at 3"]})  # fmt: skip
    # The task that failed is the reason, not the ones that did not run because of it.
    assert broken["reason"] == "failed at check_continuity: t-0: gap 5..7 | t-1: overlap at 3"
    assert broken["continuity"] == "BROKEN"


def test_only_upstream_failures_are_named_when_no_task_failed_itself(cfg):
    row = _record(cfg, {"preflight": "upstream_failed", "ingest": "upstream_failed", "record_run": "running"})
    assert (row["outcome"], row["reason"]) == ("failed", "failed at ingest, preflight")


def test_accepted_gaps_are_the_runs_lost_records(cfg):
    gaps = [{"topic": "t", "partition": 0, "from": 5, "until": 9}, {"topic": "t", "partition": 1, "from": 0, "until": 2}]
    row = _record(cfg, {"wait_for_lag": "success", "preflight": "success"},
                  preflight={"lag": {"total_lag": 3, "total_lost": 99, "partitions": []}, "table_version": 1,
                             "accepted_gaps": gaps, "findings": []})  # fmt: skip
    assert (row["lost"], row["gaps_json"]) == (6, gaps)
    no_gap = _record(cfg, {"wait_for_lag": "success"}, wait_for_lag={"total_lag": 3, "total_lost": 4, "partitions": []})
    assert (no_gap["lost"], no_gap["gaps_json"]) == (4, [])


def test_the_action_and_reason_come_from_the_trigger_params_when_no_request_was_checked(cfg):
    row = record.build_record(cfg, run_id="r1", run_type="manual", dag_id="orders", states={}, xcoms={},
                              lag_after=None, started_at=None, finished_at=None,
                              params={"action": "reread_after_restore", "reason": "INC-7"})  # fmt: skip
    assert (row["action"], row["request_reason"], row["request_json"]) == ("reread_after_restore", "INC-7", None)
    assert row["duration_s"] is None and row["continuity"] == "not checked"


TRANSFORMED = {"run_id": "r1", "read": 5, "upserted": 3, "deleted": 1, "quarantined": 1, "superseded": 0,
               "silver_version": 9, "epoch": 0, "duration_s": 1.0}  # fmt: skip


def test_the_transform_columns_take_the_continuity_checks_counts_over_the_jobs_own(cfg):
    states = {"ingest": "success", "transform": "success", "check_continuity": "success"}
    alone = _record(cfg, states, transform=TRANSFORMED)
    assert (alone["silver_read"], alone["silver_upserted"], alone["silver_deleted"], alone["quarantined"],
            alone["silver_version_after"]) == (5, 3, 1, 1, 9)  # fmt: skip
    checked = {"read": 6, "upserted": 4, "deleted": 1, "quarantined": 1, "superseded": 0}
    row = _record(cfg, states, transform=TRANSFORMED, check_continuity={"ok": True, "violations": [],
                                                                        "transform": checked})  # fmt: skip
    assert (row["silver_read"], row["silver_upserted"], row["silver_version_after"]) == (6, 4, 9)
    assert row["transform_json"] == {"job": TRANSFORMED, "check": checked}
    assert "silver_read" not in _record(cfg, {"ingest": "success"})
