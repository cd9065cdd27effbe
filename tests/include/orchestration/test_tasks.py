"""Each task's function in ``include/orchestration/tasks.py``, called with plain values, and the DAG that wires them.

No broker, Spark or Airflow run. Where a function reads Kafka, the read
(``preflight_run.snapshot``, ``run_preflight``, ``plan_request``,
``mirror_offsets``) is replaced by fake numbers run through the real pure
rules (:func:`include.contract.preflight.measure_lag`, :func:`include.contract.preflight.preflight`).
The run lock, the continuity check on an empty lake and the cluster stop run
for real in ``tmp_path``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml
from airflow.sdk import TriggerRule
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from include import settings
from include.contract.actions import RequestError
from include.contract.handoffs import RequestPlan
from include.contract.offsets import PartitionState, TopicState
from include.contract.preflight import LagReport, measure_lag
from include.contract.preflight import preflight as preflight_rules
from include.orchestration import (
    dag_factory,
    post_run,
    preflight_run,
    request_plan,
    run_folder,
    run_lock,
    tasks,
)
from include.spark import cluster_state, spark_cluster

T0 = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)


@pytest.fixture
def cfg(make_pipeline, kafka_connection, monkeypatch):
    """Pipeline ``orders`` on topic ``t``: lag gate 10 records or 60 s; runs of up to 100 records stay local."""
    monkeypatch.setattr(preflight_run, "utcnow", lambda: T0)
    monkeypatch.setattr(spark_cluster, "start_standalone", _no_spark)
    return make_pipeline(
        "orders", lag={"min_records": 10, "max_wait_minutes": 1},
        cluster={"workers": 3, "worker_cores": 2, "worker_memory": "1g", "local_max_records": 100,
                 "records_per_worker": 1000},
    )  # fmt: skip


def _no_spark(*args: Any, **kwargs: Any) -> None:
    # A wrong backlog sends start_cluster to a real standalone cluster; here that is a failure, not a JVM.
    raise AssertionError("a unit test tried to start a Spark cluster")


def _kafka(**partitions: tuple[int, int]) -> dict[str, TopicState]:
    """Topic ``t`` with partitions ``p0=(earliest, latest)``, ...: fake Kafka numbers."""
    return {"t": TopicState("t", "id-t", {int(p[1:]): PartitionState(*r) for p, r in partitions.items()})}


def _lag(table_next: dict | None, oldest_pending: datetime | None = None, **partitions: tuple[int, int]) -> LagReport:
    report = measure_lag(table_next, _kafka(**partitions))
    return LagReport(report.partitions, report.table_version, oldest_pending=oldest_pending)


# --------------------------------------------------------------------------- run_task


def test_run_task_pushes_the_report_then_fails_the_task_without_retry(fake_ti):
    ti = fake_ti()

    def body(n: int) -> dict:
        raise tasks.FailTask(f"broken at {n}", key="failed_report", report={"ok": False, "n": n})

    with pytest.raises(AirflowFailException, match="^broken at 3$"):
        tasks.run_task(ti, body, 3)
    assert ti.pushed == {"failed_report": {"ok": False, "n": 3}}


def test_run_task_skips_and_pushes_only_a_report_it_was_given(fake_ti):
    ti = fake_ti()
    with pytest.raises(AirflowSkipException, match="nothing new"):
        tasks.run_task(ti, lambda: (_ for _ in ()).throw(tasks.SkipTask("nothing new", key="lag", report={"total_lag": 0})))
    assert ti.pushed == {"lag": {"total_lag": 0}}
    bare = fake_ti()
    with pytest.raises(AirflowSkipException):
        tasks.run_task(bare, lambda: (_ for _ in ()).throw(tasks.SkipTask("nothing to backfill")))
    assert bare.pushed == {}


def test_run_task_returns_the_value_and_lets_other_errors_through_to_a_retry(fake_ti):
    ti = fake_ti()
    assert tasks.run_task(ti, lambda a, b=0: a + b, 2, b=5) == 7
    with pytest.raises(RuntimeError, match="broker down"):
        tasks.run_task(ti, lambda: (_ for _ in ()).throw(RuntimeError("broker down")))
    assert ti.pushed == {}


# --------------------------------------------------------------------------- airflow_run_state


def test_airflow_run_state_reads_the_task_sdk_and_knows_a_deleted_run_holds_nothing():
    class SDK:
        @staticmethod
        def get_dagrun_state(dag_id: str, run_id: str) -> str:
            if run_id == "gone":
                raise RuntimeError("DagRun not found")
            if run_id == "gone404":
                raise RuntimeError("server said 404")
            if run_id == "broken":
                raise RuntimeError("api-server unreachable")
            return "DagRunState.RUNNING" if dag_id == "orders" else "success"

    state = tasks.airflow_run_state(SDK)
    assert state("orders", "r1") == "running"
    assert state("other", "r1") == "success"
    assert state("orders", "gone") is None and state("orders", "gone404") is None
    with pytest.raises(RuntimeError, match="unreachable"):
        state("orders", "broken")


# --------------------------------------------------------------------------- check_request


def _request(cfg, run_id: str = "manual__1", params: dict | None = None, running: tuple[str, ...] = ()):
    return tasks.check_request(
        cfg, dag_id="orders", run_id=run_id, params=params or {}, run_type="manual", requested_by="ann",
        data_interval=(None, None), run_state=lambda _dag, run: "running" if run in running else None,
    )  # fmt: skip


def _lock_holder(cfg) -> str | None:
    return (run_lock.holder(run_lock.lock_folder(cfg)) or {}).get("run_id")


def test_check_request_takes_the_lock_and_plans_a_normal_run_without_reading_kafka(cfg, monkeypatch, capsys):
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_TEST")  # a normal run reads Kafka in wait_for_lag, not here
    done = _request(cfg)
    assert done.is_done is True
    assert done.xcom_value == {"action": "normal", "reason": "", "requested_by": "ann", "describe": "normal run",
                               "ranges": [], "time_range": None, "notes": [], "lock_epoch": 1}  # fmt: skip
    assert _lock_holder(cfg) == "manual__1"
    assert "SUMMARY check_request: normal run; lock epoch 1 taken" in capsys.readouterr().out


def test_check_request_refuses_bad_params_before_taking_the_lock(cfg):
    with pytest.raises(tasks.FailTask) as ended:
        _request(cfg, params={"action": "rebuild_checkpoint"})
    assert str(ended.value).startswith("pipeline 'orders': the run's params were refused: reason: required")
    assert ended.value.key == "refused" and ended.value.report.startswith("reason: required for action")
    assert _lock_holder(cfg) is None


def test_check_request_waits_while_a_live_run_holds_the_lock(cfg, capsys):
    assert _request(cfg, run_id="manual__1").is_done
    waiting = _request(cfg, run_id="manual__2", running=("manual__1",))
    assert waiting.is_done is False and waiting.xcom_value is None
    assert _lock_holder(cfg) == "manual__1"
    assert "check_request: waiting: run manual__1 of pipeline orders holds" in capsys.readouterr().out
    # Once that run is over, the waiting run takes the lock.
    assert _request(cfg, run_id="manual__2").is_done and _lock_holder(cfg) == "manual__2"


BACKFILL = {"action": "backfill_offsets", "reason": "replay",
            "offset_ranges": [{"topic": "t", "partition": 0, "from": 0, "until": 5}]}  # fmt: skip


def test_check_request_plans_a_backfill_with_the_kafka_connection(cfg, monkeypatch, capsys):
    seen = {}

    def plan_request(cfg_, client, request):  # Kafka's answer: one range of five offsets
        seen.update(client=client, action=request.action)
        return RequestPlan(request.action, describe=request.describe(), ranges=({"topic": "t"},), offsets=5,
                           notes=("partition t-0 starts at 0",))  # fmt: skip

    monkeypatch.setattr(request_plan, "plan_request", plan_request)
    done = _request(cfg, params=BACKFILL)
    assert done.is_done and done.xcom_value["offsets"] == 5
    assert seen == {"client": {"bootstrap.servers": "b1:9092"}, "action": "backfill_offsets"}
    out = capsys.readouterr().out
    assert "check_request note: partition t-0 starts at 0" in out
    assert "SUMMARY check_request: backfill_offsets t-0 [0, 5) by ann: replay; 1 ranges, 5 offsets to re-read" in out


def test_check_request_refused_by_kafka_names_the_action_and_leaves_the_reason(cfg, monkeypatch):
    def plan_request(cfg_, client, request):
        raise RequestError("partition t-0 holds offsets 9 to 12 only")

    monkeypatch.setattr(request_plan, "plan_request", plan_request)
    with pytest.raises(tasks.FailTask) as ended:
        _request(cfg, params=BACKFILL)
    assert str(ended.value) == "pipeline 'orders': backfill_offsets refused: partition t-0 holds offsets 9 to 12 only"
    assert (ended.value.key, ended.value.report) == ("refused", "partition t-0 holds offsets 9 to 12 only")
    assert _lock_holder(cfg) == "manual__1"  # held until record_run gives it back


def test_a_dry_run_reports_what_it_would_do_takes_no_lock_and_the_rest_of_the_run_skips(cfg, monkeypatch, capsys):
    from include.contract.dry_run import DryRunReport, RangeDryRun
    from include.orchestration import dry_run

    seen = {}

    def report(cfg_, client, request):  # what the real reads would find: one range, 2 of its 5 offsets in bronze
        seen.update(client=client, dry_run=request.dry_run)
        return DryRunReport(request.action, ranges=(RangeDryRun("t", 0, 0, 5, 0, 9, 2),))

    monkeypatch.setattr(dry_run, "dry_run_report", report)
    done = _request(cfg, params={**BACKFILL, "dry_run": True})
    assert done.is_done and _lock_holder(cfg) is None
    assert seen == {"client": {"bootstrap.servers": "b1:9092"}, "dry_run": True}
    plan = RequestPlan.from_xcom(done.xcom_value)
    assert plan.dry_run["would_insert"] == 3 and "lock_epoch" not in done.xcom_value
    out = capsys.readouterr().out
    assert "dry run: t-0 [0, 5): 5 offsets, 5 held by Kafka, 2 already in bronze, would insert 3" in out
    assert ("SUMMARY check_request: dry run of backfill_offsets: would insert 3 records into bronze: 1 range(s) of "
            "5 offsets, 5 held by Kafka, 2 already in bronze; no lock taken, nothing runs") in out  # fmt: skip
    with pytest.raises(tasks.SkipTask, match="a dry run does nothing"):
        tasks.wait_for_lag(cfg, plan=done.xcom_value)


# --------------------------------------------------------------------------- wait_for_lag


def _snapshot(monkeypatch, report: LagReport) -> None:
    monkeypatch.setattr(preflight_run, "snapshot", lambda cfg, client, options=None: (report, None, {}))


def test_wait_for_lag_skips_a_run_with_nothing_new_and_leaves_the_lag(cfg, monkeypatch, capsys):
    _snapshot(monkeypatch, _lag({"t": {0: 12}}, p0=(0, 12)))
    with pytest.raises(tasks.SkipTask, match="nothing to do: no new records in any partition; no cluster started") as ended:
        tasks.wait_for_lag(cfg, plan={"action": "normal"})
    assert ended.value.key == "lag" and ended.value.report["total_lag"] == 0
    assert "SUMMARY wait_for_lag: lag 0 records over 0/1 partitions; skip:" in capsys.readouterr().out


@pytest.mark.parametrize(("latest", "waited_s", "done"), [
    (22, 0, True),     # lag 10 = min_records
    (15, 30, False),   # lag 3, the oldest record waited 30 s of 60
    (15, 61, True),    # lag 3, but it waited longer than max_wait_minutes
])  # fmt: skip
def test_wait_for_lag_goes_on_at_min_records_or_max_wait(cfg, monkeypatch, latest, waited_s, done):
    _snapshot(monkeypatch, _lag({"t": {0: 12}}, T0 - timedelta(seconds=waited_s), p0=(0, latest)))
    poke = tasks.wait_for_lag(cfg, plan=None)
    assert poke.is_done is done
    assert poke.xcom_value["total_lag"] == latest - 12
    assert poke.xcom_value["oldest_pending_age_s"] == waited_s


def test_wait_for_lag_lets_a_manual_action_run_without_asking_kafka(cfg, monkeypatch, capsys):
    monkeypatch.delenv("AIRFLOW_CONN_KAFKA_TEST")
    poke = tasks.wait_for_lag(cfg, plan={"action": "rebuild_checkpoint", "ranges": []})
    assert (poke.is_done, poke.xcom_value) == (True, {"action": "rebuild_checkpoint"})
    assert "SUMMARY wait_for_lag: rebuild_checkpoint runs now, whatever the lag" in capsys.readouterr().out


def test_wait_for_lag_skips_a_backfill_with_nothing_in_its_window(cfg):
    with pytest.raises(tasks.SkipTask, match="nothing to backfill") as ended:
        tasks.wait_for_lag(cfg, plan={"action": "backfill_time", "ranges": []})
    assert ended.value.key is None
    poke = tasks.wait_for_lag(cfg, plan={"action": "backfill_time", "ranges": [{"topic": "t"}]})
    assert poke.is_done and poke.xcom_value == {"action": "backfill_time"}


# --------------------------------------------------------------------------- preflight


def _run_preflight(monkeypatch, table_next: dict, kafka: dict[str, TopicState], table_version: int = 3) -> list:
    """``run_preflight`` on fake Kafka numbers through the real rules; returns the requests it was asked."""
    asked = []

    def run_preflight(cfg, client, request, *, ledger_rows=None, options=None):
        asked.append(request)
        verdict = preflight_rules(table_next=table_next, recorded_topic_ids={}, kafka=kafka,
                                  configured_topics=cfg.kafka.topics, policy=cfg.data_loss_policy, dag_id=cfg.name)  # fmt: skip
        progress = SimpleNamespace(table_version=table_version, next_offsets=table_next)
        return verdict, measure_lag(table_next, kafka, table_version=table_version), progress

    monkeypatch.setattr(preflight_run, "run_preflight", run_preflight)
    return asked


def test_preflight_passes_the_request_on_and_returns_what_the_later_tasks_read(cfg, monkeypatch, capsys):
    asked = _run_preflight(monkeypatch, {"t": {0: 5}}, _kafka(p0=(0, 12)))
    result = tasks.preflight(cfg, plan={"action": "rebuild_checkpoint", "reason": "lost disk", "requested_by": "ann"})
    assert [(r.action, r.reason, r.requested_by) for r in asked] == [("rebuild_checkpoint", "lost disk", "ann")]
    assert result["ok"] is True and result["blocking"] == []
    assert result["job_file"] == {"topic_ids": {"t": "id-t"}, "accepted_gaps": []}
    assert (result["lag"]["total_lag"], result["table_version"], result["table_next"]) == (7, 3, {"t": {"0": 5}})
    assert result["transform_before"] is None
    assert "SUMMARY preflight: ok, every partition continues where the table stands; lag 7 records" in capsys.readouterr().out


def test_preflight_of_a_normal_run_asks_for_a_normal_request(cfg, monkeypatch):
    asked = _run_preflight(monkeypatch, {"t": {0: 5}}, _kafka(p0=(0, 12)))
    tasks.preflight(cfg, plan=None)
    assert [(r.action, r.reason, r.requested_by) for r in asked] == [("normal", "", None)]


def test_preflight_fails_on_data_loss_and_leaves_its_report(cfg, monkeypatch, capsys):
    _run_preflight(monkeypatch, {"t": {0: 5}}, _kafka(p0=(9, 12)))
    with pytest.raises(tasks.FailTask) as ended:
        tasks.preflight(cfg, plan={})
    message = str(ended.value)
    assert message.startswith("preflight of pipeline 'orders' stopped the run before any cluster started:\n  - ")
    assert "partition t-0: 4 records (offsets 5 to 8)" in message
    report = ended.value.report
    assert ended.value.key == "failed_report" and report["ok"] is False and report["lag"]["total_lost"] == 4
    assert [f["kind"] for f in report["findings"]] == ["data_loss"]
    assert "preflight data_loss: partition t-0: 4 records" in capsys.readouterr().out


def test_preflight_reads_the_ledger_once_for_its_witness_and_for_maintenance(cfg, monkeypatch):
    from dataclasses import replace

    from include.readers import run_ledger

    cfg = replace(cfg, maintenance=replace(cfg.maintenance, every_runs=2))
    parts = [{"topic": "t", "partition": 0, "next_offset": 5}]
    run_ledger.append_run(cfg.tables.ledger_path, {"run_id": "r1", "finished_at": T0 - timedelta(hours=1),
                                                   "outcome": "success", "partitions_json": parts})  # fmt: skip
    reads, handed = [], []
    real = run_ledger.newest_runs
    monkeypatch.setattr(run_ledger, "newest_runs", lambda *a, **k: reads.append(k.get("columns")) or real(*a, **k))

    def run_preflight(cfg_, client, request, *, ledger_rows=None, options=None):
        handed.append(ledger_rows)
        verdict = preflight_rules(table_next={"t": {0: 5}}, recorded_topic_ids={}, kafka=_kafka(p0=(0, 12)),
                                  configured_topics=("t",), policy=cfg.data_loss_policy, dag_id=cfg.name)  # fmt: skip
        assert preflight_run.ledger_witness(cfg_, {"t": {0: 5}}, ledger_rows) is None  # the ledger agrees
        return verdict, measure_lag({"t": {0: 5}}, _kafka(p0=(0, 12))), None

    monkeypatch.setattr(preflight_run, "run_preflight", run_preflight)
    result = tasks.preflight(cfg, plan=None)
    assert len(reads) == 1 and {"outcome", "partitions_json", "maintenance_json"} <= set(reads[0])
    assert [[r["run_id"] for r in rows] for rows in handed] == [["r1"]]
    assert result["maintenance"] == {"due": "every_runs 2: this is run 2 and it was never done"}
    # The witness reads the same rows: a position behind the ledger's last run is refused.
    assert preflight_run.ledger_witness(cfg, {"t": {0: 3}}, handed[0]).kind == "ledger_ahead"


def test_preflight_refuses_kafka_settings_the_spark_job_cannot_take_before_reading_anything(cfg, monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "b1:9092", "security.protocol": "TLS"}}))  # fmt: skip
    asked = _run_preflight(monkeypatch, {"t": {0: 5}}, _kafka(p0=(0, 12)))
    with pytest.raises(tasks.FailTask, match=r"^pipeline 'orders': Airflow connection 'kafka_test': .*'TLS'") as ended:
        tasks.preflight(cfg, plan={})
    assert ended.value.key is None and asked == []


# --------------------------------------------------------------------------- start_cluster / stop_cluster


def test_start_cluster_keeps_a_small_backlog_in_local_mode_and_starts_nothing(cfg, capsys):
    result = tasks.start_cluster(cfg, run_id="manual__1", plan={"action": "normal"},
                                 preflight_result={"lag": {"total_lag": 40}}, cpu_count=4)  # fmt: skip
    assert result == {"master_url": "local[4]", "mode": "local", "workers": 0, "backlog": 40,
                      "choice": "local[4] in the driver: backlog 40 records <= cluster.local_max_records 100"}  # fmt: skip
    assert not (run_folder.run_dir(cfg, "manual__1") / "cluster").exists()
    assert "SUMMARY start_cluster: no cluster: local[4]" in capsys.readouterr().out


def test_start_cluster_sizes_a_standalone_cluster_to_a_backfills_offsets(cfg, monkeypatch, capsys):
    started = []

    def start_standalone(folder, *, workers, worker_cores, worker_memory):  # no Spark here: where and how big
        started.append((folder, workers, worker_cores, worker_memory))
        return cluster_state.StandaloneCluster("spark://127.0.0.1:7077", "http://127.0.0.1:8080", str(folder),
                                               {"master": 11, "worker-1": 12, "worker-2": 13})  # fmt: skip

    monkeypatch.setattr(spark_cluster, "start_standalone", start_standalone)
    result = tasks.start_cluster(cfg, run_id="manual__1", plan={"action": "backfill_offsets", "offsets": 1500},
                                 preflight_result={"lag": {"total_lag": 3}}, cpu_count=4)  # fmt: skip
    folder = run_folder.run_dir(cfg, "manual__1") / "cluster"
    assert started == [(folder, 2, 2, "1g")]
    assert (result["master_url"], result["mode"], result["workers"], result["backlog"]) == (
        "spark://127.0.0.1:7077", "cluster", 2, 1500)  # fmt: skip
    assert result["run_dir"] == str(folder) and result["pids"]["worker-2"] == 13
    assert "2 of at most 3 worker(s)" in result["choice"]
    assert "SUMMARY start_cluster: spark://127.0.0.1:7077 with 2 worker(s) x 2 core(s), 1g" in capsys.readouterr().out


def test_stop_cluster_stops_what_the_runs_cluster_folder_names(cfg, capsys):
    folder = run_folder.run_dir(cfg, "manual__1") / "cluster"
    folder.mkdir(parents=True)
    cluster_id = uuid.uuid4().hex
    daemon = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True,
                              env={**os.environ, cluster_state.MARKER_ENV: cluster_id})  # fmt: skip
    try:
        # Popen returns once exec has begun; the kernel fills /proc/<pid>/environ a moment later, and under
        # load the stop below could look before it did. A cluster's processes are found long after.
        marker = f"{cluster_state.MARKER_ENV}={cluster_id}".encode()
        deadline = time.monotonic() + 10
        while marker not in Path(f"/proc/{daemon.pid}/environ").read_bytes().split(b"\0"):
            assert time.monotonic() < deadline, "the stand-in daemon never showed its environment"
            time.sleep(0.01)
        (folder / cluster_state.STATE_FILE).write_text(json.dumps({
            "master_url": "spark://127.0.0.1:1", "web_ui_url": "http://127.0.0.1:1", "run_dir": str(folder),
            "pids": {}, "cluster_id": cluster_id, "sids": {}, "pgids": {}, "start_ticks": {}, "logs": {},
        }))  # fmt: skip
        assert tasks.stop_cluster(cfg, run_id="manual__other") == {"stopped": [], "left": []}
        assert daemon.poll() is None, "another run's folder was stopped"
        assert tasks.stop_cluster(cfg, run_id="manual__1") == {"stopped": [daemon.pid], "left": []}
        assert daemon.wait(10) == -signal.SIGTERM
        assert "SUMMARY stop_cluster: stopped 1 processes, 0 left" in capsys.readouterr().out
    finally:
        if daemon.poll() is None:
            daemon.kill()
            daemon.wait()


# --------------------------------------------------------------------------- check_continuity


def test_check_continuity_of_a_run_that_wrote_nothing_is_continuous(cfg, capsys):
    result = tasks.check_continuity(cfg, run_id="manual__1", preflight_result={"table_version": None, "table_next": None},
                                    ingest_summary={"rows": 0}, transform_summary=None)  # fmt: skip
    assert (result["ok"], result["run_id"], result["commits"], result["violations"]) == (True, "manual__1", 0, [])
    assert "SUMMARY continuity: CONTINUOUS: 0 commits, 0 rows" in capsys.readouterr().out


def test_check_continuity_fails_when_the_job_reports_rows_no_commit_holds(cfg, capsys):
    with pytest.raises(tasks.FailTask) as ended:
        tasks.check_continuity(cfg, run_id="manual__1", preflight_result={"table_version": None, "table_next": None},
                               ingest_summary={"rows": 3}, transform_summary=None)  # fmt: skip
    assert str(ended.value) == ("continuity check of pipeline 'orders' failed:\n"
                                "  - the job reported 3 rows but its commits in this run hold 0")  # fmt: skip
    assert ended.value.key == "failed_report" and ended.value.report["ok"] is False
    assert ended.value.report["violations"] == ["the job reported 3 rows but its commits in this run hold 0"]
    out = capsys.readouterr().out
    assert "continuity violation: the job reported 3 rows" in out and "SUMMARY continuity: BROKEN (1 violations)" in out


# --------------------------------------------------------------------------- mirror_offsets


def test_mirror_offsets_returns_the_group_what_was_committed_and_the_lag_after(cfg, monkeypatch, capsys):
    committed = {"t": {"0": 12, "1": 7}}
    lag = _lag({"t": {0: 12, 1: 7}}, p0=(0, 12), p1=(0, 10))
    monkeypatch.setattr(post_run, "mirror_offsets", lambda cfg_, client: (committed, lag))
    got = tasks.mirror_offsets(cfg)
    assert got["group"] == "kafka-delta-elt.orders"  # the pipeline's group, named by the task
    # record_run writes this lag into the ledger row instead of reading the table and Kafka again.
    assert got["lag_after"]["total_lag"] == 3
    assert [(p["partition"], p["next_offset"], p["lag"]) for p in got["lag_after"]["partitions"]] == [(0, 12, 0), (1, 7, 3)]
    assert ("SUMMARY mirror_offsets: committed 2 partition offsets to consumer group kafka-delta-elt.orders; "
            "lag after the run 3" in capsys.readouterr().out)  # fmt: skip


# --------------------------------------------------------------------------- the DAG's wiring


def test_dag_tasks_keep_their_rules_retries_and_xcom_shapes(cfg):
    dag = dag_factory.build_dag(cfg)
    got = {t.task_id: (t.trigger_rule, t.retries, t.multiple_outputs) for t in dag.tasks}
    r, success = cfg.retries, TriggerRule.ALL_SUCCESS
    assert got == {
        "check_request": (success, r, False), "wait_for_lag": (success, r, False),
        # A ``-> dict`` task function also pushes each key as an XCom of its own: part of what the task publishes.
        "preflight": (success, r, True), "start_cluster": (success, 1, True), "ingest": (success, r, False),
        "stop_cluster": (TriggerRule.ALL_DONE_SETUP_SUCCESS, 2, True), "check_continuity": (success, r, True),
        "mirror_offsets": (success, r, True), "record_run": (TriggerRule.ALL_DONE, r, True),
        "maintain": (success, r, False),
    }  # fmt: skip
    assert [t.task_id for t in dag.tasks if t.doc_md] == [], "a task function's docstring became its doc_md"
    check = dag.get_task("check_request")
    assert (check.mode, check.poke_interval, check.timeout) == ("reschedule", 15, 6 * 3600)
    assert dag.get_task("start_cluster").is_setup and dag.get_task("stop_cluster").is_teardown
    assert dag.get_task("record_run").upstream_task_ids == {"check_request", "wait_for_lag", "preflight",
                                                            "mirror_offsets", "maintain"}  # fmt: skip
    # Maintenance runs on the run's cluster, so the teardown waits for it; continuity checks after it.
    assert dag.get_task("maintain").upstream_task_ids == {"ingest"}
    assert "maintain" in dag.get_task("stop_cluster").upstream_task_ids


def test_dag_doc_names_the_pipelines_own_topics_tables_and_group(cfg):
    doc = dag_factory.dag_doc(cfg)
    assert doc == dag_factory.build_dag(cfg).doc_md
    assert doc.startswith("### Kafka → Delta pipeline `orders`")
    assert "topics `t` through Airflow connection `kafka_test`" in doc and f"`{cfg.tables.bronze_path}`" in doc
    assert "(consumer group `kafka-delta-elt.orders`)" in doc and "policy `fail`" in doc
    assert "**transform**" not in doc and "upserted" not in doc  # this pipeline has none


def test_dag_task_leaves_its_refusal_in_xcom_and_fails(cfg, fake_ti):
    ti = fake_ti()
    task = dag_factory.build_dag(cfg).get_task("check_request")
    with pytest.raises(AirflowFailException, match="the run's params were refused: action: expected one of"):
        task.python_callable(ti=ti, run_id="manual__1", params={"action": "drop_table"},
                             dag_run=SimpleNamespace(run_type="manual", triggering_user_name="ann"))  # fmt: skip
    assert ti.pushed["refused"].startswith("action: expected one of normal")


def test_dag_task_hands_its_function_the_earlier_tasks_xcoms(cfg, fake_ti, monkeypatch):
    ti = fake_ti(check_request={"action": "normal"}, preflight={"lag": {"total_lag": 40}})
    result = dag_factory.build_dag(cfg).get_task("start_cluster").python_callable(ti=ti, run_id="manual__1")
    assert (result["mode"], result["backlog"]) == ("local", 40)
    # A skipping wait_for_lag skips every task after it but record_run at once (Airflow's request is sent
    # by tasks.skip_after, which needs a task runner; here it records what it would skip).
    sent: list[list[str]] = []
    monkeypatch.setattr(tasks, "skip_after", lambda task, keep: sent.append(tasks.tasks_after(task, keep=keep)))
    dag = dag_factory.build_dag(cfg)
    skipped = fake_ti(check_request={"action": "backfill_offsets", "ranges": []})
    with pytest.raises(AirflowSkipException, match="nothing to backfill"):
        dag.get_task("wait_for_lag").python_callable(ti=skipped, task=dag.get_task("wait_for_lag"))
    assert sent == [sorted(set(dag.task_ids) - {"check_request", "wait_for_lag", "record_run"})]
    assert {"preflight", "ingest", "check_continuity", "mirror_offsets"} <= set(sent[0])


def test_parsing_the_dags_imports_no_kafka_spark_or_delta_module(tmp_path):
    """The task functions' module is imported while parsing; the heavy clients must wait for a task to run."""
    (tmp_path / "orders.yaml").write_text(yaml.safe_dump({"kafka": {"connection_id": "k", "topics": ["t"]},
                                                          "schedule": None}))  # fmt: skip
    script = ("import sys; from include.orchestration.dag_factory import build_dags; dags, errors = build_dags(); "
              "assert list(dags) == ['orders'] and not errors, errors; "
              "print(sorted({m.split('.')[0] for m in sys.modules} & "
              "{'confluent_kafka', 'pyspark', 'deltalake', 'pyarrow', 'py4j'}))")  # fmt: skip
    env = {**os.environ, settings.PIPELINES_DIR_ENV: str(tmp_path), "KDE_LAKEHOUSE_ROOT": str(tmp_path / "lake")}
    proc = subprocess.run([sys.executable, "-c", script], cwd=Path(settings.PROJECT_ROOT), env=env,
                          capture_output=True, text=True, timeout=120)  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == "[]"
