"""Hand-made DAG-run timings, as the benchmark measures them from an ``airflow dags test`` run.

A test module is not a library: the run tests (test_benchmark_runs.py) and the report's tests
(test_benchmark.py) both build their timings with :func:`dag_run_timing` from here.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from include.tooling.benchmark_runs import DagRunTiming, TaskTiming


def dag_run_timing(kind: str, rep: int, seconds: dict[str, float], choice: str | None) -> DagRunTiming:
    """Repetition ``rep`` of run ``kind`` (2 commits before it, 1,000 rows) whose tasks succeeded one after
    another, each taking its ``seconds`` (task id: seconds, its own work too), the wall clock 5 s more;
    ``choice`` is where its Spark application ran."""
    at = datetime(2026, 11, 25, 18, 0, 0)
    tasks = {}
    for task_id, s in seconds.items():
        tasks[task_id] = TaskTiming(task_id, "success", at, at + timedelta(seconds=s))
        at += timedelta(seconds=s)
    return DagRunTiming(kind, rep, 2, 1000, sum(seconds.values()) + 5, tasks, dict(seconds), choice)
