"""Profile ``local_standalone``: each run starts its own Spark standalone cluster on 127.0.0.1 (or, for a small
backlog, runs in local mode inside the driver), and its jobs submit in client mode to it."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include.config import ClusterConfig, PipelineConfig
from include.contract.errors import ContractError
from include.orchestration.profiles.base import DriverHereProfile, SubmitRequest, local_env
from include.orchestration.spark_conf import job_spark_conf

if TYPE_CHECKING:  # the Spark provider is imported only when a job runs
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook


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



class LocalStandalone(DriverHereProfile):
    """Client mode against this run's own cluster (or local mode), on 127.0.0.1."""

    name = "local_standalone"
    transient = True

    def describe(self, cluster: ClusterConfig) -> str:
        c = cluster
        local = (f"; a backlog of at most {c.local_max_records} records runs in local mode inside the driver, "
                 "no cluster" if c.local_max_records else "")  # fmt: skip
        scaled = f", fewer for a backlog under {c.records_per_worker} per worker" if c.records_per_worker else ""
        return (
            f"**start_cluster** (setup: Spark standalone master + {c.workers} worker(s){scaled} x {c.worker_cores} "
            f"core(s), {c.worker_memory} on 127.0.0.1{local}; **stop_cluster** is its teardown) "
        )

    def driver_scratch(self, folder: Path, task_id: str) -> Path | None:
        """Where a job's driver on this machine keeps its scratch (its copy of the jars and files, block
        manager and shuffle files in local mode): in the run folder, not the system's temporary folder.

        Spark removes its scratch when the driver exits, but not when the driver
        is killed (the job's kill tests, an out-of-memory kill, a task killed with
        its driver): in ``/tmp`` each kill left about 23 MB nobody removed. Here
        the task removes the folder once spark-submit has ended, and the next try
        of the task removes what a killed try's task process left.
        """
        return folder / "scratch" / task_id

    def submit_hook(self, cfg: PipelineConfig, request: SubmitRequest) -> tuple[SparkSubmitHook, str]:
        from include import settings
        from include.spark.cluster_state import SECRET_FILE

        env = local_env()
        # The run's cluster listens on 127.0.0.1; so does the driver (no hostname lookup, no warning).
        env["SPARK_LOCAL_IP"] = "127.0.0.1"
        if request.scratch_dir is not None and not os.environ.get("SPARK_LOCAL_DIRS"):  # the worker's own choice wins
            env["SPARK_LOCAL_DIRS"] = str(request.scratch_dir)
        if not request.run_master:
            raise ContractError("no master URL from this run's cluster setup task")
        if request.cluster_dir is not None:
            # The driver joins the run's cluster with its secret (include/spark/spark_cluster.py).
            env[settings.SPARK_SECRET_FILE_ENV] = str(Path(request.cluster_dir) / SECRET_FILE)
        conf = job_spark_conf(cfg, transient=True, workers=request.workers, backlog=request.backlog)
        if request.storage is not None:
            request.storage.apply(conf, env)
        hook = _hook_class()(master=request.run_master, conf=conf, jars=request.jars, py_files=request.py_files,
                             env_vars=env, **request.common())  # fmt: skip
        return hook, str(settings.PROJECT_ROOT / request.application)
