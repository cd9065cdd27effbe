"""Task-side logic without a broker or Spark: connections, the submit hook, the run record, the ledger."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

from include.config import load_pipeline
from include.orchestration import record
from include.orchestration.spark_operator import _hook_class, job_run_type, job_spark_conf
from include.readers import connections, run_ledger


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setenv("KDE_LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({
        "kafka": {"connection_id": "kafka_test", "topics": ["t"]}, "schedule": None,
        "cluster": {"workers": 2, "worker_cores": 2, "worker_memory": "768m"},
    }))  # fmt: skip
    return load_pipeline(path)


def test_kafka_connection_from_environment(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "b1:9092", "security.protocol": "SSL",
                                         "sasl.password": "s3cret"}}))  # fmt: skip
    config = connections.kafka_client_config("kafka_test")
    assert config["bootstrap.servers"] == "b1:9092"
    # Only settings the Java client names the same way go to Spark; secrets never do by accident.
    assert connections.spark_kafka_options(config, "kafka_test") == {"security.protocol": "SSL"}


def test_kafka_connection_without_bootstrap_names_the_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps({"conn_type": "kafka", "extra": {}}))
    with pytest.raises(connections.ConnectionConfigError, match="'kafka_test': expected 'bootstrap.servers'"):
        connections.kafka_client_config("kafka_test")


def test_missing_connection_is_an_error_not_a_yarn_fallback():
    with pytest.raises(connections.ConnectionConfigError, match="'no_such_spark' does not exist"):
        connections.spark_master("no_such_spark")


@pytest.mark.parametrize("conn,master", [
    ({"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077}, "spark://10.0.0.5:7077"),
    ({"conn_type": "spark", "host": "yarn"}, "yarn"),
    ({"conn_type": "spark", "host": "k8s://https://api.example:443"}, "k8s://https://api.example:443"),
])  # fmt: skip
def test_spark_master_reads_the_connection_like_the_provider(monkeypatch, conn, master):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_TEST", json.dumps(conn))
    assert connections.spark_master("spark_test") == master


def test_run_cluster_hook_returns_the_same_keys_as_the_provider_hook():
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    base = SparkSubmitHook(conn_id="no_such_connection")._connection
    hook = _hook_class()(master="spark://127.0.0.1:7077", conn_id="unused", spark_binary="spark-submit")
    assert set(hook._connection) == set(base)
    assert hook._connection["master"] == "spark://127.0.0.1:7077"
    cmd = hook._build_spark_submit_command("job.py")
    assert cmd[cmd.index("--master") + 1] == "spark://127.0.0.1:7077"


def test_job_conf_per_profile(cfg):
    transient = job_spark_conf(cfg, transient=True)
    assert (transient["spark.cores.max"], transient["spark.executor.cores"], transient["spark.executor.memory"]) == (
        "4", "2", "768m")  # fmt: skip
    assert transient["spark.driver.host"] == "127.0.0.1"
    existing = job_spark_conf(cfg, transient=False)
    assert existing["spark.executor.instances"] == "2" and "spark.cores.max" not in existing


@pytest.mark.parametrize("run_type,expected", [
    ("scheduled", "scheduled"), ("DagRunType.BACKFILL_JOB", "manual"), ("backfill", "backfill"),
    ("manual", "manual"), ("asset_triggered", "manual"),
])  # fmt: skip
def testjob_run_type(run_type, expected):
    assert job_run_type({"dag_run": SimpleNamespace(run_type=run_type)}) == expected


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
    from include import settings

    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "var")
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

    from include.orchestration import pipeline_run

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
    assert pipeline_run.maintenance_due(cfg, "tables", now) is None  # run 1: nothing to count yet
    run_ledger.append_run(cfg.tables.ledger_path, dict(_record(cfg, states), run_id="r0"))
    assert pipeline_run.maintenance_due(cfg, "tables", now) == "every_runs 2: this is run 2 and it was never done"
    run_ledger.append_run(cfg.tables.ledger_path, dict(row, finished_at=T0 + timedelta(minutes=5)))
    assert pipeline_run.maintenance_due(cfg, "tables", now) is None
    assert pipeline_run.maintenance_due(cfg, "ledger", now) is None
    assert pipeline_run.maintenance_due(replace(cfg, maintenance=replace(cfg.maintenance, every_runs=None)),
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
