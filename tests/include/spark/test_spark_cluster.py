"""Tests of the transient standalone cluster: include/spark/spark_cluster.py (start), cluster_state.py,
cluster_stop.py and leftovers.py.

Pure helpers (``/proc`` parsing, commands, environment, which processes
belong to a cluster) are tested without processes. Stopping and finding a
process tree is tested on small fake daemons (Python processes, no JVM). The
``integration`` tests start real standalone clusters, one at a time.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from include import ports
from include.spark import cluster_state, cluster_stop, leftovers, spark_cluster
from include.spark.cluster_state import (
    ClusterError,
    StandaloneCluster,
    _members,
    _parse_stat,
    _ProcStat,
    _read_stat,
    _save_state,
    running_processes,
)
from include.spark.cluster_stop import stop_standalone
from include.spark.spark_cluster import (
    _daemon_env,
    _launch,
    _master_command,
    _record,
    _wait_ready,
    _worker_command,
    main,
    start_standalone,
)
from include.spark.spark_submit import spark_submit_binary, submit_environment

# --- pure helpers --------------------------------------------------------------------------------

# A real line from /proc/<pid>/stat, with a command name that holds spaces and ")".
STAT_LINE = (
    "4242 (python (x) y) S 17 4200 4100 0 -1 4194560 1234 0 0 0 10 5 0 0 20 0 3 0 "
    "987654 123456789 2345 18446744073709551615 1 1 0 0 0 0 0 16781312 2 0 0 0 17 1 0 0 0 0 0"
)


def test_parse_stat_splits_after_the_last_parenthesis():
    stat = _parse_stat(STAT_LINE)
    assert stat == _ProcStat(pid=4242, state="S", ppid=17, pgid=4200, sid=4100, start_ticks=987654)


def test_parse_stat_rejects_other_text():
    with pytest.raises(ValueError, match="not a /proc"):
        _parse_stat("hello")


def test_read_stat_of_this_process_matches_the_os():
    stat = _read_stat(os.getpid())
    assert stat is not None
    assert (stat.pid, stat.ppid, stat.pgid, stat.sid) == (
        os.getpid(),
        os.getppid(),
        os.getpgid(0),
        os.getsid(0),
    )
    assert stat.state == "R"
    assert _read_stat(2**22 + 1) is None  # above any pid_max


def _stat(pid: int, sid: int, ticks: int = 100, state: str = "S", pgid: int | None = None) -> _ProcStat:
    return _ProcStat(pid=pid, state=state, ppid=1, pgid=pgid or sid, sid=sid, start_ticks=ticks)


STATE = {
    "cluster_id": "c1",
    "sids": {"master": 10, "worker-1": 20},
    "start_ticks": {"master": 100, "worker-1": 200},
}


def test_members_are_the_recorded_sessions_and_marked_processes():
    stats = [
        _stat(10, 10, 100),  # master
        _stat(20, 20, 200),  # worker
        _stat(21, 20, 300),  # executor, in the worker's group
        _stat(22, 20, 301, pgid=22),  # pyspark daemon: own group, same session
        _stat(23, 20, 302, state="Z", pgid=22),  # exited python worker: a zombie
        _stat(30, 30, 400),  # left the session, still carries the marker
        _stat(40, 40, 500),  # unrelated
    ]
    found = _members(STATE, stats, has_marker=lambda pid: pid == 30)
    assert [s.pid for s in found] == [10, 20, 21, 22, 30]


def test_members_skip_a_session_whose_leader_pid_now_names_another_process():
    stats = [
        _stat(10, 10, 999),  # pid 10 reused by a new session leader: not the master
        _stat(11, 10, 1000),  # ...and its child
        _stat(20, 5, 200),  # pid 20 reused inside another session
    ]
    assert _members(STATE, stats, has_marker=lambda pid: False) == []


def test_members_keep_orphans_of_a_leader_that_is_gone():
    # The worker died but its executor lives on: the session id cannot have
    # been reused while the executor still holds it.
    stats = [_stat(21, 20, 300), _stat(99, 99, 5)]
    assert [s.pid for s in _members(STATE, stats, has_marker=lambda pid: False)] == [21]


def test_commands(tmp_path):
    home = Path("/opt/spark")
    assert _master_command(home, 7077, 8080) == [
        "/opt/spark/bin/spark-class", "org.apache.spark.deploy.master.Master",
        "--host", "127.0.0.1", "--port", "7077", "--webui-port", "8080",
    ]  # fmt: skip
    cmd = _worker_command(
        home,
        7078,
        8081,
        cores=2,
        memory="1g",
        work_dir=tmp_path / "worker-1",
        master_url="spark://127.0.0.1:7077",
    )
    assert cmd == [
        "/opt/spark/bin/spark-class", "org.apache.spark.deploy.worker.Worker",
        "--host", "127.0.0.1", "--port", "7078", "--webui-port", "8081",
        "--cores", "2", "--memory", "1g", "--work-dir", str(tmp_path / "worker-1"),
        "spark://127.0.0.1:7077",
    ]  # fmt: skip


def test_daemon_env_keeps_everything_in_the_run_dir(tmp_path):
    base = {"PATH": "/usr/bin", "HOME": "/home/x", "SPARK_CONF_DIR": "/etc/spark", "SPARK_ENV_LOADED": "1"}
    env = _daemon_env(tmp_path, "worker-2", "abc", Path("/opt/spark"), base, secret="s3cret")
    assert env["PATH"] == "/usr/bin"
    assert "SPARK_ENV_LOADED" not in env
    assert env["SPARK_HOME"] == "/opt/spark"
    assert env["SPARK_LOCAL_IP"] == "127.0.0.1"
    assert env["PYSPARK_PYTHON"] == sys.executable
    assert env[cluster_state.MARKER_ENV] == "abc"
    assert env["SPARK_WORKER_DIR"] == str(tmp_path / "worker-2")
    for key in ("SPARK_CONF_DIR", "SPARK_LOG_DIR", "SPARK_LOCAL_DIRS", "TMPDIR"):
        assert env[key].startswith(str(tmp_path)), key
    assert f"-Djava.io.tmpdir={tmp_path}" in env["SPARK_DAEMON_JAVA_OPTS"]
    assert "-Dspark.port.maxRetries=0" in env["SPARK_DAEMON_JAVA_OPTS"]
    assert "-XX:TieredStopAtLevel=1" in env["SPARK_DAEMON_JAVA_OPTS"]  # a daemon lives one run: C1
    assert "SPARK_WORKER_DIR" not in _daemon_env(tmp_path, "master", "abc", Path("/opt/spark"), base, secret="s")


def test_daemons_get_the_secret_by_environment_and_nothing_of_the_airflow_worker(tmp_path):
    base = {"PATH": "/usr/bin", "HOME": "/home/x", "LC_ALL": "C.UTF-8", "JAVA_HOME": "/jdk", "KDE_VAR_DIR": "/v",
            "AIRFLOW__CORE__FERNET_KEY": "fernet", "AWS_SECRET_ACCESS_KEY": "aws", "KDE_KAFKA_SASL_PASSWORD": "pw",
            "PYSPARK_SUBMIT_ARGS": "--conf x=y"}  # fmt: skip
    env = _daemon_env(tmp_path, "master", "abc", Path("/opt/spark"), base, secret="s3cret")
    assert {k: env[k] for k in ("PATH", "HOME", "LC_ALL", "JAVA_HOME")} == {
        "PATH": "/usr/bin", "HOME": "/home/x", "LC_ALL": "C.UTF-8", "JAVA_HOME": "/jdk"}  # fmt: skip
    assert "KDE_VAR_DIR" not in env
    assert not {"AIRFLOW__CORE__FERNET_KEY", "AWS_SECRET_ACCESS_KEY", "KDE_KAFKA_SASL_PASSWORD",
                "PYSPARK_SUBMIT_ARGS"} & set(env)  # fmt: skip
    assert env[spark_cluster.SECRET_ENV] == "s3cret"
    assert "-Dspark.authenticate=true" in env["SPARK_DAEMON_JAVA_OPTS"]
    assert "s3cret" not in " ".join(v for k, v in env.items() if k != spark_cluster.SECRET_ENV)


def test_a_new_secret_is_owner_only_and_replaces_a_link_instead_of_writing_through_it(tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("keep")
    (tmp_path / cluster_state.SECRET_FILE).symlink_to(target)
    secret = spark_cluster._new_secret(tmp_path)
    path = tmp_path / cluster_state.SECRET_FILE
    assert not path.is_symlink() and path.stat().st_mode & 0o777 == 0o600
    assert (tmp_path / cluster_state.SECRET_FILE).read_text() == secret and len(secret) == 64
    assert target.read_text() == "keep"
    assert spark_cluster._new_secret(tmp_path) != secret
    leftovers.remove_scratch(tmp_path)
    assert not (tmp_path / cluster_state.SECRET_FILE).exists()


def test_cluster_json_round_trip_ignores_bookkeeping():
    cluster = StandaloneCluster(
        "spark://127.0.0.1:1", "http://127.0.0.1:2", "/r", {"master": 5, "worker-1": 6}
    )
    data = json.loads(json.dumps({**cluster.to_json(), "cluster_id": "x", "sids": {}}))
    assert StandaloneCluster.from_json(data) == cluster


def test_never_started_dir_has_nothing_to_stop(tmp_path, capsys):
    assert running_processes(tmp_path / "nothing") == []
    assert stop_standalone(tmp_path / "nothing") == []
    assert stop_standalone(tmp_path / "nothing") == []
    assert main(["status", str(tmp_path / "nothing")]) == 1
    assert main(["stop", str(tmp_path / "nothing")]) == 0
    assert capsys.readouterr().out.splitlines() == ["not running", "not running"]


def test_unreadable_state_names_the_file(tmp_path):
    (tmp_path / "cluster.json").write_text("{not json")
    with pytest.raises(ClusterError, match=r"cluster\.json") as err:
        stop_standalone(tmp_path)
    assert str(tmp_path) in str(err.value)


def test_invalid_arguments_are_refused_before_anything_starts(tmp_path):
    with pytest.raises(ValueError, match="workers >= 1"):
        start_standalone(tmp_path, workers=0)
    assert not (tmp_path / "cluster.json").exists()


# --- fake daemons: process trees without a JVM ---------------------------------------------------

#: Like a Spark worker: a child that makes its own process group (as pyspark's
#: daemon does) and one that leaves the session; the latter ignores SIGTERM.
FAKE_DAEMON = """
import os, subprocess, sys, time
sleep = [sys.executable, "-c", "import signal, sys, time\\n"
         "if sys.argv[1] == 'ignore': signal.signal(signal.SIGTERM, signal.SIG_IGN)\\n"
         "print('ready', flush=True)\\n"
         "time.sleep(600)"]
grouped = subprocess.Popen([*sleep, "term"], preexec_fn=os.setpgrp, stdout=subprocess.PIPE)
escaped = subprocess.Popen([*sleep, "ignore"], start_new_session=True, stdout=subprocess.PIPE)
# Only once each child runs its handlers: a SIGTERM before that would kill the one meant to ignore it.
grouped.stdout.readline(), escaped.stdout.readline()
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{grouped.pid} {escaped.pid}")
os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def _wait_for_file(path: Path, timeout_s: float, proc: subprocess.Popen | None = None) -> str:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        if proc is not None and proc.poll() is not None:
            raise AssertionError(f"process {proc.pid} exited with {proc.returncode} before writing {path}")
        assert time.monotonic() < deadline, f"{path} not written after {timeout_s}s"
        time.sleep(0.1)
    return path.read_text()


def _same_process_alive(pid: int, start_ticks: int) -> bool:
    stat = _read_stat(pid)
    return stat is not None and stat.start_ticks == start_ticks and stat.state not in ("Z", "X")


def _fake_state(run_dir: Path, cluster_id: str) -> dict:
    return {
        "master_url": "spark://127.0.0.1:1",
        "web_ui_url": "http://127.0.0.1:1",
        "run_dir": str(run_dir),
        "pids": {},
        "cluster_id": cluster_id,
        "sids": {},
        "pgids": {},
        "start_ticks": {},
        "logs": {},
    }


def test_stop_finds_and_kills_the_whole_tree(tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "logs").mkdir(parents=True)
    script = tmp_path / "fake_daemon.py"
    script.write_text(FAKE_DAEMON)
    state = _fake_state(run_dir, uuid.uuid4().hex)
    env = {**os.environ, cluster_state.MARKER_ENV: state["cluster_id"]}
    leader = _launch(run_dir, "master", [sys.executable, str(script), str(tmp_path / "pids")], env)
    _record(state, "master", leader)
    _save_state(run_dir, state)
    try:
        grouped, escaped = map(int, _wait_for_file(tmp_path / "pids", 30, leader).split())
        ticks = {pid: _read_stat(pid).start_ticks for pid in (leader.pid, grouped, escaped)}
        assert _read_stat(grouped).pgid == grouped and _read_stat(grouped).sid == leader.pid
        assert _read_stat(escaped).sid == escaped
        assert running_processes(run_dir) == sorted(ticks)

        with pytest.raises(ClusterError, match="still running") as err:
            start_standalone(run_dir)
        assert str(run_dir / "logs" / "master.log") in str(err.value)

        started = time.monotonic()
        # The escaped child ignores SIGTERM: it takes the SIGKILL after the 1 s grace, no sooner (the upper
        # bound only catches a stop that waits for nothing: it is 30 times the grace, as the machine may be busy).
        assert stop_standalone(run_dir, timeout_s=1) == sorted(ticks)
        assert 1 <= time.monotonic() - started < 30
        assert running_processes(run_dir) == []
        assert not any(_same_process_alive(pid, t) for pid, t in ticks.items())
        assert stop_standalone(run_dir) == []
    finally:
        for pid in running_processes(run_dir):
            os.kill(pid, signal.SIGKILL)


def test_remove_scratch_keeps_logs_and_state_and_counts_what_it_freed(tmp_path):
    run_dir = tmp_path / "cluster"
    executor = run_dir / "worker-1" / "app-20261128000000-0000" / "0"
    files = {
        executor / "stdout": 3, executor / "stderr": 5, executor / "delta-spark.jar": 700,
        executor / "kde_jobs.zip" : 20, executor / "spark-x" / "nested.bin": 11,
        run_dir / "local" / "worker-1" / "blockmgr-1" / "0a" / "shuffle_0.data": 40,
        run_dir / "tmp" / "netty.so": 9, run_dir / "logs" / "master.log": 13, run_dir / "cluster.json": 2,
    }  # fmt: skip
    for path, size in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x" * size)
    (run_dir / "conf").mkdir()

    assert leftovers.remove_scratch(run_dir) == 700 + 20 + 11 + 40 + 9
    left = sorted(str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file())
    assert left == ["cluster.json", "logs/master.log", f"{executor.relative_to(run_dir)}/stderr",
                    f"{executor.relative_to(run_dir)}/stdout"]  # fmt: skip
    assert (run_dir / "conf").is_dir()
    assert leftovers.remove_scratch(run_dir) == 0  # nothing left to free


def test_a_recorded_pid_now_used_by_another_process_is_left_alone(tmp_path):
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True
    )
    try:
        state = _fake_state(run_dir, uuid.uuid4().hex)
        stat = _read_stat(stranger.pid)
        # What cluster.json would say had the master died and its pid been
        # handed to this process: same pid and session id, another start time.
        state["pids"]["master"] = state["sids"]["master"] = state["pgids"]["master"] = stranger.pid
        state["start_ticks"]["master"] = stat.start_ticks - 1
        _save_state(run_dir, state)
        assert running_processes(run_dir) == []
        assert stop_standalone(run_dir, timeout_s=1) == []
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_wait_ready_names_the_master_log_when_the_master_never_answers(tmp_path):
    run_dir = tmp_path
    (run_dir / "logs").mkdir()
    (run_dir / "logs" / "master.log").write_text("line 1\nstill booting\n")
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        port = ports.free_port()
        with pytest.raises(ClusterError, match="master not ALIVE after 1s") as err:
            _wait_ready(run_dir, {"master": sleeper}, f"http://127.0.0.1:{port}", {}, time.monotonic() + 1, 1)
        message = str(err.value)
        assert str(run_dir / "logs" / "master.log") in message and "still booting" in message
    finally:
        sleeper.kill()
        sleeper.wait()


def test_wait_ready_names_the_worker_that_did_not_register(tmp_path):
    (tmp_path / "logs").mkdir()
    (tmp_path / "logs" / "worker-2.log").write_text("Connecting to master...\n")
    body = json.dumps(
        {"status": "ALIVE", "workers": [{"port": 1001, "state": "ALIVE"}, {"port": 1002, "state": "DEAD"}]}
    ).encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(ClusterError, match="worker-2 not registered ALIVE") as err:
            _wait_ready(tmp_path, {}, url, {"worker-1": 1001, "worker-2": 1002}, time.monotonic() + 1, 1)
        assert str(tmp_path / "logs" / "worker-2.log") in str(err.value)
        assert "Connecting to master" in str(err.value)
    finally:
        server.shutdown()
        server.server_close()


# --- real clusters -------------------------------------------------------------------------------

#: Prints a sum, then blocks one task inside a python worker so the test can
#: stop the cluster while the application still holds an executor.
JOB = """
import json, os, sys, time
from pyspark.sql import SparkSession

pids_file = sys.argv[1]  # read here: in a python worker, sys.argv is the worker's own
# The cluster's secret, as a job's driver sets it (spark_jobs/job_common.build_session).
secret = open(os.environ["KDE_SPARK_SECRET_FILE"]).read()
spark = (SparkSession.builder.appName("spark-cluster-test").config("spark.authenticate", "true")
         .config("spark.authenticate.secret", secret).getOrCreate())
print("SUM", spark.range(1000).selectExpr("sum(id)").collect()[0][0], flush=True)

def block(rows):
    list(rows)
    with open(pids_file + ".tmp", "w") as f:
        json.dump({"python_worker": os.getpid(), "pyspark_daemon": os.getppid()}, f)
    os.replace(pids_file + ".tmp", pids_file)
    time.sleep(600)
    yield 0

spark.sparkContext.parallelize([0], 1).mapPartitions(block).collect()
"""


def _master_json(cluster: StandaloneCluster) -> dict:
    with urllib.request.urlopen(f"{cluster.web_ui_url}/json/", timeout=5) as resp:
        return json.load(resp)


def _processes_mentioning(text: str) -> list[int]:
    """Live processes whose command line or environment contains ``text``."""
    needle = text.encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        stat = _read_stat(int(entry))
        if stat is None or stat.state in ("Z", "X"):
            continue
        for part in ("cmdline", "environ"):
            try:
                if needle in Path(f"/proc/{entry}/{part}").read_bytes():
                    found.append(int(entry))
                    break
            except OSError:
                pass
    return found


def _recorded_ticks(run_dir: Path) -> dict[int, int]:
    state = json.loads((run_dir / "cluster.json").read_text())
    return {state["pids"][name]: ticks for name, ticks in state["start_ticks"].items()}


def _assert_nothing_left(run_dir: Path, ticks: dict[int, int]) -> None:
    assert running_processes(run_dir) == []
    assert [pid for pid, t in ticks.items() if _same_process_alive(pid, t)] == []
    assert _processes_mentioning(str(run_dir)) == []


@pytest.mark.full
@pytest.mark.integration
def test_one_worker_runs_a_job_and_stop_kills_executors_and_python_workers(tmp_path):
    run_dir = tmp_path / "spark"
    cluster = start_standalone(run_dir, workers=1, worker_cores=1, worker_memory="1g")
    ticks = _recorded_ticks(run_dir)
    driver = None
    try:
        assert cluster.run_dir == str(run_dir.resolve())
        assert sorted(cluster.pids) == ["master", "worker-1"]
        info = _master_json(cluster)
        assert info["status"] == "ALIVE"
        assert info["url"] == cluster.master_url
        alive = [w for w in info["workers"] if w["state"] == "ALIVE"]
        assert info["aliveworkers"] == 1 and len(alive) == 1
        assert (alive[0]["cores"], alive[0]["memory"]) == (1, 1024)
        assert sorted(running_processes(run_dir)) == sorted(cluster.pids.values())

        job = tmp_path / "job.py"
        job.write_text(JOB)
        shipped = tmp_path / "shipped.txt"  # copied into the executor's folder, as the jobs' jars are
        shipped.write_text("x" * 1000)
        pids_file = tmp_path / "pids.json"
        out = tmp_path / "driver.out"
        # A copy outside the run folder: this test counts what still mentions the folder, not the driver.
        secret_copy = tmp_path / "driver-secret"
        secret_copy.write_text((run_dir / cluster_state.SECRET_FILE).read_text())
        env = {**submit_environment(), "SPARK_LOCAL_IP": "127.0.0.1", "KDE_SPARK_SECRET_FILE": str(secret_copy)}
        cmd = [
            spark_submit_binary(), "--master", cluster.master_url,
            "--driver-memory", "512m",
            "--conf", "spark.executor.memory=512m",
            "--conf", "spark.driver.host=127.0.0.1",
            "--conf", "spark.ui.enabled=false",
            "--conf", f"spark.local.dir={tmp_path / 'driver-local'}",
            "--files", str(shipped),
            str(job), str(pids_file),
        ]  # fmt: skip
        with open(out, "wb") as stdout:
            driver = subprocess.Popen(
                cmd, stdout=stdout, stderr=subprocess.STDOUT, env=env, cwd=tmp_path, start_new_session=True
            )
        info = json.loads(_wait_for_file(pids_file, 240, driver))
        assert "SUM 499500" in out.read_text(errors="replace").splitlines()

        executor = _read_stat(info["pyspark_daemon"]).ppid
        app_processes = {executor, info["pyspark_daemon"], info["python_worker"]}
        assert app_processes <= set(running_processes(run_dir))
        ticks.update({pid: _read_stat(pid).start_ticks for pid in app_processes})
        assert executor in _processes_mentioning(str(run_dir))

        (executor_dir,) = run_dir.glob("worker-1/app-*/*")
        assert {"shipped.txt", "stderr"} <= {f.name for f in executor_dir.iterdir()}
        assert (run_dir / "local").is_dir() and (run_dir / "tmp").is_dir()

        started = time.monotonic()
        stopped = stop_standalone(run_dir)
        stop_seconds = time.monotonic() - started
        assert set(cluster.pids.values()) | app_processes <= set(stopped)
        assert stop_seconds < 30
        _assert_nothing_left(run_dir, ticks)
        # The scratch is gone, the executor's output and the daemons' logs stay.
        assert {f.name for f in executor_dir.iterdir()} <= leftovers.EXECUTOR_LOGS
        assert (executor_dir / "stderr").is_file()
        assert not (run_dir / "local").exists() and not (run_dir / "tmp").exists()
        assert (run_dir / "logs" / "worker-1.log").is_file() and (run_dir / "cluster.json").is_file()
        assert stop_standalone(run_dir) == []
    finally:
        if driver is not None and driver.poll() is None:
            os.killpg(driver.pid, signal.SIGKILL)
            driver.wait()
        stop_standalone(run_dir)


AUTH_JOB = """
from spark_jobs.job_common import build_session

spark = build_session("auth-test")
print("SUM", spark.range(100).selectExpr("sum(id)").collect()[0][0], flush=True)
"""


@pytest.mark.integration
def test_the_cluster_takes_only_applications_that_know_its_secret_and_no_command_line_shows_it(tmp_path,
                                                                                              monkeypatch):  # fmt: skip
    from include import settings
    from include.spark import jvm_deps
    from include.spark.spark_submit import package_py_files

    monkeypatch.setenv("AIRFLOW__CORE__FERNET_KEY", "not-for-the-cluster")
    run_dir = tmp_path / "spark"
    cluster = start_standalone(run_dir, workers=1, worker_cores=1, worker_memory="512m")
    drivers: list[subprocess.Popen] = []
    try:
        secret_file = run_dir / cluster_state.SECRET_FILE
        secret = (run_dir / cluster_state.SECRET_FILE).read_text()
        assert secret and secret_file.stat().st_mode & 0o777 == 0o600
        for pid in running_processes(run_dir):
            assert secret.encode() not in Path(f"/proc/{pid}/cmdline").read_bytes(), pid
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
            assert not [e for e in environ if e.startswith(b"AIRFLOW__")], pid

        job = tmp_path / "job.py"
        job.write_text(AUTH_JOB)
        base = [spark_submit_binary(), "--master", cluster.master_url, "--conf", "spark.driver.host=127.0.0.1",
                "--conf", "spark.ui.enabled=false", "--conf", "spark.executor.memory=512m",
                "--jars", ",".join(str(j) for j in jvm_deps.spark_jars()),
                "--py-files", str(package_py_files()), str(job)]  # fmt: skip
        env = {**submit_environment(), "SPARK_LOCAL_IP": "127.0.0.1"}

        # Another local user's application, without the secret: refused at its first message.
        refused_log = tmp_path / "refused.log"
        with open(refused_log, "wb") as out:
            drivers.append(subprocess.Popen(base, env=env, stdout=out, stderr=subprocess.STDOUT))
        deadline = time.monotonic() + 90
        while "Expected SaslMessage" not in refused_log.read_text(errors="replace"):
            assert time.monotonic() < deadline and drivers[0].poll() in (None, 1), refused_log.read_text()[-3000:]
            time.sleep(0.5)
        assert _master_json(cluster)["activeapps"] == []

        # The job's driver joins with the secret from the file the submitting task names.
        done = subprocess.run(base, env={**env, settings.SPARK_SECRET_FILE_ENV: str(secret_file)},
                              capture_output=True, text=True, timeout=240)  # fmt: skip
        assert done.returncode == 0 and "SUM 4950" in done.stdout, (done.stdout + done.stderr)[-3000:]
    finally:
        for driver in drivers:
            driver.kill()
            driver.wait()
        stop_standalone(run_dir)
    assert not (run_dir / cluster_state.SECRET_FILE).exists()


@pytest.mark.integration
def test_a_worker_refusing_its_memory_setting_fails_the_start_and_leaves_nothing(tmp_path):
    run_dir = tmp_path / "spark"
    with pytest.raises(ClusterError) as err:
        start_standalone(run_dir, worker_memory="lots")
    message = str(err.value)
    assert str(run_dir / "logs" / "worker-1.log") in message
    assert "worker-1" in message and "exited with code 1" in message
    # The worker's own complaint, from the tail of its log.
    assert "Usage: Worker" in message
    _assert_nothing_left(run_dir, _recorded_ticks(run_dir))
    assert stop_standalone(run_dir) == []


@pytest.mark.integration
def test_two_workers_register(tmp_path):
    run_dir = tmp_path / "spark"
    cluster = start_standalone(run_dir, workers=2, worker_cores=1, worker_memory="512m")
    ticks = _recorded_ticks(run_dir)
    try:
        info = _master_json(cluster)
        alive = [w for w in info["workers"] if w["state"] == "ALIVE"]
        assert info["aliveworkers"] == 2 and len(alive) == 2
        assert [(w["cores"], w["memory"]) for w in alive] == [(1, 512), (1, 512)]
        state = json.loads((run_dir / "cluster.json").read_text())
        assert sorted(w["port"] for w in alive) == sorted(state["worker_ports"].values())
        assert main(["status", str(run_dir)]) == 0
    finally:
        stopped = stop_standalone(run_dir)
    assert set(cluster.pids.values()) <= set(stopped)
    assert sorted(cluster.pids) == ["master", "worker-1", "worker-2"]
    _assert_nothing_left(run_dir, ticks)
    assert stop_standalone(run_dir) == []


@pytest.mark.integration
def test_a_job_whose_cluster_loses_its_worker_is_stopped_not_left_waiting(tmp_path):
    """Found by the fault soak: with the run's only worker killed, the job waited for executors forever.

    A stand-in process plays the job (Spark's endless wait is what the soak saw); the
    cluster is real. The watch stops the job within seconds and names the lost daemon.
    """
    run_dir = tmp_path / "spark"
    cluster = start_standalone(run_dir, workers=1, worker_cores=1, worker_memory="512m")
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    try:
        with cluster_stop.ClusterWatch(run_dir, job.kill, interval_s=0.5) as watch:
            time.sleep(1.5)
            assert watch.lost == [] and job.poll() is None, "a healthy cluster never stops the job"
            os.kill(cluster.pids["worker-1"], signal.SIGKILL)
            assert job.wait(10) == -signal.SIGKILL
        assert watch.lost == ["worker-1"]
        assert f"lost worker-1 while the job ran (logs in {run_dir / 'logs'})" in watch.message()
        assert cluster_state.lost_daemons(run_dir) == ["worker-1"]
    finally:
        job.kill()
        job.wait()
        stop_standalone(run_dir)
    assert cluster_state.lost_daemons(tmp_path / "never-started") == []
