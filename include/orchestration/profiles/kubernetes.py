"""Profile ``kubernetes``: cluster mode to a ``k8s://`` master; the driver runs in a pod, reads code from the
image and exchanges files through the shared volume, and Kafka settings reach it in a Kubernetes secret
mounted in the driver pod, never on the command line the hook logs. Unit-tested only: no Kubernetes here.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from include.config import ClusterConfig, KubernetesConfig, PipelineConfig
from include.contract.errors import ContractError
from include.orchestration import kubernetes_allowlist
from include.orchestration.profiles.base import SubmitRequest, TaskLog, connection_master
from include.orchestration.spark_conf import job_spark_conf

if TYPE_CHECKING:  # the Spark provider is imported only when a job runs
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

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



def driver_pod_kill_command(master: str, namespace: str, pod: str) -> list[str]:
    """``spark-submit --kill``: Spark's own way of deleting a driver pod (and what it owns)."""
    from include.spark.spark_submit import spark_submit_binary

    return [spark_submit_binary(), "--master", master, "--conf", f"spark.kubernetes.namespace={namespace}",
            "--kill", f"{namespace}:{pod}"]  # fmt: skip



class Kubernetes:
    """Cluster mode, the driver in a pod of the image, the jobs from the image (whose jars must include S3A's
    for tables on an object store)."""

    name = "kubernetes"
    transient = False
    code_from_image = True

    def describe(self, cluster: ClusterConfig) -> str:
        k8s = cluster.kubernetes
        where = f"image `{k8s.image}`, namespace `{k8s.namespace}`" if k8s else ""
        return (
            f"Kubernetes in cluster mode through connection `{cluster.master_connection_id}` (profile kubernetes: "
            f"Spark creates a driver pod and {cluster.workers} executor pod(s) per job, {where}, and removes them; "
            "no start/stop cluster task) "
        )

    def submit_hook(self, cfg: PipelineConfig, request: SubmitRequest) -> tuple[SparkSubmitHook, str]:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        conn_id, master = connection_master(cfg, request.storage, driver_remote=True)
        k8s = cfg.cluster.kubernetes
        if not master.startswith("k8s://"):
            raise ContractError(
                f"pipeline {cfg.name!r}: cluster.profile kubernetes needs a k8s://https://... master, but Spark "
                f"connection {conn_id!r} names {master!r}"
            )
        if k8s is None or not request.pod_base or not request.run_id:
            raise ContractError(f"pipeline {cfg.name!r}: profile kubernetes needs cluster.kubernetes, a pod name and a run id")
        # Image, namespace, service account, volume claim and secrets: code and secrets, the connection owner's call.
        kubernetes_allowlist.check_connection(cfg.name, k8s, conn_id)
        conf = {**job_spark_conf(cfg, transient=False, kubernetes_master=True, driver_in_pod=True),
                **kubernetes_conf(cfg, pod_base=request.pod_base, run_id=request.run_id)}  # fmt: skip
        if request.storage is not None:
            request.storage.apply(conf, None)
        # No env_vars: the hook would send this machine's SPARK_HOME to the driver pod.
        hook = SparkSubmitHook(conn_id=conn_id, conf=conf, deploy_mode="cluster", jars=None,
                               py_files=image_uri(k8s, "kde_jobs.zip"), env_vars=None, **request.common())  # fmt: skip
        return hook, image_uri(k8s, request.application)

    def run_folder(self, cfg: PipelineConfig, local: Path) -> Path:
        """On the shared volume: the driver pod reads the request files and writes the summary there."""
        k8s = cfg.cluster.kubernetes
        if k8s is not None and k8s.shared_dir:
            return Path(k8s.shared_dir) / "runs" / cfg.name / local.name
        return local

    def driver_scratch(self, folder: Path, task_id: str) -> Path | None:
        return None  # the driver's scratch is in its pod

    def pod_base(self, cfg: PipelineConfig, task_id: str, run_id: str, try_number: int) -> str | None:
        return k8s_pod_base(cfg.name, task_id, run_id, try_number)

    def kafka_options_file(self, cfg: PipelineConfig, folder: Path, client: dict[str, str]) -> str | None:
        """The secret mounted in the driver pod (no file here; Airflow never holds those settings)."""
        k8s = cfg.cluster.kubernetes
        return kafka_options_path(k8s) if k8s is not None else None

    def registry_file(self, cfg: PipelineConfig, folder: Path, registry: str) -> str:
        """The driver pod reads the registry's settings from its secret; Airflow never holds them."""
        k8s = cfg.cluster.kubernetes
        if k8s is None:
            raise ContractError(f"pipeline {cfg.name!r}: profile kubernetes needs cluster.kubernetes")
        return str(PurePosixPath(K8S_REGISTRY_MOUNT) / k8s.registry_secret_key)

    def after_job(self, cfg: PipelineConfig, hook: SparkSubmitHook | None, pod_base: str | None, *,
                  succeeded: bool, log: TaskLog) -> None:  # fmt: skip
        """Spark deleted the executor pods; the finished driver pod goes too, by policy."""
        k8s = cfg.cluster.kubernetes
        if k8s is None or hook is None or not pod_base:
            return
        pod = f"{pod_base}-driver"
        policy = k8s.delete_driver_pod
        if policy == "never" or (policy == "on_success" and not succeeded):
            log.info("keeping driver pod %s/%s (delete_driver_pod: %s)", k8s.namespace, pod, policy)
            return
        cmd = driver_pod_kill_command(hook._connection["master"], k8s.namespace or "default", pod)
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
        if proc.returncode:
            # A finished pod left behind costs no resources; it must not fail a job that succeeded.
            log.warning("could not delete driver pod %s/%s (exit %s): %s", k8s.namespace, pod,
                        proc.returncode, (proc.stdout + proc.stderr)[-2000:])  # fmt: skip
