"""Profile ``existing_master`` for real: a Spark standalone cluster started outside any pipeline.

The suite starts a master and two workers with Spark's own classes (as an
operator's ``start-master.sh`` / ``start-worker.sh`` would; no secret, no
pipeline code). One DAG run with ``cluster.profile: existing_master`` submits
its job there in client mode; one executor is killed in the middle of the run.
The lakehouse is on an object store (a real S3-compatible server, s3proxy),
so the driver and the executors share nothing but it. The run must land
exactly the topic's records, and leave nothing of itself on the cluster: no
application still running, no executor process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from include.ports import free_port
from include.spark.spark_submit import spark_home
from tests.kafka_helpers import produce_numbered, read_all

pytestmark = [pytest.mark.integration, pytest.mark.full]

PARTITIONS = 3
RECORDS = 3000


class Cluster:
    """A standalone master and its workers, each a process of its own session."""

    def __init__(self, root: Path, workers: int) -> None:
        self.root, self.procs = root, []
        self.port, self.ui_port = free_port(), free_port()
        self.master = f"spark://127.0.0.1:{self.port}"
        env = {**os.environ, "SPARK_HOME": str(spark_home()), "SPARK_DAEMON_MEMORY": "256m",
               "SPARK_LOG_DIR": str(root / "logs"), "SPARK_WORKER_DIR": str(root / "work")}  # fmt: skip
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(self.port), "--webui-port", str(self.ui_port)], env)  # fmt: skip
        self._wait(lambda state: True)
        for n in range(1, workers + 1):
            self._start(f"worker-{n}", ["org.apache.spark.deploy.worker.Worker", self.master, "--host", "127.0.0.1",
                                        "--cores", "1", "--memory", "1g", "--webui-port", str(free_port()),
                                        "--work-dir", str(root / f"worker-{n}")], env)  # fmt: skip
        self._wait(lambda state: sum(w["state"] == "ALIVE" for w in state["workers"]) == workers)

    def _start(self, name: str, args: list[str], env: dict[str, str]) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        with (self.root / f"{name}.log").open("wb") as out:
            self.procs.append(subprocess.Popen([str(spark_home() / "bin" / "spark-class"), *args], env=env,
                                               stdout=out, stderr=subprocess.STDOUT, start_new_session=True))  # fmt: skip

    def state(self) -> dict:
        """The master's own view (its web UI's JSON): workers, running and completed applications."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as answer:
            return json.loads(answer.read())

    def _wait(self, ready, timeout_s: float = 120) -> None:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if ready(self.state()):
                    return
            except OSError:
                pass
            assert time.monotonic() < deadline, (self.root / "master.log").read_text(errors="replace")[-3000:]
            time.sleep(0.5)

    def executors(self) -> list[int]:
        """Pids of the executor processes the workers launched."""
        found = []
        for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
                cwd = os.readlink(f"/proc/{pid}/cwd")
            except OSError:
                continue
            # An executor runs in its worker's work folder: <work-dir>/<app id>/<executor id>.
            if b"CoarseGrainedExecutorBackend" in cmdline and cwd.startswith(str(self.root)):
                found.append(pid)
        return found

    def stop(self) -> None:
        for proc in self.procs:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            proc.wait(30)


def executor_stderr(pid: int) -> Path:
    """The executor's stderr file, in its work folder (the process's working directory)."""
    try:
        return Path(os.readlink(f"/proc/{pid}/cwd")) / "stderr"
    except OSError:
        return Path("/nonexistent")


def unfinished_tasks(stderr: Path) -> set[str]:
    """Task ids the executor's log says it began running and never finished (Spark's default INFO log)."""
    try:
        text = stderr.read_text(errors="replace")
    except OSError:
        return set()
    began = set(re.findall(r"Running task .*?\(TID (\d+)\)", text))
    return began - set(re.findall(r"Finished task .*?\(TID (\d+)\)", text))


@pytest.fixture
def cluster(tmp_path) -> Iterator[Cluster]:
    started = Cluster(tmp_path / "spark-cluster", workers=2)
    yield started
    started.stop()


def test_a_run_on_an_existing_cluster_survives_a_lost_executor_and_leaves_nothing_there(
    make_dag_pipeline, bootstrap, cluster
):
    p = make_dag_pipeline(store="s3", partitions=PARTITIONS)
    name, topic = p.name, p.topic
    p.write(
        kafka={"connection_id": "kafka_default", "topics": [topic], "max_offsets_per_trigger": 150},
        cluster={"profile": "existing_master", "master_connection_id": "spark_existing", "workers": 2,
                 "worker_memory": "512m"},
    )  # fmt: skip
    produce_numbered(bootstrap, topic, PARTITIONS, RECORDS)

    proc, log = p.start(AIRFLOW_CONN_SPARK_EXISTING=json.dumps({"conn_type": "spark", "host": cluster.master}))
    deadline = time.monotonic() + 300
    lost, stderr = 0, Path()
    while not lost:  # an executor in the middle of a task: the kill must hit running work
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
        executors = cluster.executors()
        for pid in executors if len(executors) == 2 else ():  # both up: the other one takes the work over
            stderr = executor_stderr(pid)
            if unfinished_tasks(stderr):
                os.kill(pid, signal.SIGKILL)
                lost = pid
                break
        time.sleep(0.05)
    assert proc.wait(600) == 0, log.read_text()[-5000:]
    # The executor's own log: a task it began and never finished (Spark ran it again on the other one).
    assert unfinished_tasks(stderr), stderr.read_text(errors="replace")[-3000:]

    (run,) = p.ledger()
    assert (run["outcome"], run["rows"], run["continuity"]) == ("success", RECORDS, "CONTINUOUS")
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == RECORDS
    assert set(keys) == {(part, offset) for part, offset, _ in read_all(bootstrap, topic)}
    state = cluster.state()
    assert state["activeapps"] == [], state["activeapps"]
    assert [a for a in state["completedapps"] if name in a["name"]], "the run's application never reached the cluster"
    assert cluster.executors() == []
    assert not p.lake.exists() and "00000000000000000000.json" in p.listing("bronze", "_delta_log")
