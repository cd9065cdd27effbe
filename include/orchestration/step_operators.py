"""The tasks of the steps the run's Spark application runs after ingest: the transform and the maintenance."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include.contract.errors import PipelineError
from include.contract.failure import read_failure
from include.contract.handoffs import request_plan
from include.contract.jobs import PREFLIGHT_TASK
from include.orchestration.job_args import (
    MAINTAIN_APPLICATION,
    MAINTAIN_ERROR_FILE,
    TRANSFORM_APPLICATION,
    TRANSFORM_ERROR_FILE,
    maintain_job_args,
    transform_job_args,
)
from include.orchestration.job_operator import SparkJobOperator, raise_if_lock_lost
from include.orchestration.job_summaries import maintain_summary_text, transform_summary_text
from include.orchestration.run_context import maintenance_reason, try_number

if TYPE_CHECKING:  # OpenLineage's modules only when lineage is asked for
    from include.orchestration.lineage import Lineage


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
                failure = self._job_failure(error_path) or PipelineError(
                    f"{error_path}: the step's failure file is no JSON", pipeline=self.pipeline.name)  # fmt: skip
                self._report_failure(context, failure)
                raise_if_lock_lost(failure)
                # An AirflowException (the task may retry: alone, the step may pass) caused by the step's own error.
                raise AirflowException(
                    f"{self.task_id} of pipeline {self.pipeline.name!r} failed in the run's Spark application: "
                    f"{failure} ({self.after_failure}; a retry of this task submits it alone)"
                ) from failure
            if summary_path.exists():
                summary = json.loads(summary_path.read_text())
                if summary.get("run_id") == context["run_id"] and read_failure(summary) is None:
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
        plan = request_plan(context)
        return transform_job_args(self.pipeline, folder, context["run_id"], summary_path, plan.lock_epoch, plan.replay)

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
        return maintain_job_args(self.pipeline, context["run_id"], summary_path, request_plan(context).lock_epoch)

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
