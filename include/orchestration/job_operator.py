"""The Spark job operators' base: submit one of the pipeline's jobs for this run through the Spark provider's
spark-submit hook, pointed at this run's cluster, and report its summary or its failure.

``SparkSubmitOperator`` takes its master from a connection fixed when the DAG
is written; a transient cluster's master URL exists only once the run's setup
task has started it. :class:`SparkJobOperator` is a thin operator on the
provider's hook whose master comes from the setup task's XCom, or from the
pipeline's Spark connection for an existing cluster: one submit per cluster
profile (``cluster.profile``), built by the profile's runtime part
(:mod:`include.orchestration.profiles`).

Everything the submit needs (jars, the ``--py-files`` archive, Kafka settings)
is resolved in ``execute``, so parsing the DAG file touches neither Spark nor
the network. The operators of each step are :mod:`include.orchestration.ingest_operator` and
:mod:`include.orchestration.step_operators`.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseOperator

from include.config import PipelineConfig
from include.contract.errors import ERROR_XCOM_KEY, FailureEnvelopeError, PipelineError
from include.contract.failure import read_failure
from include.contract.handoffs import ClusterStart, cluster_start, push
from include.contract.jobs import TRY_NUMBER_KEY
from include.orchestration.profiles import profile_of
from include.orchestration.profiles.base import SubmitRequest
from include.orchestration.run_context import try_number
from include.orchestration.spark_conf import storage_submit

if TYPE_CHECKING:  # the Spark provider is imported only when a job runs, OpenLineage's when lineage is asked for
    from airflow.providers.apache.spark.hooks.spark_submit import SparkSubmitHook

    from include.orchestration.lineage import Lineage
    from include.spark.cluster_stop import ClusterWatch


def submit_hook(cfg: PipelineConfig, **request: Any) -> tuple[SparkSubmitHook, str]:
    """The Spark provider's hook for one job of this pipeline, and the application path it submits: the
    pipeline's cluster profile builds it from ``request`` (the fields of
    :class:`~include.orchestration.profiles.base.SubmitRequest`). Nothing runs: ``hook.submit(application)``
    does, and ``hook._build_spark_submit_command(application)`` shows the command it would run.
    """
    return profile_of(cfg.cluster).submit_hook(cfg, SubmitRequest(**request))


def _remove_scratch(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
    with contextlib.suppress(OSError):  # other tasks' scratch may still be there
        folder.parent.rmdir()


def _each(*steps: Callable[[], None] | None) -> Callable[[], None]:
    """One ``preexec_fn`` that runs each of ``steps`` (``None`` ones left out) in order."""
    chosen = [step for step in steps if step is not None]

    def run() -> None:
        for step in chosen:
            step()

    return run


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
        (:func:`include.orchestration.run_folder.write_secret`), which the submit removes whatever ends it."""
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

    def _started(self, context: Any) -> ClusterStart:
        """What this run's ``start_cluster`` reported (nothing: a profile that starts no cluster of its own)."""
        return cluster_start(context) if profile_of(self.pipeline.cluster).transient else ClusterStart()

    def _cluster_watch(self, context: Any) -> contextlib.AbstractContextManager[ClusterWatch | None]:
        """A :class:`~include.spark.cluster_stop.ClusterWatch` on this run's transient cluster, if one was started."""
        from contextlib import nullcontext

        from include.orchestration import run_folder
        from include.spark import cluster_stop

        if not profile_of(self.pipeline.cluster).transient:
            return nullcontext(None)
        folder = run_folder.run_dir(self.pipeline, context["run_id"]) / "cluster"  # none in local mode

        def stop_job() -> None:
            proc = getattr(self._hook, "_submit_sp", None)
            if proc is not None and proc.poll() is None:
                self.log.error("the run's cluster lost a daemon: stopping spark-submit (pid %s)", proc.pid)
                proc.kill()

        return cluster_stop.ClusterWatch(folder, stop_job)

    def run_folder(self, context: Any) -> Path:
        """This run's folder of job files: the run folder here, or where the profile's driver reads them
        (``kubernetes``: the shared volume)."""
        from include.orchestration import run_folder

        folder = run_folder.run_dir(self.pipeline, context["run_id"])
        return profile_of(self.pipeline.cluster).run_folder(self.pipeline, folder)

    def execute(self, context: Any) -> dict[str, Any]:
        from include.orchestration import run_folder

        self._try_number = try_number(context)
        cfg = self.pipeline
        profile = profile_of(cfg.cluster)
        folder = self.run_folder(context)
        folder.mkdir(parents=True, exist_ok=True)
        summary_path = folder / f"{self.task_id}-summary.json"
        summary_path.unlink(missing_ok=True)
        scratch = profile.driver_scratch(folder, self.task_id)
        if scratch is not None:
            _remove_scratch(scratch)  # an earlier try's, killed with its task process
        pod_base = profile.pod_base(cfg, self.task_id, context["run_id"], self._try_number)
        try:
            # Inside the block that removes them: a submission that fails half way (a missing registry
            # connection after the Kafka options were written) leaves no credentials file behind.
            app_path = self._prepare(context, folder, summary_path, scratch, pod_base)
            ok = False
            try:
                self._submit(context, app_path)
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
                profile.after_job(cfg, self._hook, pod_base, succeeded=ok, log=self.log)
        finally:
            run_folder.remove_secrets(folder)
            if scratch is not None:  # spark-submit has ended: nothing uses the driver's scratch any more
                _remove_scratch(scratch)
        return self._finish(json.loads(summary_path.read_text()))

    def _prepare(self, context: Any, folder: Path, summary_path: Path, scratch: Path | None,
                 pod_base: str | None) -> str:  # fmt: skip
        """The job's files and credentials written, its hook built (:attr:`_hook`); returns the application path."""
        from include.orchestration import run_folder
        from include.spark import jvm_deps
        from include.spark.spark_submit import package_py_files

        cfg = self.pipeline
        from_image = profile_of(cfg.cluster).code_from_image
        started = self._started(context)
        application, args = self.submission(context, folder, summary_path)
        storage = storage_submit(cfg, folder)
        # S3A and its AWS SDK modules only for a pipeline whose tables are on an object store.
        jars = [*jvm_deps.spark_jars(), *(jvm_deps.s3_jars() if storage is not None else ())]
        self._hook, app_path = submit_hook(
            cfg, application=application, application_args=args, name=f"{self.job_name}:{cfg.name}",
            run_master=self.master, pod_base=pod_base, run_id=context["run_id"],
            jars=None if from_image else ",".join(str(j) for j in jars),
            py_files=None if from_image else str(package_py_files()), workers=started.workers or None,
            backlog=started.backlog, scratch_dir=scratch,
            cluster_dir=run_folder.run_dir(cfg, context["run_id"]) / "cluster", storage=storage,
        )  # fmt: skip
        self.log.info("submitting %s for pipeline %s to %s (profile %s)", app_path, cfg.name,
                      self._hook._connection["master"], cfg.cluster.profile)  # fmt: skip
        return app_path

    def _submit(self, context: Any, app_path: str) -> None:
        """Run spark-submit under this run's cluster watch; a lost daemon of the cluster is the error then."""
        from include.orchestration import run_folder
        from include.spark import cluster_state, leftovers
        from include.spark.spark_submit import dies_with_parent

        if self._hook is None:
            raise PipelineError(f"{self.task_id}: no spark-submit hook was built", pipeline=self.pipeline.name)
        with self._cluster_watch(context) as watch:
            try:
                self._hook.submit(app_path, preexec_fn=_each(
                    dies_with_parent(),
                    # In this machine's run folder (never the pods' volume): a run that takes
                    # the lock over from this one stops exactly these processes.
                    leftovers.record_job(run_folder.run_dir(self.pipeline, context["run_id"]), self.task_id),
                ))  # fmt: skip
            except Exception as exc:
                if watch is not None and watch.lost:
                    raise cluster_state.ClusterError(watch.message()) from exc
                raise

    def _job_failure(self, summary_path: Path) -> PipelineError | None:
        """The error of the failure envelope the job wrote to ``summary_path`` (its summary file, or a later step's
        error file), rebuilt as its class, or ``None`` (no file, or a result). An envelope this code cannot read
        is the failure itself (:class:`FailureEnvelopeError`, naming the versions); a traceback goes to the log."""
        try:
            data = json.loads(summary_path.read_text())
        except (OSError, ValueError):
            return None
        try:
            failure = read_failure(data, source=str(summary_path))
        except FailureEnvelopeError as exc:
            return exc
        if failure is not None and failure.traceback:
            self.log.error("%s", failure.traceback)
        return failure.error() if failure is not None else None

    def _report_failure(self, context: Any, failure: PipelineError) -> None:
        """The task log's lines for a job's error, from its fields, and the error in XCom ``error`` for
        ``record_run`` (the run ledger and the monitor render it from there)."""
        fields = {k: v for k, v in failure.fields().items() if v is not None and k != "cause"}
        self.log.error("%s failed: %s: %s", self.task_id, type(failure).__name__, failure)
        if fields:
            self.log.error("error fields: %s", ", ".join(f"{k}={v}" for k, v in fields.items()))
        push(context.get("ti"), ERROR_XCOM_KEY, failure.to_dict())

    def on_kill(self) -> None:
        if self._hook is not None:
            self._hook.on_kill()


def lost_lock(failure: PipelineError) -> bool:
    """Whether a job failed because a later run took the pipeline's lock over (itself, or its failed batch)."""
    from include.contract.errors import StaleLockError

    return isinstance(failure, StaleLockError) or isinstance(getattr(failure, "cause", None), StaleLockError)


def raise_if_lock_lost(failure: PipelineError) -> None:
    """End the task without a retry when its job lost the lock: a retry would hold the same stale epoch."""
    if lost_lock(failure):
        from airflow.sdk.exceptions import AirflowFailException

        raise AirflowFailException(str(failure)) from failure
