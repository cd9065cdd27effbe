"""What a job operator reads of its DAG run: the try, the run type, and the earlier tasks' XComs
(``check_request``'s plan, the lock's epoch, whether maintenance is due)."""

from __future__ import annotations

from typing import Any

from include.contract.jobs import CHECK_REQUEST_TASK


def maintenance_reason(context: Any, preflight_task_id: str) -> str | None:
    """Why the preflight found the tables' maintenance due in this run, or ``None``."""
    ti = context.get("ti")
    preflight = (ti.xcom_pull(task_ids=preflight_task_id) if ti is not None else None) or {}
    return ((preflight.get("maintenance") or {}) if isinstance(preflight, dict) else {}).get("due")


def try_number(context: Any) -> int:
    """Airflow's try number of the running task (1 on its first try; 1 without a task instance)."""
    return int(getattr(context.get("ti"), "try_number", 1) or 1)


def request_plan(context: Any) -> dict[str, Any]:
    """What this DAG run was asked to do, as ``check_request`` planned it (its XCom; empty without one)."""
    ti = context.get("ti")
    plan = ti.xcom_pull(task_ids=CHECK_REQUEST_TASK) if ti is not None else None
    return plan if isinstance(plan, dict) else {}


def held_epoch(context: Any) -> int | None:
    """The run lock's epoch this DAG run took (``check_request``'s XCom), which its jobs carry as ``--lock-epoch``."""
    epoch = request_plan(context).get("lock_epoch")
    return int(epoch) if epoch is not None else None


def job_run_type(context: Any) -> str:
    """The job's ``--run-type`` for this DAG run."""
    run_type = str(getattr(context["dag_run"], "run_type", "manual") or "manual")
    run_type = run_type.rsplit(".", 1)[-1].lower()
    return {"scheduled": "scheduled", "backfill": "backfill"}.get(run_type, "manual")
