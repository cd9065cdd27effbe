"""Backfill job: re-read bounded Kafka offset ranges and insert into bronze only the records it lacks.

Submitted by the DAG's ingest task for a backfill (trigger form or ``airflow
backfill create``) as::

    spark-submit ... spark_jobs/kafka_backfill.py --pipeline orders \\
        --bootstrap-servers 127.0.0.1:9092 --bronze-path lakehouse/orders/bronze \\
        --request-file request.json --run-id <airflow run id> --run-type manual --summary-path summary.json

One run: read the table's position (its newest bronze commit) and cap every
range there (offsets past it belong to the next normal run) -> ``spark.read``
kafka with starting and ending offsets (no checkpoint, no stream) -> keep the
records inside the time window, if any -> anti-join with bronze on
``(topic, partition, offset)`` -> one ``MERGE ... WHEN NOT MATCHED THEN INSERT``
whose ``userMetadata`` is a :class:`include.contract.offsets.BackfillCommit` (ranges,
records read and inserted, who and why).

Running it twice inserts nothing the second time. It never touches the
ingestion checkpoint or the table's position. Delta detects a concurrent
MERGE into bronze (another backfill) and the job then tries again from the
new snapshot; a normal run's appends lie at or past the position read here,
so they never meet a backfill's rows.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include.contract import summaries as contract
from include.contract.errors import BackfillError
from include.contract.jobs import BackfillArgs, ContractArgumentParser
from include.contract.offsets import BackfillCommit, BackfillRange, OffsetError, PositionMap
from spark_jobs.delta_commits import check_fence, fence_of, read_table_stand
from spark_jobs.ingest_plan import JobConfigError, read_kafka_options_file
from spark_jobs.job_common import JobStep, job_main, write_summary
from spark_jobs.kafka_to_bronze import BRONZE_COLUMNS
from spark_jobs.table_properties import check_owner, with_user_metadata

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("kafka_backfill")
#: Attempts of the MERGE when a concurrent writer changed bronze under it.
MERGE_ATTEMPTS = 3
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_MICROSECOND = timedelta(microseconds=1)


def merge_conflicts() -> tuple[type[Exception], ...]:
    """Delta's commit conflicts: another commit won the race, so the MERGE is worth running again.

    Each means the snapshot the MERGE read is stale; the retry reads bronze
    again and inserts only what is still missing, so retrying any of them is
    safe. Delta's Python classes do not inherit from one another (the
    ``ConcurrentAppendException`` py4j raises is no
    ``DeltaConcurrentModificationException``), hence the whole list.
    """
    from delta import exceptions as conflicts  # importing it makes py4j raise these classes

    return (
        conflicts.ConcurrentAppendException,
        conflicts.ConcurrentDeleteReadException,
        conflicts.ConcurrentDeleteDeleteException,
        conflicts.ConcurrentTransactionException,
        conflicts.ConcurrentWriteException,
        conflicts.MetadataChangedException,
        conflicts.ProtocolChangedException,
        conflicts.DeltaConcurrentModificationException,
    )


@dataclass(frozen=True)
class BackfillConfig:
    """Everything one backfill run needs (see ``--help``)."""

    pipeline: str
    bootstrap_servers: str
    bronze_path: str
    ranges: tuple[BackfillRange, ...]
    action: str
    reason: str
    requested_by: str | None = None
    time_range: dict[str, Any] | None = None
    run_id: str = "manual"
    run_type: str = "manual"
    summary_path: str | None = None
    #: Kafka client settings from ``--kafka-options-file``, applied as ``kafka.<name>``; they may hold
    #: secrets (a JAAS config, a private key), so the config's repr leaves them out.
    kafka_options: dict[str, str] = field(default_factory=dict, repr=False)
    #: The run lock's epoch this run holds (``--lock-epoch``), or ``None`` outside a DAG run.
    lock_epoch: int | None = None

    def window_micros(self) -> tuple[int, int] | None:
        """``[from, to)`` of the time window in microseconds since the epoch, or ``None``."""
        if not self.time_range:
            return None
        start, end = (datetime.fromisoformat(self.time_range[k]) for k in ("from", "to"))
        # Whole timedeltas, not timestamp() * 10**6: past 2038-01-19 a float of epoch seconds no
        # longer holds every microsecond, and about 1 whole-millisecond bound in 30 came out 1 below.
        return (start - _EPOCH) // _MICROSECOND, (end - _EPOCH) // _MICROSECOND


def build_arg_parser() -> ContractArgumentParser:
    """The job's command line: :class:`include.contract.jobs.BackfillArgs`, which the orchestrator renders."""
    return BackfillArgs.parser()


def parse_config(argv: list[str]) -> BackfillConfig:
    """Parse and check the job's arguments; raises :class:`JobConfigError` naming the argument or field."""
    args = BackfillArgs.from_args(argv)
    path = Path(args.request_file)
    try:
        data = json.loads(path.read_text())
        ranges = tuple(BackfillRange.from_json(r) for r in data["ranges"])
        action, reason = str(data["action"]), str(data.get("reason") or "")
        time_range = data.get("time_range")
        if time_range is not None:
            for key in ("from", "to"):
                if datetime.fromisoformat(time_range[key]).tzinfo is None:
                    raise JobConfigError(f"time_range.{key} has no time zone")
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as exc:
        raise JobConfigError(
            f"--request-file {path}: expected {{'action', 'reason', 'ranges': [{{topic, partition, from, until}}], "
            f"'time_range'}}: {exc!r}"
        ) from None
    seen = [(r.topic, r.partition) for r in ranges]
    if len(set(seen)) != len(seen):
        raise JobConfigError(f"--request-file {path}: a partition appears in two ranges: {sorted(seen)}")
    return BackfillConfig(
        pipeline=args.pipeline, bootstrap_servers=args.bootstrap_servers, bronze_path=args.bronze_path,
        ranges=ranges, action=action, reason=reason, requested_by=data.get("requested_by"),
        time_range=time_range, run_id=args.run_id, run_type=args.run_type, summary_path=args.summary_path,
        kafka_options=read_kafka_options_file(args.kafka_options_file), lock_epoch=args.lock_epoch,
    )  # fmt: skip


def cap_at_position(ranges: tuple[BackfillRange, ...],
                    position: PositionMap) -> tuple[list[BackfillRange], list[str]]:  # fmt: skip
    """The ranges cut at the table's next offsets, and a note for each cut (pure)."""
    kept, notes = [], []
    for r in ranges:
        nxt = position.get(r.topic, {}).get(r.partition)
        until = min(r.until_offset, nxt) if nxt is not None else r.from_offset
        if until < r.until_offset:
            notes.append(f"{r.topic}-{r.partition}: [{max(until, r.from_offset)}, {r.until_offset}) is not "
                         "ingested yet and is left to the next normal run")  # fmt: skip
        if until > r.from_offset:
            kept.append(BackfillRange(r.topic, r.partition, r.from_offset, until))
    return kept, notes


def _source_options(cfg: BackfillConfig, ranges: list[BackfillRange]) -> dict[str, str]:
    starting: dict[str, dict[str, int]] = {}
    ending: dict[str, dict[str, int]] = {}
    for r in ranges:
        starting.setdefault(r.topic, {})[str(r.partition)] = r.from_offset
        ending.setdefault(r.topic, {})[str(r.partition)] = r.until_offset
    opts = {f"kafka.{k}": v for k, v in cfg.kafka_options.items()}
    opts.update({
        "kafka.bootstrap.servers": cfg.bootstrap_servers,
        "kafka.isolation.level": "read_committed",
        "includeHeaders": "true",
        # A range Kafka no longer holds in full must fail the backfill, not shrink it.
        "failOnDataLoss": "true",
        "assign": json.dumps({t: sorted(int(p) for p in parts) for t, parts in starting.items()}),
        "startingOffsets": json.dumps(starting),
        "endingOffsets": json.dumps(ending),
    })  # fmt: skip
    return opts


def _range_filter(ranges: list[BackfillRange], prefix: str = "") -> str:
    """SQL predicate selecting the ranges' rows (lets Delta skip files by their offset statistics)."""
    return "(" + " OR ".join(
        f"({prefix}topic = '{r.topic.replace(chr(39), chr(39) * 2)}' AND {prefix}partition = {r.partition} "
        f"AND {prefix}offset >= {r.from_offset} AND {prefix}offset < {r.until_offset})"
        for r in ranges
    ) + ")"


def _counts(df: DataFrame) -> dict[tuple[str, int], int]:
    return {(row["topic"], row["partition"]): row["n"] for row in df.groupBy("topic", "partition").count()
            .withColumnRenamed("count", "n").collect()}  # fmt: skip


def _commit_of_run(spark: SparkSession, path: str, run_id: str,
                   after: int) -> tuple[int, BackfillCommit, dict[str, str]] | None:  # fmt: skip
    from delta.tables import DeltaTable

    history = DeltaTable.forPath(spark, path).history(20).select("version", "userMetadata", "operationMetrics")
    for row in history.collect():
        if row["version"] <= after:
            break
        commit = BackfillCommit.from_user_metadata(row["userMetadata"], version=row["version"])
        if commit is not None and commit.run_id == run_id:
            return int(row["version"]), commit, dict(row["operationMetrics"] or {})
    return None


def run(spark: SparkSession, cfg: BackfillConfig) -> dict[str, Any]:
    """One backfill on an existing session; returns (and writes) its summary."""
    from delta.tables import DeltaTable
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    started = time.monotonic()
    partitions: dict[str, list[int]] = {}
    for r in cfg.ranges:
        partitions.setdefault(r.topic, []).append(r.partition)
    check_owner(spark, cfg.bronze_path, cfg.pipeline, "bronze")
    stand = read_table_stand(spark, cfg.bronze_path, cfg.pipeline, partitions)
    if stand is None:
        raise BackfillError(f"bronze table {cfg.bronze_path} has no progress yet; nothing to backfill")
    ranges, notes = cap_at_position(cfg.ranges, stand.next_offsets)
    result = BackfillCommit(cfg.pipeline, cfg.run_id, cfg.run_type, cfg.action, cfg.reason, cfg.requested_by,
                            tuple(ranges), cfg.time_range)  # fmt: skip
    version = None
    if ranges:
        records = spark.read.format("kafka").options(**_source_options(cfg, ranges)).load()
        window = cfg.window_micros()
        if window is not None:
            micros = F.unix_micros(F.col("timestamp"))
            records = records.where((micros >= window[0]) & (micros < window[1]))
        rows = records.select(
            *BRONZE_COLUMNS,
            F.lit(cfg.run_id).alias("run_id"),
            # Not written by a checkpoint epoch's micro-batch: no batch id, no epoch.
            F.lit(None).cast("long").alias("batch_id"),
            F.lit(None).cast("int").alias("epoch"),
            F.current_timestamp().alias("ingested_at"),
        ).persist(StorageLevel.MEMORY_AND_DISK)
        try:
            read = _counts(rows)
            for attempt in range(1, MERGE_ATTEMPTS + 1):
                before = DeltaTable.forPath(spark, cfg.bronze_path).history(1).collect()[0]["version"]
                present = spark.read.format("delta").load(cfg.bronze_path).where(_range_filter(ranges))
                missing = rows.join(present.select("topic", "partition", "offset"),
                                    ["topic", "partition", "offset"], "left_anti").persist()  # fmt: skip
                try:
                    inserted = _counts(missing)
                    result = BackfillCommit(
                        cfg.pipeline, cfg.run_id, cfg.run_type, cfg.action, cfg.reason, cfg.requested_by,
                        tuple(BackfillRange(r.topic, r.partition, r.from_offset, r.until_offset,
                                            read.get((r.topic, r.partition), 0),
                                            inserted.get((r.topic, r.partition), 0)) for r in ranges),
                        cfg.time_range,
                    )  # fmt: skip
                    if not result.inserted:
                        break
                    merge = (
                        DeltaTable.forPath(spark, cfg.bronze_path).alias("t")
                        .merge(missing.alias("s"), "t.topic = s.topic AND t.partition = s.partition AND "
                               f"t.offset = s.offset AND {_range_filter(ranges, 't.')}")
                        .whenNotMatchedInsertAll()
                    )  # fmt: skip
                    # A MERGE commit carries one txn action only: the lock is checked just before it.
                    check_fence(spark, cfg.bronze_path, fence_of(cfg.pipeline, cfg.lock_epoch))
                    try:
                        with_user_metadata(spark, result.to_user_metadata(), merge.execute)
                    except merge_conflicts() as exc:
                        if attempt == MERGE_ATTEMPTS:
                            raise BackfillError(f"bronze kept changing under the backfill ({exc}); try again") from exc
                        log.warning("attempt %s: another writer changed bronze; reading it again", attempt)
                        continue
                    found = _commit_of_run(spark, cfg.bronze_path, cfg.run_id, before)
                    if found is None:
                        raise BackfillError(f"{cfg.bronze_path}: the backfill's MERGE left no commit of run {cfg.run_id}")
                    version, _, metrics = found
                    done = int(metrics.get("numTargetRowsInserted", -1))
                    if done != result.inserted:
                        raise OffsetError(
                            f"{cfg.bronze_path} version {version}: the backfill meant to insert {result.inserted} "
                            f"rows but Delta inserted {done}; another backfill wrote the same offsets meanwhile"
                        )
                    break
                finally:
                    missing.unpersist()
        finally:
            rows.unpersist()
    summary = {
        "kind": "backfill",
        "pipeline": cfg.pipeline,
        "run_id": cfg.run_id,
        "run_type": cfg.run_type,
        "action": cfg.action,
        "reason": cfg.reason,
        "requested_by": cfg.requested_by,
        "time_range": cfg.time_range,
        "ranges": [r.to_json() for r in sorted(result.ranges)],
        "read": result.read,
        "inserted": result.inserted,
        "present": result.read - result.inserted,
        "rows": result.inserted,
        "commits": 0 if version is None else 1,
        "partitions": {t: {str(r.partition): {"from": r.from_offset, "until": r.until_offset, "rows": r.inserted}
                           for r in result.ranges if r.topic == t} for t in sorted({r.topic for r in result.ranges})},
        "bronze_version": version,
        "notes": notes,
        "duration_s": round(time.monotonic() - started, 3),
    }  # fmt: skip
    write_summary(cfg.summary_path, contract.BackfillSummary.from_json(summary).to_json())
    return summary


#: The job as a step of a run's Spark application (``spark_jobs/run_steps.py``).
STEP = JobStep(
    "kafka_backfill", parse=parse_config, bad_argument=JobConfigError, run=run,
    describe=lambda s: f"read={s['read']} inserted={s['inserted']} present={s['present']} version={s['bronze_version']}",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point: args -> session -> run -> summary line; exit 2 on bad arguments."""
    return job_main(STEP, argv)


if __name__ == "__main__":
    sys.exit(main())
