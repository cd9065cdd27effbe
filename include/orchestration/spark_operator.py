"""The ingestion task: the Spark provider's spark-submit hook, pointed at this run's cluster.

``SparkSubmitOperator`` takes its master from a connection fixed when the DAG
is written; a transient cluster's master URL exists only once the run's setup
task has started it. :class:`IngestOperator` is a thin operator on the same
hook (:class:`RunClusterSparkSubmitHook`) whose master comes from the setup
task's XCom, or from the pipeline's Spark connection for an existing cluster.

Everything the submit needs (jars, the ``--py-files`` archive, Kafka settings)
is resolved in ``execute``, so parsing the DAG file touches neither Spark nor
the network. Kafka settings reach the job in a file readable only by its owner
(or, with profile ``kubernetes``, in a Kubernetes secret mounted in the driver
pod), never on the command line the hook logs.

One submit per cluster profile (``cluster.profile``), built by :func:`submit_hook`:

- ``local_standalone``: client mode to this run's transient standalone master.
- ``existing_master``: client mode (``--deploy-mode client`` whatever the
  connection's extra says: the summary file is read locally) to the master of
  the Spark connection: ``spark://``, ``yarn`` (the connection's ``queue``
  extra is used), or ``k8s://`` (executor pods from ``cluster.kubernetes.image``).
- ``kubernetes``: cluster mode to a ``k8s://`` master; the driver runs in a
  pod, reads code from the image and exchanges files through the shared
  volume. Unit-tested only: no Kubernetes here.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from include.config import KubernetesConfig, PipelineConfig
from include.contract.errors import ERROR_XCOM_KEY, ContractError, PipelineError, summary_failure
from include.contract.jobs import (
    CHECK_REQUEST_TASK,
    MAINTAIN_TASK,
    PREFLIGHT_TASK,
    START_CLUSTER_TASK,
    TRANSFORM_TASK,
    TRY_NUMBER_KEY,
    BackfillArgs,
    BackfillSummary,
    IngestArgs,
    MaintainArgs,
    MaintainSummary,
    StepsArgs,
    TransformArgs,
    TransformSummary,
    ingest_step_summary,
)
from include.orchestration import kubernetes_allowlist

if TYPE_CHECKING:  # the Spark provider is imported only when a job runs, OpenLineage's when lineage is asked for
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from include.orchestration.lineage import Lineage
    from include.spark.spark_cluster import ClusterWatch

APPLICATION = "spark_jobs/kafka_to_bronze.py"
BACKFILL_APPLICATION = "spark_jobs/kafka_backfill.py"
TRANSFORM_APPLICATION = "spark_jobs/bronze_to_silver.py"
#: A run's steps (ingest or backfill, then transform) in one Spark application.
RUN_STEPS_APPLICATION = "spark_jobs/run_steps.py"
MAINTAIN_APPLICATION = "spark_jobs/maintain_tables.py"
#: Where the run's application writes the transform step's failure (in the run folder).
TRANSFORM_ERROR_FILE = "transform-error.json"
#: Where the run's application writes the maintenance step's failure (in the run folder).
MAINTAIN_ERROR_FILE = "maintain-error.json"
#: Where the driver pod of profile ``kubernetes`` sees the Kafka options secret.
K8S_SECRET_MOUNT = "/etc/kafka-delta-elt/kafka"
#: Where the driver pod sees ``cluster.kubernetes.registry_secret``.
K8S_REGISTRY_MOUNT = "/etc/kafka-delta-elt/registry"
#: Name of the shared volume in the pod specs (any DNS label would do).
K8S_SHARED_VOLUME = "kde-shared"
#: Labels on the driver and executor pods, to find a pipeline's or a run's pods.
K8S_PIPELINE_LABEL = "kafka-delta-elt-pipeline"
K8S_RUN_LABEL = "kafka-delta-elt-run"
#: Spark's limit on an executor pod name prefix (63 minus "-exec-" and a long's digits).
_EXECUTOR_PREFIX_MAX = 38


def _hook_class() -> Callable[..., SparkSubmitHook]:
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


#: Avro's own bounds (Avro 1.12, in Spark 4.2): a length or count over them throws before the decoder allocates.
AVRO_LIMITS = ("string", "bytes", "collectionItems")


def avro_limit_flags(cfg: PipelineConfig) -> str:
    """JVM flags that bound what Avro allocates for one value to the pipeline's ``transform.max_value_bytes``.

    A value's string, bytes or array cannot be longer than the value itself, yet a 10-byte value whose
    length varint claims 2 GiB made the decoder allocate that much: the executor died of OutOfMemoryError
    and no record of the batch reached silver. With the bound, Avro throws instead, PERMISSIVE ``from_avro``
    gives that value a record of nulls, and it goes to quarantine alone. Empty without a transform.
    """
    if cfg.transform is None:
        return ""
    bound = cfg.transform.max_value_bytes
    return "".join(f" -Dorg.apache.avro.limits.{kind}.maxLength={bound}" for kind in AVRO_LIMITS)


def job_spark_conf(cfg: PipelineConfig, *, transient: bool, kubernetes_master: bool = False,
                   workers: int | None = None, backlog: int | None = None) -> dict[str, str]:
    """Spark settings of a job for this pipeline's cluster profile (without the per-run pod settings).

    ``transient``: this run's own standalone cluster on 127.0.0.1.
    ``backlog``: the records this run's cluster was sized for (``start_cluster``); up to
    :data:`include.spark.jvm_cds.SHORT_JOB_MAX_RECORDS` its executors' JIT stops at C1 too.
    ``kubernetes_master``: the executors (and, with profile ``kubernetes``, the
    driver) run in pods of ``cluster.kubernetes.image``, whose own Python
    runs the job: this machine's interpreter path means nothing there.
    """
    from include.spark import jvm_cds
    from include.spark.spark_submit import BASE_CONF, KAFKA_JVM_FLAGS, driver_java_options

    k8s = cfg.cluster.kubernetes
    in_pod = kubernetes_master and cfg.cluster.profile == "kubernetes"
    limits = avro_limit_flags(cfg)
    conf = {
        **BASE_CONF,
        # A run's driver lives seconds: it plans and commits on a cluster, or processes a backlog the
        # cluster sizing judged small in local mode (jvm_cds.driver_options).
        "spark.driver.extraJavaOptions": driver_java_options(k8s.app_dir if in_pod and k8s else None,
                                                             short_job=True) + limits,
        "spark.executor.extraJavaOptions": KAFKA_JVM_FLAGS + limits,
        "spark.executor.cores": str(cfg.cluster.worker_cores),
        "spark.executor.memory": cfg.cluster.worker_memory,
    }
    if not kubernetes_master:
        conf["spark.pyspark.python"] = sys.executable
    if not kubernetes_master or cfg.cluster.profile != "kubernetes":
        # Client mode: the driver is a child of this task, on this machine.
        conf["spark.pyspark.driver.python"] = sys.executable
    if transient:
        # The workers this run started (sized to its backlog), not the most it may start: the
        # scheduler below waits for spark.cores.max cores to register.
        started = cfg.cluster.workers if workers is None else workers
        conf["spark.cores.max"] = str(max(1, started) * cfg.cluster.worker_cores)
        # The scheduler waits (up to 30 s) until every worker's executor has
        # registered, so the first batch is spread over all of them too.
        conf["spark.scheduler.minRegisteredResourcesRatio"] = "1.0"
        if backlog is not None and backlog <= jvm_cds.SHORT_JOB_MAX_RECORDS:
            # A cold executor's life is this one run's backlog: C1 compiles sooner (jvm_cds).
            conf["spark.executor.extraJavaOptions"] += " " + jvm_cds.SHORT_EXECUTOR_FLAGS
        # The cluster listens on 127.0.0.1 only; the driver must be reachable there too.
        conf["spark.driver.host"] = "127.0.0.1"
        conf["spark.driver.bindAddress"] = "127.0.0.1"
        # Spark's UI and its port search are of no use on a cluster that lives for one run.
        conf["spark.ui.enabled"] = "false"
    else:
        conf["spark.executor.instances"] = str(cfg.cluster.workers)
    return conf


def _k8s_label_value(text: str) -> str:
    """``text`` as a Kubernetes label value: at most 63 of ``[A-Za-z0-9_.-]``, alphanumeric at both ends."""
    value = re.sub(r"[^A-Za-z0-9_.-]+", "_", text)[:63]
    return re.sub(r"^[^A-Za-z0-9]+|[^A-Za-z0-9]+$", "", value) or "x"


def k8s_pod_base(pipeline: str, task_id: str, run_id: str, try_number: int) -> str:
    """Name stem of one job's pods: the driver is ``<stem>-driver``, executors ``<stem>-exec-<n>``.

    A DNS label of at most 38 characters (Spark's limit for the executor
    prefix). It ends in a hash of pipeline, run and try: a retry must not
    collide with a kept driver pod of the try before, and the Spark hook
    recognises ``<...>-<hash>-driver`` as a driver pod it may delete on kill.
    """
    digest = hashlib.sha1(f"{pipeline}\0{run_id}\0{try_number}".encode()).hexdigest()[:10]
    job = re.sub(r"[^a-z0-9]+", "-", task_id.lower()).strip("-")[:9].strip("-") or "job"
    room = _EXECUTOR_PREFIX_MAX - len("kde---") - len(job) - len(digest)
    name = re.sub(r"[^a-z0-9]+", "-", pipeline.lower()).strip("-")[:room].strip("-")
    return "-".join(p for p in ("kde", name, job, digest) if p)


def kubernetes_conf(cfg: PipelineConfig, *, pod_base: str, run_id: str) -> dict[str, str]:
    """Profile ``kubernetes`` (cluster mode): the pod settings of one job of one run.

    Spark creates the driver pod named ``<pod_base>-driver`` and the executor
    pods, labelled with the pipeline and the run (the exact run id is an
    annotation: label values cannot hold it), mounts the shared volume in
    all of them and the Kafka options secret in the driver only, and deletes
    the executor pods when the job ends. Not exercised here (no Kubernetes).
    """
    k8s = cfg.cluster.kubernetes
    if k8s is None or cfg.cluster.profile != "kubernetes":
        raise ContractError(f"pipeline {cfg.name!r}: kubernetes_conf is for cluster.profile kubernetes")
    conf = {
        "spark.kubernetes.container.image": k8s.image,
        "spark.kubernetes.namespace": k8s.namespace or "default",
        "spark.kubernetes.authenticate.driver.serviceAccountName": k8s.service_account or "",
        "spark.kubernetes.driver.pod.name": f"{pod_base}-driver",
        "spark.kubernetes.executor.podNamePrefix": pod_base,
        # spark-submit waits for the driver and prints its exit code, which the hook checks.
        "spark.kubernetes.submission.waitAppCompletion": "true",
        "spark.kubernetes.executor.deleteOnTermination": "true",
    }
    for role in ("driver", "executor"):
        conf[f"spark.kubernetes.{role}.label.{K8S_PIPELINE_LABEL}"] = _k8s_label_value(cfg.name)
        conf[f"spark.kubernetes.{role}.label.{K8S_RUN_LABEL}"] = _k8s_label_value(run_id)
        conf[f"spark.kubernetes.{role}.annotation.kafka-delta-elt/run-id"] = run_id
        volume = f"spark.kubernetes.{role}.volumes.persistentVolumeClaim.{K8S_SHARED_VOLUME}"
        conf[f"{volume}.options.claimName"] = k8s.shared_volume_claim or ""
        conf[f"{volume}.mount.path"] = k8s.shared_dir or ""
    if k8s.kafka_options_secret:
        # The whole secret as read-only files in the driver pod; executors get
        # the Kafka settings from the driver inside the query plan.
        conf[f"spark.kubernetes.driver.secrets.{k8s.kafka_options_secret}"] = K8S_SECRET_MOUNT
    if k8s.registry_secret:
        conf[f"spark.kubernetes.driver.secrets.{k8s.registry_secret}"] = K8S_REGISTRY_MOUNT
    return conf


def kafka_options_path(k8s: KubernetesConfig) -> str | None:
    """Where the driver pod reads the job's Kafka options (the mounted secret's key); ``None`` without a secret."""
    if not k8s.kafka_options_secret:
        return None
    return str(PurePosixPath(K8S_SECRET_MOUNT) / k8s.kafka_options_key)


def image_uri(k8s: KubernetesConfig, relative: str) -> str:
    """A file of the project baked into the image, as the ``local://`` URI Spark reads it by in the pod."""
    return f"local://{PurePosixPath(k8s.app_dir) / relative}"


def driver_scratch(run_folder: Path, task_id: str) -> Path:
    """Where a job's driver on this machine keeps its scratch (its copy of the jars and files, block
    manager and shuffle files in local mode): in the run folder, not the system's temporary folder.

    Spark removes its scratch when the driver exits, but not when the driver
    is killed (the job's kill tests, an out-of-memory kill, a task killed with
    its driver): in ``/tmp`` each kill left about 23 MB nobody removed. Here
    the task removes the folder once spark-submit has ended, and the next try
    of the task removes what a killed try's task process left.
    """
    return run_folder / "scratch" / task_id


def _remove_scratch(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):  # other tasks' scratch may still be there
        folder.parent.rmdir()


@dataclass(frozen=True)
class StorageSubmit:
    """How a job reaches tables on an object store: S3A's settings, none of them secret, on the command line,
    and its key pair in an owner-only file whose path the driver finds in its environment
    (:func:`include.settings.storage_secrets`)."""

    hadoop: dict[str, str]
    secrets_file: Path | None = None

    def apply(self, conf: dict[str, str], env: dict[str, str] | None) -> None:
        """Add the settings to a submit's ``conf``, and the secrets file to the driver's ``env``."""
        from include import settings

        conf.update({f"spark.hadoop.{k}": v for k, v in self.hadoop.items()})
        if self.secrets_file is not None and env is not None:
            env[settings.STORAGE_SECRETS_FILE_ENV] = str(self.secrets_file)


def spark_locations(cfg: PipelineConfig) -> dict[str, str]:
    """The locations a pipeline's Spark jobs read and write, by their key in the pipeline file."""
    t = cfg.tables
    return {"tables.bronze_path": t.bronze_path, "tables.checkpoint_root": t.checkpoint_root,
            "tables.silver_path": t.silver_path, "tables.quarantine_path": t.quarantine_path,
            "tables.transform_checkpoint_root": t.transform_checkpoint_root}  # fmt: skip


def storage_submit(cfg: PipelineConfig, folder: Path) -> StorageSubmit | None:
    """What a job of ``cfg`` needs for its tables on an object store (``None``: all local, no connection read).

    The key pair of ``tables.storage_connection_id`` goes to the run folder ``folder``'s ``secrets/``, which
    the submit removes whatever ends it.
    """
    from include.orchestration import pipeline_run
    from include.readers import object_store

    store = object_store.store_settings(spark_locations(cfg), cfg.tables.storage_connection_id)
    if store is None:
        return None
    secrets = store.hadoop_secrets()
    path = pipeline_run.write_secret(folder, "object-store.json", json.dumps(secrets)) if secrets else None
    return StorageSubmit(store.hadoop_options(), path)


def submit_hook(
    cfg: PipelineConfig,
    *,
    application: str,
    application_args: list[str],
    name: str,
    run_master: str | None = None,
    pod_base: str | None = None,
    run_id: str = "",
    jars: str | None = None,
    py_files: str | None = None,
    workers: int | None = None,
    backlog: int | None = None,
    scratch_dir: Path | None = None,
    cluster_dir: Path | None = None,
    storage: StorageSubmit | None = None,
) -> tuple[SparkSubmitHook, str]:
    """The Spark provider's hook for one job of this pipeline, and the application path it submits.

    ``application`` is relative to the project (``spark_jobs/...``).
    ``run_master``: the transient cluster's master URL (``local_standalone``).
    ``jars`` and ``py_files``: the local files (client-mode profiles); with
    profile ``kubernetes`` the image's are used. ``pod_base`` and ``run_id``
    name the pods (``kubernetes``). ``workers``: how many the run's cluster
    started (``local_standalone``; default ``cluster.workers``) and ``backlog`` the records it was
    sized for (see :func:`job_spark_conf`). ``scratch_dir``: the driver's scratch folder
    (``local_standalone``; see :func:`driver_scratch`). ``cluster_dir``: the run's cluster folder, whose
    secret the driver joins with (``local_standalone``). ``storage``: how the job reaches tables on an
    object store (:func:`storage_submit`). Nothing runs: ``hook.submit(application)``
    does, and ``hook._build_spark_submit_command(application)`` shows the
    command it would run.
    """
    from include.spark.spark_submit import spark_submit_binary

    common: dict[str, Any] = dict(
        name=name, driver_memory="1g", application_args=application_args, spark_binary=spark_submit_binary()
    )
    if cfg.cluster.profile == "local_standalone":
        return _local_standalone_hook(cfg, application, common, run_master=run_master, jars=jars,
                                      py_files=py_files, workers=workers, backlog=backlog,
                                      scratch_dir=scratch_dir, cluster_dir=cluster_dir, storage=storage)  # fmt: skip
    from include.readers import connections

    conn_id = cfg.cluster.master_connection_id or ""
    # Raises when the connection is missing: the hook would silently fall back to yarn.
    master = connections.spark_master(conn_id)
    if master.startswith("k8s://"):
        _require_kubernetes_provider(cfg, master)
    if storage is not None and storage.secrets_file is not None and (
            cfg.cluster.profile == "kubernetes" or master.startswith(("yarn", "k8s://"))):
        raise PipelineError(
            f"pipeline {cfg.name!r}: its tables are on an object store and Airflow connection "
            f"{cfg.tables.storage_connection_id!r} holds a key pair, but a driver on {master} cannot be handed "
            "it safely; leave the connection's login and password empty so that Spark's S3A uses the cluster's "
            "own credentials (instance profile, IRSA), keeping the endpoint and region in its extra"
        )  # fmt: skip
    if cfg.cluster.profile == "existing_master":
        return _existing_master_hook(cfg, application, common, conn_id=conn_id, master=master, jars=jars,
                                     py_files=py_files, storage=storage)  # fmt: skip
    return _kubernetes_hook(cfg, application, common, conn_id=conn_id, master=master, pod_base=pod_base,
                            run_id=run_id, storage=storage)  # fmt: skip


def _local_env() -> dict[str, str]:
    """What a driver on this machine needs of its environment: this project's Spark and Python."""
    from include.spark.spark_submit import spark_home

    return {"SPARK_HOME": str(spark_home()), "PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}


def _local_standalone_hook(cfg: PipelineConfig, application: str, common: dict[str, Any], *, run_master: str | None,
                           jars: str | None, py_files: str | None, workers: int | None, backlog: int | None,
                           scratch_dir: Path | None, cluster_dir: Path | None,
                           storage: StorageSubmit | None = None) -> tuple[SparkSubmitHook, str]:  # fmt: skip
    """Profile ``local_standalone``: client mode against this run's own cluster (or local mode), on 127.0.0.1."""
    from include import settings
    from include.spark.spark_cluster import SECRET_FILE

    env = _local_env()
    # The run's cluster listens on 127.0.0.1; so does the driver (no hostname lookup, no warning).
    env["SPARK_LOCAL_IP"] = "127.0.0.1"
    if scratch_dir is not None and not os.environ.get("SPARK_LOCAL_DIRS"):  # the worker's own choice wins
        env["SPARK_LOCAL_DIRS"] = str(scratch_dir)
    if not run_master:
        raise ContractError("no master URL from this run's cluster setup task")
    if cluster_dir is not None:
        # The driver joins the run's cluster with its secret (include/spark/spark_cluster.py).
        env[settings.SPARK_SECRET_FILE_ENV] = str(Path(cluster_dir) / SECRET_FILE)
    conf = job_spark_conf(cfg, transient=True, workers=workers, backlog=backlog)
    if storage is not None:
        storage.apply(conf, env)
    hook = _hook_class()(master=run_master, conf=conf, jars=jars, py_files=py_files, env_vars=env, **common)
    return hook, str(settings.PROJECT_ROOT / application)


def _existing_master_hook(cfg: PipelineConfig, application: str, common: dict[str, Any], *, conn_id: str,
                          master: str, jars: str | None, py_files: str | None,
                          storage: StorageSubmit | None = None) -> tuple[SparkSubmitHook, str]:  # fmt: skip
    """Profile ``existing_master``: client mode against the Spark connection's master (standalone, yarn or
    ``k8s://``, whose executor pods need ``cluster.kubernetes.image``)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from include import settings

    on_k8s = master.startswith("k8s://")
    k8s = cfg.cluster.kubernetes
    conf = job_spark_conf(cfg, transient=False, kubernetes_master=on_k8s)
    if on_k8s:
        if k8s is None or not k8s.image:
            raise ContractError(
                f"pipeline {cfg.name!r}: Spark connection {conn_id!r} is a Kubernetes master ({master}); "
                "executor pods need an image: set cluster.kubernetes.image in the pipeline file"
            )
        # The executor pods run the image with the Kafka credentials: the connection's owner must allow it.
        kubernetes_allowlist.check_connection(cfg.name, k8s, conn_id, keys=("image", "namespace"))
        conf["spark.kubernetes.container.image"] = k8s.image
        if k8s.namespace:
            conf["spark.kubernetes.namespace"] = k8s.namespace
    # On yarn and k8s the hook would turn env_vars into the application master's or driver pod's
    # environment; this machine's paths mean nothing there, and the local driver finds its Spark by itself.
    env = None if master.startswith(("yarn", "k8s://")) else _local_env()
    if storage is not None:
        storage.apply(conf, env)
    hook = SparkSubmitHook(conn_id=conn_id, conf=conf, deploy_mode="client", jars=jars, py_files=py_files,
                           env_vars=env, **common)  # fmt: skip
    return hook, str(settings.PROJECT_ROOT / application)


def _kubernetes_hook(cfg: PipelineConfig, application: str, common: dict[str, Any], *, conn_id: str, master: str,
                     pod_base: str | None, run_id: str,
                     storage: StorageSubmit | None = None) -> tuple[SparkSubmitHook, str]:  # fmt: skip
    """Profile ``kubernetes``: cluster mode, the driver in a pod of the image, the jobs from the image (whose
    jars must include S3A's for tables on an object store)."""
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    k8s = cfg.cluster.kubernetes
    if not master.startswith("k8s://"):
        raise ContractError(
            f"pipeline {cfg.name!r}: cluster.profile kubernetes needs a k8s://https://... master, but Spark "
            f"connection {conn_id!r} names {master!r}"
        )
    if k8s is None or not pod_base or not run_id:
        raise ContractError(f"pipeline {cfg.name!r}: profile kubernetes needs cluster.kubernetes, a pod name and a run id")
    # Image, namespace, service account, volume claim and secrets: code and secrets, the connection owner's call.
    kubernetes_allowlist.check_connection(cfg.name, k8s, conn_id)
    conf = {**job_spark_conf(cfg, transient=False, kubernetes_master=True),
            **kubernetes_conf(cfg, pod_base=pod_base, run_id=run_id)}  # fmt: skip
    if storage is not None:
        storage.apply(conf, None)
    # No env_vars: the hook would send this machine's SPARK_HOME to the driver pod.
    hook = SparkSubmitHook(conn_id=conn_id, conf=conf, deploy_mode="cluster", jars=None,
                           py_files=image_uri(k8s, "kde_jobs.zip"), env_vars=None, **common)  # fmt: skip
    return hook, image_uri(k8s, application)


def _require_kubernetes_provider(cfg: PipelineConfig, master: str) -> None:
    from airflow.providers.apache.spark.hooks import spark_submit

    from include.spark.spark_cluster import ClusterError

    # The Spark hook refuses k8s:// masters unless the cncf.kubernetes
    # provider imported (it deletes the driver pod on kill with its client).
    if getattr(spark_submit, "kube_client", None) is None:
        raise ClusterError(
            f"pipeline {cfg.name!r}: the Spark master {master} is Kubernetes, which the Spark provider's "
            "hook only accepts with apache-airflow-providers-cncf-kubernetes installed"
        )


def driver_pod_kill_command(master: str, namespace: str, pod: str) -> list[str]:
    """``spark-submit --kill``: Spark's own way of deleting a driver pod (and what it owns)."""
    from include.spark.spark_submit import spark_submit_binary

    return [spark_submit_binary(), "--master", master, "--conf", f"spark.kubernetes.namespace={namespace}",
            "--kill", f"{namespace}:{pod}"]  # fmt: skip


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
        self._hook: SparkSubmitHook | None = None
        #: The step's summary once this task has it: what its lineage reports on completion.
        self._summary: dict[str, Any] | None = None
        #: Airflow's try number of the running try (1 on the first), carried in the summary as ``try_number``.
        self._try_number = 1

    def job_args(self, context: Any, folder: Path, summary_path: Path) -> list[str]:
        """The job's arguments; credentials it needs go to the run folder's ``secrets/``
        (:func:`include.orchestration.pipeline_run.write_secret`), which the submit removes whatever ends it."""
        raise NotImplementedError

    def summary_line(self, summary: dict[str, Any]) -> str:
        """The task log's one-line summary of the job's result."""
        raise NotImplementedError

    def application_for(self, context: Any) -> str:
        """The job this run submits (a path under the project root)."""
        return self.application

    def submission(self, context: Any, folder: Path, summary_path: Path) -> tuple[str, list[str]]:
        """The application to submit and its arguments (see :meth:`job_args`)."""
        return self.application_for(context), self.job_args(context, folder, summary_path)

    def done_despite(self, exc: BaseException, summary_path: Path) -> bool:
        """Whether this task's step finished although the application failed after it (default: never)."""
        return False

    def lineage(self, summary: dict[str, Any] | None) -> Lineage:
        """This task's OpenLineage datasets and facets (:mod:`include.orchestration.lineage`): from the
        step's ``summary``, or, before there is one (the task starting or failing), from the pipeline file."""
        raise NotImplementedError

    # Called by the OpenLineage provider's listener, only when a transport is configured (docs/lineage.md).
    def get_openlineage_facets_on_start(self) -> Lineage:
        return self.lineage(None)

    def get_openlineage_facets_on_complete(self, task_instance: Any) -> Lineage:
        return self.lineage(self._summary)

    def get_openlineage_facets_on_failure(self, task_instance: Any) -> Lineage:
        return self.lineage(None)

    def _finish(self, summary: dict[str, Any], note: str = "") -> dict[str, Any]:
        """The task's end with the step's ``summary``: its log line, kept for lineage, returned as XCom with the
        try that reported it (``record_run`` records how many tries each step took)."""
        print(self.summary_line(summary) + note)
        summary = {**summary, TRY_NUMBER_KEY: self._try_number}
        self._summary = summary
        return summary

    def _started(self, context: Any) -> dict[str, Any]:
        """What this run's ``start_cluster`` reported (``workers``, ``backlog``, ...), if it ran."""
        if not self.pipeline.cluster.transient or context.get("ti") is None:
            return {}
        started = context["ti"].xcom_pull(task_ids=START_CLUSTER_TASK) or {}
        return started if isinstance(started, dict) else {}

    def _cluster_watch(self, context: Any) -> contextlib.AbstractContextManager[ClusterWatch | None]:
        """A :class:`~include.spark.spark_cluster.ClusterWatch` on this run's transient cluster, if one was started."""
        from contextlib import nullcontext

        from include.orchestration import pipeline_run
        from include.spark import spark_cluster

        if not self.pipeline.cluster.transient:
            return nullcontext(None)
        folder = pipeline_run.run_dir(self.pipeline, context["run_id"]) / "cluster"  # none in local mode

        def stop_job() -> None:
            proc = getattr(self._hook, "_submit_sp", None)
            if proc is not None and proc.poll() is None:
                self.log.error("the run's cluster lost a daemon: stopping spark-submit (pid %s)", proc.pid)
                proc.kill()

        return spark_cluster.ClusterWatch(folder, stop_job)

    def run_folder(self, context: Any) -> Path:
        """This run's folder of job files: the run folder here, or on the shared volume (``kubernetes``)."""
        from include.orchestration import pipeline_run

        folder = pipeline_run.run_dir(self.pipeline, context["run_id"])
        k8s = self.pipeline.cluster.kubernetes
        if self.pipeline.cluster.profile == "kubernetes" and k8s is not None and k8s.shared_dir:
            # The driver pod reads the request files and writes the summary there.
            return Path(k8s.shared_dir) / "runs" / self.pipeline.name / folder.name
        return folder

    def execute(self, context: Any) -> dict[str, Any]:
        from include.orchestration import pipeline_run
        from include.spark import jvm_deps, spark_cluster
        from include.spark.spark_submit import dies_with_parent, package_py_files

        self._try_number = try_number(context)
        cfg = self.pipeline
        in_pod = cfg.cluster.profile == "kubernetes"
        folder = self.run_folder(context)
        folder.mkdir(parents=True, exist_ok=True)
        summary_path = folder / f"{self.task_id}-summary.json"
        summary_path.unlink(missing_ok=True)
        scratch = None if cfg.cluster.profile != "local_standalone" else driver_scratch(folder, self.task_id)
        if scratch is not None:
            _remove_scratch(scratch)  # an earlier try's, killed with its task process
        pod_base = None
        if in_pod:
            pod_base = k8s_pod_base(cfg.name, self.task_id, context["run_id"], self._try_number)
        started = self._started(context)
        try:
            # Inside the block that removes them: a submission that fails half way (a missing registry
            # connection after the Kafka options were written) leaves no credentials file behind.
            application, args = self.submission(context, folder, summary_path)
            storage = storage_submit(cfg, folder)
            # S3A and its AWS SDK modules only for a pipeline whose tables are on an object store.
            jars = [*jvm_deps.spark_jars(), *(jvm_deps.s3_jars() if storage is not None else ())]
            self._hook, app_path = submit_hook(
                cfg, application=application, application_args=args, name=f"{self.job_name}:{cfg.name}",
                run_master=self.master, pod_base=pod_base, run_id=context["run_id"],
                jars=None if in_pod else ",".join(str(j) for j in jars),
                py_files=None if in_pod else str(package_py_files()), workers=started.get("workers"),
                backlog=started.get("backlog"), scratch_dir=scratch,
                cluster_dir=pipeline_run.run_dir(cfg, context["run_id"]) / "cluster", storage=storage,
            )  # fmt: skip
            self.log.info("submitting %s for pipeline %s to %s (profile %s)", app_path, cfg.name,
                          self._hook._connection["master"], cfg.cluster.profile)  # fmt: skip
            ok = False
            try:
                with self._cluster_watch(context) as watch:
                    try:
                        self._hook.submit(app_path, preexec_fn=_each(
                            dies_with_parent(),
                            # In this machine's run folder (never the pods' volume): a run that takes
                            # the lock over from this one stops exactly these processes.
                            spark_cluster.record_job(pipeline_run.run_dir(cfg, context["run_id"]), self.task_id),
                        ))  # fmt: skip
                    except Exception as exc:
                        if watch is not None and watch.lost:
                            raise spark_cluster.ClusterError(watch.message()) from exc
                        raise
                ok = True
            except Exception as exc:
                if not self.done_despite(exc, summary_path):
                    failure = self._job_failure(summary_path)
                    if failure is None:
                        raise
                    self._report_failure(context, failure)
                    raise_if_lock_lost(failure)
                    raise failure from exc
            finally:
                if in_pod and pod_base:
                    self._delete_driver_pod(f"{pod_base}-driver", succeeded=ok)
        finally:
            pipeline_run.remove_secrets(folder)
            if scratch is not None:  # spark-submit has ended: nothing uses the driver's scratch any more
                _remove_scratch(scratch)
        return self._finish(json.loads(summary_path.read_text()))

    def _job_failure(self, summary_path: Path) -> PipelineError | None:
        """The error the job wrote to its summary file when it failed (as data), or ``None``."""
        try:
            return summary_failure(json.loads(summary_path.read_text()))
        except (OSError, ValueError):
            return None

    def _report_failure(self, context: Any, failure: PipelineError) -> None:
        """The task log's lines for a job's error, from its fields, and the error in XCom ``error`` for
        ``record_run`` (the run ledger and the monitor render it from there)."""
        fields = {k: v for k, v in failure.fields().items() if v is not None and k != "cause"}
        self.log.error("%s failed: %s: %s", self.task_id, type(failure).__name__, failure)
        if fields:
            self.log.error("error fields: %s", ", ".join(f"{k}={v}" for k, v in fields.items()))
        ti = context.get("ti")
        if ti is not None and hasattr(ti, "xcom_push"):
            ti.xcom_push(key=ERROR_XCOM_KEY, value=failure.to_dict())

    def _delete_driver_pod(self, pod: str, *, succeeded: bool) -> None:
        """Profile ``kubernetes``: Spark deleted the executor pods; the finished driver pod goes too, by policy."""
        k8s = self.pipeline.cluster.kubernetes
        if k8s is None or self._hook is None:
            return
        policy = k8s.delete_driver_pod
        if policy == "never" or (policy == "on_success" and not succeeded):
            self.log.info("keeping driver pod %s/%s (delete_driver_pod: %s)", k8s.namespace, pod, policy)
            return
        cmd = driver_pod_kill_command(self._hook._connection["master"], k8s.namespace or "default", pod)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode:
            # A finished pod left behind costs no resources; it must not fail a job that succeeded.
            self.log.warning("could not delete driver pod %s/%s (exit %s): %s", k8s.namespace, pod,
                             proc.returncode, (proc.stdout + proc.stderr)[-2000:])  # fmt: skip

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

    def __init__(self, *, preflight_task_id: str = PREFLIGHT_TASK, request_task_id: str = CHECK_REQUEST_TASK,
                 transform_task_id: str = TRANSFORM_TASK, maintain_task_id: str = MAINTAIN_TASK, **kwargs: Any) -> None:  # fmt: skip
        super().__init__(**kwargs)
        self.preflight_task_id = preflight_task_id
        self.request_task_id = request_task_id
        self.transform_task_id = transform_task_id
        self.maintain_task_id = maintain_task_id
        self._bootstrap: str | None = None
        self._request: tuple[str | None, dict[str, Any]] | None = None

    def _plan(self, context: Any) -> dict[str, Any]:
        """``check_request``'s plan for this run: read once (the application, the arguments and each later
        step ask for it), again only for another run."""
        run_id = context.get("run_id")
        if self._request is None or self._request[0] != run_id:
            self._request = (run_id, context["ti"].xcom_pull(task_ids=self.request_task_id) or {})
        return self._request[1]

    def application_for(self, context: Any) -> str:
        from include.contract.manual_ops import BACKFILL_ACTIONS

        return BACKFILL_APPLICATION if self._plan(context).get("action") in BACKFILL_ACTIONS else APPLICATION

    def job_args(self, context: Any, folder: Path, summary_path: Path) -> list[str]:
        from include.contract import manual_ops
        from include.readers import connections

        cfg = self.pipeline
        plan = self._plan(context)
        client = connections.kafka_client_config(cfg.kafka.connection_id)
        self._bootstrap = client["bootstrap.servers"]
        options_file = self._kafka_options(folder, client)
        run_type = job_run_type(context)
        if plan.get("action") in manual_ops.BACKFILL_ACTIONS:
            request_file = folder / "backfill-request.json"
            request_file.write_text(json.dumps({k: plan.get(k) for k in
                                                ("action", "reason", "requested_by", "ranges", "time_range")}))  # fmt: skip
            return BackfillArgs(
                pipeline=cfg.name, bootstrap_servers=client["bootstrap.servers"], bronze_path=cfg.tables.bronze_path,
                request_file=str(request_file), run_id=context["run_id"],
                run_type="backfill" if run_type == "backfill" else "manual", summary_path=str(summary_path),
                lock_epoch=plan.get("lock_epoch"), kafka_options_file=options_file or None,
            ).to_args()  # fmt: skip
        preflight = context["ti"].xcom_pull(task_ids=self.preflight_task_id) or {}
        preflight_file = folder / "preflight.json"
        preflight_file.write_text(json.dumps(preflight.get("job_file") or {}))
        rebuild = plan.get("action") == manual_ops.REBUILD_CHECKPOINT
        who = f" by {plan['requested_by']}" if plan.get("requested_by") else ""
        args = IngestArgs.for_pipeline(cfg, bootstrap_servers=client["bootstrap.servers"], run_id=context["run_id"],
                                       run_type="rebuild_checkpoint" if rebuild else run_type,
                                       summary_path=str(summary_path))  # fmt: skip
        return replace(args, kafka_options_file=options_file or None, preflight_file=str(preflight_file),
                       lock_epoch=plan.get("lock_epoch"),
                       rebuild_checkpoint=f"asked{who}: {plan.get('reason', '')}" if rebuild else None,
                       ).to_args()  # fmt: skip

    def submission(self, context: Any, folder: Path, summary_path: Path) -> tuple[str, list[str]]:
        """With a transform, or maintenance due: the run's application runs this step, then the transform,
        then the maintenance (one driver, one session); the transform and maintain tasks report theirs.
        Otherwise this step's job alone."""
        application, args = super().submission(context, folder, summary_path)
        cfg = self.pipeline
        later: list[tuple[str, str, str, Callable[[Path], list[str]]]] = []
        epoch = self._plan(context).get("lock_epoch")
        if cfg.transform is not None:
            later.append((self.transform_task_id, TRANSFORM_APPLICATION, TRANSFORM_ERROR_FILE,
                          lambda summary: transform_job_args(cfg, folder, context["run_id"], summary, epoch,
                                                             self._plan(context).get("replay"))))  # fmt: skip
        if maintenance_reason(context, self.preflight_task_id):
            later.append((self.maintain_task_id, MAINTAIN_APPLICATION, MAINTAIN_ERROR_FILE,
                          lambda summary: maintain_job_args(cfg, context["run_id"], summary, epoch)))  # fmt: skip
        self._later = bool(later)
        if not later:
            return application, args
        steps: list[dict[str, Any]] = [{"job": Path(application).stem, "args": args}]
        for task_id, later_app, error_file, job_args in later:
            later_summary, error_path = folder / f"{task_id}-summary.json", folder / error_file
            # Whatever a former try left must not pass for this one's outcome.
            later_summary.unlink(missing_ok=True)
            error_path.unlink(missing_ok=True)
            steps.append({"job": Path(later_app).stem, "error_path": str(error_path), "args": job_args(later_summary)})
        steps_file = folder / "steps.json"
        steps_file.write_text(json.dumps({"pipeline": cfg.name, "steps": steps}, indent=2))
        self.log.info("one Spark application for %s (%s)", " then ".join(s_["job"] for s_ in steps), steps_file)
        return RUN_STEPS_APPLICATION, StepsArgs(steps_file=str(steps_file)).to_args()

    def done_despite(self, exc: BaseException, summary_path: Path) -> bool:
        """The application failed after this step wrote its summary (so after its last commit): the
        step is done; each later task finds no outcome of its own step and submits it alone."""
        if not getattr(self, "_later", False) or not summary_path.exists() or self._job_failure(summary_path):
            return False
        self.log.warning("the run's Spark application failed after the ingest step finished (%s); bronze "
                         "stands as the summary says, and each later task submits its step alone", exc)  # fmt: skip
        return True

    def _kafka_options(self, folder: Path, client: dict[str, str]) -> str | None:
        """Where the job reads its Kafka options.

        Client-mode profiles: a file only its owner can read in the run folder,
        from ``kafka.options`` and the connection's Java-compatible settings.
        Profile ``kubernetes``: the secret mounted in the driver pod (no file
        here; Airflow never holds those settings).
        """
        from include.readers import connections

        cfg = self.pipeline
        k8s = cfg.cluster.kubernetes
        if cfg.cluster.profile == "kubernetes" and k8s is not None:
            return kafka_options_path(k8s)
        from include.orchestration import pipeline_run

        options = {**cfg.kafka.options, **connections.spark_kafka_options(client, cfg.kafka.connection_id)}
        options_file = pipeline_run.write_secret(folder, "kafka-options.json", json.dumps(options))
        return str(options_file)

    def lineage(self, summary: dict[str, Any] | None) -> Lineage:
        from include.orchestration.lineage import ingest_lineage
        from include.readers import connections

        cfg = self.pipeline
        bootstrap = self._bootstrap or connections.kafka_client_config(cfg.kafka.connection_id)["bootstrap.servers"]
        return ingest_lineage(cfg, bootstrap, summary)

    def summary_line(self, summary: dict[str, Any]) -> str:
        s = ingest_step_summary(summary)
        if isinstance(s, BackfillSummary):
            return (
                f"SUMMARY ingest: backfill re-read {s.read} records in {len(s.ranges)} ranges, "
                f"inserted {s.inserted} missing from bronze, {s.present} were there already; "
                f"bronze version {s.bronze_version}, {s.duration_s:.1f}s in the job"
                + "".join(f"; {n}" for n in s.notes)
            )
        rebuilt = s.checkpoint_rebuilt
        return (
            f"SUMMARY ingest: {s.rows} rows in {len(s.batches)} batches, epoch {s.epoch}, "
            f"bronze version {s.bronze_version}, {s.duration_s:.1f}s in the job"
            + (f", checkpoint rebuilt: {rebuilt['reason']}" if rebuilt else "")
            + (f"; position set ({s.position_set['reason']}): {s.position_set['positions']}"
               if s.position_set else "")
        )


class LaterStepOperator(SparkJobOperator):
    """A step the run's Spark application runs after ingest (``spark_jobs/run_steps.py``).

    On its first try it reports that step: its summary, or its failure. When
    the application never reached the step (it died after ingest), and on
    every retry, it submits the step's job alone.
    """

    #: The run folder's file where the application writes this step's failure.
    error_file = ""
    #: What stands when this step failed, for the failure message.
    after_failure = ""

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowException

        self._try_number = try_number(context)
        if self._try_number == 1:
            folder = self.run_folder(context)
            summary_path = folder / f"{self.task_id}-summary.json"
            error_path = folder / self.error_file
            if error_path.exists():
                error = json.loads(error_path.read_text())
                if error.get("traceback"):
                    self.log.error("%s", error["traceback"])
                data = error.get("failure")
                failure = PipelineError.from_dict(data) if isinstance(data, dict) else PipelineError(
                    str(error.get("error")), pipeline=self.pipeline.name)  # fmt: skip
                self._report_failure(context, failure)
                raise_if_lock_lost(failure)
                # An AirflowException (the task may retry: alone, the step may pass) caused by the step's own error.
                raise AirflowException(
                    f"{self.task_id} of pipeline {self.pipeline.name!r} failed in the run's Spark application: "
                    f"{error.get('error')} ({self.after_failure}; a retry of this task submits it alone)"
                ) from failure
            if summary_path.exists():
                summary = json.loads(summary_path.read_text())
                if summary.get("run_id") == context["run_id"] and summary_failure(summary) is None:
                    return self._finish(summary, " (ran in the ingest task's Spark application)")
            self.log.info("the run's Spark application did not reach the %s step; submitting it alone", self.task_id)
        return super().execute(context)


class TransformOperator(LaterStepOperator):
    """The transform step: bronze's new records into silver and quarantine."""

    application = TRANSFORM_APPLICATION
    job_name = "bronze_to_silver"
    error_file = TRANSFORM_ERROR_FILE
    after_failure = "bronze keeps what ingest committed"

    def job_args(self, context: Any, folder: Path, summary_path: Path) -> list[str]:
        return transform_job_args(self.pipeline, folder, context["run_id"], summary_path, held_epoch(context),
                                  request_plan(context).get("replay"))  # fmt: skip

    def summary_line(self, summary: dict[str, Any]) -> str:
        return "SUMMARY transform: " + transform_summary_text(summary)

    def lineage(self, summary: dict[str, Any] | None) -> Lineage:
        from include.orchestration.lineage import transform_lineage

        return transform_lineage(self.pipeline, summary)


class MaintainOperator(LaterStepOperator):
    """The maintenance step (compaction, VACUUM, log checkpoint of bronze, silver and quarantine), when the
    preflight found it due (``include/contract/maintenance.py``); skipped otherwise.

    :param preflight_task_id: task whose XCom says whether maintenance is due.
    """

    application = MAINTAIN_APPLICATION
    job_name = "maintain_tables"
    error_file = MAINTAIN_ERROR_FILE
    after_failure = "the run's data stands as committed; maintenance stays due for the next run"

    def __init__(self, *, preflight_task_id: str = PREFLIGHT_TASK, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.preflight_task_id = preflight_task_id

    def job_args(self, context: Any, folder: Path, summary_path: Path) -> list[str]:
        return maintain_job_args(self.pipeline, context["run_id"], summary_path, held_epoch(context))

    def summary_line(self, summary: dict[str, Any]) -> str:
        return "SUMMARY maintain: " + maintain_summary_text(summary)

    def lineage(self, summary: dict[str, Any] | None) -> Lineage:
        from include.orchestration.lineage import maintain_lineage

        return maintain_lineage(self.pipeline, summary)

    def execute(self, context: Any) -> dict[str, Any]:
        from airflow.sdk.exceptions import AirflowSkipException

        if not maintenance_reason(context, self.preflight_task_id):
            raise AirflowSkipException("table maintenance is not due in this run")
        return super().execute(context)


def maintenance_reason(context: Any, preflight_task_id: str) -> str | None:
    """Why the preflight found the tables' maintenance due in this run, or ``None``."""
    ti = context.get("ti")
    preflight = (ti.xcom_pull(task_ids=preflight_task_id) if ti is not None else None) or {}
    return ((preflight.get("maintenance") or {}) if isinstance(preflight, dict) else {}).get("due")


def lost_lock(failure: PipelineError) -> bool:
    """Whether a job failed because a later run took the pipeline's lock over (itself, or its failed batch)."""
    from include.contract.errors import StaleLockError

    cause = getattr(failure, "cause", None)
    return isinstance(failure, StaleLockError) or isinstance(cause, dict) and cause.get("class") == "StaleLockError"


def raise_if_lock_lost(failure: PipelineError) -> None:
    """End the task without a retry when its job lost the lock: a retry would hold the same stale epoch."""
    if lost_lock(failure):
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(str(failure)) from failure


def try_number(context: Any) -> int:
    """Airflow's try number of the running task (1 on its first try; 1 without a task instance)."""
    return int(getattr(context.get("ti"), "try_number", 1) or 1)


def request_plan(context: Any) -> dict[str, Any]:
    """What this DAG run was asked to do, as ``check_request`` planned it (its XCom; empty without one)."""
    ti = context.get("ti")
    plan = ti.xcom_pull(task_ids=CHECK_REQUEST_TASK) if ti is not None else None
    return plan if isinstance(plan, dict) else {}


def held_epoch(context: Any) -> int | None:
    """The run lock's epoch this DAG run took (``check_request``'s XCom), which its jobs carry as ``--lock-epoch``."""
    epoch = request_plan(context).get("lock_epoch")
    return int(epoch) if epoch is not None else None


def maintain_job_args(cfg: PipelineConfig, run_id: str, summary_path: Path, lock_epoch: int | None = None) -> list[str]:
    """``maintain_tables``' arguments for this run: the pipeline's tables and what its ``maintenance`` asks."""
    from include.orchestration.pipeline_run import pipeline_tables

    m = cfg.maintenance
    return MaintainArgs.for_tables(cfg.name, pipeline_tables(cfg), zorder_by=m.zorder_by, optimize=m.optimize, vacuum=m.vacuum,
                                   checkpoint=m.checkpoint, run_id=run_id, summary_path=str(summary_path),
                                   lock_epoch=lock_epoch).to_args()  # fmt: skip


def maintain_summary_text(s: Mapping[str, Any]) -> str:
    """One line per run: each table's files and bytes before and after."""
    parts = []
    for name, t in MaintainSummary.from_json(s).tables.items():
        if "files_before" not in t:
            parts.append(f"{name} {t.get('skipped') or t.get('error')}")
            continue
        parts.append(f"{name} files {t['files_before']} -> {t['files_after']}, "
                     f"{t['bytes_before'] / 1e6:.1f} -> {t['bytes_after'] / 1e6:.1f} MB in {t['seconds']:.1f}s")  # fmt: skip
    return "; ".join(parts) or "no table"


def transform_job_args(cfg: PipelineConfig, folder: Path, run_id: str, summary_path: Path,
                       lock_epoch: int | None = None, replay: dict[str, Any] | None = None) -> list[str]:  # fmt: skip
    """``bronze_to_silver``'s arguments for this run; its spec goes in a file of the run folder, and so does a
    ``replay_quarantine`` run's selection (``replay``, from its plan).

    With a schema registry, its URL and credentials (from the Airflow connection) go to the run folder's
    owner-only ``secrets/`` (:func:`include.orchestration.pipeline_run.write_secret`), which the submit removes.
    """
    if cfg.transform is None:
        raise ContractError(f"pipeline {cfg.name!r} has no transform section")
    spec_file = folder / "transform-spec.json"
    spec_file.write_text(json.dumps(cfg.transform.to_json(), indent=2))
    registry = None
    vs = cfg.transform.value_schema
    k8s = cfg.cluster.kubernetes
    if vs is not None and vs.registry and cfg.cluster.profile == "kubernetes" and k8s is not None:
        # The driver pod reads the registry's settings from its secret; Airflow never holds them.
        registry = str(PurePosixPath(K8S_REGISTRY_MOUNT) / k8s.registry_secret_key)
    elif vs is not None and vs.registry:
        from include.orchestration import pipeline_run
        from include.readers import connections

        settings = connections.registry_settings(vs.registry)
        if settings.get("password"):
            connections.mask(settings["password"])
        registry_file = pipeline_run.write_secret(folder, "schema-registry.json", json.dumps(settings))
        registry = str(registry_file)
    replay_file = None
    if replay is not None:
        replay_file = folder / "replay-request.json"
        replay_file.write_text(json.dumps(replay))
    t = cfg.tables
    return TransformArgs(
        pipeline=cfg.name, bronze_path=t.bronze_path, silver_path=t.silver_path, quarantine_path=t.quarantine_path,
        checkpoint_root=t.transform_checkpoint_root, spec_file=str(spec_file), run_id=run_id,
        summary_path=str(summary_path), table_property=tuple(f"{k}={v}" for k, v in t.retention_properties().items()),
        registry_file=registry, lock_epoch=lock_epoch, replay_file=str(replay_file) if replay_file else None,
    ).to_args()  # fmt: skip


def transform_summary_text(summary: Mapping[str, Any]) -> str:
    """One line saying where the records a transform read went."""
    s = TransformSummary.from_json(summary)
    bad = ", ".join(f"{n} {f}" for f, n in sorted(s.quarantine_fields.items(), key=lambda i: -i[1]))
    text = (
        f"read {s.read} from bronze: {s.upserted} upserted, {s.deleted} deleted, "
        f"{s.quarantined} quarantined{f' ({bad})' if bad else ''}, {s.superseded} superseded by newer"
    )
    if s.replayed:
        text += f", {s.replayed} already applied"
    if s.skipped:
        text += f", {s.skipped} skipped (change events that are no row change)"
    if s.truncated_rows:
        text += f"; source truncates deleted {s.truncated_rows} silver rows"
    text += f"; silver version {s.silver_version}, epoch {s.epoch}, {s.duration_s:.1f}s in the job"
    if s.replay is not None:
        outcomes = ", ".join(f"{n} {k.replace('_', ' ')}" for k, n in sorted(s.replay.get("outcomes", {}).items()))
        text += f"; quarantine replay: {s.replay.get('selected', 0)} selected" + (f": {outcomes}" if outcomes else "")
    if s.fields_added:
        text += "; fields added: " + ", ".join(f"{f['name']} {f['type']}" for f in s.fields_added)
    if s.fields_ignored:
        text += "; fields ignored: " + ", ".join(sorted(s.fields_ignored))
        if s.fields_unknown > len(s.fields_ignored):
            text += f" and {s.fields_unknown - len(s.fields_ignored)} more (transform.limits.field_names)"
    if s.checkpoint_rebuilt:
        text += f"; checkpoint rebuilt: {s.checkpoint_rebuilt['reason']}"
    if s.value_schema:
        vs = s.value_schema
        text += f"; values read with subject {vs['subject']} version {vs['version']} (schema id {vs['id']})"
    return text


def job_run_type(context: Any) -> str:
    """The job's ``--run-type`` for this DAG run."""
    run_type = str(getattr(context["dag_run"], "run_type", "manual") or "manual")
    run_type = run_type.rsplit(".", 1)[-1].lower()
    return {"scheduled": "scheduled", "backfill": "backfill"}.get(run_type, "manual")


def _each(*steps: Callable[[], None] | None) -> Callable[[], None]:
    """One ``preexec_fn`` that runs each of ``steps`` (``None`` ones left out) in order."""
    chosen = [step for step in steps if step is not None]

    def run() -> None:
        for step in chosen:
            step()

    return run
