"""A run's Spark application: its steps (ingest or backfill, then transform, then maintenance) in one driver.

Submitted by the ingest task when the pipeline has a transform
(``include/orchestration/ingest_operator.py``)::

    spark-submit ... --py-files kde_jobs.zip spark_jobs/run_steps.py --steps-file <run folder>/steps.json

``steps.json`` names each step's job and its arguments, exactly those the job
takes on its own::

    {"pipeline": "orders", "steps": [
        {"job": "kafka_to_bronze", "args": ["--pipeline=orders", ...]},
        {"job": "bronze_to_silver", "args": [...], "error_path": "<run folder>/transform-error.json"}]}

Why one application: each spark-submit pays a JVM start, a SparkSession, a
cold executor and Delta's first-use class loading, seconds each; a run with
a transform paid them twice.

Outcomes, so that Airflow still shows each step's own result:

- Every step's arguments are checked before the session starts (exit 2).
- The first step failing ends the application with exit 1: nothing after it runs.
- A later step failing (any error) leaves what the steps before it committed;
  its message goes to its ``error_path`` and the application exits 0; the
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
from spark_jobs.job_common import JobStep, build_session, configure_logging, write_failure

#: The jobs a run's application can run, by name (each module's ``STEP``).
JOBS = {
    "kafka_to_bronze": "spark_jobs.kafka_to_bronze",
    "kafka_backfill": "spark_jobs.kafka_backfill",
    "bronze_to_silver": "spark_jobs.bronze_to_silver",
    "maintain_tables": "spark_jobs.maintain_tables",
}


@dataclass(frozen=True)
class PlannedStep:
    """One step: its job, its parsed config and where a later step's failure is written."""

    step: JobStep
    cfg: Any
    error_path: str | None


def read_steps(path: str) -> tuple[str, list[tuple[str, list[str], str | None]]]:
    """The pipeline name and ``(job, args, error_path)`` per step of the steps file ``path``."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise StepsFileError(f"{path}: cannot read the steps file: {exc}") from None
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list) or not steps:
        raise StepsFileError(f"{path}: field 'steps' must be a non-empty list of {{job, args}}")
    out = []
    for i, s in enumerate(steps):
        job = s.get("job") if isinstance(s, dict) else None
        if job not in JOBS:
            raise StepsFileError(f"{path}: steps[{i}].job is {job!r}; expected one of {', '.join(JOBS)}")
        args = s.get("args")
        if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
            raise StepsFileError(f"{path}: steps[{i}].args must be a list of strings")
        if i and not s.get("error_path"):
            raise StepsFileError(f"{path}: steps[{i}].error_path is missing: a later step's failure must be written")
        out.append((job, args, s.get("error_path")))
    return str(data.get("pipeline") or "?"), out


def main(argv: list[str] | None = None) -> int:
    """Entry point: read every step's arguments, start one session, run the steps in order."""
    configure_logging()
    try:
        a = StepsArgs.from_args(sys.argv[1:] if argv is None else argv)
        pipeline, raw = read_steps(a.steps_file)
    except StepsFileError as exc:
        print(f"run_steps: bad argument: {exc}", file=sys.stderr)
        return 2
    planned: list[PlannedStep] = []
    for job, args, error_path in raw:
        step: JobStep = importlib.import_module(JOBS[job]).STEP
        try:
            planned.append(PlannedStep(step, step.parse(args), error_path))
        except step.bad_argument as exc:
            print(f"{step.name}: bad argument: {exc}", file=sys.stderr)
            return 2
    for p_ in planned:
        if p_.error_path:
            Path(p_.error_path).unlink(missing_ok=True)
    spark = build_session(f"run:{pipeline}")
    try:
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
                known = isinstance(exc, PipelineError)
                message = str(exc) if known else f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
                detail = None if known else traceback.format_exc()[-4000:]
                _write_error(p_.error_path, p_.step.name, message, detail, as_pipeline_error(exc, pipeline=pipeline))
                print(f"{p_.step.name}: {message} (written to {p_.error_path}; the steps before it stand)",
                      file=sys.stderr)  # fmt: skip
                return 0
            print(f"{p_.step.name}: pipeline={p_.cfg.pipeline} {p_.step.describe(result)}", flush=True)
    finally:
        spark.stop()
    return 0


def _write_error(path: str | None, job: str, message: str, detail: str | None, error: PipelineError) -> None:
    """A later step's failure: ``error`` is the message as before, ``failure`` the error as data
    (:meth:`~include.contract.errors.PipelineError.to_dict`), which the step's task raises again."""
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps({"job": job, "error": message, "traceback": detail,
                                          "failure": error.to_dict()}, indent=2))  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
