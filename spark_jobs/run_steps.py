"""A run's Spark application: its steps (ingest or backfill, then transform, then maintenance) in one driver.

Submitted by the ingest task when the pipeline has a transform
(``include/orchestration/ingest_operator.py``)::

    spark-submit ... --py-files kde_jobs.zip spark_jobs/run_steps.py --steps-file <run folder>/steps.json

``steps.json`` (:class:`include.contract.steps_file.StepsFile`) names each step's
job and its arguments, exactly those the job takes on its own.

Why one application: each spark-submit pays a JVM start, a SparkSession, a
cold executor and Delta's first-use class loading, seconds each; a run with
a transform paid them twice.

Outcomes, so that Airflow still shows each step's own result:

- Every step's arguments are checked before the session starts (exit 2).
- The first step failing ends the application with exit 1: nothing after it runs.
- A later step failing (any error) leaves what the steps before it committed;
  its failure envelope (:mod:`include.contract.failure`) goes to its
  ``error_path`` and the application exits 0; the
  steps after it do not run (maintenance never runs after a failed transform,
  whose unread bronze files it could otherwise compact away). The step's task
  reports that failure; its retry submits the step alone.
- Each step writes its own summary file, as when it runs alone.
"""

from __future__ import annotations

import importlib
import json
import sys
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from include.contract.errors import PipelineError, StepsFileError, as_pipeline_error
from include.contract.jobs import StepsArgs
from include.contract.steps_file import STEP_JOBS, StepsFile
from spark_jobs.job_common import JobStep, build_session, configure_logging, write_failure

#: The module of each job a run's application can run (each module's ``STEP``).
JOBS = {name: f"spark_jobs.{name}" for name in STEP_JOBS}


@dataclass(frozen=True)
class PlannedStep:
    """One step: its job, its parsed config and where a later step's failure is written."""

    step: JobStep
    cfg: Any
    error_path: str | None


def read_steps(path: str) -> StepsFile:
    """The steps file ``path``, checked (:class:`StepsFileError` naming the file and the field)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StepsFileError(f"{path}: cannot read the steps file: {exc}") from None
    return StepsFile.from_json(data, source=path)


def main(argv: list[str] | None = None) -> int:
    """Entry point: read every step's arguments, start one session, run the steps in order."""
    configure_logging()
    try:
        a = StepsArgs.from_args(sys.argv[1:] if argv is None else argv)
        steps = read_steps(a.steps_file)
    except StepsFileError as exc:
        print(f"run_steps: bad argument: {exc}", file=sys.stderr)
        return 2
    planned: list[PlannedStep] = []
    for raw in steps.steps:
        step: JobStep = importlib.import_module(JOBS[raw.job]).STEP
        try:
            planned.append(PlannedStep(step, step.parse(list(raw.args)), raw.error_path))
        except step.bad_argument as exc:
            print(f"{step.name}: bad argument: {exc}", file=sys.stderr)
            return 2
    for p_ in planned:
        if p_.error_path:
            Path(p_.error_path).unlink(missing_ok=True)
    spark = build_session(f"run:{steps.pipeline}")
    try:
        return _run(spark, planned, steps.pipeline)
    finally:
        spark.stop()


def _run(spark: Any, planned: list[PlannedStep], pipeline: str) -> int:
    """Run the steps on ``spark``: 1 when the first fails, 0 otherwise (a later step's failure is its file's)."""
    first, *later = planned
    try:
        result = first.step.run(spark, first.cfg)
    except PipelineError as exc:
        print(f"{first.step.name}: {exc}", file=sys.stderr)
        write_failure(first.step.name, first.cfg, exc)
        return 1
    print(f"{first.step.name}: pipeline={first.cfg.pipeline} {first.step.describe(result)}", flush=True)
    for p_ in later:
        try:
            result = p_.step.run(spark, p_.cfg)
        except Exception as exc:  # noqa: BLE001 - any failure of a later step is that step's outcome
            detail = None if isinstance(exc, PipelineError) else traceback.format_exc()[-4000:]
            error = as_pipeline_error(exc, pipeline=pipeline)
            write_failure(p_.step.name, p_.cfg, error, path=p_.error_path, traceback=detail)
            print(f"{p_.step.name}: {error} (written to {p_.error_path}; the steps before it stand)",
                  file=sys.stderr)  # fmt: skip
            return 0
        print(f"{p_.step.name}: pipeline={p_.cfg.pipeline} {p_.step.describe(result)}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
