"""Profile ``existing_master`` for real, on clusters started outside any pipeline.

- A Spark standalone master and two workers, started with Spark's own classes (as an operator's
  ``start-master.sh`` / ``start-worker.sh`` would; no secret, no pipeline code), with the lakehouse on an
  object store (a real S3-compatible server, s3proxy), so that the driver and the executors share nothing
  but it.
- YARN: Hadoop's own ResourceManager and NodeManager (tests/yarn_cluster.py), whose containers run the
  executors, with the lakehouse on the suite's HDFS, as a Hadoop site runs it.

One DAG run submits its job there in client mode; one executor is killed in the middle of a task. The run
must land exactly the topic's records, and leave nothing of itself on the cluster: no application still
running, no executor process.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from include.ports import free_port
from include.spark.spark_submit import spark_home
from tests.kafka_helpers import produce_numbered, read_all
from tests.processes import java_processes_in

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
        """Pids of the executor processes the workers launched (each runs in its worker's work folder,
        ``<work-dir>/<app id>/<executor id>``)."""
        return java_processes_in(self.root, b"CoarseGrainedExecutorBackend")

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


def kill_an_executor_mid_task(proc, log: Path, executors: Callable[[], list[int]],
                              stderr_of: Callable[[int], Path]) -> None:  # fmt: skip
    """Once both executors are up, SIGKILL one in the middle of a task (the other takes its work over); then
    wait for the run, which must succeed, and check in the lost executor's own log that the kill hit work."""
    deadline = time.monotonic() + 300
    lost, stderr = 0, Path()
    while not lost:
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
        up = executors()
        for pid in up if len(up) == 2 else ():
            stderr = stderr_of(pid)
            if unfinished_tasks(stderr):
                os.kill(pid, signal.SIGKILL)
                lost = pid
                break
        time.sleep(0.05)
    assert proc.wait(600) == 0, log.read_text()[-5000:]
    # A task the executor began and never finished: Spark ran it again elsewhere.
    assert unfinished_tasks(stderr), stderr.read_text(errors="replace")[-3000:]


def assert_exact(p, bootstrap: str) -> None:
    """One successful run landed each of the topic's records in bronze exactly once."""
    (run,) = p.ledger()
    assert (run["outcome"], run["rows"], run["continuity"]) == ("success", RECORDS, "CONTINUOUS")
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == RECORDS
    assert set(keys) == {(part, offset) for part, offset, _ in read_all(bootstrap, p.topic)}


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
    kill_an_executor_mid_task(proc, log, cluster.executors, executor_stderr)
    assert_exact(p, bootstrap)
    state = cluster.state()
    assert state["activeapps"] == [], state["activeapps"]
    assert [a for a in state["completedapps"] if name in a["name"]], "the run's application never reached the cluster"
    assert cluster.executors() == []
    assert not p.lake.exists() and "00000000000000000000.json" in p.listing("bronze", "_delta_log")


@pytest.fixture
def yarn(tmp_path, hdfs_server) -> Iterator:
    from tests import yarn_cluster

    started = yarn_cluster.start(tmp_path / "yarn", hdfs_server.uri)
    yield started
    started.stop()


def test_a_run_on_yarn_with_its_lakehouse_on_hdfs_survives_a_lost_executor_container(
    make_dag_pipeline, bootstrap, yarn, tmp_path
):
    p = make_dag_pipeline(store="hdfs", partitions=PARTITIONS)
    p.write(
        kafka={"connection_id": "kafka_default", "topics": [p.topic], "max_offsets_per_trigger": 150},
        cluster={"profile": "existing_master", "master_connection_id": "spark_yarn", "workers": 2,
                 "worker_memory": "512m"},
    )  # fmt: skip
    produce_numbered(bootstrap, p.topic, PARTITIONS, RECORDS)
    # What a YARN site's Spark configuration holds: the cluster's Spark jars already on every node (here
    # pyspark's own), so that a run uploads only the job's few jars, not Spark's.
    spark_conf = tmp_path / "spark-conf"
    spark_conf.mkdir()
    (spark_conf / "spark-defaults.conf").write_text(
        f"spark.yarn.jars local:{spark_home() / 'jars'}/*\nspark.yarn.am.memory 384m\n")

    proc, log = p.start(
        AIRFLOW_CONN_SPARK_YARN=json.dumps({"conn_type": "spark", "host": "yarn", "extra": {"queue": "default"}}),
        HADOOP_CONF_DIR=str(yarn.conf_dir), SPARK_CONF_DIR=str(spark_conf))  # fmt: skip
    kill_an_executor_mid_task(proc, log, yarn.executors, yarn.executor_stderr)
    assert_exact(p, bootstrap)
    # spark.yarn.jars was read from the site's configuration: Spark's jars were not uploaded.
    assert "falling back to uploading libraries under SPARK_HOME" not in log.read_text()
    # The run's application reached YARN, in the queue the connection names, and ended with the run.
    apps = [a for a in yarn.apps() if p.name in a["name"]]
    assert apps, [a["name"] for a in yarn.apps()]
    ended = [(a["state"], a["finalStatus"], a["queue"].rsplit(".", 1)[-1]) for a in apps]  # root.default
    assert ended == [("FINISHED", "SUCCEEDED", "default")] * len(apps), apps
    assert yarn.executors() == []
    # The executors wrote through the NameNode: nothing of the lakehouse is on the worker's disk.
    assert not p.lake.exists() and "00000000000000000000.json" in p.listing("bronze", "_delta_log")
