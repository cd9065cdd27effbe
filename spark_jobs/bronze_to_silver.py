"""Transform job: what is new in bronze → typed, deduplicated silver rows, and a quarantine.

Submitted after the ingestion job, to the same cluster (``include/orchestration/step_operators.py``)::

    spark-submit ... --py-files kde_jobs.zip spark_jobs/bronze_to_silver.py \\
        --pipeline orders --bronze-path lakehouse/orders/bronze \\
        --silver-path lakehouse/orders/silver --quarantine-path lakehouse/orders/quarantine \\
        --checkpoint-root lakehouse/orders/_checkpoints/silver --spec-file transform.json \\
        --run-id <airflow run id> --summary-path transform-summary.json

One run: read where the transform stands in the bronze log (silver's txn
action, with its last batch commit while the log holds it; a RESTORE of
silver after it sends it back) → resume the checkpoint if it matches, else
start a new epoch there → ``readStream`` delta bronze with ``Trigger.AvailableNow`` → per
micro-batch: decode and validate (``silver_rules``), add new fields if the
pipeline says so, append bad records to quarantine (idempotent
``txnAppId``/``txnVersion``), MERGE the newest record per key into silver in
one commit carrying the batch's counts → write the run summary.

Exactly once: a batch's silver commit is its completion mark, and carries
where the transform stands as a txn action (:func:`include.contract.jobs.silver_app_id`),
which log checkpoints keep after Delta's log cleanup removed the commit. A
batch Spark replays after a crash is skipped when silver already has its
commit; a quarantine append it repeats is dropped by Delta (same app id and
version).
"""

from __future__ import annotations

import json
import logging
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include.contract import summaries as contract
from include.contract.errors import TransformError
from include.contract.history import read_until
from include.contract.jobs import TransformArgs, quarantine_app_id, silver_app_id
from include.contract.replay import ReplaySelection
from include.contract.silver_stand import (
    COUNT_KEYS,
    SCHEMA_KIND,
    TRUNCATE_KIND,
    BronzePosition,
    SilverCommit,
    SilverStand,
    newest_silver_commit,
    resolve_silver_stand,
    silver_epochs,
    silver_history_covered,
    silver_txn_version,
)
from include.contract.transform_spec import FieldSpec, TransformSpec
from include.readers import spark_checkpoint
from spark_jobs import cdc_rules, quarantine_replay
from spark_jobs.delta_commits import (
    check_fence,
    confirm_newest_commit,
    delta_snapshot,
    fence_of,
    history_rows,
    txn_versions,
)
from spark_jobs.hadoop_files import checkpoint_files
from spark_jobs.job_common import (
    BatchWriter,
    JobStep,
    PhaseTimer,
    failpoint,
    job_main,
    parse_table_properties,
    write_summary,
)
from spark_jobs.table_properties import (
    apply_table_properties,
    check_owner,
    delta_table_sql,
    with_user_metadata,
)
from spark_jobs.value_formats import ValueSchemaError, ValueSchemas, read_registry_file

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

    from spark_jobs.silver_rules import NewFields

log = logging.getLogger("bronze_to_silver")


@dataclass(frozen=True)
class TransformConfig:
    """The job's arguments."""

    pipeline: str
    bronze_path: str
    silver_path: str
    quarantine_path: str
    checkpoint_root: str
    spec: TransformSpec
    run_id: str
    summary_path: str | None = None
    max_files_per_trigger: int | None = None
    #: Delta table properties silver and quarantine carry (``--table-property``: the pipeline's retention).
    table_properties: dict[str, str] = field(default_factory=dict)
    #: The schema registry's URL and credentials (``--registry-file``, a private file), when the spec names one.
    registry_file: str | None = None
    #: The run lock's epoch this run holds (``--lock-epoch``), or ``None`` outside a DAG run.
    lock_epoch: int | None = None
    #: Quarantined records to replay after the batches (``--replay-file``; a ``replay_quarantine`` run).
    replay: ReplaySelection | None = None

    @property
    def fence(self) -> tuple[str, int] | None:
        """``(pipeline, lock epoch)`` checked before each write to silver and quarantine, or ``None``."""
        return fence_of(self.pipeline, self.lock_epoch)


def parse_config(argv: list[str]) -> TransformConfig:
    """Arguments → :class:`TransformConfig`; the spec comes as a JSON file written by the operator."""
    a = TransformArgs.from_args(argv)
    try:
        spec = TransformSpec.from_json(json.loads(Path(a.spec_file).read_text()))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise TransformError(f"{a.spec_file}: cannot read the transform spec: {exc}") from None
    try:
        properties = parse_table_properties(list(a.table_property))
    except ValueError as exc:
        raise TransformError(str(exc)) from None
    replay = None
    if a.replay_file:
        try:
            replay = ReplaySelection.from_json(json.loads(Path(a.replay_file).read_text()))
        except (OSError, ValueError, TypeError) as exc:
            raise TransformError(f"{a.replay_file}: cannot read the replay request: {exc}") from None
    return TransformConfig(a.pipeline, a.bronze_path, a.silver_path, a.quarantine_path, a.checkpoint_root,
                           spec, a.run_id, a.summary_path, a.max_files_per_trigger, properties,
                           a.registry_file, a.lock_epoch, replay)  # fmt: skip


# --------------------------------------------------------------------------- checkpoint plan


@dataclass(frozen=True)
class DeltaCheckpointState:
    """Where a Delta-source checkpoint stands: last committed batch and the batch still pending."""

    last_committed_batch: int | None
    pending_batch: int | None


def read_checkpoint(path: str, files: spark_checkpoint.Files = spark_checkpoint.LOCAL) -> DeltaCheckpointState | None:
    """The state of the checkpoint folder ``path``; ``None`` when no query ever ran there."""
    progress = spark_checkpoint.batch_progress(path, files)
    return None if progress is None else DeltaCheckpointState(*progress)


def batch_end(path: str, batch_id: int, files: spark_checkpoint.Files = spark_checkpoint.LOCAL) -> BronzePosition:
    """The bronze position a batch of the checkpoint at ``path`` reads up to (``offsets/<batch_id>``)."""
    f = spark_checkpoint.child(path, "offsets", str(batch_id))
    try:
        lines = [ln for ln in files.read_bytes(f).decode("utf-8").splitlines() if ln.strip()]
        data = json.loads(lines[-1])
        return BronzePosition(int(data["reservoirVersion"]), int(data["index"]))
    except (OSError, ValueError, KeyError, IndexError) as exc:
        raise TransformError(f"{f}: not a Delta source offset entry: {exc}") from None


@dataclass(frozen=True)
class TransformPlan:
    """The epoch this run writes under and where a new checkpoint starts in bronze."""

    epoch: int
    start: BronzePosition
    rebuilt_reason: str | None = None
    previous_epoch: int | None = None


def plan_transform(last: SilverStand | None, checkpoints: dict[int, DeltaCheckpointState | None],
                   damaged: dict[int, str] | None = None) -> TransformPlan:  # fmt: skip
    """Resume the newest checkpoint if it agrees with silver's last batch commit, else start a new epoch.

    Silver is the source of truth. The checkpoint agrees when it committed that
    batch, or stopped just before committing it (killed between the silver
    commit and Spark's checkpoint commit: Spark replays the batch and the job
    skips it). A newest checkpoint in ``damaged`` is replaced by a new epoch. A new epoch starts at the bronze version after the last one
    silver read whole; a partly read version is read again, and the rows it
    already applied are recognised (``replayed``) instead of applied twice.
    """
    start = BronzePosition(last.bronze_end.version if last else 0)
    latest = max(checkpoints) if checkpoints else None
    restore = last.restore if last is not None else None
    if last is not None and restore is not None:  # restore is None without last
        if restore.bronze_from is None:
            raise TransformError(
                f"silver was restored to {restore.restored_to} (silver version {restore.version}) after the "
                f"transform's batch {last.batch_id} of epoch {last.epoch}, and its log no longer shows where silver "
                "stood in bronze at that version; RESTORE silver by version to one that still holds a transform "
                "batch commit (DESCRIBE HISTORY shows them), or back to the version before this RESTORE"
            )
        epoch = max([-1, *checkpoints, last.epoch]) + 1
        reason = (f"silver was restored to {restore.restored_to} (silver version {restore.version}), undoing batches "
                  f"up to batch {last.batch_id} of epoch {last.epoch}: re-reading bronze from version "
                  f"{restore.bronze_from.version}, where silver stood then")  # fmt: skip
        return TransformPlan(epoch, restore.bronze_from, reason, latest)
    if latest is None:
        if last is None:
            return TransformPlan(0, start)
        reason = "no checkpoint found"
    else:
        state = checkpoints[latest]
        if state is None and latest in (damaged or {}):
            reason = f"checkpoint of epoch {latest} is damaged: {(damaged or {})[latest]}"
        elif state is None:
            reason = f"checkpoint of epoch {latest} was never started or is empty"
        elif last is None:
            if state.last_committed_batch is None:
                return TransformPlan(latest, start)
            reason = f"checkpoint of epoch {latest} committed batches that silver does not hold"
        elif last.epoch != latest:
            reason = f"silver's last batch was written by epoch {last.epoch}, the newest checkpoint is epoch {latest}"
        elif state.last_committed_batch == last.batch_id or (
            state.pending_batch == last.batch_id and state.last_committed_batch in (None, last.batch_id - 1)
        ):
            return TransformPlan(latest, start)
        else:
            reason = (
                f"checkpoint of epoch {latest} stands at batch {state.last_committed_batch} but silver's "
                f"last commit is batch {last.batch_id}"
            )
    epoch = max([-1, *checkpoints, *([last.epoch] if last else [])]) + 1
    return TransformPlan(epoch, start, reason, latest)


# --------------------------------------------------------------------------- summary


@dataclass
class BatchResult:
    """What one micro-batch did, for the run summary."""

    batch_id: int
    commit: SilverCommit | None
    skipped_replay: bool
    duration_s: float
    #: Seconds per step of the writer, in order, for profiling.
    phases: dict[str, float] = field(default_factory=dict)


@dataclass
class TransformSummary:
    """The machine-readable result of one transform run."""

    pipeline: str
    run_id: str
    epoch: int
    checkpoint_rebuilt: dict[str, Any] | None
    start: BronzePosition
    batches: list[BatchResult] = field(default_factory=list)
    fields_added: list[dict[str, Any]] = field(default_factory=list)
    #: Silver rows deleted by source truncates (change events), in commits of their own.
    truncated_rows: int = 0
    #: What a ``replay_quarantine`` run's replay did (:class:`spark_jobs.quarantine_replay.ReplayResult`).
    replay: dict[str, Any] | None = None
    duration_s: float = 0.0
    #: The registry schema values were read with (``{subject, version, id, type}``); ``None`` otherwise.
    value_schema: dict[str, Any] | None = None
    #: Seconds per phase of the run (silver's last commit and plan, silver's schema, the stream).
    phases_s: dict[str, float] = field(default_factory=dict)
    #: Ignored field names the summary names (``transform.limits.field_names``).
    field_names_shown: int = 20
    #: Silver's columns after the run (``{name, type}``, Spark SQL types), for lineage's schema facet.
    silver_columns: list[dict[str, str]] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        done = [b.commit for b in self.batches if b.commit is not None]
        totals = {k: sum(c.counts.get(k, 0) for c in done) for k in COUNT_KEYS}
        qfields: dict[str, int] = {}
        ignored: dict[str, str] = {}
        for c in done:
            for k, v in c.quarantine_fields.items():
                qfields[k] = qfields.get(k, 0) + v
            ignored.update(c.fields_ignored or {})
        # As many names as one batch records (transform.limits.field_names), however many batches ran.
        ignored = dict(sorted(ignored.items())[: self.field_names_shown])
        versions = [c.version for c in done if c.version is not None]
        return {
            "pipeline": self.pipeline,
            "run_id": self.run_id,
            "epoch": self.epoch,
            "checkpoint_rebuilt": self.checkpoint_rebuilt,
            "bronze_start": self.start.to_json(),
            "bronze_end": done[-1].bronze_end.to_json() if done else self.start.to_json(),
            "read": sum(c.read for c in done),
            **totals,
            "quarantine_fields": qfields,
            "fields_added": self.fields_added,
            "fields_ignored": ignored,
            # The most distinct names one batch left out of silver: batches see the same names again.
            "fields_unknown": max((c.fields_unknown or 0 for c in done), default=0),
            "silver_version": max(versions) if versions else None,
            "silver_columns": self.silver_columns,
            "value_schema": self.value_schema,
            **({"truncated_rows": self.truncated_rows} if self.truncated_rows else {}),
            **({"replay": self.replay} if self.replay is not None else {}),
            "batches": [
                {
                    "batch_id": b.batch_id,
                    "skipped_replay": b.skipped_replay,
                    "silver_version": b.commit.version if b.commit else None,
                    "read": b.commit.read if b.commit else 0,
                    "counts": b.commit.counts if b.commit else {},
                    "duration_s": round(b.duration_s, 3),
                    "phases": {k: round(v, 3) for k, v in b.phases.items()},
                }
                for b in self.batches
            ],
            "duration_s": round(self.duration_s, 3),
            "phases_s": {k: round(v, 3) for k, v in self.phases_s.items()},
        }


# --------------------------------------------------------------------------- Delta


def ensure_silver(spark: SparkSession, path: str, spec: TransformSpec) -> list[FieldSpec]:
    """Create silver (declared fields + system columns) if missing; returns its effective fields."""
    from delta.tables import DeltaTable

    from spark_jobs.silver_rules import fields_of_table, silver_ddl

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
    from spark_jobs.silver_rules import JSON_COMMENT

    cols = ", ".join(
        f"`{f.name}` {spark_type(f.type)}" + (f" COMMENT '{JSON_COMMENT}'" if f.type == "json" else "")
        for f in added
    )
    meta = json.dumps({"kind": SCHEMA_KIND, **metadata, "fields_added": [{"name": f.name, "type": f.type} for f in added]})
    # Added columns land after the system columns; MERGE matches columns by name, so order is harmless.
    with_user_metadata(spark, meta, lambda: spark.sql(f"ALTER TABLE {delta_table_sql(path)} ADD COLUMNS ({cols})"))


# --------------------------------------------------------------------------- the batch writer


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
            self._commit(classified, commit, end, batch_id, touches_existing=touches_existing, adds_keys=adds_keys)
            timer.lap("silver_commit")
        finally:
            for frame in reversed(cached):
                frame.unpersist()
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
        a problem naming the cap. Returns the decoded frame and the :class:`~spark_jobs.silver_rules.NewFields`."""
        from pyspark import StorageLevel

        from spark_jobs import silver_rules

        cfg, spec = self.cfg, self.cfg.spec
        value_plan = self.values.plan(bronze) if self.values else None
        decoded = silver_rules.decode(bronze, spec, self.fields, value_plan).persist(StorageLevel.MEMORY_AND_DISK)
        cached.append(decoded)
        run_left = spec.limits.new_columns - len(self.summary.fields_added)
        table_left = spec.limits.silver_columns - len(self.fields)
        budget = min(run_left, table_left)
        new = silver_rules.plan_new_fields(decoded, spec, self.fields, budget=budget)
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
            decoded = silver_rules.refuse_new_fields(decoded, allowed, cap)
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
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from spark_jobs import silver_rules

        cfg = self.cfg
        first_problem = F.when(F.size("_problems") > 0, F.col("_problems")[0]["field"])
        groups = decoded.groupBy(first_problem.alias("field")).agg(F.count("*").alias("n")).collect()
        read = sum(r["n"] for r in groups)
        qfields = {r["field"]: r["n"] for r in groups if r["field"] is not None}
        bad = sum(qfields.values())
        quarantine = silver_rules.quarantine_rows(decoded, cfg.run_id, self.plan.epoch, batch_id)
        if not bad or not _is_delta(self.spark, cfg.quarantine_path):
            return read, qfields, 0, quarantine
        # This batch's own rows, an earlier attempt's append of it, are not "held already": the append below
        # carries the batch's idempotent-write marker, so Delta skips it, and the batch counts them as its own.
        own = (F.col("epoch") == self.plan.epoch) & (F.col("batch_id") == batch_id)
        # A bad record may be in quarantine already: a new epoch re-reads the bronze version the last one
        # stood in (or, after a RESTORE of silver, where silver stood then), and a backfill puts records back
        # into bronze that this transform read before. Only where this batch's bad records are is looked at,
        # so the cost follows the batch, not the quarantine's history.
        spans = quarantine.groupBy("topic", "partition").agg(F.min("offset").alias("lo"),
                                                             F.max("offset").alias("hi")).collect()  # fmt: skip
        where = F.lit(False)
        for r in spans:
            where = where | ((F.col("topic") == r["topic"]) & (F.col("partition") == r["partition"])
                             & F.col("offset").between(r["lo"], r["hi"]))  # fmt: skip
        held = (self.spark.read.format("delta").load(cfg.quarantine_path).where(where & ~own)
                .select("topic", "partition", "offset"))  # fmt: skip
        quarantine = quarantine.join(held, ["topic", "partition", "offset"], "left_anti").persist(
            StorageLevel.MEMORY_AND_DISK)  # fmt: skip
        cached.append(quarantine)
        qfields = {
            r["field"]: r["n"]
            for r in quarantine.groupBy(F.col("fields")[0].alias("field")).agg(F.count("*").alias("n")).collect()
        }
        return read, qfields, bad - sum(qfields.values()), quarantine

    def _classify(self, decoded: DataFrame, cached: list[DataFrame]) -> tuple[DataFrame, dict[str, int], bool, bool]:
        """Classify step: what each valid record does to silver (:func:`spark_jobs.silver_rules.classify`), kept.
        Returns the classified frame, the count per action, and whether it updates or deletes keys silver holds
        and whether it brings keys silver lacks (which decide the commit's shape)."""
        from pyspark import StorageLevel
        from pyspark.sql import functions as F

        from spark_jobs import silver_rules

        valid = silver_rules.valid_records(decoded)
        current = self.spark.read.format("delta").load(self.cfg.silver_path)
        self.truncates = cdc_rules.truncated_at(valid) if self.cfg.spec.cdc else {}
        classified = silver_rules.classify(valid, current, self.cfg.spec, self.fields, self.truncates).persist(
            StorageLevel.MEMORY_AND_DISK)  # fmt: skip
        cached.append(classified)
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

    def _commit(self, classified: DataFrame, commit: SilverCommit, end: BronzePosition, batch_id: int, *,
                touches_existing: bool, adds_keys: bool) -> None:  # fmt: skip
        """Commit step: the batch's rows and where the transform now stands, in one silver commit."""
        from spark_jobs import silver_rules

        cfg, spec = self.cfg, self.cfg.spec
        current = self.spark.read.format("delta").load(cfg.silver_path)
        rows = silver_rules.silver_rows(classified, self.fields, spec, cfg.run_id)
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
            (rows.select(*current.columns).write.format("delta").mode("append")
             .option("userMetadata", meta).option("txnAppId", txn[0]).option("txnVersion", txn[1])
             .save(cfg.silver_path))  # fmt: skip
            return
        from delta.tables import DeltaTable

        # Without a new key the MERGE is matched-only.
        merge = silver_rules.silver_merge(DeltaTable.forPath(self.spark, cfg.silver_path), rows, current.columns,
                                          self.fields, spec, insert=adds_keys)  # fmt: skip
        with_user_metadata(self.spark, meta, merge.execute, txn=txn)

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


def _is_delta(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def read_silver_stand(spark: SparkSession, path: str, pipeline: str) -> SilverStand | None:
    """Where the transform stands: silver's txn actions (its state) with its newest batch commit.

    The state survives Delta's log cleanup; the commit, while the log still
    holds it, adds the batch's detail. ``None``: no silver yet, or no batch.
    """
    from delta.tables import DeltaTable

    if not _is_delta(spark, path):
        return None
    state = silver_epochs(txn_versions(spark, delta_snapshot(spark, path)), pipeline)
    table = DeltaTable.forPath(spark, path)
    history = read_until(lambda limit: history_rows(table, limit), silver_history_covered)
    try:
        return resolve_silver_stand(state, newest_silver_commit(history), history)
    except ValueError as exc:
        raise TransformError(f"{path}: {exc}") from None


# --------------------------------------------------------------------------- run


def run(spark: SparkSession, cfg: TransformConfig) -> TransformSummary:
    """One transform run on an existing session; returns (and writes) its summary."""
    started = time.monotonic()
    check_owner(spark, cfg.silver_path, cfg.pipeline, "silver")
    check_owner(spark, cfg.quarantine_path, cfg.pipeline, "quarantine")
    last = read_silver_stand(spark, cfg.silver_path, cfg.pipeline)
    if last is not None and last.source == "state":
        log.warning("silver's batch commit of epoch %s batch %s is no longer in its log (log cleanup); "
                    "the transform stands at bronze version %s as silver's state records",
                    last.epoch, last.batch_id, last.bronze_end.version)  # fmt: skip
    root = cfg.checkpoint_root
    files = checkpoint_files(spark, root)
    checkpoints, damaged = spark_checkpoint.read_epochs(root, read_checkpoint, files)
    plan = plan_transform(last, checkpoints, damaged)
    rebuilt = None
    if plan.rebuilt_reason:
        rebuilt = {"reason": plan.rebuilt_reason, "previous_epoch": plan.previous_epoch}
        log.warning("starting transform checkpoint epoch %s at bronze version %s: %s",
                    plan.epoch, plan.start.version, plan.rebuilt_reason)  # fmt: skip
    summary = TransformSummary(cfg.pipeline, cfg.run_id, plan.epoch, rebuilt,
                               last.bronze_end if last and not last.restore else plan.start,
                               field_names_shown=cfg.spec.limits.field_names)  # fmt: skip
    phases = summary.phases_s
    phases["plan"] = time.monotonic() - started
    if _is_delta(spark, cfg.bronze_path):
        values = _value_schemas(spark, cfg)
        summary.value_schema = values.recorded() if values else None
        fields = ensure_silver(spark, cfg.silver_path, cfg.spec)
        phases["silver_schema"] = time.monotonic() - started - sum(phases.values())
        checkpoint = spark_checkpoint.epoch_dir(root, plan.epoch)
        writer = SilverBatchWriter(spark, cfg, plan, checkpoint, last, fields, summary, values, files)
        if _read_whole(checkpoint_files(spark, cfg.bronze_path), cfg.bronze_path, plan.start):
            # Silver has read every bronze version (a retried transform, or a replay run with nothing new):
            # Delta's source would fail on the version that does not exist yet instead of reading nothing.
            log.info("bronze holds nothing after version %s; no batch to run", plan.start.version - 1)
            # The stream would replay the checkpoint's pending batch and skip it if silver has it; say so as it
            # would, so the earlier attempt's commits are accounted for (include/contract/continuity.py).
            state = checkpoints.get(plan.epoch)
            writer.skip_replay(state.pending_batch if state is not None else None)
        else:
            _stream(spark, cfg, plan, checkpoint, writer)
        if cfg.replay is not None:
            summary.replay = quarantine_replay.replay(
                spark, pipeline=cfg.pipeline, run_id=cfg.run_id, silver_path=cfg.silver_path,
                quarantine_path=cfg.quarantine_path, spec=cfg.spec, fields=writer.fields, selection=cfg.replay,
                values=values, fence=cfg.fence,
            ).to_json()  # fmt: skip
            phases["replay"] = time.monotonic() - started - sum(phases.values())
        from spark_jobs.silver_rules import silver_columns

        summary.silver_columns = [{"name": n, "type": t} for n, t in silver_columns(writer.fields, cdc=cfg.spec.cdc)]
    for path in (cfg.silver_path, cfg.quarantine_path):
        properties_set = apply_table_properties(spark, path, cfg.table_properties, cfg.fence, owner=cfg.pipeline)
        if properties_set:
            log.info("%s table properties set: %s", path, ", ".join(f"{k}={v}" for k, v in properties_set.items()))
    summary.duration_s = time.monotonic() - started
    phases["stream"] = summary.duration_s - sum(phases.values())
    log.info("transform phases: %s", ", ".join(f"{k} {v:.1f}s" for k, v in phases.items()))
    write_summary(cfg.summary_path, contract.TransformSummary.from_json(summary.to_json()).to_json())
    return summary


def already_in_silver(last: SilverStand | SilverCommit | None, plan: TransformPlan, batch_id: int | None) -> bool:
    """Whether batch ``batch_id`` of the epoch ``plan`` runs is in silver already (``last``: silver's newest
    commit): an earlier attempt committed it and was stopped before the checkpoint committed it."""
    return batch_id is not None and last is not None and last.epoch == plan.epoch and batch_id <= last.batch_id


def _read_whole(files: spark_checkpoint.Files, bronze_path: str, start: BronzePosition) -> bool:
    """Whether bronze ends just before ``start``: the version before it is bronze's newest (its commit file is
    there, ``start``'s is not). A version whose file log cleanup removed says nothing: ``False``."""
    log_dir = f"{bronze_path.rstrip('/')}/_delta_log"
    return (start.index == -1 and start.version > 0 and not files.exists(f"{log_dir}/{start.version:020d}.json")
            and files.exists(f"{log_dir}/{start.version - 1:020d}.json"))  # fmt: skip


def _stream(spark: SparkSession, cfg: TransformConfig, plan: TransformPlan, checkpoint: str,
            writer: SilverBatchWriter) -> None:  # fmt: skip
    """Bronze's versions from ``plan.start`` on, through ``writer``, micro-batch by micro-batch (``AvailableNow``)."""
    # A DELETE or UPDATE of bronze rows (e.g. an erasure request) rewrites files; without this
    # the stream stops for good at such a commit. Its rows were read when they first came.
    reader = (
        spark.readStream.format("delta")
        .option("startingVersion", plan.start.version)
        .option("skipChangeCommits", "true")
    )
    if cfg.max_files_per_trigger:
        reader = reader.option("maxFilesPerTrigger", cfg.max_files_per_trigger)
    writer.drain(reader.load(cfg.bronze_path), job="bronze_to_silver", pipeline=cfg.pipeline, checkpoint=checkpoint,
                 error=TransformError, stage="transform")  # fmt: skip


def _value_schemas(spark: SparkSession, cfg: TransformConfig) -> ValueSchemas | None:
    """The run's value schemas (``avro``, ``json_schema``); a reader schema that cannot be had stops the run."""
    vs = cfg.spec.value_schema
    if cfg.spec.format == "json" or vs is None:
        return None
    try:
        registry = read_registry_file(cfg.registry_file) if vs.registry else None
        return ValueSchemas(spark, cfg.spec, registry=registry)
    except ValueSchemaError as exc:
        raise TransformError(f"pipeline {cfg.pipeline!r}: {exc}") from None


def _describe(summary: TransformSummary) -> str:
    s = summary.to_json()
    return (f"epoch={summary.epoch} read={s['read']} upserted={s['upserted']} deleted={s['deleted']} "
            f"quarantined={s['quarantined']} superseded={s['superseded']} duration={summary.duration_s:.1f}s")  # fmt: skip


#: The job as a step of a run's Spark application (``spark_jobs/run_steps.py``).
STEP = JobStep("bronze_to_silver", parse=parse_config, bad_argument=TransformError,
               run=run, describe=_describe)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    """Entry point: args -> session -> run -> summary line; exit 2 on bad arguments."""
    return job_main(STEP, argv)


if __name__ == "__main__":
    sys.exit(main())
