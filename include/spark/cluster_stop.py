"""Stopping a transient Spark cluster (from whatever process: everything the stop needs is in its run folder),
and watching it while a job runs so that a lost daemon stops the job instead of leaving it waiting."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from include.spark.cluster_state import (
    SECRET_FILE,
    ClusterError,
    _find,
    _load_state,
    _lost,
    _ProcStat,
    _read_stat,
)
from include.spark.leftovers import remove_scratch


class ClusterWatch:
    """Stops a job whose transient cluster lost a daemon while it ran, instead of letting it wait forever.

    Spark's standalone scheduler waits without limit for executors: once the
    run's only worker is gone none can come, and the job would hang until
    someone kills it. Use as a context manager around the job; ``stop_job``
    is called once, from a background thread, when a daemon is lost, and
    :attr:`lost` then names the daemons. Without a cluster in ``run_dir`` it
    watches nothing.
    """

    def __init__(self, run_dir: str | Path, stop_job: Callable[[], None], *, interval_s: float = 2.0) -> None:
        self.run_dir, self.stop_job, self.interval_s = Path(run_dir), stop_job, interval_s
        # Read once: the daemons a cluster started do not change while a job runs on it.
        self._state = _load_state(self.run_dir.resolve())
        self.lost: list[str] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="cluster-watch", daemon=True)

    def __enter__(self) -> ClusterWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._done.set()
        self._thread.join()

    def _watch(self) -> None:
        if self._state is None:  # no cluster was started in run_dir: nothing to watch
            return
        while not self._done.wait(self.interval_s):
            lost = _lost(self._state)
            if lost:
                self.lost = lost
                self.stop_job()
                return

    def message(self) -> str:
        """What happened and what comes next, for the task's error."""
        return (f"the run's Spark cluster in {self.run_dir} lost {', '.join(self.lost)} while the job ran "
                f"(logs in {self.run_dir / 'logs'}); the job was stopped instead of waiting for executors "
                "that cannot come. Nothing is lost: the next run (or this task's retry) resumes from the tables")  # fmt: skip


def _signal(procs: Iterable[_ProcStat], sig: signal.Signals) -> None:
    # By process group, as the daemons' groups also hold their executors;
    # pyspark's daemon makes a group of its own, and is found on its own.
    for pgid in sorted({p.pgid for p in procs}):
        try:
            os.killpg(pgid, sig)
        except (ProcessLookupError, PermissionError):
            pass  # gone already; a survivor is reported by the final check


def _wait_gone(state: Mapping[str, Any], timeout_s: float, seen: dict[int, int]) -> list[_ProcStat]:
    """The cluster's processes still there after at most ``timeout_s``; ``seen`` collects pid -> start ticks.

    A process killed with SIGKILL drops out of :func:`_find` as soon as the kernel has released its memory
    (its environment, with the marker, is unreadable from then on), which is before it has exited and
    closed its files and ports. So each process once seen counts until its own stat says it is gone.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        left = _find(state)
        for p in left:
            seen.setdefault(p.pid, p.start_ticks)
        found = {p.pid for p in left}
        for pid, ticks in seen.items():
            stat = _read_stat(pid)
            if pid not in found and stat is not None and stat.start_ticks == ticks and stat.state not in ("Z", "X"):
                left.append(stat)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(0.2)


def stop_standalone(run_dir: str | Path, *, timeout_s: float = 30) -> list[int]:
    """Stop every process of the cluster in ``run_dir``: SIGTERM, then SIGKILL after ``timeout_s``.

    Returns the pids that were running and were stopped (empty if none were,
    or if ``run_dir`` never held a cluster). Raises :class:`ClusterError` if
    a process survives SIGKILL.
    """
    run_dir = Path(run_dir).resolve()
    state = _load_state(run_dir)
    if state is None:  # a start that failed before saving its state may have left its secret
        (run_dir / SECRET_FILE).unlink(missing_ok=True)
        return []
    stopped: dict[int, int] = {}
    left = _find(state)
    stopped.update((p.pid, p.start_ticks) for p in left)
    if left:
        # A worker's shutdown waits for its executors to exit: all at once
        # is as fast as it gets.
        _signal(left, signal.SIGTERM)
        left = _wait_gone(state, timeout_s, stopped)
    if left:
        _signal(left, signal.SIGKILL)
        left = _wait_gone(state, 10, stopped)
    if left:
        raise ClusterError(
            f"processes {sorted(p.pid for p in left)} of the Spark cluster in {run_dir} survived "
            f"SIGTERM and SIGKILL; logs: {', '.join(state.get('logs', {}).values()) or run_dir / 'logs'}"
        )
    remove_scratch(run_dir)
    return sorted(stopped)
