"""What a run killed without its teardown leaves behind, with real processes (no Spark, no Airflow).

The fault soak found both: a killed Airflow task process left its Spark
driver running on the checkpoint, and the run that took the lock over from
the dead run started its own driver beside it.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from include import settings
from include.orchestration import pipeline_lock, run_folder, run_lock
from include.spark import cluster_state, leftovers
from tests.processes import processes_naming

SLEEPER = [sys.executable, "-c", "import time; time.sleep(600)"]

#: A parent that starts two children, one armed with dies_with_parent, writes their pids, then waits.
PARENT = """
import subprocess, sys, time
from include.spark.spark_submit import dies_with_parent
sleep = [sys.executable, "-c", "import time; time.sleep(600)"]
armed = subprocess.Popen(sleep, preexec_fn=dies_with_parent())
unarmed = subprocess.Popen(sleep)
with open(sys.argv[1] + ".tmp", "w") as f:
    f.write(f"{armed.pid} {unarmed.pid}")
import os; os.replace(sys.argv[1] + ".tmp", sys.argv[1])
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def _wait_gone(pid: int, timeout_s: float = 10) -> bool:
    deadline = time.monotonic() + timeout_s
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not _alive(pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl(PR_SET_PDEATHSIG) is Linux only")
def test_a_driver_started_by_a_task_process_dies_when_that_process_is_killed(tmp_path):
    pids_file = tmp_path / "pids"
    env = {**os.environ, "PYTHONPATH": str(settings.PROJECT_ROOT)}
    parent = subprocess.Popen([sys.executable, "-c", PARENT, str(pids_file)], env=env)
    deadline = time.monotonic() + 30
    while not pids_file.exists():
        assert parent.poll() is None and time.monotonic() < deadline, "the parent never started its children"
        time.sleep(0.05)
    armed, unarmed = map(int, pids_file.read_text().split())
    try:
        assert _alive(armed) and _alive(unarmed)
        os.kill(parent.pid, signal.SIGKILL)
        parent.wait()
        assert _wait_gone(armed), "the armed child outlived its killed parent"
        time.sleep(0.5)
        assert _alive(unarmed), "without dies_with_parent a child outlives its parent (what the driver did)"
    finally:
        for pid in (armed, unarmed):
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.fixture
def cfg(make_pipeline):
    return make_pipeline()


def _job_of(run_folder: Path, name: str = "ingest") -> subprocess.Popen:
    """A stand-in for a run's driver, recorded in the run's folder as the operator records spark-submit."""
    run_folder.mkdir(parents=True, exist_ok=True)
    return subprocess.Popen([*SLEEPER, str(run_folder / "ingest-summary.json")], start_new_session=True,
                            preexec_fn=leftovers.record_job(run_folder, name))  # fmt: skip


def test_a_run_taking_the_lock_from_a_dead_run_first_stops_that_runs_job(cfg):
    states = {"manual__dead": "running"}

    def take(run_id: str) -> pipeline_lock.LockClaim:
        return pipeline_lock.take_lock(cfg, dag_id="orders", run_id=run_id, run_state=lambda _dag, run: states.get(run))

    assert take("manual__dead") == pipeline_lock.LockClaim(1)
    dead_job = _job_of(run_folder.run_dir(cfg, "manual__dead"))
    other_job = _job_of(run_folder.run_dir(cfg, "manual__deadline"))  # a prefix of its name is not its folder
    try:
        claim = take("manual__next")
        assert claim.epoch is None and claim.holder["run_id"] == "manual__dead"
        assert "Mark Run as Failed" in claim.message and "manual__dead" in claim.message
        assert dead_job.poll() is None, "a live holder's job is never touched"

        states["manual__dead"] = "failed"  # what the scheduler does once the dead task's heartbeat times out
        claim = take("manual__next")
        host = socket.gethostname()
        assert claim.epoch == 2 and claim.holder is None
        assert claim.message == (f"took the lock over from run manual__dead (epoch 1, host {host}): run "
                                 f"manual__dead died without its teardown; stopped its job processes "
                                 f"[{dead_job.pid}] and 0 processes of its cluster []; no table to fence at "
                                 "epoch 2")  # fmt: skip
        assert dead_job.wait(10) == -signal.SIGKILL
        assert other_job.poll() is None
        assert run_lock.holder(run_lock.lock_folder(cfg))["run_id"] == "manual__next"

        # A retry of the same task takes its own lock again, at its epoch; nothing is left to stop.
        claim = take("manual__next")
        assert claim.epoch == 2
        assert claim.message == (f"took the lock over from run manual__dead (epoch 1, host {host}): it left no "
                                 "process running here; no table to fence at epoch 2")  # fmt: skip
    finally:
        for proc in (dead_job, other_job):
            proc.kill()
            proc.wait()


def test_processes_naming_a_folder_are_found_by_their_command_line(tmp_path):
    job = _job_of(tmp_path / "run-1")
    try:
        assert processes_naming(tmp_path / "run-1") == [job.pid]
        assert processes_naming(tmp_path / "run-2") == []
    finally:
        job.kill()
        job.wait()
    assert processes_naming(tmp_path / "run-1") == []


#: A driver that starts a child of its own, as spark-submit's JVM starts the Python driver.
PARENT_OF_ONE = [sys.executable, "-c", "import subprocess, sys, time; "
                 "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']); time.sleep(600)"]


def test_only_recorded_jobs_and_what_they_started_are_stopped_never_a_reader_of_the_runs_log(cfg):
    folder = run_folder.run_dir(cfg, "manual__dead")
    folder.mkdir(parents=True)
    (folder / "ingest.log").write_text("the dead run's log")
    job = subprocess.Popen(PARENT_OF_ONE, start_new_session=True,
                           preexec_fn=leftovers.record_job(folder, "ingest"))  # fmt: skip
    reader = subprocess.Popen([*SLEEPER, str(folder / "ingest.log")])  # a `less` of the log names the folder too
    try:
        deadline = time.monotonic() + 10
        while len(leftovers.recorded_jobs(folder)) < 2:
            assert time.monotonic() < deadline, "the job's child never started"
            time.sleep(0.05)
        (child,) = set(leftovers.recorded_jobs(folder)) - {job.pid}
        assert reader.pid in processes_naming(folder)
        message = pipeline_lock.stop_leftovers(cfg, "manual__dead")
        assert message is not None and str(job.pid) in message
        assert job.wait(10) == -signal.SIGKILL
        assert _wait_gone(child)
        assert reader.poll() is None, "a process that only names the folder is not the run's"
    finally:
        for proc in (job, reader):
            proc.kill()
            proc.wait()


def test_a_record_whose_pid_number_now_belongs_to_another_process_names_nobody(tmp_path):
    import json

    reused = subprocess.Popen(SLEEPER)
    try:
        jobs = tmp_path / leftovers.JOBS_DIR
        jobs.mkdir()
        stat = cluster_state._read_stat(reused.pid)
        (jobs / "ingest.json").write_text(json.dumps({"pid": reused.pid, "start_ticks": stat.start_ticks - 1}))
        assert leftovers.recorded_jobs(tmp_path) == []
        (jobs / "ingest.json").write_text(json.dumps({"pid": reused.pid, "start_ticks": stat.start_ticks}))
        assert leftovers.recorded_jobs(tmp_path) == [reused.pid]
        (jobs / "broken.json").write_text("{not json")
        assert leftovers.recorded_jobs(tmp_path) == [reused.pid]
    finally:
        reused.kill()
        reused.wait()
