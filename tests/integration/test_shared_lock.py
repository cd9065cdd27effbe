"""The run lock across Airflow workers: two workers, one metadata database, one lakehouse.

Each worker has its own ``KDE_VAR_DIR`` (its local disk: run folders, logs)
and its own Airflow home (config, logs), and they share what a Celery
deployment shares: the metadata database and the tables, on a shared disk or
on an object store (a real S3-compatible server, s3proxy). Real ``airflow
dags test`` runs, real Kafka, Spark and Delta.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import time
from datetime import datetime
from pathlib import Path

import pytest
import yaml

from include.orchestration import run_lock
from include.settings import FAILPOINT_ENV
from include.tooling import airflow_local
from tests.integration.dag_helpers import bronze_keys_of
from tests.kafka_helpers import produce_numbered
from tests.processes import processes_naming, wait_for_failpoint

pytestmark = [pytest.mark.integration, pytest.mark.full]

class Worker:
    """One Airflow worker of the deployment: its own folders, the shared database and lakehouse."""

    def __init__(self, root: Path, n: int, *, database: Path, lake: Path, pipelines: Path, bootstrap: str,
                 env: dict[str, str] | None = None) -> None:  # fmt: skip
        self.var = root / f"worker-{n}" / "var"
        self.env = airflow_local.environment(
            root / f"worker-{n}" / "airflow", kafka_bootstrap=bootstrap, pipelines_dir=pipelines,
            extra={"KDE_LAKEHOUSE_ROOT": str(lake), "KDE_VAR_DIR": str(self.var),
                   "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{database}?timeout=60", **(env or {})},
        )  # fmt: skip
        self.logs = root / f"worker-{n}" / "logs"
        self.logs.mkdir(parents=True)

    def start(self, dag_id: str, name: str, conf: dict | None = None, **env: str) -> tuple[subprocess.Popen, Path]:
        """``airflow dags test`` (with the trigger form's ``conf``) in a session of its own, so that the
        worker's death can take all of it."""
        log = self.logs / f"{name}.log"
        command = airflow_local.airflow_command("dags", "test", dag_id, *(["-c", json.dumps(conf)] if conf else []))
        with log.open("wb") as out:
            proc = subprocess.Popen(command, env={**self.env, **env},
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        return proc, log

    def die(self, proc: subprocess.Popen) -> None:
        """The worker is lost: its DAG run's process and everything it started end at once (SIGKILL)."""
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in processes_naming(self.var):
            os.kill(pid, signal.SIGKILL)
        proc.wait(30)


def _epoch(lock: run_lock.Folder, epoch: int, suffix: str = "json") -> dict:
    """An epoch's record (``json``: who took it, since when) or its release marker (``released``: when)."""
    return json.loads(run_lock._folder(lock).read(f"{epoch:020d}.{suffix}"))


class Deployment:
    """Two workers of one Airflow deployment, a pipeline of one topic (3 partitions), its lakehouse: a folder
    both workers mount, or (with ``s3_server``) a bucket of that server, reached through an ``aws`` connection."""

    def __init__(self, tmp_path: Path, bootstrap: str, make_topic, unique_name: str, s3_server=None) -> None:
        self.name = unique_name.replace("-", "_")
        self.topic = make_topic(f"{unique_name}.events", 3)
        pipelines, self.database = tmp_path / "pipelines", tmp_path / "airflow.db"
        self.lake, tables, env, self.options = str(tmp_path / "lake"), {}, {}, None
        if s3_server is not None:
            self.lake = f"{s3_server.create_bucket(f'lake-{self.name[-8:]}')}/lake"
            tables = {"tables": {"lakehouse_root": self.lake, "storage_connection_id": "aws_test"}}
            env = {"AIRFLOW_CONN_AWS_TEST": json.dumps(s3_server.connection())}
            settings = s3_server.settings()
            self.options = settings.object_store_options()
            self.lock: run_lock.Folder = run_lock.ObjectStoreFolder(f"{self.lake}/{self.name}/_lock",
                                                                    *settings.obstore_args())  # fmt: skip
        else:
            self.lock = Path(self.lake) / self.name / "_lock"
        pipelines.mkdir()
        (pipelines / f"{self.name}.yaml").write_text(yaml.safe_dump({
            "name": self.name, "schedule": None, "retries": 0, "data_loss_policy": "fail", "tags": ["test"],
            "kafka": {"connection_id": "kafka_default", "topics": [self.topic], "max_offsets_per_trigger": 100},
            "lag": {"min_records": 1, "max_wait_minutes": 1}, **tables,
        }))  # fmt: skip
        self.one, self.two = (Worker(tmp_path, n, database=self.database, lake=Path(tmp_path / "lake"),
                                     pipelines=pipelines, bootstrap=bootstrap, env=env) for n in (1, 2))  # fmt: skip
        airflow_local.migrate(self.one.env)

    @property
    def lock_location(self) -> str:
        return f"{self.lake}/{self.name}/_lock"

    @property
    def bronze(self) -> str:
        return f"{self.lake}/{self.name}/bronze"

    def bronze_is_kafka(self, produced: int) -> bool:
        """Whether bronze holds offsets 0 .. produced / 3 of each partition, once each."""
        expected = sorted((p, o) for p in range(3) for o in range(produced // 3))
        return sorted(bronze_keys_of(self.bronze, self.options)) == expected

    def in_its_job(self, worker: Worker, proc: subprocess.Popen, log: Path) -> None:
        """Wait until ``worker``'s run has its Spark driver up, then a few seconds more: inside its batches."""
        deadline = time.monotonic() + 300
        while not [pid for pid in processes_naming(worker.var)
                   if b"SparkSubmit" in Path(f"/proc/{pid}/cmdline").read_bytes()]:  # fmt: skip
            assert proc.poll() is None and time.monotonic() < deadline, log.read_text()[-4000:]
            time.sleep(0.2)
        time.sleep(3)

    def mark_failed(self, run_id: str) -> None:
        """What the scheduler does once a lost worker's task stops heartbeating (or a user, by hand)."""
        with sqlite3.connect(self.database, timeout=60) as db:
            db.execute("UPDATE task_instance SET state = 'failed' WHERE dag_id = ? AND run_id = ? AND state NOT IN "
                       "('success', 'failed', 'skipped', 'upstream_failed')", (self.name, run_id))  # fmt: skip
            db.execute("UPDATE dag_run SET state = 'failed' WHERE dag_id = ? AND run_id = ?", (self.name, run_id))


@pytest.mark.parametrize("store", ["shared disk", "object store"])
def test_two_workers_never_run_one_pipeline_at_once_and_a_lost_workers_lock_is_taken_over(
    tmp_path, bootstrap, make_topic, unique_name, store, request
):
    d = Deployment(tmp_path, bootstrap, make_topic, unique_name,
                   request.getfixturevalue("s3_server") if store == "object store" else None)  # fmt: skip
    name, topic, lock, one, two = d.name, d.topic, d.lock, d.one, d.two
    produced = produce_numbered(bootstrap, topic, 3, 900)

    # A run on each worker, started together: one holds the lock, the other waits for it.
    first, first_log = one.start(name, "first")
    time.sleep(3)
    second, second_log = two.start(name, "second")
    assert first.wait(600) == 0, first_log.read_text()[-4000:]
    assert second.wait(600) == 0, second_log.read_text()[-4000:]
    taken, given_back, next_taken = _epoch(lock, 1), _epoch(lock, 1, "released"), _epoch(lock, 2)
    assert datetime.fromisoformat(given_back["at"]) <= datetime.fromisoformat(next_taken["since"]), (
        "the two runs held the lock at once")
    assert given_back["run_id"] == taken["run_id"] != next_taken["run_id"]
    waited = next(text for text in (first_log.read_text(), second_log.read_text()) if next_taken["run_id"] in text)
    assert f"check_request: waiting: run {taken['run_id']} of pipeline {name} holds the lock in {d.lock_location} (epoch 1" in waited
    assert d.bronze_is_kafka(produced), "bronze is not exactly what Kafka holds"

    # The holder's worker dies mid-run; Airflow marks its run failed; the next run, elsewhere, takes over.
    more = produce_numbered(bootstrap, topic, 3, 3000, start=900)
    lost, lost_log = one.start(name, "lost")
    d.in_its_job(one, lost, lost_log)
    held = run_lock.holder(lock)
    assert held is not None and held["epoch"] == 3, held
    one.die(lost)
    d.mark_failed(held["run_id"])
    after, after_log = two.start(name, "after")
    assert after.wait(600) == 0, after_log.read_text()[-4000:]
    text = after_log.read_text()
    assert f"took the lock over from run {held['run_id']}" in text
    assert _epoch(lock, 4)["took_over_from"]["run_id"] == held["run_id"]
    assert run_lock.holder(lock) is None  # given back
    assert d.bronze_is_kafka(produced + more), "bronze is not exactly what Kafka holds after the takeover"


def test_a_paused_worker_that_wakes_after_a_takeover_commits_nothing(tmp_path, bootstrap, make_topic, unique_name):
    """A worker stops (a VM paused, a long GC, a network partition) in the middle of a bronze commit, and
    Airflow gives up on it; the run that takes over fences the tables. When the paused driver wakes, its
    commit is refused, not merely unlikely: the kill of the first test cannot reach a driver on another
    machine. The run that takes over rebuilds the checkpoint (a new epoch, so a new app id for its batches):
    without the fence nothing else would refuse the woken commit, which holds records the new run wrote too.
    (Stopped inside its commit by the job's own failpoint: a stop at a random moment mostly lands between
    batches, where Spark's checkpoint refuses the woken query first.)"""
    from deltalake import DeltaTable

    d = Deployment(tmp_path, bootstrap, make_topic, unique_name)
    produced = produce_numbered(bootstrap, d.topic, 3, 300)
    first, first_log = d.one.start(d.name, "first")
    assert first.wait(600) == 0, first_log.read_text()[-4000:]
    bronze = d.bronze
    produced += produce_numbered(bootstrap, d.topic, 3, 3000, start=300)
    paused, paused_log = d.one.start(d.name, "paused", **{FAILPOINT_ENV: "stop-before-bronze-commit:5"})
    wait_for_failpoint(paused, paused_log, "stop-before-bronze-commit:5")
    stopped_at = DeltaTable(bronze).version()
    frozen = processes_naming(d.one.var)
    os.killpg(paused.pid, signal.SIGSTOP)
    for pid in frozen:
        os.kill(pid, signal.SIGSTOP)
    held = run_lock.holder(d.lock)
    assert held is not None and held["epoch"] == 2, held
    try:
        d.mark_failed(held["run_id"])
        after, after_log = d.two.start(d.name, "after", {"action": "rebuild_checkpoint", "reason": "takeover"})
        assert after.wait(600) == 0, after_log.read_text()[-4000:]
        assert "fenced bronze at epoch 3: no job of that run can commit there any more" in after_log.read_text()
        assert d.bronze_is_kafka(produced), "bronze is not exactly what Kafka holds after the takeover"
        fenced_version = DeltaTable(bronze).version()
        assert fenced_version > stopped_at
    finally:
        for pid in frozen:
            os.kill(pid, signal.SIGCONT)
        os.killpg(paused.pid, signal.SIGCONT)
    try:
        paused.wait(300)
    finally:
        if paused.poll() is None:
            d.one.die(paused)
    text = paused_log.read_text()
    assert "StaleLockError" in text and "at epoch 2, but the table records epoch 3" in text, text[-6000:]
    assert DeltaTable(bronze).version() == fenced_version, "the woken driver committed to bronze"
    assert d.bronze_is_kafka(produced), "the woken driver changed bronze"
