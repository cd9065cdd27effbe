"""The transform's batch writer: per micro-batch, decode, classify, quarantine and one silver commit.

:class:`SilverBatchWriter` is the ``foreachBatch`` sink of the transform's
stream. Each step is timed (``job_common.PhaseTimer``): reading the batch's
rows, decode (and new fields within ``transform.limits``), classify, quarantine,
commit (its plan, then Delta's append or MERGE, whose commit carries where the
transform stands in bronze), then the commit is confirmed against Delta's own
row metrics (:func:`check_rows_written`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from include.contract.errors import TransformError
from include.contract.jobs import quarantine_app_id, silver_app_id
from include.contract.routes import RoutingAccount
from include.contract.silver_stand import (
    SCHEMA_KIND,
    TRUNCATE_KIND,
    BronzePosition,
    SilverCommit,
    SilverStand,
    silver_txn_version,
)
from include.contract.transform_spec import FieldSpec, TransformSpec
from include.readers import spark_checkpoint
from spark_jobs import cdc_rules
from spark_jobs.delta_commits import (
    check_fence,
    confirm_newest_commit,
)
from spark_jobs.formats.schemas import ValueSchemas
from spark_jobs.job_common import (
    BatchWriter,
    PhaseTimer,
    failpoint,
    keep_for_batch,
    release,
)
from spark_jobs.table_properties import (
    delta_table_sql,
    with_user_metadata,
)
from spark_jobs.transform_plan import (
    TransformConfig,
    TransformPlan,
    already_in_silver,
    batch_end,
    is_delta,
    value_schemas,
)
from spark_jobs.transform_summary import BatchResult, TransformSummary

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from include.contract.replay import ReplaySelection
    from spark_jobs.new_fields import NewFields


log = logging.getLogger("bronze_to_silver")


def ensure_silver(spark: SparkSession, path: str, spec: TransformSpec) -> list[FieldSpec]:
    """Create silver (declared fields + system columns) if missing; returns its effective fields."""
    from delta.tables import DeltaTable

    from spark_jobs.silver_table import fields_of_table, silver_ddl

    if not DeltaTable.isDeltaTable(spark, path):
        spark.sql(f"CREATE TABLE IF NOT EXISTS {delta_table_sql(path)} ({silver_ddl(spec.fields, cdc=spec.cdc)}) "
                  "USING delta")  # fmt: skip
    schema = spark.read.format("delta").load(path).schema
    columns = [(f.name, f.dataType.simpleString(), f.metadata.get("comment")) for f in schema.fields]
    fields = fields_of_table(columns, spec)
    missing = [f.name for f in spec.fields if f.name not in {c[0] for c in columns}]
    if missing:
        raise TransformError(
            f"{path}: silver has no column for declared field(s) {', '.join(missing)}; declared fields "
            "cannot be added to an existing silver table by the job (add them with ALTER TABLE, or give "
            f"the pipeline a new tables.silver_path)"
        )
    return fields


def add_fields(spark: SparkSession, path: str, added: list[FieldSpec], metadata: dict[str, Any]) -> None:
    """``ALTER TABLE ADD COLUMNS`` for fields the data brought, recorded in that commit's metadata."""
    from include.contract.transform_spec import spark_type
    from spark_jobs.silver_table import JSON_COMMENT

    cols = ", ".join(
        f"`{f.name}` {spark_type(f.type)}" + (f" COMMENT '{JSON_COMMENT}'" if f.type == "json" else "")
        for f in added
    )
    meta = json.dumps({"kind": SCHEMA_KIND, **metadata, "fields_added": [{"name": f.name, "type": f.type} for f in added]})
    # Added columns land after the system columns; MERGE matches columns by name, so order is harmless.
    with_user_metadata(spark, meta, lambda: spark.sql(f"ALTER TABLE {delta_table_sql(path)} ADD COLUMNS ({cols})"))


def run_summary(cfg: TransformConfig, plan: TransformPlan, last: SilverStand | None) -> TransformSummary:
    """The run summary of one silver table, before its batches: the epoch, a rebuilt checkpoint, where it starts."""
    rebuilt = {"reason": plan.rebuilt_reason, "previous_epoch": plan.previous_epoch} if plan.rebuilt_reason else None
    return TransformSummary(cfg.pipeline, cfg.run_id, plan.epoch, rebuilt,
                            last.bronze_end if last and not last.restore else plan.start,
                            field_names_shown=cfg.spec.limits.field_names)  # fmt: skip


def open_writer(spark: SparkSession, cfg: TransformConfig, plan: TransformPlan, checkpoint: str,
                last: SilverStand | None, files: spark_checkpoint.Files, summary: TransformSummary) -> SilverBatchWriter:  # fmt: skip
    """The batch writer of one silver table (``cfg``'s; a route's with :meth:`TransformConfig.for_route`) writing
    ``summary`` (:func:`run_summary`), its value schemas read and its table made or its columns read
    (:func:`ensure_silver`)."""
    values = value_schemas(spark, cfg)
    summary.value_schema = values.recorded() if values else None
    fields = ensure_silver(spark, cfg.silver_path, cfg.spec)
    return SilverBatchWriter(spark, cfg, plan, checkpoint, last, fields, summary, values, files)


class SilverBatchWriter(BatchWriter):
    """``foreachBatch`` sink: quarantine append, then one silver commit per micro-batch."""

    def __init__(self, spark: SparkSession, cfg: TransformConfig, plan: TransformPlan, checkpoint: str,
                 last: SilverStand | SilverCommit | None, fields: list[FieldSpec], summary: TransformSummary,
                 values: ValueSchemas | None = None,
                 files: spark_checkpoint.Files = spark_checkpoint.LOCAL) -> None:  # fmt: skip
        self.spark = spark
        self.cfg = cfg
        self.plan = plan
        self.checkpoint = checkpoint
        self.files = files
        self.last = last
        self.fields = fields
        self.summary = summary
        self.values = values
        #: Per topic, the LSN of the batch's last source truncate (change events; usually empty).
        self.truncates: dict[str, int] = {}
        #: The route this writer's silver table is (a routed transform's route writer), or ``None``.
        self.route: str | None = None
        #: The routing account of the batch being written, which its silver commit carries (set per batch by
        #: :class:`spark_jobs.routed_transform.RoutedBatchWriter`).
        self.account: RoutingAccount | None = None

    def record_columns(self) -> None:
        """Silver's columns after the run into the summary (``{name, type}``, Spark SQL types), for lineage."""
        from spark_jobs.silver_table import silver_columns

        self.summary.silver_columns = [{"name": n, "type": t} for n, t in
                                       silver_columns(self.fields, cdc=self.cfg.spec.cdc)]  # fmt: skip

    def replay_quarantine(self, selection: ReplaySelection) -> dict[str, Any]:
        """The quarantined records ``selection`` takes, again through this writer's rules into its silver
        (:func:`spark_jobs.quarantine_replay.replay`); what became of them, for the summary."""
        from spark_jobs import quarantine_replay

        cfg = self.cfg
        return quarantine_replay.replay(
            self.spark, pipeline=cfg.pipeline, run_id=cfg.run_id, silver_path=cfg.silver_path,
            quarantine_path=cfg.quarantine_path, spec=cfg.spec, fields=self.fields, selection=selection,
            values=self.values, fence=cfg.fence,
        ).to_json()  # fmt: skip

    def skip_replay(self, batch_id: int | None) -> bool:
        """Whether batch ``batch_id`` is already in silver (:func:`already_in_silver`); if so it is recorded as
        a skipped replay, so the run's counts account for the commit an earlier attempt made."""
        if batch_id is None or not already_in_silver(self.last, self.plan, batch_id):  # False for None as well
            return False
        log.warning("batch %s of epoch %s is already in silver (an earlier attempt committed it and stopped before "
                    "the checkpoint did); its replay is skipped", batch_id, self.plan.epoch)  # fmt: skip
        self.summary.batches.append(BatchResult(batch_id, None, True, 0.0))
        return True

    def _write(self, df: DataFrame, batch_id: int) -> None:
        """One micro-batch: decode → classify → quarantine → commit, each step timed; then the commit confirmed."""
        from pyspark import StorageLevel

        started = time.monotonic()
        if self.skip_replay(batch_id):
            return
        start = batch_end(self.checkpoint, batch_id - 1, self.files) if batch_id > 0 else self.plan.start
        end = batch_end(self.checkpoint, batch_id, self.files)
        timer = PhaseTimer()
        cached = [df.persist(StorageLevel.MEMORY_AND_DISK)]
        try:
            # Reading the batch's rows from bronze, on its own: every later step reads the cached rows, so
            # the timer can tell the read from what the transform itself costs (make bench reports both).
            cached[0].count()
            timer.lap("read")
            decoded, new = self._decode(cached[0], batch_id, cached)
            timer.lap("decode")
            classified, actions, touches_existing, adds_keys = self._classify(decoded, cached)
            timer.lap("classify")
            if actions.pop(cdc_rules.UNKNOWN_VALUE, 0):
                # Changes whose unsent value nothing holds go to quarantine with the rest of the bad records.
                decoded = cdc_rules.with_unknown_values(decoded, classified).persist(StorageLevel.MEMORY_AND_DISK)
                cached.append(decoded)
            read, qfields, replayed, quarantine = self._quarantine(decoded, batch_id, cached)
            timer.lap("read_and_quarantine_count")
            counts = {
                "upserted": actions.get("insert", 0) + actions.get("update", 0),
                "deleted": actions.get("delete", 0),
                "quarantined": sum(qfields.values()),
                "superseded": actions.get("superseded", 0),
                "replayed": actions.get("replayed", 0) + replayed,
                **({"skipped": actions.get("skipped", 0)} if self.cfg.spec.cdc else {}),
            }
            commit = SilverCommit(
                pipeline=self.cfg.pipeline, run_id=self.cfg.run_id, epoch=self.plan.epoch, batch_id=batch_id,
                bronze_start=start, bronze_end=end, read=read, counts=counts, quarantine_fields=qfields,
                fields_added=tuple({"name": f.name, "type": f.type} for f in new.added), fields_ignored=new.ignored,
                fields_unknown=new.unknown, value_schema=self.values.recorded() if self.values else None,
                route=self.route, routing=self.account.to_json() if self.account is not None else None,
            )  # fmt: skip
            if commit.accounted != read:
                raise TransformError(
                    f"batch {batch_id}: read {read} bronze records but accounted for {commit.accounted} "
                    f"({counts}); refusing to commit"
                )
            # Silver's MERGE and quarantine's append carry one txn action each (their own app ids): the
            # lock's epoch is checked just before them instead.
            check_fence(self.spark, self.cfg.silver_path, self.cfg.fence)
            failpoint("silver", batch_id, when="before")  # a transform that dies with nothing written
            self._write_quarantine(quarantine, commit, batch_id)
            failpoint("quarantine", batch_id)  # quarantine appended, silver not yet committed
            timer.lap("quarantine_write")
            if self.truncates:
                self._truncate(batch_id)
            write = self._silver_write(classified, commit, end, batch_id, touches_existing=touches_existing,
                                       adds_keys=adds_keys)  # fmt: skip
            timer.lap("silver_plan")
            write()
            timer.lap("silver_write")
        finally:
            release(cached)
        commit = self._confirm(commit, batch_id)
        timer.lap("confirm")
        failpoint("silver", batch_id)
        self.last = commit
        self.summary.batches.append(BatchResult(batch_id, commit, False, time.monotonic() - started, timer.phases))
        log.info("batch %s: read %s -> %s, silver version %s in %.2fs (%s)", batch_id, read, counts, commit.version,
                 time.monotonic() - started, timer.line())  # fmt: skip

    def _decode(self, bronze: DataFrame, batch_id: int, cached: list[DataFrame]) -> tuple[DataFrame, NewFields]:
        """Decode step: one row per bronze record (kept, as every later step reads it), after adding the new
        fields the batch brings within ``transform.limits.new_columns``; records that would need more get
        a problem naming the cap. Returns the decoded frame and the :class:`~spark_jobs.new_fields.NewFields`."""
        from pyspark import StorageLevel

        from spark_jobs import new_fields, silver_rules

        cfg, spec = self.cfg, self.cfg.spec
        value_plan = self.values.plan(bronze) if self.values else None
        decoded = silver_rules.decode(bronze, spec, self.fields, value_plan).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(decoded)
        run_left = spec.limits.new_columns - len(self.summary.fields_added)
        table_left = spec.limits.silver_columns - len(self.fields)
        budget = min(run_left, table_left)
        new = new_fields.plan_new_fields(decoded, spec, self.fields, budget=budget)
        if new.added:
            add_fields(self.spark, cfg.silver_path, new.added,
                       {"pipeline": cfg.pipeline, "run_id": cfg.run_id, "epoch": self.plan.epoch,
                        "batch_id": batch_id})  # fmt: skip
            self.fields = [*self.fields, *new.added]
            self.summary.fields_added += [{"name": f.name, "type": f.type, "batch_id": batch_id} for f in new.added]
            log.warning("batch %s: added field(s) to silver: %s", batch_id,
                        ", ".join(f"{f.name} {f.type}" for f in new.added))  # fmt: skip
            decoded = silver_rules.decode(bronze, spec, self.fields, value_plan)
        if new.refused:
            allowed = [f.name for f in self.fields] + list(new.waiting)
            cap = (f"transform.limits.new_columns ({spec.limits.new_columns} new silver columns a run)"
                   if run_left <= table_left else
                   f"transform.limits.silver_columns ({spec.limits.silver_columns} silver columns in all)")  # fmt: skip
            log.warning("batch %s: records with new fields beyond %s go to quarantine", batch_id, cap)
            decoded = new_fields.refuse_new_fields(decoded, allowed, cap)
        if new.added or new.refused:
            decoded = decoded.persist(StorageLevel.MEMORY_AND_DISK)
            cached.append(decoded)
        return decoded, new

    def _quarantine(self, decoded: DataFrame, batch_id: int,
                    cached: list[DataFrame]) -> tuple[int, dict[str, int], int, DataFrame]:  # fmt: skip
        """Quarantine step: the records read, the bad ones counted by the field of their first problem, and
        the quarantine rows to append; those in quarantine already (a new epoch re-reading a version the last
        one stood in, or a backfill putting records back into bronze) are counted as ``replayed``, never
        appended twice. Returns ``(read, {field: count}, replayed, quarantine rows)``."""
        from pyspark.sql import functions as F

        from spark_jobs import silver_rules

        cfg = self.cfg
        # One pass over the batch gives the records read, the bad ones by the field of their first problem,
        # and where the bad ones are (their offset span per partition).
        first_problem = F.when(F.size("_problems") > 0, F.col("_problems")[0]["field"])
        bad_at = F.when(first_problem.isNotNull(), F.struct("_kafka_topic", "_kafka_partition"))
        groups = (decoded.groupBy(first_problem.alias("field"), bad_at.alias("at"))
                  .agg(F.count("*").alias("n"), F.min("_kafka_offset").alias("lo"),
                       F.max("_kafka_offset").alias("hi")).collect())  # fmt: skip
        read = sum(r["n"] for r in groups)
        qfields: dict[str, int] = {}
        spans: dict[tuple[str, int], tuple[int, int]] = {}
        for r in groups:
            if r["field"] is None:
                continue
            qfields[r["field"]] = qfields.get(r["field"], 0) + r["n"]
            at = (r["at"]["_kafka_topic"], r["at"]["_kafka_partition"])
            lo, hi = spans.get(at, (r["lo"], r["hi"]))
            spans[at] = (min(lo, r["lo"]), max(hi, r["hi"]))
        bad = sum(qfields.values())
        quarantine = silver_rules.quarantine_rows(decoded, cfg.run_id, self.plan.epoch, batch_id)
        if not bad or not is_delta(self.spark, cfg.quarantine_path):
            return read, qfields, 0, quarantine
        # This batch's own rows, an earlier attempt's append of it, are not "held already": the append below
        # carries the batch's idempotent-write marker, so Delta skips it, and the batch counts them as its own.
        own = (F.col("epoch") == self.plan.epoch) & (F.col("batch_id") == batch_id)
        # A bad record may be in quarantine already: a new epoch re-reads the bronze version the last one
        # stood in (or, after a RESTORE of silver, where silver stood then), and a backfill puts records back
        # into bronze that this transform read before. Only where this batch's bad records are is looked at,
        # so the cost follows the batch, not the quarantine's history.
        where = F.lit(False)
        for (topic, partition), (lo, hi) in sorted(spans.items()):
            where = where | ((F.col("topic") == topic) & (F.col("partition") == partition)
                             & F.col("offset").between(lo, hi))  # fmt: skip
        held = (self.spark.read.format("delta").load(cfg.quarantine_path).where(where & ~own)
                .select("topic", "partition", "offset"))  # fmt: skip
        if held.isEmpty():
            # The usual case: none of them is held, so the counts above stand and no join is made.
            return read, qfields, 0, quarantine
        quarantine = keep_for_batch(quarantine.join(held, ["topic", "partition", "offset"], "left_anti"), cached)
        qfields = {
            r["field"]: r["n"]
            for r in quarantine.groupBy(F.col("fields")[0].alias("field")).agg(F.count("*").alias("n")).collect()
        }
        return read, qfields, bad - sum(qfields.values()), quarantine

    def _classify(self, decoded: DataFrame, cached: list[DataFrame]) -> tuple[DataFrame, dict[str, int], bool, bool]:
        """Classify step: what each valid record does to silver (:func:`spark_jobs.silver_table.classify`), kept.
        Returns the classified frame, the count per action, and whether it updates or deletes keys silver holds
        and whether it brings keys silver lacks (which decide the commit's shape)."""
        from pyspark.sql import functions as F

        from spark_jobs import silver_rules, silver_table

        valid = silver_rules.valid_records(decoded)
        current = self.spark.read.format("delta").load(self.cfg.silver_path)
        self.truncates = cdc_rules.truncated_at(valid) if self.cfg.spec.cdc else {}
        classified = keep_for_batch(
            silver_table.classify(valid, current, self.cfg.spec, self.fields, self.truncates), cached)  # fmt: skip
        actions: dict[str, int] = {}
        touches_existing = adds_keys = False
        for r in classified.groupBy("_action", "_present").agg(F.count("*").alias("n")).collect():
            actions[r["_action"]] = actions.get(r["_action"], 0) + r["n"]
            touches_existing |= bool(r["_present"]) and r["_action"] in ("update", "delete")
            adds_keys |= not r["_present"] and r["_action"] in ("insert", "delete")
        return classified, actions, touches_existing, adds_keys

    def _write_quarantine(self, quarantine: DataFrame, commit: SilverCommit, batch_id: int) -> None:
        """The batch's new bad records, appended to quarantine idempotently (its txn app id and the batch id)."""
        if not commit.counts["quarantined"]:
            return
        check_fence(self.spark, self.cfg.quarantine_path, self.cfg.fence)
        (
            quarantine.write.format("delta").mode("append")
            .option("txnAppId", quarantine_app_id(self.cfg.pipeline, self.plan.epoch))
            .option("txnVersion", batch_id)
            .option("userMetadata", commit.to_user_metadata())
            .save(self.cfg.quarantine_path)
        )  # fmt: skip

    def _truncate(self, batch_id: int) -> None:
        """A source table was truncated: silver's live rows of its topic written before the truncate are
        deleted, in a commit of their own before the batch's (re-running it deletes nothing more)."""
        from delta.tables import DeltaTable
        from pyspark.sql import functions as F

        cfg = self.cfg
        keys = set(cfg.spec.key)
        update: dict[str, str | Column] = {f"`{f.name}`": F.lit(None) for f in self.fields if f.name not in keys}
        # The row stands at the truncate's position: every change before it compares lower (its commit was
        # earlier), every change after it higher, so a change sent again cannot bring the row back.
        at = F.lit(None).cast("bigint")
        for topic, lsn in sorted(self.truncates.items()):
            at = F.when(F.col("_kafka_topic") == topic, F.lit(lsn)).otherwise(at)
        update |= {"_deleted": F.lit(True), "_cdc_op": F.lit("t"), "_cdc_commit_lsn": at, "_cdc_lsn": at,
                   "_run_id": F.lit(cfg.run_id), "_updated_at": F.current_timestamp()}  # fmt: skip
        meta = json.dumps({"kind": TRUNCATE_KIND, "pipeline": cfg.pipeline, "run_id": cfg.run_id,
                           "epoch": self.plan.epoch, "batch_id": batch_id, "truncated_at": self.truncates})  # fmt: skip
        check_fence(self.spark, cfg.silver_path, cfg.fence)
        table = DeltaTable.forPath(self.spark, cfg.silver_path)
        with_user_metadata(self.spark, meta,
                           lambda: table.update(cdc_rules.truncate_condition(self.truncates), update))  # fmt: skip
        deleted = int(dict(table.history(1).collect()[0]["operationMetrics"]).get("numUpdatedRows", 0))
        self.summary.truncated_rows += deleted
        log.warning("batch %s: source truncate(s) at %s: deleted %s silver row(s) written before it", batch_id,
                    self.truncates, deleted)  # fmt: skip

    def _silver_write(self, classified: DataFrame, commit: SilverCommit, end: BronzePosition, batch_id: int, *,
                      touches_existing: bool, adds_keys: bool) -> Callable[[], object]:  # fmt: skip
        """Commit step, planned: the call that writes the batch's rows and where the transform now stands in one
        silver commit (Delta's append or MERGE), so the batch's timer can tell planning it from running it."""
        from spark_jobs import silver_table

        cfg, spec = self.cfg, self.cfg.spec
        current = self.spark.read.format("delta").load(cfg.silver_path)
        rows = silver_table.silver_rows(classified, self.fields, spec, cfg.run_id)
        meta = commit.to_user_metadata()
        # Where the transform now stands, in the same commit: part of silver's state.
        try:
            txn = (silver_app_id(cfg.pipeline, self.plan.epoch), silver_txn_version(end.version, batch_id))
        except ValueError as exc:
            raise TransformError(f"batch {batch_id} of epoch {self.plan.epoch}: {exc}") from None
        counts = commit.counts
        if not (counts["upserted"] or counts["deleted"]) or not touches_existing:
            # Every row is a key silver does not hold (classify read silver): an append is the
            # MERGE's exact outcome without its two joins over silver. With no row, the empty
            # append is the batch's completion mark and position.
            writer = (rows.select(*current.columns).write.format("delta").mode("append")
                      .option("userMetadata", meta).option("txnAppId", txn[0]).option("txnVersion", txn[1]))  # fmt: skip
            return lambda: writer.save(cfg.silver_path)
        from delta.tables import DeltaTable

        # Without a new key the MERGE is matched-only.
        merge = silver_table.silver_merge(DeltaTable.forPath(self.spark, cfg.silver_path), rows, current.columns,
                                          self.fields, spec, insert=adds_keys)  # fmt: skip
        return lambda: with_user_metadata(self.spark, meta, merge.execute, txn=txn)

    def _confirm(self, commit: SilverCommit, batch_id: int) -> SilverCommit:
        """The batch's commit as silver's log holds it (its version), its rows checked against Delta's metrics."""
        version, operation, metrics = confirm_newest_commit(self.spark, self.cfg.silver_path,
                                                            SilverCommit.from_user_metadata, self.plan.epoch,
                                                            batch_id, TransformError)  # fmt: skip
        check_rows_written(self.cfg.silver_path, version, operation, metrics, commit)
        return replace(commit, version=version)


def rows_written(operation: str, metrics: dict[str, str]) -> int | None:
    """The rows a silver commit wrote, by Delta's own operation metrics; ``None`` when it kept none.

    A MERGE's inserted, updated and deleted rows (this transform's MERGE never
    deletes a row: a delete is a row marked ``_deleted``), an append's output rows.
    """
    names = {"MERGE": ("numTargetRowsInserted", "numTargetRowsUpdated", "numTargetRowsDeleted"),
             "WRITE": ("numOutputRows",)}.get(operation)  # fmt: skip
    if names is None or not all(n in metrics for n in names):
        return None
    return sum(int(metrics[n]) for n in names)


def check_rows_written(path: str, version: int, operation: str, metrics: dict[str, str], commit: SilverCommit) -> None:
    """Raise :class:`TransformError` when Delta's metrics of ``version`` disagree with the batch's counts.

    The counts come from the batch's classification before its commit, Delta's
    metrics from what the commit did: each upserted or deleted record is
    exactly one row written.
    """
    expected = commit.counts["upserted"] + commit.counts["deleted"]
    written = rows_written(operation, metrics)
    if written is None:
        log.warning("%s version %s: the %s kept no row metrics; its rows are not cross-checked", path, version,
                    operation)  # fmt: skip
        return
    if written != expected:
        raise TransformError(
            f"{path}: batch {commit.batch_id} of epoch {commit.epoch} committed version {version}, where "
            f"Delta's {operation} metrics say {written} rows were written ({metrics}) but the batch classified "
            f"{expected} (counts {commit.counts}); undo it with RESTORE TABLE delta.`{path}` TO VERSION AS OF "
            f"{version - 1} (the next run redoes what the restore undid) and report this as a bug"
        )
