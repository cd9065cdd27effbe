"""Profile ``existing_master``: client mode (the driver runs on the Airflow worker) to the running cluster named
by the pipeline's Spark connection: ``spark://``, ``yarn`` (the connection's ``queue`` extra is used), or
``k8s://`` (executor pods from ``cluster.kubernetes.image``); no cluster is started or stopped."""

from __future__ import annotations

from typing import TYPE_CHECKING

from include.config import ClusterConfig, PipelineConfig
from include.contract.errors import ContractError
from include.orchestration import kubernetes_allowlist
from include.orchestration.profiles.base import DriverHereProfile, SubmitRequest, connection_master, local_env
from include.orchestration.spark_conf import job_spark_conf

if TYPE_CHECKING:  # the Spark provider is imported only when a job runs
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


class ExistingMaster(DriverHereProfile):
    """Client mode against the Spark connection's master (standalone, yarn or ``k8s://``, whose executor pods
    need ``cluster.kubernetes.image``); ``--deploy-mode client`` whatever the connection's extra says: the
    summary file is read locally."""

    name = "existing_master"

    def describe(self, cluster: ClusterConfig) -> str:
        return (
            f"existing Spark master from connection `{cluster.master_connection_id}` (profile existing_master: "
            f"client mode, the driver runs on the Airflow worker, {cluster.workers} executor(s); no cluster is "
            "started or stopped) "
        )

    def submit_hook(self, cfg: PipelineConfig, request: SubmitRequest) -> tuple[SparkSubmitHook, str]:
        from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

        from include import settings

        conn_id, master = connection_master(cfg, request.storage)
        on_k8s = master.startswith("k8s://")
        conf = job_spark_conf(cfg, transient=False, kubernetes_master=on_k8s)
        if on_k8s:
            conf.update(_executor_pods(cfg, conn_id, master))
        # On yarn and k8s the hook would turn env_vars into the application master's or driver pod's
        # environment; this machine's paths mean nothing there, and the local driver finds its Spark by itself.
        env = None if master.startswith(("yarn", "k8s://")) else local_env()
        if request.storage is not None:
            request.storage.apply(conf, env)
        hook = SparkSubmitHook(conn_id=conn_id, conf=conf, deploy_mode="client", jars=request.jars,
                               py_files=request.py_files, env_vars=env, **request.common())  # fmt: skip
        return hook, str(settings.PROJECT_ROOT / request.application)


def _executor_pods(cfg: PipelineConfig, conn_id: str, master: str) -> dict[str, str]:
    """A ``k8s://`` master's executor pods: the image (required) and namespace the connection's owner allows."""
    k8s = cfg.cluster.kubernetes
    if k8s is None or not k8s.image:
        raise ContractError(
            f"pipeline {cfg.name!r}: Spark connection {conn_id!r} is a Kubernetes master ({master}); "
            "executor pods need an image: set cluster.kubernetes.image in the pipeline file"
        )
    # The executor pods run the image with the Kafka credentials: the connection's owner must allow it.
    kubernetes_allowlist.check_connection(cfg.name, k8s, conn_id, keys=("image", "namespace"))
    conf = {"spark.kubernetes.container.image": k8s.image}
    if k8s.namespace:
        conf["spark.kubernetes.namespace"] = k8s.namespace
    return conf
