"""The run lock's epoch as a fencing token, with real Kafka, Spark and Delta.

A run that took the lock over fences the pipeline's tables
(``pipeline_lock.fence_tables``, through delta-rs as ``check_request`` does);
a job of the run it took over from must then commit nothing more, whether it
reaches its commit after the fence or races it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess

import pytest

from include.contract.errors import IngestionError, StaleLockError, TransformError
from include.contract.failure import read_failure
from include.contract.jobs import lock_app_id
from include.orchestration.pipeline_lock import fence_tables
from include.settings import FAILPOINT_ENV
from include.spark.spark_submit import submit_environment
from include.tooling.job_submit import submit_command
from spark_jobs import bronze_to_silver, kafka_to_bronze, maintain_tables
from spark_jobs.ingest_plan import parse_config
from tests.integration.job_helpers import bronze_offsets, ingest_args, order_after_t0, transform_args
from tests.kafka_helpers import produce, produce_numbered, read_all
from tests.processes import wait_for_failpoint

pytestmark = pytest.mark.integration


def _args(bootstrap, lake, name, topic, epoch: int) -> list[str]:
    return ingest_args(bootstrap, lake, name, topic, "--lock-epoch", str(epoch), checkpoints="checkpoints/bronze")


def _ingest(spark, bootstrap, lake, name, topic, epoch: int):
    return kafka_to_bronze.run(spark, parse_config(_args(bootstrap, lake, name, topic, epoch)))


def _version(spark, path) -> int:
    from delta.tables import DeltaTable

    return int(DeltaTable.forPath(spark, str(path)).history(1).collect()[0]["version"])


def _refused(error: BaseException, *, mine: int, table: int) -> StaleLockError:
    """The stale-lock error a job's failure carries (itself, or as its failed batch's cause)."""
    cause = getattr(error, "cause", None)
    stale = cause if cause is not None else error
    assert isinstance(stale, StaleLockError), error
    assert (stale.lock_epoch, stale.table_epoch) == (mine, table)
    assert f"holds the run lock of pipeline {stale.pipeline!r} at epoch {mine}, but the table records epoch {table}" \
        in str(stale)  # fmt: skip
    return stale


def test_after_a_takeover_fence_the_older_epochs_ingest_commits_nothing_and_the_newer_one_goes_on(
    spark, bootstrap, make_topic, unique_name, lake
):
    topic = make_topic(unique_name, partitions=2)
    produce_numbered(bootstrap, topic, 2, 200)
    assert _ingest(spark, bootstrap, lake, unique_name, topic, epoch=1).rows == 200
    from deltalake import DeltaTable

    assert DeltaTable(str(lake / "bronze")).transaction_version(lock_app_id(unique_name)) == 1

    # Epoch 2 takes the lock over: its check_request fences bronze before any job of its own runs.
    assert fence_tables(unique_name, {"bronze": str(lake / "bronze"), "silver": str(lake / "silver")}, 2) == ["bronze"]
    assert fence_tables(unique_name, {"bronze": str(lake / "bronze")}, 2) == [], "a table fenced already is left"
    fenced_at = _version(spark, lake / "bronze")
    produce_numbered(bootstrap, topic, 2, 50, start=200)

    with pytest.raises(IngestionError) as refused:
        _ingest(spark, bootstrap, lake, unique_name, topic, epoch=1)
    stale = _refused(refused.value, mine=1, table=2)
    assert stale.table == str(lake / "bronze")
    assert _version(spark, lake / "bronze") == fenced_at, "the stale run committed to bronze"
    assert len(bronze_offsets(spark, lake / "bronze")) == 200

    # The run holding epoch 2 reads on from where bronze stands, the stale run's batch included.
    assert _ingest(spark, bootstrap, lake, unique_name, topic, epoch=2).rows == 50
    assert bronze_offsets(spark, lake / "bronze") == sorted((p, o) for p, o, _ in read_all(bootstrap, topic))


@pytest.mark.full
def test_an_older_epochs_commit_that_races_the_fence_loses(spark, bootstrap, make_topic, unique_name, lake, tmp_path):
    """The fence lands after the stale job wrote its batch's files and before it commits: Delta's conflict check
    on the lock's app id refuses the stale commit (the job must not treat it as a commit to retry).

    The stale job is a real driver process of its own, paused at that moment by the
    ``stop-before-bronze-commit`` failpoint, as a frozen worker would be; the fence commits from delta-rs
    meanwhile, as another worker's check_request would, and the job is then woken."""
    topic = make_topic(unique_name, partitions=1)
    produce_numbered(bootstrap, topic, 1, 30)
    _ingest(spark, bootstrap, lake, unique_name, topic, epoch=1)  # batch 0 of epoch 1's checkpoint
    produce_numbered(bootstrap, topic, 1, 20, start=30)
    summary, log = tmp_path / "summary.json", tmp_path / "stale-job.log"
    cmd = submit_command("spark_jobs/kafka_to_bronze.py",
                         [*_args(bootstrap, lake, unique_name, topic, epoch=1), "--summary-path", str(summary)],
                         master="local[1]", conf={"spark.ui.enabled": "false"})  # fmt: skip
    env = submit_environment({**os.environ, FAILPOINT_ENV: "stop-before-bronze-commit:1"})
    with log.open("wb") as out:
        stale = subprocess.Popen(cmd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_for_failpoint(stale, log, "stop-before-bronze-commit:1")
        fence_tables(unique_name, {"bronze": str(lake / "bronze")}, 2)
    finally:
        os.killpg(stale.pid, signal.SIGCONT)
    assert stale.wait(300) != 0, log.read_text(errors="replace")[-4000:]
    envelope = read_failure(json.loads(summary.read_text()))
    assert envelope is not None, summary.read_text()
    failure = envelope.error()
    assert isinstance(failure, IngestionError), failure
    _refused(failure, mine=1, table=2)
    assert len(bronze_offsets(spark, lake / "bronze")) == 30


@pytest.mark.full
def test_the_transform_and_maintenance_of_an_older_epoch_refuse_a_fenced_table(spark, bootstrap, make_topic,
                                                                               unique_name, lake):  # fmt: skip
    topic = make_topic(unique_name, partitions=1)
    produce(bootstrap, topic, [(0, b"o1", order_after_t0("o1", 1)), (0, b"o2", order_after_t0("o2", 2, amount=-1))])
    _ingest(spark, bootstrap, lake, unique_name, topic, epoch=1)
    first = bronze_to_silver.parse_config([*transform_args(lake, unique_name), "--lock-epoch", "1"])
    assert bronze_to_silver.run(spark, first).to_json()["upserted"] == 1
    tables = {name: str(lake / name) for name in ("bronze", "silver", "quarantine")}
    assert fence_tables(unique_name, tables, 2) == ["bronze", "silver", "quarantine"]
    silver_at = _version(spark, lake / "silver")

    produce(bootstrap, topic, [(0, b"o3", order_after_t0("o3", 3))])
    _ingest(spark, bootstrap, lake, unique_name, topic, epoch=2)
    stale = bronze_to_silver.parse_config([*transform_args(lake, unique_name, run_id="run-2"), "--lock-epoch", "1"])
    with pytest.raises(TransformError) as refused:
        bronze_to_silver.run(spark, stale)
    assert _refused(refused.value, mine=1, table=2).table == str(lake / "silver")
    assert _version(spark, lake / "silver") == silver_at

    maintain = maintain_tables.parse_config([
        "--pipeline", unique_name, *(f"--table={n}={p}" for n, p in tables.items()), "--lock-epoch", "1",
    ])  # fmt: skip
    with pytest.raises(StaleLockError):
        maintain_tables.run(spark, maintain)
    assert _version(spark, lake / "silver") == silver_at

    current = bronze_to_silver.parse_config([*transform_args(lake, unique_name, run_id="run-3"), "--lock-epoch", "2"])
    assert bronze_to_silver.run(spark, current).to_json()["upserted"] == 1
