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
Once its processes are stopped, :func:`include.spark.cluster_stop.stop_standalone` removes what only a
running cluster needs (:func:`include.spark.leftovers.remove_scratch`), so
a run folder keeps its logs and state, not a copy of the jars per run.

This module starts the cluster (and is its command line); the others of the cluster are
:mod:`include.spark.cluster_state` (its state file and which processes are its, found by their session
or a marker in their environment), :mod:`include.spark.cluster_stop` (stopping and watching it) and
:mod:`include.spark.leftovers` (each job's recorded process, and the scratch a stopped cluster leaves).

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
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from include.contract.errors import ContractError
from include.ports import free_port
from include.private_files import write_private
from include.spark.cluster_state import (
    _CHILDREN,
    MARKER_ENV,
    SECRET_FILE,
    ClusterError,
    StandaloneCluster,
    _load_state,
    _log_path,
    _read_stat,
    _save_state,
    running_processes,
)
from include.spark.cluster_stop import stop_standalone
from include.spark.spark_submit import spark_home

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
#: Heap of the master and of each worker JVM; executors get their own memory.
DAEMON_MEMORY = "512m"
#: The JIT and collector of the master and worker daemons (see :func:`_daemon_env`).
DAEMON_JIT_FLAGS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
#: Where Spark's master, workers and executors look for the secret when their configuration has none.
SECRET_ENV = "_SPARK_AUTH_SECRET"
#: What a daemon keeps of the calling environment: enough to run Java and Python, nothing of Airflow's
#: or the project's (a cluster's processes are found through its run folder: :func:`running_processes`).
_KEPT_ENV = frozenset({"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "JAVA_HOME", "VIRTUAL_ENV",
                       "PYTHONPATH", "PYTHONHASHSEED", "LD_LIBRARY_PATH"})  # fmt: skip


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
