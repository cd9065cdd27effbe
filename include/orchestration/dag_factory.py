"""One Airflow DAG per pipeline file: lag sensor → preflight → [cluster up] → ingest → transform
→ [cluster down] → continuity → mirror → record.

What each task does is in :mod:`include.orchestration.tasks`; this module only declares the
tasks, hands each its context values, and wires them.

Parse-time rule: building a DAG reads the pipeline files and nothing else. No
connection, Variable, Kafka client, Spark or Delta import happens until a task
runs (a test imports the DAG folder and checks ``sys.modules``).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TypedDict

from airflow.sdk import DAG, Asset, CronDataIntervalTimetable, PokeReturnValue, TriggerRule, chain, task

from include import settings
from include.config import PipelineConfig, load_pipelines
from include.contract.handoffs import MASTER_URL_TEMPLATE, pull
from include.contract.jobs import (
    CHECK_CONTINUITY_TASK,
    CHECK_REQUEST_TASK,
    INGEST_TASK,
    MAINTAIN_TASK,
    MIRROR_OFFSETS_TASK,
    PREFLIGHT_TASK,
    RECORD_RUN_TASK,
    START_CLUSTER_TASK,
    STOP_CLUSTER_TASK,
    TRANSFORM_TASK,
    WAIT_FOR_LAG_TASK,
)
from include.contract.manual_ops import form_params
from include.contract.transform_spec import TransformSpec
from include.orchestration import tasks
from include.orchestration.ingest_operator import IngestOperator
from include.orchestration.profiles import profile_of
from include.orchestration.run_context import job_run_type
from include.orchestration.step_operators import MaintainOperator, TransformOperator

#: A driver outlives a stopped cluster and would wait forever; the task must not.
INGEST_TIMEOUT = timedelta(hours=4)
#: How long a run waits for another run of its pipeline to finish before it gives up.
LOCK_TIMEOUT = timedelta(hours=6)

DOC = """\
### Kafka → Delta pipeline `{name}`

{description}

Source: {source} through Airflow connection `{conn}`. Bronze table: `{bronze}`.
Run ledger: `{ledger}`. Pipeline file: `{file}`.

Each run: **check_request** (the trigger form's action checked against the pipeline, Kafka
and the table; waits while another run of this pipeline holds its lock) → **wait_for_lag**
(Kafka admin + Delta log, no JVM; skipped when there is nothing new) → **preflight** (data loss by retention, recreated topics, offsets
going backwards, partitions added or gone; policy `{policy}`) →
{cluster} → **ingest** (`Trigger.AvailableNow`, one Delta commit per micro-batch
with its offset ranges) → {transform}{maintain}**check_continuity** (ranges chain, rows match,
checkpoint == table{transform_check}) → **mirror_offsets** (consumer group `{group}`) →
**record_run** (run ledger row, Asset event; gives the lock back).

Trigger the DAG with a config to run a manual operation: backfill by offsets or by time,
rebuild the checkpoint, or acknowledge a data-loss gap (each needs a reason, recorded
in the ledger). `airflow backfill create` runs re-read their data interval by Kafka timestamp.
"""


def bronze_asset(cfg: PipelineConfig) -> Asset:
    """The Airflow Asset standing for the pipeline's bronze table."""
    path = cfg.tables.bronze_path
    uri = path if "://" in path else Path(path).resolve().as_uri()
    return Asset(name=f"kafka-delta-elt.{cfg.name}.bronze", uri=uri)


def silver_assets(cfg: PipelineConfig) -> list[Asset]:
    """The Airflow Assets standing for the pipeline's silver tables: one, or one per route (``silver.<route>``)."""
    assets = []
    for target in cfg.silver_targets():
        path = target.silver_path
        uri = path if "://" in path else Path(path).resolve().as_uri()
        suffix = "" if target.route is None else f".{target.route}"
        assets.append(Asset(name=f"kafka-delta-elt.{cfg.name}.silver{suffix}", uri=uri))
    return assets


def transform_doc(cfg: PipelineConfig) -> str:
    """The DAG doc's words for the transform step: its silver table(s), key and ordering, and quarantine."""
    def rules(spec: TransformSpec) -> str:
        return f"by key `{', '.join(spec.key)}`, " + (
            f"newest by `{spec.ordering}`" if spec.ordering else
            f"{spec.envelope} change events in the source's commit order")  # fmt: skip

    if cfg.routing is not None:
        routes = "; ".join(f"route `{r.name}` ({r.match.describe()}) → silver `{r.silver_path}` {rules(r.transform)}"
                           for r in cfg.routing.routes)  # fmt: skip
        where = (f"bronze → {len(cfg.routing.routes)} routes: {routes}; each route's bad records → its quarantine "
                 f"beside it; records no route takes: {cfg.routing.unrouted}")  # fmt: skip
    else:
        spec = cfg.transform_spec()
        where = (f"bronze → silver `{cfg.tables.silver_path}` {rules(spec)}; bad records → quarantine "
                 f"`{cfg.tables.quarantine_path}`")  # fmt: skip
    return (f"**transform** ({where}; it runs in ingest's Spark application, right after it, and this task reports "
            "it; a retry submits it alone) → ")


def cluster_doc(cfg: PipelineConfig) -> str:
    """The DAG doc's words for where the Spark jobs run (profile ``cluster.profile``)."""
    return profile_of(cfg.cluster).describe(cfg.cluster)


def maintenance_doc(cfg: PipelineConfig) -> str:
    """The DAG doc's words for when and how the pipeline's tables are maintained."""
    m = cfg.maintenance
    when = " or ".join(w for w in (f"every {m.every_runs} runs" if m.every_runs else "",
                                   f"daily in {m.daily_window} UTC" if m.daily_window else "") if w)  # fmt: skip
    what = ", ".join(w for w, on in (("OPTIMIZE", m.optimize), ("VACUUM", m.vacuum), ("log checkpoint", m.checkpoint)) if on)
    return f"{what or 'nothing'} of each table, {when}, in the run's Spark application; the ledger in record_run"


def dag_doc(cfg: PipelineConfig) -> str:
    """The DAG's ``doc_md``: what one run of the pipeline does, in its own names and paths."""
    return DOC.format(
        name=cfg.name,
        description=cfg.description or "",
        source=f"topics `{', '.join(cfg.kafka.topics)}`" if cfg.kafka.topics else f"pattern `{cfg.kafka.topic_pattern}`",
        conn=cfg.kafka.connection_id,
        bronze=cfg.tables.bronze_path,
        ledger=cfg.tables.ledger_path,
        file=cfg.source_path,
        policy=cfg.data_loss_policy,
        cluster=cluster_doc(cfg),
        group=cfg.consumer_group,
        transform=transform_doc(cfg) if cfg.has_transform else "",
        maintain=(
            f"**maintain** (when due: {maintenance_doc(cfg)}; skipped otherwise) → " if cfg.maintenance.enabled else ""
        ),
        transform_check=", every bronze record read is upserted, deleted, quarantined or superseded"
        + (" in the route that took it, or counted as unrouted" if cfg.routing is not None else "")
        if cfg.has_transform
        else "",
    )


def build_dag(cfg: PipelineConfig) -> DAG:
    """The DAG of one pipeline."""
    asset = bronze_asset(cfg)
    outlets = [asset, *silver_assets(cfg)]
    with DAG(**_dag_arguments(cfg)) as dag:
        # Tasks are created in the order the steps run: the DAG keeps that order.
        checks = _check_tasks(cfg)
        cluster = _cluster_tasks(cfg) if profile_of(cfg.cluster).transient else None
        after_jobs, maintain = _job_tasks(cfg, checks[-1], cluster)
        _closing_tasks(cfg, outlets, checks, after_jobs, maintain)
    return dag


def _dag_arguments(cfg: PipelineConfig) -> dict[str, Any]:
    """The DAG's own settings: id, schedule (none without one), one active run, tags, doc, retries and the
    trigger form's params."""
    return dict(
        dag_id=cfg.name,
        description=(cfg.description or f"Kafka → Delta bronze: {cfg.name}")[:200],
        # Each scheduled or backfill run owns the interval [previous tick, this tick).
        schedule=CronDataIntervalTimetable(cfg.schedule, timezone="UTC") if cfg.schedule else None,
        start_date=datetime(2024, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        tags=sorted({"kafka-delta-elt", *cfg.tags}),
        doc_md=dag_doc(cfg),
        default_args={
            "retries": cfg.retries,
            "retry_delay": timedelta(seconds=settings.retry_delay_s()),
            "retry_exponential_backoff": True,
            "max_retry_delay": timedelta(minutes=10),
        },
        params=form_params(),
    )


# The task functions below carry no docstring: TaskFlow would show it as the task's doc_md. Their
# ``-> dict[str, Any]`` annotations stay: they make TaskFlow push each key as an XCom of its own too (it
# evaluates them in this module, so ``Any`` is imported at run time, not under TYPE_CHECKING).


def _check_tasks(cfg: PipelineConfig) -> tuple[Any, Any, Any]:
    """The checks before any Spark: ``check_request`` (lock and the run's plan), ``wait_for_lag`` (enough new
    data, or skip) and ``preflight``, in that order; returns the three tasks."""
    max_wait_s = cfg.lag.max_wait_minutes * 60

    @task.sensor(
        task_id=CHECK_REQUEST_TASK,
        mode="reschedule",
        poke_interval=15,
        timeout=LOCK_TIMEOUT.total_seconds(),
        retries=cfg.retries,  # a retry holding the lock takes it again (same run id)
    )
    def check_request(**context: Any) -> PokeReturnValue:
        ti = context["ti"]
        return tasks.run_task(
            ti, tasks.check_request, cfg, dag_id=ti.dag_id, run_id=context["run_id"],
            params=context.get("params") or {}, run_type=job_run_type(context),
            requested_by=getattr(context["dag_run"], "triggering_user_name", None),
            data_interval=(context.get("data_interval_start"), context.get("data_interval_end")),
            run_state=tasks.airflow_run_state(),
        )  # fmt: skip

    @task.sensor(
        task_id=WAIT_FOR_LAG_TASK,
        mode="reschedule",
        poke_interval=max(5.0, min(60.0, max_wait_s / 4)),
        timeout=max_wait_s + 600,
        retries=cfg.retries,
    )
    def wait_for_lag(**context: Any) -> PokeReturnValue:
        from airflow.sdk.exceptions import AirflowSkipException

        try:
            return tasks.run_task(context["ti"], tasks.wait_for_lag, cfg, plan=pull(context, CHECK_REQUEST_TASK))
        except AirflowSkipException:
            # Nothing to do: every task up to record_run is skipped at once, so record_run runs next.
            tasks.skip_after(context["task"], keep=(RECORD_RUN_TASK,))
            raise

    @task(task_id=PREFLIGHT_TASK, retries=cfg.retries)
    def run_preflight(**context: Any) -> dict[str, Any]:
        return tasks.run_task(context["ti"], tasks.preflight, cfg, plan=pull(context, CHECK_REQUEST_TASK))

    requested = check_request()
    lag = wait_for_lag()
    checked = run_preflight()
    requested >> lag >> checked
    return requested, lag, checked


def _cluster_tasks(cfg: PipelineConfig) -> tuple[Any, Any]:
    """A transient cluster's setup and teardown: ``start_cluster`` and ``stop_cluster``, which runs whatever
    the jobs did as long as the cluster started."""

    @task(task_id=START_CLUSTER_TASK, retries=1)
    def start_cluster(**context: Any) -> dict[str, Any]:
        return tasks.start_cluster(cfg, run_id=context["run_id"], plan=pull(context, CHECK_REQUEST_TASK),
                                   preflight_result=pull(context, PREFLIGHT_TASK))  # fmt: skip

    @task(task_id=STOP_CLUSTER_TASK, trigger_rule=TriggerRule.ALL_DONE_SETUP_SUCCESS, retries=2)
    def stop_cluster(**context: Any) -> dict[str, Any]:
        return tasks.stop_cluster(cfg, run_id=context["run_id"])

    return start_cluster(), stop_cluster()


class _JobArgs(TypedDict):
    """What :func:`_job_tasks` gives each Spark job operator besides its task id."""

    pipeline: PipelineConfig
    master: str | None
    retries: int
    execution_timeout: timedelta


def _job_tasks(cfg: PipelineConfig, checked: Any, cluster: tuple[Any, Any] | None) -> tuple[list[Any], Any]:
    """The Spark jobs after ``checked``: ingest, then the transform and maintenance when the pipeline has them,
    on the transient cluster between its setup and teardown when there is one (the master URL is
    ``start_cluster``'s XCom). Returns what the closing checks wait on, and the maintain task (or ``None``)."""
    master = MASTER_URL_TEMPLATE if cluster else None
    job = _JobArgs(pipeline=cfg, master=master, retries=cfg.retries, execution_timeout=INGEST_TIMEOUT)
    ingest = IngestOperator(task_id=INGEST_TASK, **job)
    jobs = [ingest, TransformOperator(task_id=TRANSFORM_TASK, **job)] if cfg.has_transform else [ingest]
    chain(*jobs)
    # Skipped when not due; nothing waits on its success (the teardown and record_run run anyway).
    maintain = MaintainOperator(task_id=MAINTAIN_TASK, **job) if cfg.maintenance.enabled else None
    if maintain is not None:
        jobs[-1] >> maintain
    if cluster is None:
        checked >> jobs[0]
        return [jobs[-1]], maintain
    up, down = cluster
    checked >> up >> jobs[0]
    jobs[-1] >> down
    if maintain is not None:
        maintain >> down
    down.as_teardown(setups=up)
    return [jobs[-1], down], maintain


def _closing_tasks(cfg: PipelineConfig, outlets: list[Asset], checks: tuple[Any, Any, Any],
                   after_jobs: list[Any], maintain: Any) -> None:  # fmt: skip
    """After the jobs: ``check_continuity``, ``mirror_offsets``, then ``record_run``, which runs whatever
    happened before it (every earlier task is upstream of it) and updates the assets."""

    @task(task_id=MIRROR_OFFSETS_TASK, retries=cfg.retries)
    def mirror_offsets() -> dict[str, Any]:
        return tasks.mirror_offsets(cfg)

    @task(task_id=RECORD_RUN_TASK, trigger_rule=TriggerRule.ALL_DONE, outlets=outlets, retries=cfg.retries)
    def record_run(**context: Any) -> dict[str, Any]:
        from include.orchestration import record

        return record.record_run(cfg, outlets, context)

    continuity = tasks.ContinuityOperator(task_id=CHECK_CONTINUITY_TASK, pipeline=cfg, retries=cfg.retries)
    mirrored = mirror_offsets()
    recorded = record_run()
    after_jobs >> continuity >> mirrored >> recorded
    if maintain is not None:
        maintain >> recorded
    list(checks) >> recorded


def build_dags(folder: Path | None = None) -> tuple[dict[str, DAG], dict[str, str]]:
    """Every valid pipeline's DAG by dag_id, and the errors of the invalid files by path."""
    configs, errors = load_pipelines(folder or settings.pipelines_dir())
    return {name: build_dag(cfg) for name, cfg in configs.items()}, errors
