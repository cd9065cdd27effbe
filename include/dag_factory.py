"""One Airflow DAG per pipeline file: lag sensor → preflight → [cluster up] → ingest → transform
→ [cluster down] → continuity → mirror → record.

Parse-time rule: building a DAG reads the pipeline files and nothing else. No
connection, Variable, Kafka client, Spark or Delta import happens until a task
runs (a test imports the DAG folder and checks ``sys.modules``).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, CronDataIntervalTimetable, TriggerRule, chain, task

from include import settings
from include.manual_ops import form_params
from include.pipeline_config import PipelineConfig, load_pipelines
from include.spark_operator import IngestOperator, TransformOperator

#: A driver outlives a stopped cluster and would wait forever; the task must not.
INGEST_TIMEOUT = timedelta(hours=4)
#: How long a run waits for another run of its pipeline to finish before it gives up.
LOCK_TIMEOUT = timedelta(hours=6)
#: Folder of pipeline files; ``KDE_PIPELINES_DIR`` overrides it (tests, deployments).
PIPELINES_ENV = "KDE_PIPELINES_DIR"

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
with its offset ranges) → {transform}**check_continuity** (ranges chain, rows match,
checkpoint == table{transform_check}) → **mirror_offsets** (consumer group `{group}`) →
**record_run** (run ledger row, Asset event; gives the lock back).

Trigger the DAG with a config to run a manual operation: backfill by offsets or by time,
rebuild the checkpoint, or acknowledge a data-loss gap (each needs a reason, recorded
in the ledger). `airflow backfill create` runs re-read their data interval by Kafka timestamp.
"""


def pipelines_dir() -> Path:
    """Where the pipeline files are read from."""
    return Path(os.environ.get(PIPELINES_ENV) or settings.PROJECT_ROOT / "include" / "pipelines")


def bronze_asset(cfg: PipelineConfig) -> Asset:
    """The Airflow Asset standing for the pipeline's bronze table."""
    path = cfg.tables.bronze_path
    uri = path if "://" in path else Path(path).resolve().as_uri()
    return Asset(name=f"kafka-delta-elt.{cfg.name}.bronze", uri=uri)


def silver_asset(cfg: PipelineConfig) -> Asset:
    """The Airflow Asset standing for the pipeline's silver table."""
    path = cfg.tables.silver_path
    uri = path if "://" in path else Path(path).resolve().as_uri()
    return Asset(name=f"kafka-delta-elt.{cfg.name}.silver", uri=uri)


def cluster_doc(cfg: PipelineConfig) -> str:
    """The DAG doc's words for where the Spark jobs run (profile ``cluster.profile``)."""
    c = cfg.cluster
    if c.profile == "local_standalone":
        local = (f"; a backlog of at most {c.local_max_records} records runs in local mode inside the driver, "
                 "no cluster" if c.local_max_records else "")  # fmt: skip
        scaled = f", fewer for a backlog under {c.records_per_worker} per worker" if c.records_per_worker else ""
        return (
            f"**start_cluster** (setup: Spark standalone master + {c.workers} worker(s){scaled} x {c.worker_cores} "
            f"core(s), {c.worker_memory} on 127.0.0.1{local}; **stop_cluster** is its teardown) "
        )
    if c.profile == "existing_master":
        return (
            f"existing Spark master from connection `{c.master_connection_id}` (profile existing_master: "
            f"client mode, the driver runs on the Airflow worker, {c.workers} executor(s); no cluster is "
            "started or stopped) "
        )
    k8s = c.kubernetes
    where = f"image `{k8s.image}`, namespace `{k8s.namespace}`" if k8s else ""
    return (
        f"Kubernetes in cluster mode through connection `{c.master_connection_id}` (profile kubernetes: "
        f"Spark creates a driver pod and {c.workers} executor pod(s) per job, {where}, and removes them; "
        "no start/stop cluster task) "
    )


def build_dag(cfg: PipelineConfig) -> DAG:
    """The DAG of one pipeline."""
    transient = cfg.cluster.transient
    max_wait_s = cfg.lag.max_wait_minutes * 60
    doc = DOC.format(
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
        transform=(
            f"**transform** (bronze → silver `{cfg.tables.silver_path}` by key `{', '.join(cfg.transform.key)}`, "
            f"newest by `{cfg.transform.ordering}`; bad records → quarantine `{cfg.tables.quarantine_path}`; "
            "it runs in ingest's Spark application, right after it, and this task reports it; a retry "
            "submits it alone) → "
            if cfg.transform
            else ""
        ),
        transform_check=", every bronze record read is upserted, deleted, quarantined or superseded"
        if cfg.transform
        else "",
    )
    asset = bronze_asset(cfg)
    outlets = [asset, silver_asset(cfg)] if cfg.transform else [asset]
    with DAG(
        dag_id=cfg.name,
        description=(cfg.description or f"Kafka → Delta bronze: {cfg.name}")[:200],
        # Each scheduled or backfill run owns the interval [previous tick, this tick).
        schedule=CronDataIntervalTimetable(cfg.schedule, timezone="UTC") if cfg.schedule else None,
        start_date=datetime(2024, 1, 1, tzinfo=UTC),
        catchup=False,
        max_active_runs=1,
        tags=sorted({"kafka-delta-elt", *cfg.tags}),
        doc_md=doc,
        default_args={
            "retries": cfg.retries,
            "retry_delay": timedelta(seconds=30),
            "retry_exponential_backoff": True,
            "max_retry_delay": timedelta(minutes=10),
        },
        params=form_params(),
    ) as dag:

        @task.sensor(
            task_id="check_request",
            mode="reschedule",
            poke_interval=15,
            timeout=LOCK_TIMEOUT.total_seconds(),
            retries=cfg.retries,  # a retry holding the lock takes it again (same run id)
        )
        def check_request(**context: Any):
            from airflow.sdk import PokeReturnValue
            from airflow.sdk.exceptions import AirflowFailException
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance

            from include import connections, manual_ops, pipeline_run
            from include.spark_operator import job_run_type

            dag_run, ti = context["dag_run"], context["ti"]
            who = getattr(dag_run, "triggering_user_name", None)
            try:
                request = manual_ops.parse_request(
                    context.get("params") or {}, run_type=job_run_type(context), requested_by=who,
                    data_interval=(context.get("data_interval_start"), context.get("data_interval_end")),
                )  # fmt: skip
            except manual_ops.RequestError as exc:
                ti.xcom_push(key="refused", value=str(exc))
                raise AirflowFailException(f"pipeline {cfg.name!r}: the run's params were refused: {exc}") from None
            holder, message = pipeline_run.take_lock(cfg, dag_id=ti.dag_id, run_id=context["run_id"],
                                                     run_state=_run_state(RuntimeTaskInstance))  # fmt: skip
            if message:
                print(f"check_request: {message}")
            if holder is not None:
                return PokeReturnValue(is_done=False)
            try:
                client = connections.kafka_client_config(cfg.kafka.connection_id) if request.is_backfill else {}
                plan = pipeline_run.plan_request(cfg, client, request)
            except manual_ops.RequestError as exc:
                ti.xcom_push(key="refused", value=str(exc))
                raise AirflowFailException(f"pipeline {cfg.name!r}: {request.action} refused: {exc}") from None
            for note in plan["notes"]:
                print(f"check_request note: {note}")
            text = plan["describe"]
            if request.is_backfill:
                text += f"; {len(plan['ranges'])} ranges, {plan['offsets']} offsets to re-read"
            print(f"SUMMARY check_request: {text}; lock {cfg.name}.lock.json taken")
            return PokeReturnValue(is_done=True, xcom_value=plan)

        @task.sensor(
            task_id="wait_for_lag",
            mode="reschedule",
            poke_interval=max(5.0, min(60.0, max_wait_s / 4)),
            timeout=max_wait_s + 600,
            retries=cfg.retries,
        )
        def wait_for_lag(**context: Any):
            from airflow.sdk import PokeReturnValue
            from airflow.sdk.exceptions import AirflowSkipException

            from include import connections, manual_ops, pipeline_run
            from include.preflight import lag_decision

            plan = context["ti"].xcom_pull(task_ids="check_request") or {}
            action = plan.get("action", manual_ops.NORMAL)
            if action != manual_ops.NORMAL:
                if action in manual_ops.BACKFILL_ACTIONS and not plan.get("ranges"):
                    print(f"SUMMARY wait_for_lag: {action}: nothing the table has passed lies in the window")
                    raise AirflowSkipException("nothing to backfill; no cluster started")
                print(f"SUMMARY wait_for_lag: {action} runs now, whatever the lag")
                return PokeReturnValue(is_done=True, xcom_value={"action": action})
            client = connections.kafka_client_config(cfg.kafka.connection_id)
            now = pipeline_run.utcnow()
            report, _, _ = pipeline_run.snapshot(cfg, client)
            decision = lag_decision(report, min_records=cfg.lag.min_records, max_wait_s=max_wait_s, now=now)
            print(f"SUMMARY wait_for_lag: {report.summary_line(now)}; {decision.action}: {decision.reason}")
            if decision.action == "skip":
                context["ti"].xcom_push(key="lag", value=report.to_json(now))
                raise AirflowSkipException(f"nothing to do: {decision.reason}; no cluster started")
            return PokeReturnValue(is_done=decision.action == "proceed", xcom_value=report.to_json(now))

        @task(task_id="preflight", retries=cfg.retries)
        def run_preflight(**context: Any) -> dict:
            from airflow.sdk.exceptions import AirflowFailException

            from include import connections, pipeline_run
            from include.manual_ops import RunRequest
            from include.offsets import positions_to_json

            plan = context["ti"].xcom_pull(task_ids="check_request") or {}
            request = RunRequest(plan.get("action", "normal"), plan.get("reason", ""), plan.get("requested_by"))
            client = connections.kafka_client_config(cfg.kafka.connection_id)
            try:
                # The Spark job's settings are derived in ingest; refuse settings it cannot
                # take now, before a cluster starts.
                connections.spark_kafka_options(client, cfg.kafka.connection_id)
            except connections.ConnectionConfigError as exc:
                raise AirflowFailException(f"pipeline {cfg.name!r}: {exc}") from None
            now = pipeline_run.utcnow()
            verdict, lag, progress = pipeline_run.run_preflight(cfg, client, request)
            for finding in verdict.findings:
                print(f"preflight {finding.severity}: {finding.message}")
            print(f"SUMMARY {verdict.summary_line()}; {lag.summary_line(now)}")
            result = {
                **verdict.to_json(),
                "job_file": verdict.job_file(),
                "lag": lag.to_json(now),
                "table_version": progress.table_version if progress else None,
                "table_next": positions_to_json(progress.next_offsets) if progress else None,
                "transform_before": pipeline_run.transform_versions(cfg) if cfg.transform else None,
            }
            if not verdict.ok:
                context["ti"].xcom_push(key="failed_report", value=result)
                raise AirflowFailException(verdict.failure_message(cfg.name))
            return result

        requested = check_request()
        lag = wait_for_lag()
        checked = run_preflight()
        requested >> lag >> checked

        if transient:

            @task(task_id="start_cluster", retries=1)
            def start_cluster(**context: Any) -> dict:
                from include import cluster_sizing, pipeline_run, spark_cluster

                records = pipeline_run.run_backlog(context["ti"].xcom_pull(task_ids="check_request"),
                                                   context["ti"].xcom_pull(task_ids="preflight"))  # fmt: skip
                choice = cluster_sizing.choose(cfg.cluster, records, os.cpu_count() or 1)
                if choice.mode == "local":
                    print(f"SUMMARY start_cluster: no cluster: {choice.reason}")
                    return {"master_url": choice.local_master, "mode": "local", "workers": 0,
                            "choice": choice.reason, "backlog": records}  # fmt: skip
                folder = pipeline_run.run_dir(cfg, context["run_id"]) / "cluster"
                cluster = spark_cluster.start_standalone(
                    folder, workers=choice.workers, worker_cores=cfg.cluster.worker_cores,
                    worker_memory=cfg.cluster.worker_memory,
                )  # fmt: skip
                print(f"SUMMARY start_cluster: {cluster.master_url} with {choice.workers} worker(s) "
                      f"x {cfg.cluster.worker_cores} core(s), {cfg.cluster.worker_memory}; UI {cluster.web_ui_url}; "
                      f"{choice.reason}")  # fmt: skip
                return {**cluster.to_json(), "mode": "cluster", "workers": choice.workers, "choice": choice.reason,
                        "backlog": records}  # fmt: skip

            @task(task_id="stop_cluster", trigger_rule=TriggerRule.ALL_DONE_SETUP_SUCCESS, retries=2)
            def stop_cluster(**context: Any) -> dict:
                from include import pipeline_run, spark_cluster

                folder = pipeline_run.run_dir(cfg, context["run_id"]) / "cluster"
                stopped = spark_cluster.stop_standalone(folder)
                left = spark_cluster.running_processes(folder)
                print(f"SUMMARY stop_cluster: stopped {len(stopped)} processes, {len(left)} left")
                return {"stopped": stopped, "left": left}

            up = start_cluster()
            down = stop_cluster()
        master = "{{ ti.xcom_pull(task_ids='start_cluster')['master_url'] }}" if transient else None
        job = dict(pipeline=cfg, master=master, retries=cfg.retries, execution_timeout=INGEST_TIMEOUT)
        ingest = IngestOperator(task_id="ingest", **job)
        jobs = [ingest, TransformOperator(task_id="transform", **job)] if cfg.transform else [ingest]
        chain(*jobs)
        if transient:
            checked >> up >> jobs[0]
            jobs[-1] >> down
            down.as_teardown(setups=up)
            after_ingest = [jobs[-1], down]
        else:
            checked >> jobs[0]
            after_ingest = [jobs[-1]]

        @task(task_id="check_continuity", retries=cfg.retries)
        def check_continuity(**context: Any) -> dict:
            from airflow.sdk.exceptions import AirflowFailException

            from include import connections, pipeline_run
            from include.offsets import positions_from_json

            ti = context["ti"]
            pre = ti.xcom_pull(task_ids="preflight")
            summary = ti.xcom_pull(task_ids="ingest")
            client = connections.kafka_client_config(cfg.kafka.connection_id)
            report = pipeline_run.check_continuity(
                cfg, client, run_id=context["run_id"], version_before=pre["table_version"],
                start=positions_from_json(pre["table_next"]) if pre["table_next"] else None,
                job_summary=summary, transform_before=pre.get("transform_before"),
                transform_summary=ti.xcom_pull(task_ids="transform") if cfg.transform else None,
            )  # fmt: skip
            result = report.to_json()
            for v in result["violations"]:
                print(f"continuity violation: {v}")
            for n in result["notes"]:
                print(f"continuity note: {n}")
            print(f"SUMMARY {report.summary_line()}")
            if not report.ok:
                ti.xcom_push(key="failed_report", value=result)
                raise AirflowFailException(
                    f"continuity check of pipeline {cfg.name!r} failed:\n  - " + "\n  - ".join(result["violations"])
                )
            return result

        @task(task_id="mirror_offsets", retries=cfg.retries)
        def mirror_offsets() -> dict:
            from include import connections, pipeline_run

            client = connections.kafka_client_config(cfg.kafka.connection_id)
            positions = pipeline_run.mirror_offsets(cfg, client)
            n = sum(len(parts) for parts in positions.values())
            print(f"SUMMARY mirror_offsets: committed {n} partition offsets to consumer group "
                  f"{cfg.consumer_group}")  # fmt: skip
            return {"group": cfg.consumer_group, "offsets": positions}

        @task(task_id="record_run", trigger_rule=TriggerRule.ALL_DONE, outlets=outlets, retries=cfg.retries)
        def record_run(**context: Any) -> dict:
            from include import record

            return record.record_run(cfg, outlets, context)

        continuity = check_continuity()
        mirrored = mirror_offsets()
        recorded = record_run()
        after_ingest >> continuity >> mirrored >> recorded
        [requested, lag, checked] >> recorded
    return dag


def _run_state(runtime_ti: Any):
    """``(dag_id, run_id) -> state`` through the Task SDK; ``None`` for a run Airflow does not know."""

    def state(dag_id: str, run_id: str) -> str | None:
        try:
            return str(runtime_ti.get_dagrun_state(dag_id=dag_id, run_id=run_id)).rsplit(".", 1)[-1].lower()
        except Exception as exc:
            # A deleted run holds no lock; any other failure must not break a live one.
            if "not found" in str(exc).lower() or "404" in str(exc):
                return None
            raise

    return state


def build_dags(folder: Path | None = None) -> tuple[dict[str, DAG], dict[str, str]]:
    """Every valid pipeline's DAG by dag_id, and the errors of the invalid files by path."""
    configs, errors = load_pipelines(folder or pipelines_dir())
    return {name: build_dag(cfg) for name, cfg in configs.items()}, errors
