"""One run at a time per pipeline, whatever started it and whichever Airflow worker runs it.

``max_active_runs=1`` serialises a DAG's scheduled and manual runs, but
Airflow counts the runs of a backfill (``airflow backfill create``) apart
from them, so a backfill run and a scheduled run of the same pipeline could
otherwise overlap and run two jobs on one checkpoint. Every run therefore
takes this lock in its first task and gives it back in its last one
(``record_run``, which always runs).

The lock lives in the pipeline's own storage (``tables.lock_path``, by
default ``<lakehouse_root>/<name>/_lock``), which every worker that runs the
pipeline sees as it sees the tables. A folder on one worker's own disk is not
enough: with two workers, a scheduled run on one and a backfill on the other
would each find the lock free.

Each taking of the lock is an *epoch*: a file ``<epoch>.json`` (zero-padded,
so names sort as numbers) naming the run, created only if no file has that
name. The newest epoch holds the lock until its ``<epoch>.released`` marker
exists. Two runs that find epoch N free both try to create N + 1, and the
filesystem lets exactly one of them: the record is written to a private
file first and then hard-linked to its name, which fails if the name exists
(atomic on local and NFS filesystems, and a reader never sees half a
record). The loser reads the winner's record and waits.

A holder whose run is no longer queued or running (a lost worker, a run
marked failed by hand) holds nothing: the next run takes over with the next
epoch and records whom it took over from, so that it can stop what the dead
run left running first. The epoch numbers the holders apart: a holder's
record carries it, and a waiting run's log names it.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

#: DAG run states in which a holder still holds the lock.
ACTIVE_STATES = ("queued", "running")
#: Released epochs older than this many before the newest are removed by the run that takes the lock.
KEEP_EPOCHS = 20
_DIGITS = 20
#: How long a reader waits for a record created without a hard link (see :func:`_create`) to be written.
_WRITE_WAIT_S = 5.0


def _record_file(folder: Path, epoch: int) -> Path:
    return folder / f"{epoch:0{_DIGITS}d}.json"


def _released_file(folder: Path, epoch: int) -> Path:
    return folder / f"{epoch:0{_DIGITS}d}.released"


def _read(path: Path) -> dict:
    deadline = time.monotonic() + _WRITE_WAIT_S
    while True:
        text = path.read_text(errors="replace")
        if text or time.monotonic() > deadline:
            break
        time.sleep(0.05)  # created by exclusive open and not written yet (no hard links here)
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    # Anything but a holder object (an edit by hand, a damaged file) holds nothing.
    return data if isinstance(data, dict) else {"run_id": None, "unreadable": text[:200]}


def _newest(folder: Path) -> tuple[int, dict, bool] | None:
    """The newest epoch, its record and whether it was released; ``None`` when the lock was never taken."""
    try:
        names = set(os.listdir(folder))
    except FileNotFoundError:
        return None
    epochs = [int(n[:-5]) for n in names if n.endswith(".json") and len(n) == _DIGITS + 5 and n[:-5].isdigit()]
    if not epochs:
        return None
    epoch = max(epochs)
    released = _released_file(folder, epoch).name in names
    return epoch, {**_read(_record_file(folder, epoch)), "epoch": epoch}, released


def _create(path: Path, record: dict) -> bool:
    """Create ``path`` holding ``record`` unless it exists; ``True`` when this call created it."""
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    tmp.write_text(json.dumps(record))
    try:
        os.link(tmp, path)
        return True
    except FileExistsError:
        return False
    except OSError as exc:
        if exc.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # A filesystem without hard links: an exclusive create, written after (readers wait for it).
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "w") as out:
            out.write(json.dumps(record))
        return True
    finally:
        tmp.unlink(missing_ok=True)


def holder(folder: Path) -> dict | None:
    """Who holds the lock now (its record, with its ``epoch``), or ``None``."""
    newest = _newest(folder)
    if newest is None or newest[2]:
        return None
    return newest[1]


def acquire(folder: Path, *, dag_id: str, run_id: str, run_state: Callable[[str, str], str | None]) -> dict | None:
    """Take the lock for ``run_id``; returns ``None`` when taken, else the live holder's record.

    ``run_state(dag_id, run_id)`` is the holder run's state in Airflow, or
    ``None`` when Airflow does not know the run (then it holds nothing).
    Taking a lock one already holds succeeds and keeps its epoch (a retried
    task); what it took over from stays recorded, so a retry still stops it.
    """
    folder.mkdir(parents=True, exist_ok=True)
    while True:
        newest = _newest(folder)
        epoch, took_over_from = 0, None
        if newest is not None:
            epoch, current, released = newest
            if not released:
                if current.get("run_id") == run_id:
                    return None
                state = None
                if current.get("run_id"):
                    state = run_state(current.get("dag_id") or dag_id, current["run_id"])
                if state in ACTIVE_STATES:
                    return current
                took_over_from = {k: v for k, v in current.items() if k != "took_over_from"}
        mine: dict = {"dag_id": dag_id, "run_id": run_id, "since": datetime.now(UTC).isoformat(),
                      "host": socket.gethostname(), "pid": os.getpid()}  # fmt: skip
        if took_over_from is not None:
            mine["took_over_from"] = took_over_from
        if _create(_record_file(folder, epoch + 1), mine):
            _prune(folder, epoch + 1)
            return None
        # Another run created epoch + 1 first: judge its record as any holder's.


def release(folder: Path, *, run_id: str) -> bool:
    """Give the lock back if ``run_id`` holds it; ``True`` when it did."""
    newest = _newest(folder)
    if newest is None or newest[2] or newest[1].get("run_id") != run_id:
        return False
    epoch = newest[0]
    return _create(_released_file(folder, epoch), {"run_id": run_id, "at": datetime.now(UTC).isoformat()})


def _prune(folder: Path, newest: int) -> None:
    """Remove the files of epochs :data:`KEEP_EPOCHS` or more before ``newest`` (all released or taken over)."""
    for name in os.listdir(folder):
        stem = name.split(".", 1)[0]
        if stem.isdigit() and len(stem) == _DIGITS and int(stem) <= newest - KEEP_EPOCHS:
            (folder / name).unlink(missing_ok=True)
