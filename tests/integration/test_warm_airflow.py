"""The warm ``airflow`` command line the DAG-run tests fork from (include/tooling/warm_airflow.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from include.tooling import airflow_local

pytestmark = [pytest.mark.integration, pytest.mark.full]


def test_a_forked_command_gets_its_own_environment_and_log_and_its_exit_code(warm_airflow, airflow_home, tmp_path):
    env = airflow_local.environment(airflow_home, extra={"AIRFLOW_VAR_WARM_PROBE": "from-the-request"})
    assert "AIRFLOW_VAR_WARM_PROBE" not in warm_airflow.env
    log = tmp_path / "get.log"
    # A variable only this command's environment holds: the child reads the request's environment.
    assert warm_airflow.run(["variables", "get", "warm_probe"], env, log_file=log) == 0
    assert "from-the-request" in log.read_text()

    missing = tmp_path / "missing.log"
    code = warm_airflow.run(["variables", "get", "no_such_variable_anywhere"], env, log_file=missing)
    assert code == 1, missing.read_text()[-2000:]
    assert "no_such_variable_anywhere" in missing.read_text()
    # The server lives on after each command and serves the next.
    assert warm_airflow.run(["variables", "get", "warm_probe"], env, log_file=log) == 0


def test_a_command_with_other_airflow_settings_runs_as_its_own_process(warm_airflow, airflow_home, tmp_path):
    other = airflow_local.environment(airflow_home, extra={"AIRFLOW__CORE__PARALLELISM": "7"})
    assert warm_airflow.accepts(airflow_local.environment(airflow_home))
    assert not warm_airflow.accepts(other)
    with pytest.raises(ValueError, match="settings differ"):
        warm_airflow.run(["version"], other, log_file=tmp_path / "x.log")
    # dags_test falls back to a real process for it: its own stderr captured (a forked command's output
    # is all in the log file, and its stderr empty).
    proc = airflow_local.dags_test(other, "no_such_dag", log_file=tmp_path / "fallback.log", warm=warm_airflow,
                                   timeout_s=300)  # fmt: skip
    assert proc.returncode == 1 and "no_such_dag" in proc.stderr
    forked = airflow_local.dags_test(airflow_local.environment(airflow_home), "no_such_dag",
                                     log_file=tmp_path / "forked.log", warm=warm_airflow)  # fmt: skip
    assert forked.returncode == 1 and forked.stderr == "" and "no_such_dag" in forked.stdout


def test_commands_run_at_once_and_a_killed_one_reports_its_signal(warm_airflow, airflow_home, tmp_path):
    env = airflow_local.environment(airflow_home)
    # A command whose log is a FIFO nobody reads stays blocked opening it: alive, doing nothing, until killed.
    fifo = tmp_path / "blocked.log"
    os.mkfifo(fifo)
    blocked = warm_airflow.start(["version"], env, log_file=fifo)
    assert blocked.poll() is None and Path(f"/proc/{blocked.pid}").exists()
    # Another command is served meanwhile (two DAG runs racing for a pipeline's lock need this).
    assert warm_airflow.run(["version"], env, log_file=tmp_path / "version.log", timeout_s=60) == 0
    with pytest.raises(subprocess.TimeoutExpired):
        blocked.wait(0.2)
    blocked.kill()
    assert blocked.wait(30) == -signal.SIGKILL  # as subprocess.Popen.returncode reports a signal
    assert blocked.poll() == -signal.SIGKILL


def _parent(pid: int) -> int:
    """The parent pid of ``pid``, from /proc (field 4 of its stat, after the command name)."""
    return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])


def test_a_command_whose_keeper_died_says_so_on_every_wait(warm_airflow, airflow_home, tmp_path):
    fifo = tmp_path / "blocked.log"
    os.mkfifo(fifo)
    blocked = warm_airflow.start(["version"], airflow_local.environment(airflow_home), log_file=fifo)
    try:
        # The process that waits for the command and reports its exit code: the command's parent.
        keeper = _parent(blocked.pid)
        assert keeper not in (os.getpid(), warm_airflow.pid)
        os.kill(keeper, signal.SIGKILL)
        with pytest.raises(RuntimeError, match="server ended during a command"):
            blocked.wait(30)
        # Asked again, the handle says the same, not an error about its closed socket.
        with pytest.raises(RuntimeError, match="server ended during a command"):
            blocked.poll()
    finally:
        blocked.kill()
    # The server itself serves on.
    assert warm_airflow.run(["version"], airflow_local.environment(airflow_home), log_file=tmp_path / "v.log") == 0


def _hanging(tmp_path: Path, name: str) -> list[str]:
    """An ``airflow`` command that hangs once it runs: it opens a variables file that is a FIFO
    nobody writes to, so it stays blocked in the kernel, as a call hung in a native library would."""
    fifo = tmp_path / f"{name}.json"
    os.mkfifo(fifo)
    return ["variables", "import", str(fifo)]


def test_a_command_given_up_on_is_stopped_with_its_stacks_in_its_log(warm_airflow, airflow_home, tmp_path):
    env = airflow_local.environment(airflow_home)
    log = tmp_path / "hung.log"
    with pytest.raises(subprocess.TimeoutExpired):
        warm_airflow.run(_hanging(tmp_path, "timed-out"), env, log_file=log, timeout_s=8)
    text = log.read_text(errors="replace")
    # faulthandler's dump of every Python thread, the hung one inside Airflow's variables command.
    assert "most recent call first" in text and "variable_command.py" in text, text[-3000:]

    dropped = tmp_path / "dropped.log"
    command = warm_airflow.start(_hanging(tmp_path, "dropped"), env, log_file=dropped)
    deadline = time.monotonic() + 60
    while not _opening_fifo(command.pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    command._conn.close()  # the caller's end closes without a wait, as when its process ends
    deadline = time.monotonic() + 60
    while Path(f"/proc/{command.pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not Path(f"/proc/{command.pid}").exists(), "the keeper left the command running"
    assert "variable_command.py" in dropped.read_text(errors="replace")
    # The server serves on.
    assert warm_airflow.run(["version"], env, log_file=tmp_path / "after.log") == 0


def _opening_fifo(pid: int) -> bool:
    """Whether the process is blocked opening a FIFO (its kernel wait channel says so)."""
    try:
        return Path(f"/proc/{pid}/wchan").read_text() == "wait_for_partner"
    except OSError:
        return False
