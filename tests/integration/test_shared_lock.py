"""The run lock across Airflow workers: two workers, one metadata database, one lakehouse.

Each worker has its own ``KDE_VAR_DIR`` (its local disk: run folders, logs)
and its own Airflow home (config, logs), and they share what a Celery
deployment shares: the metadata database and the tables. Real ``airflow dags
test`` runs, real Kafka, Spark and Delta.
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
from include.tooling import airflow_local
from tests.integration.dag_helpers import bronze_keys_of
from tests.kafka_helpers import produce_numbered
from tests.processes import processes_naming

pytestmark = [pytest.mark.integration, pytest.mark.full]

class Worker:
    """One Airflow worker of the deployment: its own folders, the shared database and lakehouse."""

    def __init__(self, root: Path, n: int, *, database: Path, lake: Path, pipelines: Path, bootstrap: str) -> None:
        self.var = root / f"worker-{n}" / "var"
        self.env = airflow_local.environment(
            root / f"worker-{n}" / "airflow", kafka_bootstrap=bootstrap, pipelines_dir=pipelines,
            extra={"KDE_LAKEHOUSE_ROOT": str(lake), "KDE_VAR_DIR": str(self.var),
                   "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{database}?timeout=60"},
        )  # fmt: skip
        self.logs = root / f"worker-{n}" / "logs"
        self.logs.mkdir(parents=True)

    def start(self, dag_id: str, name: str) -> tuple[subprocess.Popen, Path]:
        """``airflow dags test`` in a session of its own, so that the worker's death can take all of it."""
        log = self.logs / f"{name}.log"
        with log.open("wb") as out:
            proc = subprocess.Popen(airflow_local.airflow_command("dags", "test", dag_id), env=self.env,
                                    stdout=out, stderr=subprocess.STDOUT, start_new_session=True)  # fmt: skip
        return proc, log

    def die(self, proc: subprocess.Popen) -> None:
        """The worker is lost: its DAG run's process and everything it started end at once (SIGKILL)."""
        os.killpg(proc.pid, signal.SIGKILL)
        for pid in processes_naming(self.var):
            os.kill(pid, signal.SIGKILL)
        proc.wait(30)


def _epoch(lock: Path, epoch: int, suffix: str = "json") -> dict:
    """An epoch's record (``json``: who took it, since when) or its release marker (``released``: when)."""
    return json.loads((lock / f"{epoch:020d}.{suffix}").read_text())


def test_two_workers_never_run_one_pipeline_at_once_and_a_lost_workers_lock_is_taken_over(
    tmp_path, bootstrap, make_topic, unique_name
):
    name = unique_name.replace("-", "_")
    topic = make_topic(f"{unique_name}.events", 3)
    lake, pipelines, database = tmp_path / "lake", tmp_path / "pipelines", tmp_path / "airflow.db"
    pipelines.mkdir()
    (pipelines / f"{name}.yaml").write_text(yaml.safe_dump({
        "name": name, "schedule": None, "retries": 0, "data_loss_policy": "fail", "tags": ["test"],
        "kafka": {"connection_id": "kafka_default", "topics": [topic], "max_offsets_per_trigger": 100},
        "lag": {"min_records": 1, "max_wait_minutes": 1},
    }))  # fmt: skip
    one, two = (Worker(tmp_path, n, database=database, lake=lake, pipelines=pipelines, bootstrap=bootstrap)
                for n in (1, 2))  # fmt: skip
    airflow_local.migrate(one.env)
    produced = produce_numbered(bootstrap, topic, 3, 900)

    # A run on each worker, started together: one holds the lock, the other waits for it.
    first, first_log = one.start(name, "first")
    time.sleep(3)
    second, second_log = two.start(name, "second")
    assert first.wait(600) == 0, first_log.read_text()[-4000:]
    assert second.wait(600) == 0, second_log.read_text()[-4000:]
    lock = lake / name / "_lock"
    taken, given_back, next_taken = _epoch(lock, 1), _epoch(lock, 1, "released"), _epoch(lock, 2)
    assert datetime.fromisoformat(given_back["at"]) <= datetime.fromisoformat(next_taken["since"]), (
        "the two runs held the lock at once")
    assert given_back["run_id"] == taken["run_id"] != next_taken["run_id"]
    waited = next(text for text in (first_log.read_text(), second_log.read_text()) if next_taken["run_id"] in text)
    assert f"check_request: waiting: run {taken['run_id']} of pipeline {name} holds the lock in {lock} (epoch 1" in waited
    assert sorted(bronze_keys_of(lake / name / "bronze")) == sorted(
        (p, o) for p in range(3) for o in range(produced // 3)
    ), "bronze is not exactly what Kafka holds"

    # The holder's worker dies mid-run; Airflow marks its run failed; the next run, elsewhere, takes over.
    more = produce_numbered(bootstrap, topic, 3, 3000, start=900)
    lost, lost_log = one.start(name, "lost")
    deadline = time.monotonic() + 300
    while not [pid for pid in processes_naming(one.var) if b"SparkSubmit" in Path(f"/proc/{pid}/cmdline").read_bytes()]:
        assert lost.poll() is None and time.monotonic() < deadline, lost_log.read_text()[-4000:]
        time.sleep(0.2)
    time.sleep(3)  # inside the job's batches
    held = run_lock.holder(lock)
    assert held is not None and held["epoch"] == 3, held
    one.die(lost)
    with sqlite3.connect(database, timeout=60) as db:
        db.execute("UPDATE task_instance SET state = 'failed' WHERE dag_id = ? AND run_id = ? AND state NOT IN "
                   "('success', 'failed', 'skipped', 'upstream_failed')", (name, held["run_id"]))  # fmt: skip
        db.execute("UPDATE dag_run SET state = 'failed' WHERE dag_id = ? AND run_id = ?", (name, held["run_id"]))
    after, after_log = two.start(name, "after")
    assert after.wait(600) == 0, after_log.read_text()[-4000:]
    text = after_log.read_text()
    assert f"took the lock over from run {held['run_id']}" in text
    assert _epoch(lock, 4)["took_over_from"]["run_id"] == held["run_id"]
    assert run_lock.holder(lock) is None  # given back
    assert sorted(bronze_keys_of(lake / name / "bronze")) == sorted(
        (p, o) for p in range(3) for o in range((produced + more) // 3)
    ), "bronze is not exactly what Kafka holds after the takeover"
