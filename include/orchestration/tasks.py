"""What each task of a pipeline's DAG run does, as plain functions the DAG factory calls.

:mod:`include.orchestration.dag_factory` only declares the tasks and wires them. Each task
calls one function here with the pipeline's config and the context values it
needs (earlier tasks' XComs, the run id, the trigger form's params) and returns
what the task pushes as its XCom. The reads and checks themselves live in
:mod:`include.orchestration.pipeline_lock`, :mod:`~include.orchestration.request_plan`,
:mod:`~include.orchestration.preflight_run`, :mod:`~include.orchestration.post_run` and
:mod:`~include.orchestration.run_folder`; a function here adds the task's decision (wait, skip, fail,
go on), its log lines and its XCom: a hand-off of :mod:`include.contract.handoffs`, read there
from the value an earlier task left (``from_xcom``) and returned as one (``to_xcom``).

A task that ends failed or skipped on purpose raises :class:`FailTask` or
:class:`SkipTask` with the report ``record_run`` reads back from an XCom key
(:mod:`include.contract.handoffs`' ``REFUSED_KEY``, ``LAG_KEY``, ``FAILED_REPORT_KEY``); :func:`run_task` pushes that report
and ends the task with Airflow's exception. So the functions need no task
instance, and a unit test calls them with plain values.

The Spark steps (``ingest``, ``transform``, ``maintain``) are operators of
:mod:`include.orchestration.ingest_operator` and ``step_operators``; ``check_continuity`` is
:class:`ContinuityOperator` here, so that it can report its verdict as
lineage; ``record_run`` calls :func:`include.orchestration.record.record_run`.

This module is imported while DAGs are parsed (:mod:`include.orchestration.dag_factory`), so
Kafka, Spark and Delta modules are imported inside the functions, never at the
top.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Collection, Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from airflow.sdk import BaseOperator, PokeReturnValue

from include.config import PipelineConfig
from include.contract.errors import PipelineError
from include.contract.handoffs import (
    FAILED_REPORT_KEY,
    LAG_KEY,
    REFUSED_KEY,
    ClusterStart,
    ClusterStop,
    ContinuityResult,
    LagSeen,
    MirrorResult,
    PreflightResult,
    Refusal,
    RequestPlan,
    pull,
    push,
)
from include.contract.jobs import INGEST_TASK, PREFLIGHT_TASK, TRANSFORM_TASK, TRY_NUMBER_KEY

if TYPE_CHECKING:  # the OpenLineage provider is imported only when lineage is asked for
    from include.contract.actions import RunRequest
    from include.orchestration.lineage import Lineage

_P = ParamSpec("_P")
_R = TypeVar("_R")


class EndTask(PipelineError):
    """Ends a task on purpose; ``report``, when ``key`` is set, is left in that XCom for ``record_run``."""

    def __init__(self, message: str, *, key: str | None = None, report: Any = None) -> None:
        super().__init__(message)
        self.key = key
        self.report = report


class FailTask(EndTask):
    """The task fails with no retry: a retry would meet the same refusal or the same broken chain."""


class SkipTask(EndTask):
    """The task is skipped: the run has nothing to do, so no cluster starts."""


def run_task(ti: Any, body: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
    """Call the task function ``body``; an :class:`EndTask` it raises is pushed to XCom and ends the task."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    try:
        return body(*args, **kwargs)
    except EndTask as end:
        # Pushed before the task ends, so record_run (trigger rule all_done) can say why.
        if end.key is not None:
            push(ti, end.key, end.report)
        ending = AirflowSkipException if isinstance(end, SkipTask) else AirflowFailException
        raise ending(str(end)) from None


def tasks_after(task: Any, *, keep: Collection[str]) -> list[str]:
    """The ids of every task downstream of ``task`` (at any depth) but those in ``keep``, sorted."""
    return sorted(set(task.get_flat_relative_ids(upstream=False)) - set(keep))


def skip_after(task: Any, *, keep: Collection[str]) -> list[str]:
    """Mark every task after ``task`` but ``keep`` skipped, in one request, before ``task`` itself ends
    skipped; returns their ids.

    Left to Airflow, a skip reaches the tasks after it one level per scheduler loop, and a loop that
    queued nothing sleeps (a second by default): a run with nothing to do would wait for the length of
    its chain of tasks before ``record_run`` starts. This is the request Airflow's own short-circuit sends
    (``DownstreamTasksSkipped``), which would end ``task`` as a success; Airflow leaves a task already
    running or finished as it is.
    """
    from airflow.sdk.execution_time.comms import SkipDownstreamTasks
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    ids = tasks_after(task, keep=keep)
    if ids:
        SUPERVISOR_COMMS.send(msg=SkipDownstreamTasks(tasks=ids))
    return ids


def airflow_run_state(runtime_ti: Any = None) -> Callable[[str, str], str | None]:
    """``(dag_id, run_id) -> state`` through the Task SDK; ``None`` for a run Airflow does not know.

    ``runtime_ti`` is the SDK's task-instance class (default: ``RuntimeTaskInstance``);
    the run lock asks it whether the run holding the lock is still alive.
    """
    if runtime_ti is None:
        from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

        runtime_ti = RuntimeTaskInstance

    def state(dag_id: str, run_id: str) -> str | None:
        try:
            return str(runtime_ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)).rsplit(".", 1)[-1].lower()
        except Exception as exc:
            # A deleted run holds no lock; any other failure must not break a live one.
            if "not found" in str(exc).lower() or "404" in str(exc):
                return None
            raise

    return state


def check_request(
    cfg: PipelineConfig,
    *,
    dag_id: str,
    run_id: str,
    params: Mapping[str, Any],
    run_type: str,
    requested_by: str | None,
    data_interval: tuple[datetime | None, datetime | None],
    run_state: Callable[[str, str], str | None],
) -> PokeReturnValue:
    """Sensor ``check_request``: the run's request, checked, once the run holds its pipeline's lock.

    Not done while another live run holds the lock. Done with the plan
    (:func:`include.orchestration.request_plan.plan_request`) as its XCom. A request refused,
    by its params alone or against Kafka and the table, fails the task with
    the reason (a :class:`~include.contract.handoffs.Refusal`) in XCom ``refused``.
    """
    from dataclasses import replace

    from include.contract import manual_ops
    from include.contract.actions import RequestError
    from include.orchestration import pipeline_lock, request_plan
    from include.readers import connections

    try:
        request = manual_ops.parse_request(params, run_type=run_type, requested_by=requested_by,
                                           data_interval=data_interval)  # fmt: skip
    except RequestError as exc:
        raise FailTask(f"pipeline {cfg.name!r}: the run's params were refused: {exc}", key=REFUSED_KEY,
                       report=Refusal(str(exc)).to_xcom()) from None  # fmt: skip
    if request.dry_run:
        return _dry_run(cfg, request)
    claim = pipeline_lock.take_lock(cfg, dag_id=dag_id, run_id=run_id, run_state=run_state)
    if claim.message:
        print(f"check_request: {claim.message}")
    if claim.epoch is None:
        return PokeReturnValue(is_done=False)
    try:
        # Only a backfill plans against Kafka; a normal run reads it in wait_for_lag.
        client = connections.kafka_client_config(cfg.kafka.connection_id) if request.is_backfill else {}
        plan = request_plan.plan_request(cfg, client, request)
    except RequestError as exc:
        raise FailTask(f"pipeline {cfg.name!r}: {request.action} refused: {exc}", key=REFUSED_KEY,
                       report=Refusal(str(exc)).to_xcom()) from None  # fmt: skip
    for note in plan.notes:
        print(f"check_request note: {note}")
    text = plan.describe
    if request.is_backfill:
        text += f"; {len(plan.ranges)} ranges, {plan.offsets} offsets to re-read"
    if plan.replay:
        text += f"; {plan.replay['rows']} quarantined records to replay"
    print(f"SUMMARY check_request: {text}; lock epoch {claim.epoch} taken")
    return PokeReturnValue(is_done=True, xcom_value=replace(plan, lock_epoch=claim.epoch).to_xcom())


def _dry_run(cfg: PipelineConfig, request: RunRequest) -> PokeReturnValue:
    """``check_request`` of a dry run: the report (:mod:`include.orchestration.dry_run`) in the task log and
    the plan's XCom, without the lock (nothing will write); ``wait_for_lag`` then skips the rest."""
    from include.orchestration import dry_run
    from include.readers import connections

    report = dry_run.dry_run_report(cfg, connections.kafka_client_config(cfg.kafka.connection_id), request)
    for line in report.lines():
        print(f"dry run: {line}")
    print(f"SUMMARY check_request: {report.summary()}; no lock taken, nothing runs")
    plan = RequestPlan(request.action, request.reason, request.requested_by, request.describe(),
                       dry_run=report.to_json())  # fmt: skip
    return PokeReturnValue(is_done=True, xcom_value=plan.to_xcom())


def wait_for_lag(cfg: PipelineConfig, *, plan: object) -> PokeReturnValue:
    """Sensor ``wait_for_lag``: done once the lag is worth a cluster (``cfg.lag``), with the lag report as XCom.

    ``plan`` is ``check_request``'s XCom. A manual action runs whatever the
    lag; a backfill with nothing to re-read, or a normal run with no new
    records, skips the task (the lag report in XCom ``lag``), so no cluster
    starts.
    """
    from dataclasses import replace

    from include.contract.actions import known
    from include.contract.preflight import lag_decision
    from include.orchestration import preflight_run
    from include.readers import connections, object_store

    checked = RequestPlan.from_xcom(plan)
    action, spec = checked.action, known(checked.action)
    if checked.dry_run is not None:
        print(f"SUMMARY wait_for_lag: dry run of {action}: no cluster, no job")
        raise SkipTask("a dry run does nothing; record_run records its report")
    if spec is None or spec.manual:
        if checked.is_backfill and not checked.ranges:
            print(f"SUMMARY wait_for_lag: {action}: nothing the table has passed lies in the window")
            raise SkipTask("nothing to backfill; no cluster started")
        print(f"SUMMARY wait_for_lag: {action} runs now, whatever the lag")
        return PokeReturnValue(is_done=True, xcom_value=LagSeen(action=action).to_xcom())
    client = connections.kafka_client_config(cfg.kafka.connection_id)
    now = preflight_run.utcnow()
    options = object_store.TableOptions(cfg)
    report, progress, _ = preflight_run.snapshot(cfg, client, options=options)
    if cfg.has_transform and progress is not None:
        # Read here only, where it decides: silver's lag is work (the preflight and the mirror need it not).
        report = replace(report, silver_pending=max(preflight_run.silver_lags(cfg, options=options).values()))
    decision = lag_decision(report, min_records=cfg.lag.min_records, max_wait_s=cfg.lag.max_wait_minutes * 60,
                            now=now, retention_margin_s=cfg.retention_margin_s(now))  # fmt: skip
    print(f"SUMMARY wait_for_lag: {report.summary_line(now)}; {decision.action}: {decision.reason}")
    if decision.action == "skip":
        raise SkipTask(f"nothing to do: {decision.reason}; no cluster started", key=LAG_KEY,
                       report=LagSeen(report.to_json(now)).to_xcom())  # fmt: skip
    return PokeReturnValue(is_done=decision.action == "proceed", xcom_value=LagSeen(report.to_json(now)).to_xcom())


def preflight(cfg: PipelineConfig, *, plan: object) -> dict[str, Any]:
    """Task ``preflight``: the verdict on the table against Kafka, before any cluster starts.

    ``plan`` is ``check_request``'s XCom. Returns the verdict with what the
    jobs and the continuity check need (the job's preflight file, the lag,
    where the table stands). A blocking finding fails the task with that
    result in XCom ``failed_report``; Kafka settings the Spark job could not
    take fail it with the connection's error.
    """
    from dataclasses import replace

    from include.contract.actions import RunRequest
    from include.contract.handoffs import TransformBefore
    from include.contract.offsets import positions_to_json
    from include.orchestration import post_run, preflight_run
    from include.readers import connections, object_store

    checked = RequestPlan.from_xcom(plan)
    request = RunRequest(checked.action, checked.reason, checked.requested_by, checked.skip or ())
    client = connections.kafka_client_config(cfg.kafka.connection_id)
    try:
        # The Spark job's settings are derived in ingest; refuse settings it cannot
        # take now, before a cluster starts.
        connections.spark_kafka_options(client, cfg.kafka.connection_id)
    except connections.ConnectionConfigError as exc:
        raise FailTask(f"pipeline {cfg.name!r}: {exc}") from None
    now = preflight_run.utcnow()
    options = object_store.TableOptions(cfg)  # one connection lookup for every table read below
    # One read of the ledger for its witness and for whether maintenance is due (each open of it costs).
    ledger = preflight_run.preflight_ledger(cfg, options=options)
    verdict, lag, progress = preflight_run.run_preflight(cfg, client, request, ledger_rows=ledger, options=options)
    for finding in verdict.findings:
        print(f"preflight {finding.severity}: {finding.message}")
    print(f"SUMMARY {verdict.summary_line()}; {lag.summary_line(now)}")
    before: TransformBefore | None = post_run.transform_versions(cfg, options=options) if cfg.has_transform else None
    result = PreflightResult(
        verdict.to_json(), verdict.job_file(), lag.to_json(now),
        table_version=progress.table_version if progress else None,
        table_next=positions_to_json(progress.next_offsets) if progress else None, transform_before=before,
    )  # fmt: skip
    if not verdict.ok:
        raise FailTask(verdict.failure_message(cfg.name), key=FAILED_REPORT_KEY, report=result.to_xcom())
    due = preflight_run.maintenance_due(cfg, "tables", now, ledger, options=options)
    if due:
        print(f"maintenance of bronze{', silver and quarantine' if cfg.has_transform else ''} is due "
              f"({due}): the run's Spark application does it after its last step")  # fmt: skip
    return replace(result, maintenance_due=due).to_xcom()


def start_cluster(cfg: PipelineConfig, *, run_id: str, plan: object, preflight_result: object,
                  cpu_count: int | None = None) -> dict[str, Any]:  # fmt: skip
    """Setup task ``start_cluster``: where this run's Spark application runs, sized to its backlog.

    ``plan`` and ``preflight_result`` are the XComs of ``check_request`` and
    ``preflight`` (the backlog: a backfill's offsets, else the lag). A small
    backlog runs in local mode and starts nothing; otherwise a standalone
    cluster starts in the run's folder. Returns its master URL (what ingest
    submits to), the choice and why.
    """
    from include.orchestration import cluster_sizing, request_plan, run_folder
    from include.spark import spark_cluster

    preflight = PreflightResult.from_xcom(preflight_result) if preflight_result else None
    records = request_plan.run_backlog(RequestPlan.from_xcom(plan), preflight)
    choice = cluster_sizing.choose(cfg.cluster, records, cpu_count or os.cpu_count() or 1)
    if choice.mode == "local":
        print(f"SUMMARY start_cluster: no cluster: {choice.reason}")
        return ClusterStart(choice.local_master, "local", 0, choice.reason, records).to_xcom()
    folder = run_folder.run_dir(cfg, run_id) / "cluster"
    cluster = spark_cluster.start_standalone(
        folder, workers=choice.workers, worker_cores=cfg.cluster.worker_cores,
        worker_memory=cfg.cluster.worker_memory,
    )  # fmt: skip
    print(f"SUMMARY start_cluster: {cluster.master_url} with {choice.workers} worker(s) "
          f"x {cfg.cluster.worker_cores} core(s), {cfg.cluster.worker_memory}; UI {cluster.web_ui_url}; "
          f"{choice.reason}")  # fmt: skip
    return ClusterStart(cluster.master_url, "cluster", choice.workers, choice.reason, records,
                        cluster.to_json()).to_xcom()  # fmt: skip


def stop_cluster(cfg: PipelineConfig, *, run_id: str) -> dict[str, Any]:
    """Teardown task ``stop_cluster``: stop the run's standalone cluster; the pids stopped and any left."""
    from include.orchestration import run_folder
    from include.spark import cluster_state, cluster_stop

    folder = run_folder.run_dir(cfg, run_id) / "cluster"
    stopped = cluster_stop.stop_standalone(folder)
    left = cluster_state.running_processes(folder)
    # A task killed during its submit (SIGKILL, OOM) could not remove its job's credentials.
    if run_folder.remove_secrets(run_folder.run_dir(cfg, run_id)):
        print("stop_cluster: removed the credentials files a killed submit left")
    print(f"SUMMARY stop_cluster: stopped {len(stopped)} processes, {len(left)} left")
    return ClusterStop(tuple(stopped), tuple(left)).to_xcom()


def check_continuity(cfg: PipelineConfig, *, run_id: str, preflight_result: object,
                     ingest_summary: dict[str, Any] | None,
                     transform_summary: dict[str, Any] | None) -> dict[str, Any]:  # fmt: skip
    """Task ``check_continuity``: the commits this run wrote chain on from where ``preflight`` saw the table.

    ``preflight_result``, ``ingest_summary`` and ``transform_summary`` are the
    XComs of ``preflight``, ``ingest`` and ``transform`` (``None`` without
    one). Returns the report; a broken chain fails the task with the report in
    XCom ``failed_report``.
    """
    from include.contract.offsets import positions_from_json
    from include.orchestration import post_run
    from include.readers import connections

    pre = PreflightResult.from_xcom(preflight_result)
    client = connections.kafka_client_config(cfg.kafka.connection_id)
    report = post_run.check_continuity(
        cfg, client, run_id=run_id, version_before=pre.table_version,
        start=positions_from_json(pre.table_next) if pre.table_next else None,
        job_summary=ingest_summary, transform_before=pre.transform_before,
        transform_summary=transform_summary,
    )  # fmt: skip
    result = ContinuityResult(report.to_json())
    for v in result.violations:
        print(f"continuity violation: {v}")
    for n in result.notes:
        print(f"continuity note: {n}")
    print(f"SUMMARY {report.summary_line()}")
    if not report.ok:
        raise FailTask(
            f"continuity check of pipeline {cfg.name!r} failed:\n  - " + "\n  - ".join(result.violations),
            key=FAILED_REPORT_KEY, report=result.to_xcom(),
        )  # fmt: skip
    return result.to_xcom()


class ContinuityOperator(BaseOperator):
    """Task ``check_continuity`` (:func:`check_continuity`) on the XComs of ``preflight``, ``ingest`` and
    ``transform``; its report is also its OpenLineage run facet, and its verdict an assertion on bronze.

    :param pipeline: the pipeline's configuration.
    """

    ui_color = "#e8f4e8"

    def __init__(self, *, pipeline: PipelineConfig, **kwargs: Any) -> None:
        # Each key of the report is an XCom of its own too, as the task function it replaced published it.
        super().__init__(**{"multiple_outputs": True, **kwargs})
        self.pipeline = pipeline
        #: The check's report, whichever way it ended.
        self._report: dict[str, Any] | None = None

    def execute(self, context: Any) -> dict[str, Any]:
        from include.orchestration.run_context import try_number

        ti, cfg = context["ti"], self.pipeline
        return run_task(
            ti, self._check, cfg, try_number=try_number(context), run_id=context["run_id"],
            preflight_result=pull(context, PREFLIGHT_TASK),
            ingest_summary=pull(context, INGEST_TASK),
            transform_summary=pull(context, TRANSFORM_TASK) if cfg.has_transform else None,
        )  # fmt: skip

    def _check(self, cfg: PipelineConfig, *, try_number: int = 1, **kwargs: Any) -> dict[str, Any]:
        try:
            self._report = {**check_continuity(cfg, **kwargs), TRY_NUMBER_KEY: try_number}
        except FailTask as broken:
            self._report = broken.report if isinstance(broken.report, dict) else None
            raise
        return self._report

    # Called by the OpenLineage provider's listener, only when a transport is configured (docs/lineage.md).
    def get_openlineage_facets_on_start(self) -> Lineage:
        from include.orchestration.lineage import continuity_lineage

        return continuity_lineage(self.pipeline, None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Lineage:
        from include.orchestration.lineage import continuity_lineage

        return continuity_lineage(self.pipeline, self._report)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Lineage:
        return self.get_openlineage_facets_on_complete(task_instance)


def mirror_offsets(cfg: PipelineConfig) -> dict[str, Any]:
    """Task ``mirror_offsets``: commit the table's next offsets to the pipeline's consumer group, for lag tooling.

    Its XCom also carries the lag after the run (``lag_after``, a lag
    report's JSON), read with the same table and Kafka reads, for
    ``record_run``'s ledger row.
    """
    from include.orchestration import post_run, preflight_run
    from include.readers import connections

    client = connections.kafka_client_config(cfg.kafka.connection_id)
    now = preflight_run.utcnow()
    positions, lag = post_run.mirror_offsets(cfg, client)
    n = sum(len(parts) for parts in positions.values())
    print(f"SUMMARY mirror_offsets: committed {n} partition offsets to consumer group "
          f"{cfg.consumer_group}; lag after the run {lag.total_lag}")  # fmt: skip
    return MirrorResult(cfg.consumer_group, positions, lag.to_json(now)).to_xcom()
