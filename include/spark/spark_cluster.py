"""A transient Spark standalone cluster for one pipeline run: a master and N workers on 127.0.0.1.

An Airflow setup task starts it, the run's jobs ``spark-submit`` to its
``master_url``, and a teardown task stops it, possibly from another process:
everything the stop needs is in the run folder.

    python -m include.spark.spark_cluster start var/runs/r1/spark --workers 2   # prints spark://127.0.0.1:<port>
    python -m include.spark.spark_cluster status var/runs/r1/spark
    python -m include.spark.spark_cluster stop var/runs/r1/spark

The run folder holds ``cluster.json`` (URLs, pids, process groups, sessions),
``logs/<process>.log`` (each daemon's stdout and stderr), ``worker-<i>/`` (the
workers' work dirs: one folder per application with its executors' logs),
``local/`` (scratch and shuffle files), ``tmp/`` and an empty ``conf/``.
Once its processes are stopped, :func:`stop_standalone` removes what only a
running cluster needs (each executor's copy of the application's jars and
files, about 23 MB a run with the project's jars; ``local/``; ``tmp/``), so
a run folder keeps its logs and state, not a copy of the jars per run.

Each daemon is started in its own session. Everything it spawns (executor
JVMs, pyspark daemons and their python workers) stays in that session, and
also inherits an environment variable naming this cluster; that is how
:func:`running_processes` and :func:`stop_standalone` find them, without
ever touching a process that merely got a recorded pid number again.

The cluster takes only applications that know its secret (``spark.authenticate``):
a per-cluster secret in ``auth-secret`` (owner-only, removed when the cluster
stops), which the daemons and executors get through their environment and a
job's driver through its session's configuration, never a command line that
``ps`` shows. Otherwise any local user could submit code that runs as the
Airflow worker. The daemons start with a minimal environment, not the Airflow
worker's (``AIRFLOW__*`` and cloud credentials stay out).
"""

from __future__ import annotations

import argparse
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from include.contract.errors import ContractError, PipelineError
from include.ports import free_port
from include.private_files import write_private
from include.spark.spark_submit import spark_home

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Heap of the master and of each worker JVM; executors get their own memory.
DAEMON_MEMORY = "512m"
#: The JIT and collector of the master and worker daemons (see :func:`_daemon_env`).
DAEMON_JIT_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Environment variable every process of a cluster inherits, set to its cluster id.
MARKER_ENV = "KDE_SPARK_CLUSTER_ID"
STATE_FILE = "cluster.json"
#: The cluster's shared secret, in its run folder (owner-only); a job's driver reads it through
#: :func:`include.settings.spark_secret`.
SECRET_FILE = "auth-secret"
#: Where Spark's master, workers and executors look for the secret when their configuration has none.
SECRET_ENV = "_SPARK_AUTH_SECRET"
#: What a daemon keeps of the calling environment: enough to run Java and Python, nothing of Airflow's
#: or the project's (a cluster's processes are found through its run folder: :func:`running_processes`).
_KEPT_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "JAVA_HOME", "VIRTUAL_ENV",
                       "PYTHONPATH", "PYTHONHASHSEED", "LD_LIBRARY_PATH"})  # fmt: skip

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


# --- commands and environment --------------------------------------------------------------------


def _master_command(home: Path, port: int, webui_port: int) -> list[str]:
    return [
        str(home / "bin" / "spark-class"), MASTER_CLASS,
        "--host", HOST, "--port", str(port), "--webui-port", str(webui_port),
    ]  # fmt: skip


def _worker_command(
    home: Path, port: int, webui_port: int, *, cores: int, memory: str, work_dir: Path, master_url: str
) -> list[str]:
    return [
        str(home / "bin" / "spark-class"), WORKER_CLASS,
        "--host", HOST, "--port", str(port), "--webui-port", str(webui_port),
        "--cores", str(cores), "--memory", memory, "--work-dir", str(work_dir),
        master_url,
    ]  # fmt: skip


def _daemon_env(
    run_dir: Path, name: str, cluster_id: str, home: Path, base: Mapping[str, str] | None = None, *,
    secret: str,
) -> dict[str, str]:
    """Environment of one daemon; its executors and python workers inherit it.

    Of the calling environment only :data:`_KEPT_ENV` and ``LC_*`` are kept: an
    Airflow worker's (``AIRFLOW__*``, cloud credentials, its Spark settings)
    has no business in processes that run pipeline code, and Spark settings
    from it would make the cluster depend on where the task happens to run.
    """
    env = {
        key: value
        for key, value in (os.environ if base is None else base).items()
        if key in _KEPT_ENV or key.startswith("LC_")
    }
    tmp = run_dir / "tmp"
    # java.io.tmpdir: Netty and Jetty unpack files there. No hsperfdata: the
    # JVM would otherwise write /tmp/hsperfdata_<user>/<pid> for each daemon.
    # C1 and the serial collector: a daemon of a run's cluster lives for that run and only
    # schedules and relays, so a quicker start and half the CPU beat a JIT that would pay off
    # only in a long-lived daemon.
    jvm_opts = f"-Djava.io.tmpdir={tmp} -XX:-UsePerfData {DAEMON_JIT_FLAGS}"
    env.update(
        {
            "SPARK_HOME": str(home),
            # An empty conf dir: no spark-env.sh or spark-defaults.conf from elsewhere.
            "SPARK_CONF_DIR": str(run_dir / "conf"),
            "SPARK_LOCAL_IP": HOST,
            "SPARK_LOG_DIR": str(run_dir / "logs"),
            "SPARK_LOCAL_DIRS": str(run_dir / "local" / name),
            "SPARK_DAEMON_MEMORY": DAEMON_MEMORY,
            # No port retries: a port taken between choosing and binding must
            # fail the start, not move the master to a port nobody knows.
            # spark.authenticate: the secret itself comes from SECRET_ENV. No kill links in the web UIs,
            # which spark.authenticate does not guard.
            "SPARK_DAEMON_JAVA_OPTS": f"{jvm_opts} -Dspark.port.maxRetries=0 -Dspark.authenticate=true "
            "-Dspark.ui.killEnabled=false",
            # Spark 4 starts the master's REST submission server by default, on
            # the fixed port 6066: two clusters on one machine would collide.
            "SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false",
            # spark-class runs a short-lived JVM to build the daemon's command line.
            "SPARK_LAUNCHER_OPTS": jvm_opts,
            "PYSPARK_PYTHON": sys.executable,
            # For python workers, and anything else that honours it.
            "TMPDIR": str(tmp),
            MARKER_ENV: cluster_id,
            SECRET_ENV: secret,
        }
    )
    if name.startswith("worker-"):
        env["SPARK_WORKER_DIR"] = str(run_dir / name)
    return env


def _distinct_free_ports(count: int) -> list[int]:
    ports: list[int] = []
    while len(ports) < count:
        port = free_port()
        if port not in ports:
            ports.append(port)
    return ports


# --- start ---------------------------------------------------------------------------------------


def _log_tail(log: Path, lines: int = 25) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError as exc:
        return f"(cannot read the log: {exc})"
    return "\n".join(text.splitlines()[-lines:])[-4000:] or "(the log is empty)"


def _process_error(run_dir: Path, name: str, problem: str) -> ClusterError:
    log = _log_path(run_dir, name)
    return ClusterError(
        f"Spark cluster in {run_dir}: {name} {problem}; last lines of its log {log}:\n{_log_tail(log)}"
    )


def _launch(run_dir: Path, name: str, cmd: list[str], env: Mapping[str, str]) -> subprocess.Popen[bytes]:
    log = _log_path(run_dir, name)
    with open(log, "ab") as out:
        # Own session: the daemon outlives the Airflow task that started it,
        # and its whole tree can be found and signalled as one. cwd: files a
        # daemon writes to its working directory land in the run folder.
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=dict(env),
            cwd=run_dir,
            start_new_session=True,
        )
    _CHILDREN[proc.pid] = proc
    return proc


def _record(state: dict[str, Any], name: str, proc: subprocess.Popen[bytes]) -> None:
    stat = _read_stat(proc.pid)
    state["pids"][name] = proc.pid
    # Popen returns after exec, so setsid() has run: the daemon leads its own
    # session and process group. A process that died already has no stat.
    state["sids"][name] = stat.sid if stat else proc.pid
    state["pgids"][name] = stat.pgid if stat else proc.pid
    state["start_ticks"][name] = stat.start_ticks if stat else -1


def _master_json(web_ui_url: str, timeout_s: float = 2.0) -> dict[str, Any]:
    # No proxies: an http_proxy in the environment must not see 127.0.0.1.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"{web_ui_url}/json/", timeout=timeout_s) as resp:
        # The master's /json/ page is one object (its status, workers and applications).
        return cast(dict[str, Any], json.load(resp))


def _wait_ready(
    run_dir: Path,
    procs: Mapping[str, subprocess.Popen[bytes]],
    web_ui_url: str,
    worker_ports: Mapping[str, int],
    deadline: float,
    timeout_s: float,
) -> None:
    """Wait until the master is ALIVE and each worker in ``worker_ports`` is registered ALIVE."""
    last_error: Exception | None = None
    info: dict[str, Any] = {}
    while True:
        for name, proc in procs.items():
            code = proc.poll()
            if code is not None:
                raise _process_error(run_dir, name, f"(pid {proc.pid}) exited with code {code} during start")
        try:
            info = _master_json(web_ui_url)
            last_error = None
        except (OSError, ValueError) as exc:  # not listening yet, or a half-started UI
            last_error = exc
            info = {}
        alive_ports = {w.get("port") for w in info.get("workers", []) if w.get("state") == "ALIVE"}
        missing = [name for name, port in worker_ports.items() if port not in alive_ports]
        if info.get("status") == "ALIVE" and not missing:
            return
        if time.monotonic() >= deadline:
            if info.get("status") != "ALIVE":
                seen = f"status {info.get('status')!r}" if info else f"no answer ({last_error!r})"
                raise _process_error(
                    run_dir, "master", f"not ALIVE after {timeout_s:.0f}s ({web_ui_url}/json/: {seen})"
                )
            raise _process_error(
                run_dir,
                missing[0],
                f"not registered ALIVE with the master after {timeout_s:.0f}s "
                f"(not registered: {', '.join(missing)}; master sees {len(alive_ports)} alive)",
            )
        time.sleep(0.25)


def start_standalone(
    run_dir: str | Path,
    *,
    workers: int = 1,
    worker_cores: int = 1,
    worker_memory: str = "1g",
    timeout_s: float = 120,
) -> StandaloneCluster:
    """Start a master and ``workers`` workers on 127.0.0.1 (free ports), their state in ``run_dir``.

    Returns once the master's web UI reports itself and every worker ALIVE.
    ``worker_cores`` and ``worker_memory`` (Spark's format, e.g. ``"1g"``,
    ``"512m"``) are what each worker offers to executors.

    Raises :class:`ClusterError` if a process exits or ``timeout_s`` passes
    first; everything started is stopped before. Refuses a ``run_dir`` whose
    cluster is still running.
    """
    run_dir = Path(run_dir).resolve()
    _refuse_to_start(run_dir, workers, worker_cores)
    for sub in ("conf", "logs", "local", "tmp"):
        (run_dir / sub).mkdir(parents=True, exist_ok=True)
    deadline = time.monotonic() + timeout_s
    home = spark_home()
    cluster_id = uuid.uuid4().hex
    secret = _new_secret(run_dir)
    master_port, master_ui_port, *worker_port_pairs = _distinct_free_ports(2 + 2 * workers)
    state = _initial_state(run_dir, home, cluster_id, master_port, master_ui_port,
                           workers=workers, worker_cores=worker_cores, worker_memory=worker_memory)  # fmt: skip
    procs: dict[str, subprocess.Popen[bytes]] = {}
    try:
        _start_master(run_dir, state, procs, home, master_port, master_ui_port, secret)
        # Workers start once the master answers: a worker that cannot reach
        # the master retries only after a back-off of 5 to 15 seconds.
        _wait_ready(run_dir, procs, state["web_ui_url"], {}, deadline, timeout_s)
        _start_workers(run_dir, state, procs, home, worker_port_pairs, secret)
        _wait_ready(run_dir, procs, state["web_ui_url"], state["worker_ports"], deadline, timeout_s)
    except BaseException as exc:
        try:
            stop_standalone(run_dir)
        except ClusterError as stop_error:
            raise ClusterError(f"{exc}\nStopping what had started failed too: {stop_error}") from exc
        raise
    return StandaloneCluster.from_json(state)


def _new_secret(run_dir: Path) -> str:
    """A fresh secret for the cluster in ``run_dir``, written to its :data:`SECRET_FILE` readable by the owner only
    (:func:`include.private_files.write_private`)."""
    secret = secrets.token_hex(32)
    write_private(run_dir / SECRET_FILE, secret)
    return secret


def _refuse_to_start(run_dir: Path, workers: int, worker_cores: int) -> None:
    """A cluster needs a worker and a core, and ``run_dir`` must not hold a cluster that still runs: its state
    file is what stops it later, so starting over it would lose those processes."""
    if workers < 1 or worker_cores < 1:
        raise ContractError(
            f"a Spark cluster in {run_dir} needs workers >= 1 and worker_cores >= 1, "
            f"got workers={workers}, worker_cores={worker_cores}"
        )
    alive = running_processes(run_dir)
    if alive:
        raise ClusterError(
            f"a Spark cluster from {run_dir} is still running (pids {alive}); stop it first. "
            f"Its master log: {_log_path(run_dir, 'master')}"
        )


def _initial_state(run_dir: Path, home: Path, cluster_id: str, master_port: int, master_ui_port: int, *,
                   workers: int, worker_cores: int, worker_memory: str) -> dict[str, Any]:  # fmt: skip
    """The cluster's state file before any process starts: its URLs, its id (which every daemon carries, so a
    stop finds them) and its size; the processes, ports and logs are filled in as they start."""
    return {
        "master_url": f"spark://{HOST}:{master_port}",
        "web_ui_url": f"http://{HOST}:{master_ui_port}",
        "run_dir": str(run_dir),
        "pids": {},
        "cluster_id": cluster_id,
        "sids": {},
        "pgids": {},
        "start_ticks": {},
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "workers": workers,
        "worker_cores": worker_cores,
        "worker_memory": worker_memory,
        "worker_ports": {},
        "logs": {},
        "spark_home": str(home),
    }


def _start_master(run_dir: Path, state: dict[str, Any], procs: dict[str, subprocess.Popen[bytes]], home: Path,
                  master_port: int, master_ui_port: int, secret: str) -> None:  # fmt: skip
    """Launch the master and record it in ``state`` and the state file (without waiting for it)."""
    procs["master"] = _launch(
        run_dir,
        "master",
        _master_command(home, master_port, master_ui_port),
        _daemon_env(run_dir, "master", state["cluster_id"], home, secret=secret),
    )
    _record(state, "master", procs["master"])
    state["logs"]["master"] = str(_log_path(run_dir, "master"))
    # Saved before any waiting: a stop after a failed or interrupted
    # start, from whatever process, finds what was started.
    _save_state(run_dir, state)


def _start_workers(run_dir: Path, state: dict[str, Any], procs: dict[str, subprocess.Popen[bytes]],
                   home: Path, worker_port_pairs: list[int], secret: str) -> None:  # fmt: skip
    """Launch each worker on its own port pair and work folder, registering with the master; the state file is
    saved after each, so a stop finds every worker started so far."""
    for i in range(1, state["workers"] + 1):
        name = f"worker-{i}"
        port, ui_port = worker_port_pairs[2 * (i - 1)], worker_port_pairs[2 * i - 1]
        work_dir = run_dir / name
        work_dir.mkdir(exist_ok=True)
        procs[name] = _launch(
            run_dir,
            name,
            _worker_command(
                home,
                port,
                ui_port,
                cores=state["worker_cores"],
                memory=state["worker_memory"],
                work_dir=work_dir,
                master_url=state["master_url"],
            ),
            _daemon_env(run_dir, name, state["cluster_id"], home, secret=secret),
        )
        _record(state, name, procs[name])
        state["worker_ports"][name] = port
        state["logs"][name] = str(_log_path(run_dir, name))
        _save_state(run_dir, state)


# --- processes and stop --------------------------------------------------------------------------


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


# --- command line --------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    """Command line: ``start RUN_DIR`` prints the master URL; ``stop RUN_DIR``; ``status RUN_DIR``."""
    parser = argparse.ArgumentParser(
        prog="python -m include.spark.spark_cluster",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("action", choices=["start", "stop", "status"])
    parser.add_argument("run_dir", type=Path)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--worker-cores", type=int, default=1)
    parser.add_argument("--worker-memory", default="1g")
    parser.add_argument("--timeout", type=float, help="seconds (start: 120, stop: 30)")
    args = parser.parse_args(argv)
    try:
        if args.action == "start":
            cluster = start_standalone(
                args.run_dir,
                workers=args.workers,
                worker_cores=args.worker_cores,
                worker_memory=args.worker_memory,
                timeout_s=args.timeout or 120,
            )
            print(cluster.master_url)
        elif args.action == "stop":
            stopped = stop_standalone(args.run_dir, timeout_s=args.timeout or 30)
            print(f"stopped {len(stopped)} processes: {stopped}" if stopped else "not running")
        else:
            pids = running_processes(args.run_dir)
            if not pids:
                print("not running")
                return 1
            state = _load_state(args.run_dir.resolve()) or {}
            print(state["master_url"])
            print(f"web UI {state['web_ui_url']}; processes {pids}")
    except ClusterError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
