"""The Spark jobs as the in-process integration tests call them, and what they read back.

A test's tables live under its ``lake`` folder: ``bronze``, ``silver``, ``quarantine`` and the jobs'
checkpoints under ``checkpoints/``. The ingest and transform jobs run in the session's SparkSession
(:func:`ingest`, :func:`transform`), or as their own ``spark-submit`` killed by a failpoint
(:func:`run_killed_by_failpoint`). The orders here are the transform's test data: :data:`ORDERS_SPEC`
and :func:`order_after_t0` (the DAG tests' orders are :func:`tests.integration.dag_helpers.order_at_10h`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
from datetime import UTC, datetime, timedelta
from pathlib import Path

from include.contract.silver_stand import SilverCommit
from include.contract.transform_spec import FieldSpec, TransformSpec
from include.settings import FAILPOINT_ENV
from include.spark.spark_submit import submit_environment
from include.tooling.job_submit import submit_command
from spark_jobs import bronze_to_silver, kafka_to_bronze, silver_writer
from spark_jobs.ingest_plan import parse_config

#: The orders the transform tests send: an id, an optional customer, an amount of at least 0 and a time.
ORDERS_SPEC = TransformSpec(
    fields=(
        FieldSpec("order_id", "string", required=True),
        FieldSpec("customer", "string"),
        FieldSpec("amount", "decimal(10,2)", required=True, minimum=0),
        FieldSpec("event_time", "timestamp", required=True),
    ),
    key=("order_id",),
    ordering="event_time",
    tombstones="delete",
    new_fields="add",
)
#: Minute 0 of :func:`order_after_t0`'s event times.
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def order_after_t0(order_id: str, minute: int, amount: float = 10.0, **extra) -> bytes:
    """An order event (JSON) ``minute`` minutes after :data:`T0` (any count, past the hour too), amount 10.0
    unless given; ``extra`` adds fields."""
    event_time = (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")
    return json.dumps({"order_id": order_id, "amount": amount, "event_time": event_time, **extra}).encode()


def ingest_args(bootstrap: str, lake: Path, pipeline: str, topic: str, *extra: str, bronze: str = "bronze",
                checkpoints: str = "checkpoints") -> list[str]:  # fmt: skip
    """The ingest job's arguments: bronze at ``lake/<bronze>``, its checkpoints under ``lake/<checkpoints>``,
    then ``extra`` (e.g. ``--max-offsets-per-trigger``)."""
    return [
        "--pipeline", pipeline, "--bootstrap-servers", bootstrap, "--topics", topic,
        "--bronze-path", str(lake / bronze), "--checkpoint-root", str(lake / checkpoints), *extra,
    ]  # fmt: skip


def ingest_config(bootstrap: str, lake: Path, pipeline: str, topic: str, *extra: str, bronze: str = "bronze",
                  checkpoints: str = "checkpoints"):  # fmt: skip
    """The ingest job's configuration of :func:`ingest_args`' arguments."""
    return parse_config(ingest_args(bootstrap, lake, pipeline, topic, *extra, bronze=bronze, checkpoints=checkpoints))


def ingest(spark, bootstrap: str, lake: Path, name: str, topic: str, per_trigger: int | None = None):
    """One ingest run in ``spark`` with the transform tests' layout (checkpoints in ``checkpoints/bronze``,
    beside the transform's); its result."""
    extra = ["--max-offsets-per-trigger", str(per_trigger)] if per_trigger else []
    args = ingest_args(bootstrap, lake, name, topic, *extra, checkpoints="checkpoints/bronze")
    return kafka_to_bronze.run(spark, parse_config(args))


def transform_args(lake: Path, name: str, spec: TransformSpec = ORDERS_SPEC, run_id: str = "run-1",
                   files_per_trigger: int | None = None) -> list[str]:  # fmt: skip
    """The transform job's arguments over ``lake``'s tables, ``spec`` written to ``lake/spec-<run_id>.json``."""
    spec_file = lake / f"spec-{run_id}.json"
    spec_file.parent.mkdir(parents=True, exist_ok=True)
    spec_file.write_text(json.dumps(spec.to_json()))
    args = [
        "--pipeline", name, "--bronze-path", str(lake / "bronze"), "--silver-path", str(lake / "silver"),
        "--quarantine-path", str(lake / "quarantine"), "--checkpoint-root", str(lake / "checkpoints" / "silver"),
        "--spec-file", str(spec_file), "--run-id", run_id,
    ]  # fmt: skip
    if files_per_trigger:
        args += ["--max-files-per-trigger", str(files_per_trigger)]
    return args


def transform(spark, lake: Path, name: str, **kw) -> dict:
    """One transform run in ``spark`` (``kw``: :func:`transform_args`'); its summary as JSON."""
    return bronze_to_silver.run(spark, bronze_to_silver.parse_config(transform_args(lake, name, **kw))).to_json()


def run_killed_by_failpoint(script: str, args: list[str], failpoint: str) -> subprocess.CompletedProcess:
    """Run the job ``script`` as its own ``spark-submit`` (local[1]) with the failpoint ``failpoint`` set, and
    assert that the failpoint SIGKILLed it; the finished process."""
    cmd = submit_command(script, args, master="local[1]", conf={"spark.ui.enabled": "false"})
    env = submit_environment({**os.environ, FAILPOINT_ENV: failpoint})
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, start_new_session=True)
    assert proc.returncode == -signal.SIGKILL, f"the failpoint did not kill the job: {proc.stderr[-3000:]}"
    return proc


def bronze_records(spark, table: Path) -> list[tuple[int, int, bytes]]:
    """Every ``(partition, offset, value)`` row of the bronze table in the folder ``table``, duplicates kept."""
    rows = spark.read.format("delta").load(str(table)).select("partition", "offset", "value").collect()
    return [(r["partition"], r["offset"], bytes(r["value"])) for r in rows]


def bronze_offsets(spark, table: Path) -> list[tuple[int, int]]:
    """Every ``(partition, offset)`` row of the bronze table in the folder ``table``, sorted, duplicates kept."""
    rows = spark.read.format("delta").load(str(table)).select("partition", "offset").collect()
    return sorted((r["partition"], r["offset"]) for r in rows)


def bronze_count(spark, lake: Path) -> int:
    """How many rows ``lake``'s bronze holds."""
    return spark.read.format("delta").load(str(lake / "bronze")).count()


def silver(spark, lake: Path, key: str = "order_id") -> dict:
    """``lake``'s silver rows by ``key``, each as a dict."""
    rows = spark.read.format("delta").load(str(lake / "silver")).collect()
    return {r[key]: r.asDict() for r in rows}


def quarantine(spark, lake: Path) -> dict[tuple[int, int], dict]:
    """``lake``'s quarantine rows by ``(partition, offset)``; asserts that none is there twice."""
    rows = spark.read.format("delta").load(str(lake / "quarantine")).collect()
    found = {(r["partition"], r["offset"]): r.asDict() for r in rows}
    assert len(found) == len(rows), "quarantine holds a record twice"
    return found


def silver_commits(spark, lake: Path) -> list[SilverCommit]:
    """The transform's batch commits in ``lake``'s silver log, oldest first."""
    from delta.tables import DeltaTable

    hist = DeltaTable.forPath(spark, str(lake / "silver")).history().orderBy("version").collect()
    return [c for h in hist if (c := SilverCommit.from_user_metadata(h["userMetadata"], version=h["version"]))]


def assert_accounted(spark, lake: Path) -> None:
    """Every bronze record is accounted for once, batch by batch, and the batches chain over bronze.

    Each batch's counts also agree with Delta's own metrics of its commit: every upserted or deleted
    record is one row the MERGE or append wrote.
    """
    from delta.tables import DeltaTable

    commits = silver_commits(spark, lake)
    for c in commits:
        assert c.read == c.accounted, f"batch {c.batch_id}: read {c.read}, accounted {c.counts}"
    history = {h["version"]: h for h in DeltaTable.forPath(spark, str(lake / "silver")).history().collect()}
    for c in commits:
        h = history[c.version]
        written = silver_writer.rows_written(h["operation"], dict(h["operationMetrics"]))
        assert written == c.counts["upserted"] + c.counts["deleted"], (c.version, h["operationMetrics"], c.counts)
    for a, b in zip(commits, commits[1:], strict=False):
        if b.epoch == a.epoch:
            assert b.bronze_start == a.bronze_end
    replayed = sum(c.counts["replayed"] for c in commits)
    assert sum(c.read for c in commits) - replayed == bronze_count(spark, lake)
