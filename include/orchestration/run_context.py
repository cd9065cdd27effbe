"""What a job operator reads of its DAG run: the try, the run type, and the earlier tasks' XComs
(``check_request``'s plan, the lock's epoch, whether maintenance is due)."""

from __future__ import annotations

from typing import Any

from include.contract import handoffs
from include.contract.handoffs import PreflightResult, pull
from include.contract.jobs import CHECK_REQUEST_TASK


def maintenance_reason(context: Any, preflight_task_id: str) -> str | None:
    """Why the preflight found the tables' maintenance due in this run, or ``None``."""
    return PreflightResult.from_xcom(pull(context, preflight_task_id)).maintenance_due


def try_number(context: Any) -> int:
    """Airflow's try number of the running task (1 on its first try; 1 without a task instance)."""
    return int(getattr(context.get("ti"), "try_number", 1) or 1)


def request_plan(context: Any) -> dict[str, Any]:
    """What this DAG run was asked to do, as ``check_request`` planned it (its XCom; empty without one)."""
    plan = pull(context, CHECK_REQUEST_TASK)
    return handoffs.RequestPlan.from_xcom(plan).to_xcom() if isinstance(plan, dict) else {}


def held_epoch(context: Any) -> int | None:
    """The run lock's epoch this DAG run took (``check_request``'s XCom), which its jobs carry as ``--lock-epoch``."""
    return handoffs.request_plan(context).lock_epoch


def job_run_type(context: Any) -> str:
    """The job's ``--run-type`` for this DAG run."""
    run_type = str(getattr(context["dag_run"], "run_type", "manual") or "manual")
    run_type = run_type.rsplit(".", 1)[-1].lower()
    return {"scheduled": "scheduled", "backfill": "backfill"}.get(run_type, "manual")
