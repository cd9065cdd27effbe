"""What a job operator reads of its DAG run beyond the hand-offs' readers: the try, the run type, and whether
the preflight found maintenance due."""

from __future__ import annotations

from typing import Any

from include.contract.handoffs import PreflightResult, pull


def maintenance_reason(context: Any, preflight_task_id: str) -> str | None:
    """Why the preflight found the tables' maintenance due in this run, or ``None``."""
    return PreflightResult.from_xcom(pull(context, preflight_task_id)).maintenance_due


def try_number(context: Any) -> int:
    """Airflow's try number of the running task (1 on its first try; 1 without a task instance)."""
    return int(getattr(context.get("ti"), "try_number", 1) or 1)


def job_run_type(context: Any) -> str:
    """The job's ``--run-type`` for this DAG run."""
    run_type = str(getattr(context["dag_run"], "run_type", "manual") or "manual")
    run_type = run_type.rsplit(".", 1)[-1].lower()
    return {"scheduled": "scheduled", "backfill": "backfill"}.get(run_type, "manual")
