"""What a cluster profile does when a run's job is submitted: the protocol each profile's runtime module meets.

A profile (``cluster.profile``) is two parts: its rules on the pipeline file's ``cluster`` keys
(:mod:`include.config.profiles`) and, here, what a run does with it: the spark-submit hook and its Spark
settings, whether the run starts its own cluster, where the job's files go and where the driver reads its
credentials, and what is cleaned up after the job (a driver pod). One module per profile beside this one,
registered by name in :data:`include.orchestration.profiles.PROFILES`.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from include.config import ClusterConfig, PipelineConfig
from include.contract.errors import PipelineError
from include.orchestration.spark_conf import StorageSubmit

if TYPE_CHECKING:  # the Spark provider is imported only when a job runs
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


@dataclass(frozen=True)
class SubmitRequest:
    """One submit of one job of a run, besides the pipeline.

    ``application`` is relative to the project (``spark_jobs/...``).
    ``run_master``: the transient cluster's master URL (``local_standalone``).
    ``jars`` and ``py_files``: the local files (profiles whose driver runs here); a profile whose code is in
    its image uses the image's. ``pod_base`` and ``run_id`` name the pods (``kubernetes``). ``workers``: how
    many the run's cluster started (default ``cluster.workers``) and ``backlog`` the records it was sized for
    (:func:`include.orchestration.spark_conf.job_spark_conf`). ``scratch_dir``: the driver's scratch folder
    (:meth:`ClusterProfile.driver_scratch`). ``cluster_dir``: the run's cluster folder, whose secret the
    driver joins with. ``storage``: how the job reaches tables on an object store
    (:func:`include.orchestration.spark_conf.storage_submit`).
    """

    application: str
    application_args: list[str]
    name: str
    run_master: str | None = None
    pod_base: str | None = None
    run_id: str = ""
    jars: str | None = None
    py_files: str | None = None
    workers: int | None = None
    backlog: int | None = None
    scratch_dir: Path | None = None
    cluster_dir: Path | None = None
    storage: StorageSubmit | None = None

    def common(self) -> dict[str, Any]:
        """The hook's keyword arguments every profile passes alike."""
        from include.spark.spark_submit import spark_submit_binary

        return dict(name=self.name, driver_memory="1g", application_args=self.application_args,
                    spark_binary=spark_submit_binary())  # fmt: skip


class TaskLog(Protocol):
    """What a profile writes to the task's log with (Airflow's task logger)."""

    def info(self, msg: str, /, *args: object) -> object: ...

    def warning(self, msg: str, /, *args: object) -> object: ...


class ClusterProfile(Protocol):
    """The runtime part of one ``cluster.profile``."""

    #: The profile's name, as ``cluster.profile`` spells it.
    name: str
    #: Whether each run starts and stops its own cluster (the DAG's ``start_cluster`` and ``stop_cluster``).
    transient: bool
    #: Whether the jobs' code and jars are in the driver's image (nothing uploaded, nothing packaged here).
    code_from_image: bool

    def describe(self, cluster: ClusterConfig) -> str:
        """The DAG doc's words for where the Spark jobs run."""
        ...

    def submit_hook(self, cfg: PipelineConfig, request: SubmitRequest) -> tuple[SparkSubmitHook, str]:
        """The Spark provider's hook for one job, and the application path it submits. Nothing runs:
        ``hook.submit(application)`` does."""
        ...

    def run_folder(self, cfg: PipelineConfig, local: Path) -> Path:
        """Where the run's job files (requests, summaries) go, given the run folder on this machine."""
        ...

    def driver_scratch(self, folder: Path, task_id: str) -> Path | None:
        """The driver's scratch folder on this machine, which the task removes; ``None``: not here."""
        ...

    def pod_base(self, cfg: PipelineConfig, task_id: str, run_id: str, try_number: int) -> str | None:
        """The name stem of one job's pods; ``None`` when the profile names no pods."""
        ...

    def kafka_options_file(self, cfg: PipelineConfig, folder: Path, client: dict[str, str]) -> str | None:
        """Where the job's driver reads its Kafka options."""
        ...

    def registry_file(self, cfg: PipelineConfig, folder: Path, registry: str) -> str:
        """Where the transform's driver reads schema registry ``registry``'s settings."""
        ...

    def after_job(self, cfg: PipelineConfig, hook: SparkSubmitHook | None, pod_base: str | None, *,
                  succeeded: bool, log: TaskLog) -> None:  # fmt: skip
        """What goes once spark-submit has ended, whatever the outcome (a finished driver pod)."""
        ...


class DriverHereProfile:
    """The defaults of a profile whose driver runs on this machine (client or local mode): job files in the
    run folder, credentials in its owner-only ``secrets/``, nothing left to clean up after the job."""

    transient = False
    code_from_image = False

    def run_folder(self, cfg: PipelineConfig, local: Path) -> Path:
        return local

    def driver_scratch(self, folder: Path, task_id: str) -> Path | None:
        return None

    def pod_base(self, cfg: PipelineConfig, task_id: str, run_id: str, try_number: int) -> str | None:
        return None

    def kafka_options_file(self, cfg: PipelineConfig, folder: Path, client: dict[str, str]) -> str | None:
        """A file only its owner can read in the run folder, from ``kafka.options`` and the connection's
        Java-compatible settings."""
        from include.orchestration import run_folder
        from include.readers import connections

        options = {**cfg.kafka.options, **connections.spark_kafka_options(client, cfg.kafka.connection_id)}
        return str(run_folder.write_secret(folder, "kafka-options.json", json.dumps(options)))

    def registry_file(self, cfg: PipelineConfig, folder: Path, registry: str) -> str:
        """The registry's URL and credentials (from the Airflow connection) in the run folder's owner-only
        ``secrets/`` (:func:`include.orchestration.run_folder.write_secret`), which the submit removes."""
        from include.orchestration import run_folder
        from include.readers import connections

        settings = connections.registry_settings(registry)
        if settings.get("password"):
            connections.mask(settings["password"])
        return str(run_folder.write_secret(folder, "schema-registry.json", json.dumps(settings)))

    def after_job(self, cfg: PipelineConfig, hook: SparkSubmitHook | None, pod_base: str | None, *,
                  succeeded: bool, log: TaskLog) -> None:  # fmt: skip
        return None


def local_env() -> dict[str, str]:
    """What a driver on this machine needs of its environment: this project's Spark and Python."""
    from include.spark.spark_submit import spark_home

    return {"SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def connection_master(cfg: PipelineConfig, storage: StorageSubmit | None, *, driver_remote: bool = False) -> tuple[str, str]:
    """The pipeline's Spark connection id and the master URL it names, for a profile that submits to it.

    Refuses a ``k8s://`` master without the Kubernetes provider, and a key pair for an object store that a
    driver elsewhere than here (``driver_remote``, or on yarn or Kubernetes) could not be handed safely.
    """
    from include.readers import connections

    conn_id = cfg.cluster.master_connection_id or ""
    # Raises when the connection is missing: the hook would silently fall back to yarn.
    master = connections.spark_master(conn_id)
    if master.startswith("k8s://"):
        _require_kubernetes_provider(cfg, master)
    if storage is not None and storage.secrets_file is not None and (
            driver_remote or master.startswith(("yarn", "k8s://"))):
        raise PipelineError(
            f"pipeline {cfg.name!r}: its tables are on an object store and Airflow connection "
            f"{cfg.tables.storage_connection_id!r} holds a key pair, but a driver on {master} cannot be handed "
            "it safely; leave the connection's login and password empty so that Spark's S3A uses the cluster's "
            "own credentials (instance profile, IRSA), keeping the endpoint and region in its extra"
        )  # fmt: skip
    return conn_id, master


def _require_kubernetes_provider(cfg: PipelineConfig, master: str) -> None:
    from airflow.providers.apache.spark.hooks import spark_submit

    from include.spark.cluster_state import ClusterError

    # The Spark hook refuses k8s:// masters unless the cncf.kubernetes
    # provider imported (it deletes the driver pod on kill with its client).
    if getattr(spark_submit, "kube_client", None) is None:
        raise ClusterError(
            f"pipeline {cfg.name!r}: the Spark master {master} is Kubernetes, which the Spark provider's "
            "hook only accepts with apache-airflow-providers-cncf-kubernetes installed"
        )

