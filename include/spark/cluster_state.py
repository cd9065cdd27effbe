"""A transient Spark cluster's run folder and processes: its state file (``cluster.json``), the ``/proc`` process
table, and which live processes are the cluster's (its daemons' sessions, or the marker in their environment).

Each daemon is started in its own session. Everything it spawns (executor
JVMs, pyspark daemons and their python workers) stays in that session, and
also inherits an environment variable naming this cluster; that is how
:func:`running_processes` and :func:`include.spark.cluster_stop.stop_standalone` find them, without
ever touching a process that merely got a recorded pid number again. Starting a cluster is
:mod:`include.spark.spark_cluster`.
"""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from include.contract.errors import ContractError, PipelineError

#: Environment variable every process of a cluster inherits, set to its cluster id.
MARKER_ENV = "KDE_SPARK_CLUSTER_ID"
STATE_FILE = "cluster.json"
#: The cluster's shared secret, in its run folder (owner-only); a job's driver reads it through
#: :func:`include.settings.spark_secret`.
SECRET_FILE = "auth-secret"

#: Processes started by this Python process, so their exit codes can be read
#: while starting and they are reaped (not left as zombies) when stopped.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


class ClusterError(PipelineError, RuntimeError):
    """The cluster could not be started or stopped; the message names the run folder and a log file."""


@dataclass(frozen=True)
class StandaloneCluster:
    """A started cluster: where to submit, where to look, and its daemons' pids.

    ``cluster.json`` in ``run_dir`` holds :meth:`to_json` plus the bookkeeping
    the stop needs, so ``StandaloneCluster.from_json(json.load(f))`` reads it.
    """

    master_url: str
    web_ui_url: str
    run_dir: str
    pids: dict[str, int]

    def to_json(self) -> dict[str, Any]:
        """A JSON-serialisable dict (e.g. for an Airflow XCom)."""
        return {
            "master_url": self.master_url,
            "web_ui_url": self.web_ui_url,
            "run_dir": self.run_dir,
            "pids": dict(self.pids),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> StandaloneCluster:
        """The cluster from :meth:`to_json`'s dict; other keys are ignored."""
        return cls(
            master_url=str(data["master_url"]),
            web_ui_url=str(data["web_ui_url"]),
            run_dir=str(data["run_dir"]),
            pids={str(name): int(pid) for name, pid in data["pids"].items()},
        )


# --- /proc ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _ProcStat:
    """The fields of ``/proc/<pid>/stat`` this module uses."""

    pid: int
    state: str
    ppid: int
    pgid: int
    sid: int
    #: Clock ticks after boot when the process started: with the pid, it
    #: identifies a process even after its pid number is reused.
    start_ticks: int


def _parse_stat(text: str) -> _ProcStat:
    """Parse one ``/proc/<pid>/stat`` line (see proc(5))."""
    # The command name (field 2) may hold spaces and parentheses, so split at
    # the last ")" rather than on whitespace.
    head, sep, rest = text.rpartition(")")
    if not sep or " (" not in head:
        raise ContractError(f"not a /proc/<pid>/stat line: {text[:200]!r}")
    fields = rest.split()
    # fields[0] is field 3 of proc(5): state, ppid, pgrp, session, ... starttime (22).
    return _ProcStat(
        pid=int(head.split(" (", 1)[0]),
        state=fields[0],
        ppid=int(fields[1]),
        pgid=int(fields[2]),
        sid=int(fields[3]),
        start_ticks=int(fields[19]),
    )


def _read_stat(pid: int) -> _ProcStat | None:
    try:
        return _parse_stat(Path(f"/proc/{pid}/stat").read_text())
    except (OSError, ValueError, IndexError):
        return None


def process_stats() -> list[_ProcStat]:
    """Every live process's ``/proc/<pid>/stat`` fields (pid, state, parent, group, session, start time)."""
    stats = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read_stat(int(entry))
            if stat is not None:
                stats.append(stat)
    return stats


def _environ_has(pid: int, entry: bytes) -> bool:
    try:
        return entry in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:  # gone, or another user's process (which cannot be ours)
        return False


def _members(
    state: Mapping[str, Any], stats: Iterable[_ProcStat], has_marker: Callable[[int], bool]
) -> list[_ProcStat]:
    """The live processes of the cluster described by ``state`` (the content of cluster.json).

    A process belongs to the cluster if it is in the session of one of the
    recorded daemons, or carries the cluster's marker in its environment.
    A recorded session counts only while its leader is gone or is still the
    very process that was started (same start time): Linux does not hand out
    a pid again while any process still uses it as session id, so a session
    whose leader pid now names another process has no members of ours left.
    """
    stats = list(stats)
    by_pid = {s.pid: s for s in stats}
    sessions = set()
    for name, sid in state["sids"].items():
        leader = by_pid.get(sid)
        if leader is None or (leader.sid == sid and leader.start_ticks == state["start_ticks"][name]):
            sessions.add(sid)
    own = os.getpid()
    return [
        s
        for s in stats
        # Zombies and dead entries hold no resources and ignore signals.
        if s.state not in ("Z", "X") and s.pid != own and (s.sid in sessions or has_marker(s.pid))
    ]


# --- state file ----------------------------------------------------------------------------------


def _state_path(run_dir: Path) -> Path:
    return run_dir / STATE_FILE


def _log_path(run_dir: Path, name: str) -> Path:
    return run_dir / "logs" / f"{name}.log"


def _load_state(run_dir: Path) -> dict[str, Any] | None:
    path = _state_path(run_dir)
    if not path.exists():
        return None
    try:
        # Checked just below: a state without these keys or of another shape is refused.
        state = cast(dict[str, Any], json.loads(path.read_text()))
        StandaloneCluster.from_json(state)
        for key in ("cluster_id", "sids", "pgids", "start_ticks"):
            state[key]  # noqa: B018 - only checks that the key is there
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ClusterError(
            f"cannot read the Spark cluster state {path} of run folder {run_dir}: {exc!r}; "
            f"logs are in {run_dir / 'logs'}"
        ) from exc
    return state


def _save_state(run_dir: Path, state: Mapping[str, Any]) -> None:
    # Write then rename: a stop running at the same moment never reads half a file.
    path = _state_path(run_dir)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(state, indent=2) + "\n")
    tmp.replace(path)


# --- which processes are the cluster's ------------------------------------------------------------


def _reap() -> None:
    # Only this process can collect the exit status of the daemons it
    # started; until it does they stay as zombies in the process table.
    for pid, proc in list(_CHILDREN.items()):
        if proc.poll() is not None:
            del _CHILDREN[pid]


def _find(state: Mapping[str, Any]) -> list[_ProcStat]:
    _reap()
    marker = f"{MARKER_ENV}={state['cluster_id']}".encode()
    return _members(state, process_stats(), lambda pid: _environ_has(pid, marker))


def running_processes(run_dir: str | Path) -> list[int]:
    """Pids of the cluster's live processes: daemons, executors, pyspark daemons and python workers.

    Empty when ``run_dir`` never held a cluster or everything has exited.
    """
    state = _load_state(Path(run_dir).resolve())
    return sorted(s.pid for s in _find(state)) if state else []


def lost_daemons(run_dir: str | Path) -> list[str]:
    """The cluster's daemons (``master``, ``worker-1``, ...) that are no longer running; empty without a cluster.

    A daemon counts as running only while its recorded pid still names the
    very process that was started (same start time) and is not a zombie.
    """
    state = _load_state(Path(run_dir).resolve())
    return [] if state is None else _lost(state)


def _lost(state: Mapping[str, Any]) -> list[str]:
    _reap()
    lost = []
    for name, pid in state["pids"].items():
        stat = _read_stat(int(pid))
        if stat is None or stat.state in ("Z", "X") or stat.start_ticks != state["start_ticks"].get(name):
            lost.append(name)
    return sorted(lost)
