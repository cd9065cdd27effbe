"""A job's Spark settings: the pipeline's cluster size, the JVM flags, and how it reaches an object store.

Each cluster profile (:mod:`include.orchestration.profiles`) asks :func:`job_spark_conf` with its own
answers (its own cluster, executors in pods, the driver in a pod) and adds what is its alone.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from include.config import PipelineConfig

#: Avro's own bounds (Avro 1.12, in Spark 4.2): a length or count over them throws before the decoder allocates.
AVRO_LIMITS = ("string", "bytes", "collectionItems")


def avro_limit_flags(cfg: PipelineConfig) -> str:
    """JVM flags that bound what Avro allocates for one value to the pipeline's ``transform.max_value_bytes``.

    A value's string, bytes or array cannot be longer than the value itself, yet a 10-byte value whose
    length varint claims 2 GiB made the decoder allocate that much: the executor died of OutOfMemoryError
    and no record of the batch reached silver. With the bound, Avro throws instead, PERMISSIVE ``from_avro``
    gives that value a record of nulls, and it goes to quarantine alone. Empty without a transform.
    """
    if not cfg.has_transform:
        return ""
    bound = max(t.spec.max_value_bytes for t in cfg.silver_targets())
    return "".join(f" -Dorg.apache.avro.limits.{kind}.maxLength={bound}" for kind in AVRO_LIMITS)


def job_spark_conf(cfg: PipelineConfig, *, transient: bool, kubernetes_master: bool = False,
                   driver_in_pod: bool = False, workers: int | None = None,
                   backlog: int | None = None) -> dict[str, str]:  # fmt: skip
    """Spark settings of a job for this pipeline's cluster profile (without the per-run pod settings).

    ``transient``: this run's own standalone cluster on 127.0.0.1.
    ``backlog``: the records this run's cluster was sized for (``start_cluster``); up to
    :data:`include.spark.jvm_cds.SHORT_JOB_MAX_RECORDS` its executors' JIT stops at C1 too.
    ``kubernetes_master``: the executors run in pods of ``cluster.kubernetes.image``, whose own Python
    runs the job: this machine's interpreter path means nothing there. ``driver_in_pod``: so does the
    driver (cluster mode, profile ``kubernetes``), which reads the class-data-sharing archive from the image.
    """
    from include.spark import jvm_cds
    from include.spark.spark_submit import BASE_CONF, KAFKA_JVM_FLAGS, driver_java_options

    k8s = cfg.cluster.kubernetes
    in_pod = kubernetes_master and driver_in_pod
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
    if not in_pod:
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
    from include.orchestration import run_folder
    from include.readers import object_store

    store = object_store.store_settings(spark_locations(cfg), cfg.tables.storage_connection_id)
    if store is None:
        return None
    secrets = store.hadoop_secrets()
    path = run_folder.write_secret(folder, "object-store.json", json.dumps(secrets)) if secrets else None
    return StorageSubmit(store.hadoop_options(), path)
