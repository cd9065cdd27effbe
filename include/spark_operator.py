"""The ingestion task: the Spark provider's spark-submit hook, pointed at this run's cluster.

``SparkSubmitOperator`` takes its master from a connection fixed when the DAG
is written; a transient cluster's master URL exists only once the run's setup
task has started it. :class:`IngestOperator` is a thin operator on the same
hook (:class:`RunClusterSparkSubmitHook`) whose master comes from the setup
task's XCom, or from the pipeline's Spark connection for an existing cluster.

Everything the submit needs (jars, the ``--py-files`` archive, Kafka settings)
is resolved in ``execute``, so parsing the DAG file touches neither Spark nor
the network. Kafka settings reach the job in a file readable only by its owner,
never on the command line the hook logs.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from airflow.sdk import BaseOperator

from include.pipeline_config import PipelineConfig

APPLICATION = "spark_jobs/kafka_to_bronze.py"
BACKFILL_APPLICATION = "spark_jobs/kafka_backfill.py"
TRANSFORM_APPLICATION = "spark_jobs/bronze_to_silver.py"


def _hook_class():
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    class RunClusterSparkSubmitHook(SparkSubmitHook):
        """``SparkSubmitHook`` with a master URL given at run time instead of read from a connection."""

        def __init__(self, *, master: str, **kwargs: Any) -> None:
            self._run_master = master
            super().__init__(**kwargs)

        def _resolve_connection(self) -> dict[str, Any]:
            # The keys the base class returns (provider 6.3.x); a unit test
            # keeps them in step with it.
            return {
                "master": self._run_master,
                "queue": None,
                "deploy_mode": None,
                "spark_binary": self.spark_binary,
                "namespace": None,
                "principal": self._principal,
                "keytab": self._keytab,
                "rest_scheme": "http",
                "rest_port": 6066,
                "rest_endpoint": None,
            }

    return RunClusterSparkSubmitHook


def job_spark_conf(cfg: PipelineConfig, *, transient: bool) -> dict[str, str]:
    """Spark settings of the ingestion job for this pipeline's cluster profile."""
    from include.spark_submit import BASE_CONF

    conf = {
        **BASE_CONF,
        "spark.pyspark.python": sys.executable,
        "spark.pyspark.driver.python": sys.executable,
        "spark.executor.cores": str(cfg.cluster.worker_cores),
        "spark.executor.memory": cfg.cluster.worker_memory,
    }
    if transient:
        conf["spark.cores.max"] = str(cfg.cluster.workers * cfg.cluster.worker_cores)
        # The cluster listens on 127.0.0.1 only; the driver must be reachable there too.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        # Spark's UI and its port search are of no use on a cluster that lives for one run.
        conf["spark.ui.enabled"] = "false"
    else:
        conf["spark.executor.instances"] = str(cfg.cluster.workers)
    return conf


class SparkJobOperator(BaseOperator):
    """Submit one of the pipeline's Spark jobs for this run; returns the job's summary (its JSON file).

    :param pipeline: the pipeline's configuration.
    :param master: master URL of this run's cluster (templated, e.g. from the
        setup task's XCom); ``None`` for the pipeline's Spark connection.
    """

    application = ""
    job_name = ""
    template_fields: Sequence[str] = ("master",)
    ui_color = "#fdf0e0"

    def __init__(self, *, pipeline: PipelineConfig, master: str | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.pipeline = pipeline
        self.master = master
        self._hook = None

    def job_args(self, context: Any, folder: Path, summary_path: Path) -> tuple[list[str], list[Path]]:
        """The job's arguments, and private files to delete once it ran."""
        raise NotImplementedError

    def summary_line(self, summary: dict) -> str:
        """The task log's one-line summary of the job's result."""
        raise NotImplementedError

    def application_for(self, context: Any) -> str:
        """The job this run submits (a path under the project root)."""
        return self.application

    def execute(self, context: Any) -> dict:
        from include import connections, jvm_deps, pipeline_run, settings
        from include.spark_submit import package_py_files, spark_home, spark_submit_binary

        cfg = self.pipeline
        transient = cfg.cluster.profile == "local_standalone"
        if transient:
            if not self.master:
                raise ValueError("no master URL from this run's cluster setup task")
            master = self.master
        else:
            # Raises when the connection is missing: the hook would fall back to yarn.
            master = connections.spark_master(cfg.cluster.master_connection_id)
        folder = pipeline_run.run_dir(cfg, context["run_id"])
        folder.mkdir(parents=True, exist_ok=True)
        summary_path = folder / f"{self.task_id}-summary.json"
        summary_path.unlink(missing_ok=True)
        application = self.application_for(context)
        args, private = self.job_args(context, folder, summary_path)
        common: dict[str, Any] = dict(
            conf=job_spark_conf(cfg, transient=transient),
            jars=",".join(str(j) for j in jvm_deps.spark_jars()),
            py_files=str(package_py_files()),
            name=f"{self.job_name}:{cfg.name}",
            driver_memory="1g",
            application_args=args,
            env_vars={"SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable,
                      "PYSPARK_DRIVER_PYTHON": sys.executable},  # fmt: skip
            spark_binary=spark_submit_binary(),
        )
        if transient:
            self._hook = _hook_class()(master=master, **common)
        else:
            from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

            self._hook = SparkSubmitHook(conn_id=cfg.cluster.master_connection_id, **common)
        self.log.info("submitting %s for pipeline %s to %s", application, cfg.name, master)
        try:
            self._hook.submit(str(settings.PROJECT_ROOT / application))
        finally:
            for f in private:
                f.unlink(missing_ok=True)
        summary = json.loads(summary_path.read_text())
        print(self.summary_line(summary))
        return summary

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


class IngestOperator(SparkJobOperator):
    """Submit ``spark_jobs/kafka_to_bronze.py``, or ``spark_jobs/kafka_backfill.py`` when the run is a
    backfill; Kafka settings go in a file only its owner can read.

    :param preflight_task_id: task whose XCom holds the preflight report.
    :param request_task_id: task whose XCom holds the run's checked request (``check_request``).
    """

    application = APPLICATION
    job_name = "kafka_to_bronze"

    def __init__(self, *, preflight_task_id: str = "preflight", request_task_id: str = "check_request",
                 **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.preflight_task_id = preflight_task_id
        self.request_task_id = request_task_id

    def _plan(self, context: Any) -> dict:
        return context["ti"].xcom_pull(task_ids=self.request_task_id) or {}

    def application_for(self, context: Any) -> str:
        from include.manual_ops import BACKFILL_ACTIONS

        return BACKFILL_APPLICATION if self._plan(context).get("action") in BACKFILL_ACTIONS else APPLICATION

    def job_args(self, context: Any, folder: Path, summary_path: Path) -> tuple[list[str], list[Path]]:
        from include import connections, manual_ops

        cfg = self.pipeline
        plan = self._plan(context)
        client = connections.kafka_client_config(cfg.kafka.connection_id)
        options_file = folder / "kafka-options.json"
        options = {**cfg.kafka.options, **connections.spark_kafka_options(client)}
        _write_private(options_file, json.dumps(options))
        run_type = job_run_type(context)
        if plan.get("action") in manual_ops.BACKFILL_ACTIONS:
            request_file = folder / "backfill-request.json"
            request_file.write_text(json.dumps({k: plan.get(k) for k in
                                                ("action", "reason", "requested_by", "ranges", "time_range")}))  # fmt: skip
            args = [
                f"--pipeline={cfg.name}", f"--bootstrap-servers={client['bootstrap.servers']}",
                f"--bronze-path={cfg.tables.bronze_path}", f"--request-file={request_file}",
                f"--run-id={context['run_id']}", f"--run-type={'backfill' if run_type == 'backfill' else 'manual'}",
                f"--summary-path={summary_path}", f"--kafka-options-file={options_file}",
            ]  # fmt: skip
            return args, [options_file]
        preflight = context["ti"].xcom_pull(task_ids=self.preflight_task_id) or {}
        preflight_file = folder / "preflight.json"
        preflight_file.write_text(json.dumps(preflight.get("job_file") or {}))
        rebuild = plan.get("action") == manual_ops.REBUILD_CHECKPOINT
        args = cfg.ingest_job_args(client["bootstrap.servers"], context["run_id"],
                                   "rebuild_checkpoint" if rebuild else run_type, str(summary_path))  # fmt: skip
        args += [f"--kafka-options-file={options_file}", f"--preflight-file={preflight_file}"]
        if rebuild:
            who = f" by {plan['requested_by']}" if plan.get("requested_by") else ""
            args.append(f"--rebuild-checkpoint=asked{who}: {plan.get('reason', '')}")
        return args, [options_file]

    def summary_line(self, summary: dict) -> str:
        if summary.get("kind") == "backfill":
            return (
                f"SUMMARY ingest: backfill re-read {summary['read']} records in {len(summary['ranges'])} ranges, "
                f"inserted {summary['inserted']} missing from bronze, {summary['present']} were there already; "
                f"bronze version {summary['bronze_version']}, {summary['duration_s']:.1f}s in the job"
                + "".join(f"; {n}" for n in summary.get("notes") or ())
            )
        rebuilt = summary["checkpoint_rebuilt"]
        return (
            f"SUMMARY ingest: {summary['rows']} rows in {len(summary['batches'])} batches, epoch {summary['epoch']}, "
            f"bronze version {summary['bronze_version']}, {summary['duration_s']:.1f}s in the job"
            + (f", checkpoint rebuilt: {rebuilt['reason']}" if rebuilt else "")
        )


class TransformOperator(SparkJobOperator):
    """Submit ``spark_jobs/bronze_to_silver.py``: bronze's new records into silver and quarantine."""

    application = TRANSFORM_APPLICATION
    job_name = "bronze_to_silver"

    def job_args(self, context: Any, folder: Path, summary_path: Path) -> tuple[list[str], list[Path]]:
        cfg = self.pipeline
        if cfg.transform is None:
            raise ValueError(f"pipeline {cfg.name!r} has no transform section")
        spec_file = folder / "transform-spec.json"
        spec_file.write_text(json.dumps(cfg.transform.to_json(), indent=2))
        t = cfg.tables
        args = [
            f"--pipeline={cfg.name}", f"--bronze-path={t.bronze_path}", f"--silver-path={t.silver_path}",
            f"--quarantine-path={t.quarantine_path}", f"--checkpoint-root={t.transform_checkpoint_root}",
            f"--spec-file={spec_file}", f"--run-id={context['run_id']}", f"--summary-path={summary_path}",
        ]  # fmt: skip
        return args, []

    def summary_line(self, summary: dict) -> str:
        return "SUMMARY transform: " + transform_summary_text(summary)


def transform_summary_text(s: dict) -> str:
    """One line saying where the records a transform read went."""
    bad = ", ".join(f"{n} {f}" for f, n in sorted(s.get("quarantine_fields", {}).items(), key=lambda i: -i[1]))
    text = (
        f"read {s['read']} from bronze: {s['upserted']} upserted, {s['deleted']} deleted, "
        f"{s['quarantined']} quarantined{f' ({bad})' if bad else ''}, {s['superseded']} superseded by newer"
    )
    if s.get("replayed"):
        text += f", {s['replayed']} already applied"
    text += f"; silver version {s['silver_version']}, epoch {s['epoch']}, {s['duration_s']:.1f}s in the job"
    if s.get("fields_added"):
        text += "; fields added: " + ", ".join(f"{f['name']} {f['type']}" for f in s["fields_added"])
    if s.get("fields_ignored"):
        text += "; fields ignored: " + ", ".join(sorted(s["fields_ignored"]))
    if s.get("checkpoint_rebuilt"):
        text += f"; checkpoint rebuilt: {s['checkpoint_rebuilt']['reason']}"
    return text


def job_run_type(context: Any) -> str:
    """The job's ``--run-type`` for this DAG run."""
    run_type = str(getattr(context["dag_run"], "run_type", "manual") or "manual")
    run_type = run_type.rsplit(".", 1)[-1].lower()
    return {"scheduled": "scheduled", "backfill": "backfill"}.get(run_type, "manual")


def _write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
