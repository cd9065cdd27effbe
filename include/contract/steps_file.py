"""``steps.json``: the steps of a run's one Spark application, from the ingest task to ``spark_jobs/run_steps.py``.

Pure Python, no I/O. The ingest operator writes a :class:`StepsFile` with
:meth:`StepsFile.to_json` in the run folder and submits ``run_steps.py
--steps-file <it>``; the application reads it back with
:meth:`StepsFile.from_json`, which refuses a file it could not run (naming the
file and the field) before any session starts::

    {"pipeline": "orders", "steps": [
        {"job": "kafka_to_bronze", "args": ["--pipeline=orders", ...]},
        {"job": "bronze_to_silver", "args": [...], "error_path": "<run folder>/transform-error.json"}]}

Each step's ``args`` are exactly those its job takes on its own; a step after
the first has an ``error_path``, where its failure envelope
(:mod:`include.contract.failure`) goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from include.contract.errors import StepsFileError

#: The jobs a run's application can run, by name (``spark_jobs/<name>.py``, each with its ``STEP``).
STEP_JOBS = ("kafka_to_bronze", "kafka_backfill", "bronze_to_silver", "maintain_tables")


@dataclass(frozen=True)
class RunStep:
    """One step: its job (one of :data:`STEP_JOBS`), the job's arguments, and where its failure goes when it is
    not the first step (``None`` for the first, whose failure goes to its summary file)."""

    job: str
    args: tuple[str, ...]
    error_path: str | None = None

    def to_json(self) -> dict[str, object]:
        """The step as JSON-ready data (``error_path`` only when set)."""
        out: dict[str, object] = {"job": self.job, "args": list(self.args)}
        if self.error_path is not None:
            out["error_path"] = self.error_path
        return out


@dataclass(frozen=True)
class StepsFile:
    """A run's application: the pipeline's name and its steps, in the order they run."""

    pipeline: str
    steps: tuple[RunStep, ...]

    def to_json(self) -> dict[str, object]:
        """The file's content as JSON-ready data (the module docstring shows it)."""
        return {"pipeline": self.pipeline, "steps": [s.to_json() for s in self.steps]}

    @classmethod
    def from_json(cls, data: object, *, source: str = "steps.json") -> StepsFile:
        """The file :meth:`to_json` wrote; :class:`StepsFileError` naming ``source`` and the field otherwise."""
        steps = data.get("steps") if isinstance(data, Mapping) else None
        if not isinstance(steps, list) or not steps:
            raise StepsFileError(f"{source}: field 'steps' must be a non-empty list of {{job, args}}")
        pipeline = data.get("pipeline") if isinstance(data, Mapping) else None
        return cls(str(pipeline or "?"), tuple(_step(s, i, source) for i, s in enumerate(steps)))


def _step(data: object, i: int, source: str) -> RunStep:
    """``steps[i]`` of the file ``source``, checked."""
    job = data.get("job") if isinstance(data, Mapping) else None
    if not isinstance(data, Mapping) or job not in STEP_JOBS:
        raise StepsFileError(f"{source}: steps[{i}].job is {job!r}; expected one of {', '.join(STEP_JOBS)}")
    args = data.get("args")
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise StepsFileError(f"{source}: steps[{i}].args must be a list of strings")
    error_path = data.get("error_path")
    if i and not error_path:
        raise StepsFileError(
            f"{source}: steps[{i}].error_path is missing: a later step's failure must be written"
        )
    if error_path is not None and not isinstance(error_path, str):
        raise StepsFileError(f"{source}: steps[{i}].error_path must be a string, got {error_path!r}")
    return RunStep(str(job), tuple(args), error_path or None)
