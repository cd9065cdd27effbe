"""Ingestion job: drain what is new in Kafka into a Delta bronze table, exactly once.

Submitted as (the orchestrator renders this; see ``include/spark/spark_submit.py``)::

    spark-submit --master spark://127.0.0.1:7077 \\
        --jars <spark-sql-kafka, delta jars> --py-files kde_jobs.zip \\
        spark_jobs/kafka_to_bronze.py --pipeline orders \\
        --bootstrap-servers 127.0.0.1:9092 --topics orders \\
        --bronze-path lakehouse/orders/bronze --checkpoint-root lakehouse/orders/_checkpoints/bronze \\
        --max-offsets-per-trigger 100000 --run-id <airflow run id> --summary-path summary.json

One run: check the topics exist (bounded time) -> read the table's last bronze
commit (the source of truth for offsets) -> resume the checkpoint if it
continues exactly there, else start a new epoch at the table's offsets ->
``readStream`` kafka with ``Trigger.AvailableNow`` -> per micro-batch one Delta
commit holding the rows, the batch's exact offset ranges (``userMetadata``)
and ``txnAppId``/``txnVersion`` -> write the run summary.
"""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

from include.contract import summaries as contract
from include.contract.actions import REBUILD_CHECKPOINT, action_hint
from include.contract.errors import IngestionError, KafkaSourceError
from include.contract.jobs import bronze_app_id
from include.contract.offsets import (
    BronzeCommit,
    OffsetError,
    OffsetRange,
    PositionMap,
    advance,
    flatten,
    positions_from_json,
    positions_to_json,
    skip_gaps,
)
from include.contract.table_stand import PositionUnknownError, stand_actions
from include.readers import spark_checkpoint
from spark_jobs.delta_commits import WrittenFile, commit_with_stand, read_table_stand
from spark_jobs.hadoop_files import checkpoint_files
from spark_jobs.ingest_plan import (
    NO_DICTIONARY_COLUMNS,
    CheckpointPlan,
    IngestConfig,
    JobConfigError,
    batch_ranges,
    parse_config,
    plan_checkpoint,
    resume_offsets,
    stats_from_files,
)
from spark_jobs.job_common import BatchWriter, JobStep, failpoint, job_main, stop_point, write_summary
from spark_jobs.table_properties import apply_table_properties, check_owner

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import StructType

log = logging.getLogger("kafka_to_bronze")


@dataclass
class BatchRecord:
    """What one micro-batch did, for the run summary."""

    batch_id: int
    rows: int
    ranges: list[OffsetRange]
    delta_version: int | None
    skipped_replay: bool
    duration_s: float
    #: Seconds per step of the writer (``check``: the offsets before the
    #: write; ``write``: reading the batch from Kafka and writing its files,
    #: one pass; ``stats``: the ranges from the files' statistics;
    #: ``commit``: the Delta commit with its txn actions; ``trigger``: Spark's
    #: whole trigger around the writer), for profiling against a plain job.
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class RunSummary:
    """The machine-readable result of one run, for the orchestrator."""

    pipeline: str
    run_id: str
    run_type: str
    epoch: int
    checkpoint_rebuilt: dict[str, Any] | None
    start_offsets: PositionMap
    next_offsets: PositionMap
    batches: list[BatchRecord] = field(default_factory=list)
    duration_s: float = 0.0
    #: Where this run set the table's position (``starting_offsets: latest``, a position action), or ``None``.
    position_set: dict[str, Any] | None = None
    #: Seconds per phase of the run (Kafka metadata, table position, checkpoint plan, the stream).
    phases_s: dict[str, float] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(b.rows for b in self.batches if not b.skipped_replay)

    def to_json(self) -> dict[str, Any]:
        per_partition: dict[str, dict[str, dict[str, int]]] = {}
        for b in self.batches:
            if b.skipped_replay:
                continue
            for r in b.ranges:
                entry = per_partition.setdefault(r.topic, {}).setdefault(
                    str(r.partition), {"from": r.from_offset, "until": r.until_offset, "rows": 0}
                )
                entry["from"] = min(entry["from"], r.from_offset)
                entry["until"] = max(entry["until"], r.until_offset)
                entry["rows"] += r.rows
        versions = [b.delta_version for b in self.batches if b.delta_version is not None]
        return {
            "pipeline": self.pipeline,
            "run_id": self.run_id,
            "run_type": self.run_type,
            "epoch": self.epoch,
            "checkpoint_rebuilt": self.checkpoint_rebuilt,
            "position_set": self.position_set,
            "phases_s": {k: round(v, 3) for k, v in self.phases_s.items()},
            "rows": self.rows,
            "commits": sum(1 for b in self.batches if not b.skipped_replay),
            "batches": [
                {
                    "batch_id": b.batch_id,
                    "rows": b.rows,
                    "ranges": [r.to_json() for r in b.ranges],
                    "delta_version": b.delta_version,
                    "skipped_replay": b.skipped_replay,
                    "duration_s": round(b.duration_s, 3),
                    "phases": {k: round(v, 3) for k, v in b.phases.items()},
                }
                for b in self.batches
            ],
            "partitions": per_partition,
            "start_offsets": positions_to_json(self.start_offsets),
            "next_offsets": positions_to_json(self.next_offsets),
            "bronze_version": max(versions) if versions else None,
            "duration_s": round(self.duration_s, 3),
        }


# --------------------------------------------------------------------------- Kafka


def _admin(jvm: Any, cfg: IngestConfig) -> Any:
    """Kafka's Java admin client with the Spark source's settings (security included), bounded in time."""
    props = jvm.java.util.Properties()
    for key, value in cfg.kafka_options.items():
        props.put(key, value)
    timeout_ms = int(cfg.admin_timeout_s * 1000)
    props.put("bootstrap.servers", cfg.bootstrap_servers)
    props.put("request.timeout.ms", str(timeout_ms))
    props.put("default.api.timeout.ms", str(timeout_ms))
    return jvm.org.apache.kafka.clients.admin.Admin.create(props)


def describe_source(spark: SparkSession, cfg: IngestConfig) -> dict[str, list[int]]:
    """``{topic: [partitions]}`` of the configured topics, asked with Kafka's Java admin client.

    Uses the same client settings as the Spark source (security included) and
    fails within ``admin_timeout_s`` with the broker address when Kafka does
    not answer, or names the topics that do not exist.
    """
    import re

    from py4j.protocol import Py4JJavaError

    jvm: Any = spark.sparkContext._jvm
    timeout_ms = int(cfg.admin_timeout_s * 1000)
    admin = _admin(jvm, cfg)
    unit = jvm.java.util.concurrent.TimeUnit.MILLISECONDS
    try:
        names = set(admin.listTopics().names().get(timeout_ms, unit))
        if cfg.topic_pattern:
            wanted = sorted(n for n in names if re.fullmatch(cfg.topic_pattern, n))
            if not wanted:
                raise KafkaSourceError(
                    f"no topic on {cfg.bootstrap_servers} matches --topic-pattern "
                    f"{cfg.topic_pattern!r} (topics there: {sorted(names)[:20]})"
                )
        else:
            missing = [t for t in cfg.topics if t not in names]
            if missing:
                raise KafkaSourceError(
                    f"topic(s) {', '.join(missing)} do not exist on {cfg.bootstrap_servers}; "
                    "create them or fix the pipeline's topics"
                )
            wanted = list(cfg.topics)
        described = admin.describeTopics(wanted).allTopicNames().get(timeout_ms, unit)
        return {t: sorted(p.partition() for p in described.get(t).partitions()) for t in wanted}
    except Py4JJavaError as exc:
        cause = exc.java_exception
        while cause.getCause() is not None:
            cause = cause.getCause()
        raise KafkaSourceError(
            f"Kafka at {cfg.bootstrap_servers} did not answer within {cfg.admin_timeout_s:g}s "
            f"({cause.getClass().getSimpleName()}: {cause.getMessage()})"
        ) from None
    finally:
        admin.close(jvm.java.time.Duration.ofSeconds(2))


# --------------------------------------------------------------------------- Delta


BRONZE_COLUMNS = (
    "topic", "partition", "offset", "timestamp", "timestampType", "key", "value", "headers",
)  # fmt: skip


class BronzeBatchWriter(BatchWriter):
    """``foreachBatch`` sink: one idempotent Delta commit per micro-batch, with its offsets."""

    def __init__(self, spark: SparkSession, cfg: IngestConfig, plan: CheckpointPlan, checkpoint: str,
                 table: BronzeCommit | None, summary: RunSummary,
                 files: spark_checkpoint.Files = spark_checkpoint.LOCAL) -> None:  # fmt: skip
        self.spark = spark
        self.cfg = cfg
        self.plan = plan
        self.checkpoint = checkpoint
        self.files = files
        self.last_commit = table
        self.positions: PositionMap = dict(table.next_offsets) if table else {}
        self.app_id = bronze_app_id(cfg.pipeline, plan.epoch)
        self.summary = summary

    def _already_committed(self, batch_id: int) -> bool:
        last = self.last_commit
        return last is not None and last.epoch == self.plan.epoch and batch_id <= last.batch_id

    def _write(self, df: DataFrame, batch_id: int) -> None:
        started = time.monotonic()
        if self._already_committed(batch_id):
            # The run before was killed after this batch's Delta commit and
            # before Spark's checkpoint commit: Spark replays it, Delta holds it.
            log.warning("batch %s of epoch %s is already in the table; skipping its replay",
                        batch_id, self.plan.epoch)  # fmt: skip
            self.summary.batches.append(
                BatchRecord(batch_id, 0, [], None, True, time.monotonic() - started)
            )
            return
        end = spark_checkpoint.batch_offsets(self.checkpoint, batch_id, self.files)
        if end is None:
            raise OffsetError(f"{self.checkpoint}: no offsets/{batch_id} for the running batch",
                              pipeline=self.cfg.pipeline, table=self.cfg.bronze_path)
        start = (
            spark_checkpoint.batch_offsets(self.checkpoint, batch_id - 1, self.files)
            if batch_id > 0
            else spark_checkpoint.initial_offsets(self.checkpoint, self.files)
        )
        gaps = self.cfg.accepted_gaps if batch_id == 0 and self.plan.rebuilt_reason else ()
        if gaps:
            # The epoch was started after the gaps (plan_checkpoint); the table moves past them here.
            self.positions = skip_gaps(self.positions, gaps)
        table_pos = flatten(self.positions)
        for tp, offset in flatten(start or {}).items():
            if tp in table_pos and table_pos[tp] != offset:
                raise OffsetError(
                    f"batch {batch_id} of epoch {self.plan.epoch} starts at "
                    f"{offset} but the bronze table stands at {table_pos[tp]}; refusing to write. To start a "
                    "new checkpoint where the table stands, trigger "
                    + action_hint(self.cfg.pipeline, REBUILD_CHECKPOINT),
                    pipeline=self.cfg.pipeline, topic=tp[0], partition=tp[1], offsets=(offset, table_pos[tp]),
                    table=self.cfg.bronze_path, action=REBUILD_CHECKPOINT,
                )

        run_id, epoch = self.cfg.run_id, self.plan.epoch
        phases: dict[str, float] = {}
        decided: dict[str, BronzeCommit] = {}

        def finish(read_version: int, files: list[WrittenFile]) -> tuple[str, list[tuple[str, int]]]:
            phases["write"] = time.monotonic() - started - sum(phases.values())
            stats = stats_from_files([f.stats for f in files], set(end))
            if stats is None:
                log.warning("batch %s: the written files' statistics do not pin each file to one "
                            "topic-partition; counting the %s written files instead", batch_id, len(files))  # fmt: skip
                stats = self._count_files(files)
            ranges = batch_ranges(start=start, end=end, stats=stats, batch_id=batch_id)
            next_positions = advance(self.positions, ranges)
            for topic, parts in end.items():  # partitions with no new offsets keep their place
                for p, o in parts.items():
                    next_positions.setdefault(topic, {}).setdefault(p, o)
            extra: dict[str, Any] = {}
            if self.cfg.topic_ids:
                extra["topic_ids"] = dict(self.cfg.topic_ids)
            if gaps:
                extra["gaps"] = [g.to_json() for g in gaps]
            if batch_id == 0 and self.plan.rebuilt_reason:
                extra["checkpoint_rebuilt"] = {
                    "reason": self.plan.rebuilt_reason,
                    "previous_epoch": self.plan.previous_epoch,
                }
            decided["commit"] = BronzeCommit(
                pipeline=self.cfg.pipeline,
                run_id=run_id,
                run_type=self.cfg.run_type,
                epoch=epoch,
                batch_id=batch_id,
                ranges=tuple(ranges),
                next_offsets=next_positions,
                extra=extra,
            )
            phases["stats"] = time.monotonic() - started - sum(phases.values())
            stop_point("bronze", batch_id)  # a paused worker, for the lock-fencing test: files written, not committed
            return decided["commit"].to_user_metadata(), stand_actions(
                pipeline=self.cfg.pipeline, epoch=epoch, batch_id=batch_id, read_version=read_version,
                next_offsets=next_positions, topic_ids=self.cfg.topic_ids,
            )  # fmt: skip

        phases["check"] = time.monotonic() - started
        version = commit_with_stand(
            self.spark, self.cfg.bronze_path, bronze_rows(df, run_id, batch_id, epoch), finish=finish,
            idempotency=(self.app_id, batch_id), fence=self.cfg.fence,
        )  # fmt: skip
        if version is None:
            log.warning("batch %s of epoch %s: the table's txn already holds it; skipping its replay",
                        batch_id, self.plan.epoch)  # fmt: skip
            self.summary.batches.append(BatchRecord(batch_id, 0, [], None, True, time.monotonic() - started))
            return
        phases["commit"] = time.monotonic() - started - sum(phases.values())
        failpoint("bronze", batch_id)
        commit = decided["commit"]
        self.positions = commit.next_offsets
        self.last_commit = commit
        ranges = list(commit.ranges)
        n = sum(r.rows for r in ranges)
        self.summary.batches.append(
            BatchRecord(batch_id, n, ranges, version, False, time.monotonic() - started, phases)
        )
        log.info("batch %s: %s rows in %s ranges -> bronze version %s in %.2fs (read and write %.2fs, commit %.2fs)",
                 batch_id, n, len(ranges), version, time.monotonic() - started, phases["write"], phases["commit"])  # fmt: skip

    def _count_files(self, files: list[WrittenFile]) -> dict[tuple[str, int], tuple[int, int, int]]:
        """Rows and min/max offset per topic-partition, read back from the batch's own (not yet committed) files."""
        from pyspark.sql import functions as F

        if not files:
            return {}
        base = self.cfg.bronze_path.rstrip("/")
        # An add action's path is relative to the table unless Delta wrote it absolute (a URI).
        paths = [unquote(f.path) if "://" in f.path or f.path.startswith("/") else f"{base}/{unquote(f.path)}"
                 for f in files]  # fmt: skip
        return {
            (r["topic"], r["partition"]): (r["rows"], r["low"], r["high"])
            for r in self.spark.read.parquet(*paths).groupBy("topic", "partition")
            .agg(F.count("*").alias("rows"), F.min("offset").alias("low"), F.max("offset").alias("high"))
            .collect()
        }

# --------------------------------------------------------------------------- run


def bronze_schema(spark: SparkSession, cfg: IngestConfig) -> StructType:
    """The bronze table's schema (for a position commit that creates the table without rows); no job runs."""
    source = spark.readStream.format("kafka").options(**cfg.source_options()).load()
    return bronze_rows(spark.createDataFrame([], source.schema), cfg.run_id, 0, 0).schema


def bronze_rows(df: DataFrame, run_id: str, batch_id: int, epoch: int) -> DataFrame:
    """The bronze table's columns for the Kafka rows ``df`` of one batch."""
    from pyspark.sql import functions as F

    return df.select(
        *BRONZE_COLUMNS,
        F.lit(run_id).alias("run_id"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.lit(epoch).alias("epoch"),
        F.current_timestamp().alias("ingested_at"),
    )


def record_position(spark: SparkSession, cfg: IngestConfig, partitions: dict[str, list[int]],
                    checkpoints: Mapping[int, spark_checkpoint.CheckpointState | None], table: BronzeCommit | None,
                    positions: PositionMap, note: dict[str, Any]) -> tuple[BronzeCommit, CheckpointPlan]:  # fmt: skip
    """Record in the table (state and metadata, no rows) that it stands at ``positions``, and plan a new epoch there.

    Used when the position is set rather than reached: ``starting_offsets:
    latest`` fixed on the first run, or a position action an operator chose
    at preflight. The record is written before any batch, so it holds even
    when no new record arrives in this run.
    """
    return _record_stand(spark, cfg, partitions, checkpoints, table, positions, {"position_set": note},
                         f"position set: {note.get('reason')}")  # fmt: skip


def record_skip(spark: SparkSession, cfg: IngestConfig, partitions: dict[str, list[int]],
                checkpoints: Mapping[int, spark_checkpoint.CheckpointState | None],
                table: BronzeCommit | None) -> tuple[BronzeCommit, CheckpointPlan | None]:  # fmt: skip
    """Record the offsets ``skip_offsets`` passes (``cfg.skipped``) as gaps, in a commit of their own before any
    batch, and plan a new epoch after them; ``(table, None)`` when an earlier try of this run recorded them.

    Each must start where the table stands on its partition: the preflight checked it, and a table that
    moved since (another writer, a stale request) stops the run rather than drop records it has not read.
    """
    if table is None:
        raise OffsetError("skip_offsets needs a bronze table to skip from; it has none", pipeline=cfg.pipeline,
                          table=cfg.bronze_path)  # fmt: skip
    stands = flatten(table.next_offsets)
    todo = []
    for g in cfg.skipped:
        now = stands.get((g.topic, g.partition))
        if now == g.until_offset and table.run_id == cfg.run_id:
            continue  # recorded by an earlier try of this run
        if now != g.from_offset:
            raise OffsetError(
                f"skip_offsets asked to skip [{g.from_offset}, {g.until_offset}), but the table now stands at "
                f"{now}; nothing was skipped. Trigger it again from where the table stands",
                pipeline=cfg.pipeline, topic=g.topic, partition=g.partition, offsets=(g.from_offset, g.until_offset),
                table=cfg.bronze_path,
            )  # fmt: skip
        todo.append(g)
    if not todo:
        return table, None
    described = ", ".join(f"{g.topic}-{g.partition} [{g.from_offset}, {g.until_offset})" for g in todo)
    why = f"skipping {described}: {todo[0].reason}"
    commit, plan = _record_stand(spark, cfg, partitions, checkpoints, table, skip_gaps(table.next_offsets, todo),
                                 {"gaps": [g.to_json() for g in todo]}, why)  # fmt: skip
    return commit, CheckpointPlan(plan.epoch, plan.starting_offsets, why, max(checkpoints, default=None))


def _record_stand(spark: SparkSession, cfg: IngestConfig, partitions: dict[str, list[int]],
                  checkpoints: Mapping[int, spark_checkpoint.CheckpointState | None], table: BronzeCommit | None,
                  positions: PositionMap, extra: dict[str, Any],
                  why: str) -> tuple[BronzeCommit, CheckpointPlan]:  # fmt: skip
    """A commit of no rows that makes the table stand at ``positions`` (``extra`` says why), and a new epoch
    planned there."""
    epoch = max([0, *checkpoints, *([table.epoch] if table else [])]) + 1
    extra = {**extra, **({"topic_ids": dict(cfg.topic_ids)} if cfg.topic_ids else {})}
    commit = BronzeCommit(pipeline=cfg.pipeline, run_id=cfg.run_id, run_type=cfg.run_type, epoch=epoch,
                          batch_id=-1, ranges=(), next_offsets=positions, extra=extra)  # fmt: skip
    commit_with_stand(
        spark, cfg.bronze_path, None,
        finish=lambda read_version, _files: (commit.to_user_metadata(), stand_actions(
            pipeline=cfg.pipeline, epoch=epoch, batch_id=-1, read_version=read_version,
            next_offsets=positions, topic_ids=cfg.topic_ids,
        )),
        idempotency=None, schema=bronze_schema(spark, cfg), fence=cfg.fence,
    )  # fmt: skip
    log.warning("epoch %s: %s: %s", epoch, why, positions_to_json(positions))
    return commit, CheckpointPlan(epoch, json.dumps(resume_offsets(positions, partitions)))


def latest_offsets(spark: SparkSession, cfg: IngestConfig, partitions: dict[str, list[int]]) -> PositionMap:
    """Kafka's last stable offset (what a read_committed reader reaches) of every partition, via the Java admin client."""
    jvm: Any = spark.sparkContext._jvm
    kafka = jvm.org.apache.kafka
    admin = _admin(jvm, cfg)
    timeout_ms = int(cfg.admin_timeout_s * 1000)
    try:
        specs = jvm.java.util.HashMap()
        for topic, parts in partitions.items():
            for p in parts:
                specs.put(kafka.common.TopicPartition(topic, p), kafka.clients.admin.OffsetSpec.latest())
        options = kafka.clients.admin.ListOffsetsOptions(kafka.common.IsolationLevel.READ_COMMITTED)
        found = admin.listOffsets(specs, options).all().get(timeout_ms, jvm.java.util.concurrent.TimeUnit.MILLISECONDS)
        result: PositionMap = {}
        for tp in found.keySet():
            result.setdefault(tp.topic(), {})[int(tp.partition())] = int(found.get(tp).offset())
        return result
    finally:
        admin.close(jvm.java.time.Duration.ofSeconds(2))


def run(spark: SparkSession, cfg: IngestConfig) -> RunSummary:
    """One ingestion run on an existing session; returns (and writes) its summary."""
    started = time.monotonic()
    phases: dict[str, float] = {}
    partitions = describe_source(spark, cfg)
    phases["kafka_metadata"] = time.monotonic() - started
    reset = cfg.position_reset
    check_owner(spark, cfg.bronze_path, cfg.pipeline, "bronze")
    try:
        stand = read_table_stand(spark, cfg.bronze_path, cfg.pipeline, partitions)
    except PositionUnknownError:
        if reset is None:
            raise
        stand = None
    phases["table_position"] = time.monotonic() - started - sum(phases.values())
    if stand is not None and stand.restore is not None and reset is None:
        raise OffsetError(
            f"bronze table {cfg.bronze_path} was restored ({stand.restore.restored_to}, Delta version "
            f"{stand.restore.version}) after its last progress commit; run the preflight, which names the choices",
            pipeline=cfg.pipeline, table=cfg.bronze_path, version=stand.restore.version,
        )
    table = stand.commit if stand is not None else None
    root = cfg.checkpoint_root
    files = checkpoint_files(spark, root)
    checkpoints, damaged = spark_checkpoint.read_epochs(root, spark_checkpoint.read_state, files)
    position_set = None
    if reset is not None:
        table, plan = record_position(spark, cfg, partitions, checkpoints, table,
                                      positions_from_json(reset["positions"]), reset)  # fmt: skip
        position_set = table
        plan = CheckpointPlan(plan.epoch, plan.starting_offsets, reset["reason"], max(checkpoints, default=None))
        if cfg.accepted_gaps:  # data loss found from the new position: a further epoch starts after it
            plan = plan_checkpoint(table=table, checkpoints=checkpoints, partitions=partitions,
                                   starting_offsets=cfg.starting_offsets, gaps=cfg.accepted_gaps)  # fmt: skip
    elif table is None and cfg.starting_offsets == "latest" and not cfg.accepted_gaps:
        latest = latest_offsets(spark, cfg, partitions)
        table, plan = record_position(spark, cfg, partitions, checkpoints, None, latest, {
            "action": "starting_offsets", "reason": "starting_offsets: latest, fixed on the pipeline's first run",
        })  # fmt: skip
        position_set = table
    elif cfg.skipped and (skip := record_skip(spark, cfg, partitions, checkpoints, table))[1] is not None:
        table, plan = skip[0], skip[1]  # by index: the condition narrowed skip[1], not the tuple
        if cfg.accepted_gaps:  # data loss on other partitions: a further epoch starts after it too
            plan = plan_checkpoint(table=table, checkpoints=checkpoints, partitions=partitions,
                                   starting_offsets=cfg.starting_offsets, gaps=cfg.accepted_gaps)  # fmt: skip
    else:
        plan = plan_checkpoint(
            table=table, checkpoints=checkpoints, partitions=partitions,
            starting_offsets=cfg.starting_offsets, gaps=cfg.accepted_gaps, rebuild=cfg.rebuild_reason,
            damaged=damaged,
        )  # fmt: skip
    checkpoint = spark_checkpoint.epoch_dir(root, plan.epoch)
    rebuilt = None
    if plan.rebuilt_reason:
        rebuilt = {"reason": plan.rebuilt_reason, "previous_epoch": plan.previous_epoch}
        log.warning("starting checkpoint epoch %s at the table's offsets: %s", plan.epoch, plan.rebuilt_reason)
    start_positions = dict(table.next_offsets) if table else {}
    summary = RunSummary(cfg.pipeline, cfg.run_id, cfg.run_type, plan.epoch, rebuilt,
                         start_positions, start_positions)  # fmt: skip
    if position_set is not None:
        summary.position_set = {**position_set.extra["position_set"],
                                "positions": positions_to_json(position_set.next_offsets)}  # fmt: skip
    summary.phases_s = phases
    phases["plan"] = time.monotonic() - started - sum(phases.values())
    writer = BronzeBatchWriter(spark, cfg, plan, checkpoint, table, summary, files)
    # Session settings reach the Parquet writer through the Hadoop configuration Delta's writeFiles builds.
    for column in NO_DICTIONARY_COLUMNS:
        spark.conf.set(f"parquet.enable.dictionary#{column}", "false")

    reader = spark.readStream.format("kafka").options(**cfg.source_options())
    reader = reader.option("startingOffsets", plan.starting_offsets)
    query = writer.drain(reader.load(), job="kafka_to_bronze", pipeline=cfg.pipeline, checkpoint=checkpoint,
                         error=IngestionError, stage="ingestion")  # fmt: skip
    # Spark's own time per batch (offsets, planning, our writer, its checkpoint commit), for profiling.
    triggers = {int(p["batchId"]): int(p["durationMs"].get("triggerExecution", 0)) / 1000 for p in query.recentProgress}
    for b in summary.batches:
        if b.batch_id in triggers:
            b.phases["trigger"] = triggers[b.batch_id]
    summary.next_offsets = writer.positions
    properties_set = apply_table_properties(spark, cfg.bronze_path, cfg.table_properties, cfg.fence, owner=cfg.pipeline)
    if properties_set:
        log.info("bronze table properties set: %s", ", ".join(f"{k}={v}" for k, v in properties_set.items()))
    summary.duration_s = time.monotonic() - started
    phases["stream"] = summary.duration_s - sum(phases.values())
    log.info("ingest phases: %s", ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()))
    write_summary(cfg.summary_path, contract.IngestSummary.from_json(summary.to_json()).to_json())
    return summary


#: The job as a step of a run's Spark application (``spark_jobs/run_steps.py``).
STEP = JobStep(
    "kafka_to_bronze", parse=parse_config, bad_argument=JobConfigError, run=run,
    describe=lambda s: f"epoch={s.epoch} rows={s.rows} batches={len(s.batches)} duration={s.duration_s:.1f}s",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point: args -> session -> run -> summary line; exit 2 on bad arguments."""
    return job_main(STEP, argv)


if __name__ == "__main__":
    sys.exit(main())
