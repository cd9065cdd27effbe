"""What a run leaves behind once its processes are gone, and how a later run finds what still runs: each job's
process recorded in the run folder (:func:`record_job`, :func:`recorded_jobs`, which a run taking the lock
over stops), and a stopped cluster's scratch (:func:`remove_scratch`)."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from include.spark.cluster_state import SECRET_FILE, _read_stat, process_stats

#: The folder of a run's folder where each job's process records itself (see :func:`record_job`).
JOBS_DIR = "jobs"


def record_job(run_folder: str | Path, name: str) -> Callable[[], None]:
    """A ``preexec_fn`` by which a job's process records its pid and start time in ``<run_folder>/jobs/<name>.json``.

    Written by the child itself, before it runs the job: the record exists
    as soon as the process does. The start time tells the process from a
    later one that got its pid number again, so a record left behind by a
    killed run never names anyone else's process.
    """
    folder = Path(run_folder) / JOBS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    target = folder / f"{name}.json"

    def record() -> None:
        stat = _read_stat(os.getpid())
        if stat is None:
            return
        tmp = target.with_suffix(f".{stat.pid}.tmp")
        tmp.write_text(json.dumps({"pid": stat.pid, "start_ticks": stat.start_ticks}))
        os.replace(tmp, target)

    return record


def recorded_jobs(run_folder: str | Path) -> list[int]:
    """Live job processes a run recorded (:func:`record_job`) and every process they started, sorted.

    Only recorded processes and their descendants: never another process
    that merely names the run's folder (a ``less`` of its log).
    """
    roots = set()
    for record in sorted((Path(run_folder) / JOBS_DIR).glob("*.json")):
        try:
            data = json.loads(record.read_text())
            pid, ticks = int(data["pid"]), int(data["start_ticks"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        stat = _read_stat(pid)
        if stat is not None and stat.start_ticks == ticks and stat.state != "Z":
            roots.add(pid)
    if not roots:
        return []
    children: dict[int, list[int]] = {}
    for stat in process_stats():
        if stat.state != "Z":
            children.setdefault(stat.ppid, []).append(stat.pid)
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        if pid not in found:
            found.add(pid)
            todo.extend(children.get(pid, ()))
    return sorted(found)


#: What an executor's folder keeps once its cluster stopped: its output, the only record of what it did.
EXECUTOR_LOGS = frozenset({"stdout", "stderr"})


def remove_scratch(run_dir: str | Path) -> int:
    """Remove what the stopped cluster in ``run_dir`` only needed while it ran; returns the bytes freed.

    That is each executor's copy of the application's jars and files
    (``worker-<i>/<app>/<executor>/`` but its ``stdout`` and ``stderr``), the
    scratch and shuffle folders (``local/``) and the JVMs' temporary files
    (``tmp/``), and the cluster's secret. Logs, ``conf/`` and ``cluster.json`` stay. Best effort: a file
    that cannot be removed stays where it is and costs only its space.
    """
    run_dir = Path(run_dir)
    doomed = [run_dir / "local", run_dir / "tmp", run_dir / SECRET_FILE]
    for executor in run_dir.glob("worker-*/*/*"):
        if executor.is_dir():
            doomed.extend(entry for entry in executor.iterdir() if entry.name not in EXECUTOR_LOGS)
    freed = 0
    for path in doomed:
        try:
            if path.is_dir() and not path.is_symlink():
                size = sum(f.lstat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())
                shutil.rmtree(path)
            else:
                size = path.lstat().st_size
                path.unlink()
        except OSError:  # gone already, or not ours to remove: it keeps its space
            continue
        freed += size
    return freed
