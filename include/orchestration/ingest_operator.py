"""The ingest task: ``spark_jobs/kafka_to_bronze.py`` (or ``kafka_backfill.py`` for a backfill), and, when the
run has later steps, the run's one Spark application (``spark_jobs/run_steps.py``) that runs them after it.

Kafka settings reach the job in a file readable only by its owner (or, with profile ``kubernetes``, in a
Kubernetes secret mounted in the driver pod), never on the command line the hook logs.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include.contract.actions import known
from include.contract.handoffs import PreflightResult, RequestPlan, pull
from include.contract.jobs import (
    CHECK_REQUEST_TASK,
    MAINTAIN_TASK,
    PREFLIGHT_TASK,
    TRANSFORM_TASK,
    BackfillArgs,
    IngestArgs,
    StepsArgs,
)
from include.contract.steps_file import RunStep, StepsFile
from include.orchestration.job_args import (
    APPLICATION,
    BACKFILL_APPLICATION,
    MAINTAIN_APPLICATION,
    MAINTAIN_ERROR_FILE,
    RUN_STEPS_APPLICATION,
    TRANSFORM_APPLICATION,
    TRANSFORM_ERROR_FILE,
    maintain_job_args,
    transform_job_args,
)
from include.orchestration.job_operator import SparkJobOperator
from include.orchestration.job_summaries import ingest_summary_text
from include.orchestration.profiles import profile_of
from include.orchestration.run_context import job_run_type, maintenance_reason

if TYPE_CHECKING:  # OpenLineage's modules only when lineage is asked for
    from include.orchestration.lineage import Lineage


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
        self._request: tuple[str | None, RequestPlan] | None = None

    def _plan(self, context: Any) -> RequestPlan:
        """``check_request``'s plan for this run: read once (the application, the arguments and each later
        step ask for it), again only for another run."""
        run_id = context.get("run_id")
        if self._request is None or self._request[0] != run_id:
            self._request = (run_id, RequestPlan.from_xcom(pull(context, self.request_task_id)))
        return self._request[1]

    def application_for(self, context: Any) -> str:
        return BACKFILL_APPLICATION if self._plan(context).is_backfill else APPLICATION

    def job_args(self, context: Any, folder: Path, summary_path: Path) -> list[str]:
        from include.readers import connections

        cfg = self.pipeline
        plan = self._plan(context)
        client = connections.kafka_client_config(cfg.kafka.connection_id)
        self._bootstrap = client["bootstrap.servers"]
        options_file = self._kafka_options(folder, client)
        run_type = job_run_type(context)
        if plan.is_backfill:
            request_file = folder / "backfill-request.json"
            request_file.write_text(json.dumps({k: plan.to_xcom().get(k) for k in
                                                ("action", "reason", "requested_by", "ranges", "time_range")}))  # fmt: skip
            return BackfillArgs(
                pipeline=cfg.name, bootstrap_servers=client["bootstrap.servers"], bronze_path=cfg.tables.bronze_path,
                request_file=str(request_file), run_id=context["run_id"],
                run_type="backfill" if run_type == "backfill" else "manual", summary_path=str(summary_path),
                lock_epoch=plan.lock_epoch, kafka_options_file=options_file or None,
            ).to_args()  # fmt: skip
        preflight = PreflightResult.from_xcom(pull(context, self.preflight_task_id))
        preflight_file = folder / "preflight.json"
        preflight_file.write_text(json.dumps(preflight.job_file))
        spec = known(plan.action)
        rebuild = spec is not None and spec.rebuilds_checkpoint
        who = f" by {plan.requested_by}" if plan.requested_by else ""
        args = IngestArgs.for_pipeline(cfg, bootstrap_servers=client["bootstrap.servers"], run_id=context["run_id"],
                                       run_type="rebuild_checkpoint" if rebuild else run_type,
                                       summary_path=str(summary_path))  # fmt: skip
        return replace(args, kafka_options_file=options_file or None, preflight_file=str(preflight_file),
                       lock_epoch=plan.lock_epoch,
                       rebuild_checkpoint=f"asked{who}: {plan.reason}" if rebuild else None,
                       ).to_args()  # fmt: skip

    def submission(self, context: Any, folder: Path, summary_path: Path) -> tuple[str, list[str]]:
        """With a transform, or maintenance due: the run's application runs this step, then the transform,
        then the maintenance (one driver, one session); the transform and maintain tasks report theirs.
        Otherwise this step's job alone."""
        application, args = super().submission(context, folder, summary_path)
        cfg = self.pipeline
        later: list[tuple[str, str, str, Callable[[Path], list[str]]]] = []
        epoch = self._plan(context).lock_epoch
        if cfg.has_transform:
            later.append((self.transform_task_id, TRANSFORM_APPLICATION, TRANSFORM_ERROR_FILE,
                          lambda summary: transform_job_args(cfg, folder, context["run_id"], summary, epoch,
                                                             self._plan(context).replay)))  # fmt: skip
        if maintenance_reason(context, self.preflight_task_id):
            later.append((self.maintain_task_id, MAINTAIN_APPLICATION, MAINTAIN_ERROR_FILE,
                          lambda summary: maintain_job_args(cfg, context["run_id"], summary, epoch)))  # fmt: skip
        self._later = bool(later)
        if not later:
            return application, args
        steps = [RunStep(Path(application).stem, tuple(args))]
        for task_id, later_app, error_file, job_args in later:
            later_summary, error_path = folder / f"{task_id}-summary.json", folder / error_file
            # Whatever a former try left must not pass for this one's outcome.
            later_summary.unlink(missing_ok=True)
            error_path.unlink(missing_ok=True)
            steps.append(RunStep(Path(later_app).stem, tuple(job_args(later_summary)), str(error_path)))
        steps_file = folder / "steps.json"
        steps_file.write_text(json.dumps(StepsFile(cfg.name, tuple(steps)).to_json(), indent=2))
        self.log.info("one Spark application for %s (%s)", " then ".join(s_.job for s_ in steps), steps_file)
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
        """Where the job reads its Kafka options: the cluster profile says
        (:meth:`~include.orchestration.profiles.base.ClusterProfile.kafka_options_file`)."""
        return profile_of(self.pipeline.cluster).kafka_options_file(self.pipeline, folder, client)

    def lineage(self, summary: dict[str, Any] | None) -> Lineage:
        from include.orchestration.lineage import ingest_lineage
        from include.readers import connections

        cfg = self.pipeline
        bootstrap = self._bootstrap or connections.kafka_client_config(cfg.kafka.connection_id)["bootstrap.servers"]
        return ingest_lineage(cfg, bootstrap, summary)

    def summary_line(self, summary: dict[str, Any]) -> str:
        return "SUMMARY ingest: " + ingest_summary_text(summary)
