"""One run at a time per pipeline, whatever started it.

``max_active_runs=1`` serialises a DAG's scheduled and manual runs, but
Airflow counts the runs of a backfill (``airflow backfill create``) apart
from them, so a backfill run and a scheduled run of the same pipeline could
otherwise overlap and run two jobs on one checkpoint. Every run therefore
takes this lock in its first task and gives it back in its last one
(``record_run``, which always runs).

The lock is a small JSON file naming the holder's DAG run. A holder whose run
is no longer queued or running (killed worker, run marked failed by hand) no
longer holds it: the next run takes it over. Reading, judging and writing the
holder happen under an ``flock`` of a guard file, so two runs never both win.
The folder must be shared by every Airflow worker that runs the pipeline's
tasks (the transient cluster profile already keeps a run on one machine).
"""

from __future__ import annotations

import fcntl
import json
import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

#: DAG run states in which a holder still holds the lock.
ACTIVE_STATES = ("queued", "running")


def lock_path(folder: Path, pipeline: str) -> Path:
    """The lock file of ``pipeline`` under ``folder``."""
    return folder / "locks" / f"{pipeline}.lock.json"


@contextmanager
def _guarded(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path.with_suffix(".guard"), os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)


def holder(path: Path) -> dict | None:
    """Who holds the lock now (as written), or ``None``."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return None
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    # Anything but a holder object (a torn write, an edit by hand) holds nothing.
    return data if isinstance(data, dict) else {"run_id": None, "unreadable": text[:200]}


def acquire(path: Path, *, dag_id: str, run_id: str, run_state: Callable[[str, str], str | None]) -> dict | None:
    """Take the lock for ``run_id``; returns ``None`` when taken, else the live holder.

    ``run_state(dag_id, run_id)`` is the holder run's state in Airflow, or
    ``None`` when Airflow does not know the run (then it holds nothing).
    Taking a lock one already holds succeeds (a retried task).
    """
    with _guarded(path):
        current = holder(path)
        if current is not None and current.get("run_id") != run_id:
            state = None
            if current.get("run_id"):
                state = run_state(current.get("dag_id") or dag_id, current["run_id"])
            if state in ACTIVE_STATES:
                return current
        mine = {"dag_id": dag_id, "run_id": run_id, "since": datetime.now(UTC).isoformat(), "pid": os.getpid()}
        if current is not None and current.get("run_id") not in (None, run_id):
            mine["took_over_from"] = {k: v for k, v in current.items() if k != "took_over_from"}
        elif current is not None and current.get("took_over_from"):
            # A retry keeps it: what the dead holder left must be stopped even if the first try failed to.
            mine["took_over_from"] = current["took_over_from"]
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(mine))
        os.replace(tmp, path)
        return None


def release(path: Path, *, run_id: str) -> bool:
    """Give the lock back if ``run_id`` holds it; ``True`` when it did."""
    with _guarded(path):
        current = holder(path)
        if current is None or current.get("run_id") != run_id:
            return False
        path.unlink()
        return True
