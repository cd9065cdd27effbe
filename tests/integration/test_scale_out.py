"""Scale-out on a real transient standalone cluster: two workers, an executor on each, both running tasks.

One ingestion DAG run (``airflow dags test``) with ``cluster.workers: 2`` on a
topic of four partitions, capped at 150 records per micro-batch so the
backlog is written in several Delta commits. Which executors ran tasks is
read from the workers' own folders (each executor's log, written by Spark
itself under ``worker-<i>/<app id>/<executor id>/stderr``), not from
anything the pipeline reports about itself.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.integration.dag_helpers import assert_no_cluster_left
from tests.kafka_helpers import produce_numbered, read_all

pytestmark = [pytest.mark.integration, pytest.mark.full]

PARTITIONS = 4
RECORDS = 1200
MAX_PER_BATCH = 150
#: An executor's log line for each task it finished (Spark's ``Executor`` at INFO).
_FINISHED_TASK = re.compile(r"Executor: Finished task \S+ in stage \S+ \(TID \d+\)")


def _tasks_per_executor(cluster_dir: Path) -> dict[tuple[str, str], int]:
    """``(worker folder, executor id) -> tasks it finished``, from each executor's stderr."""
    finished: dict[tuple[str, str], int] = {}
    for worker in sorted(cluster_dir.glob("worker-*")):
        for log in worker.glob("app-*/*/stderr"):
            finished[(worker.name, log.parent.name)] = len(_FINISHED_TASK.findall(log.read_text(errors="replace")))
    return finished


def test_two_workers_share_the_ingestion_and_every_record_lands_once(make_dag_pipeline, bootstrap):
    p = make_dag_pipeline(partitions=PARTITIONS)
    topic = p.topic
    p.write(
        kafka={"connection_id": "kafka_default", "topics": [topic], "max_offsets_per_trigger": MAX_PER_BATCH},
        # A cluster is what this test proves: local mode is never chosen for it.
        cluster={"profile": "local_standalone", "workers": 2, "worker_cores": 1, "worker_memory": "512m",
                 "local_max_records": 0},
    )
    produce_numbered(bootstrap, topic, PARTITIONS, RECORDS)

    started = time.monotonic()
    proc, log = p.run()
    elapsed = time.monotonic() - started
    print(f"scale-out DAG run took {elapsed:.0f}s")
    assert proc.returncode == 0, log[-5000:]

    (run,) = p.ledger()
    assert (run["outcome"], run["rows"], run["continuity"]) == ("success", RECORDS, "CONTINUOUS")
    assert run["commits"] >= RECORDS // MAX_PER_BATCH  # several micro-batches, one Delta commit each

    (run_dir,) = p.run_dirs()
    cluster_dir = run_dir / "cluster"
    state = json.loads((cluster_dir / "cluster.json").read_text())
    assert sorted(state["worker_ports"]) == ["worker-1", "worker-2"]
    assert "2 worker(s) x 1 core(s)" in log

    # The independent signal: both workers launched an executor, and each executor finished tasks.
    tasks = _tasks_per_executor(cluster_dir)
    busy = {key: n for key, n in tasks.items() if n > 0}
    assert {worker for worker, _ in busy} == {"worker-1", "worker-2"}, tasks
    assert len(busy) >= 2 and sum(busy.values()) >= run["commits"], tasks
    master_log = (cluster_dir / "logs" / "master.log").read_text(errors="replace")
    assert len(re.findall(r"Launching executor app-\S+ on worker", master_log)) >= 2

    # Exactly once: every produced (partition, offset) in bronze, none twice.
    keys = p.bronze_keys()
    assert len(keys) == len(set(keys)) == RECORDS
    assert set(keys) == {(part, off) for part, off, _ in read_all(bootstrap, topic)}
    assert_no_cluster_left(p)
