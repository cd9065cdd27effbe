"""Where a transform run starts: its arguments, where silver stands, its checkpoint, and the epoch it writes under.

Silver is the source of truth: :func:`read_silver_stand` reads where the
transform stands from silver's state (its txn action) and newest batch commit;
:func:`plan_transform` resumes the newest checkpoint if it agrees, else starts a
new epoch there.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from include.contract.errors import TransformError, ValueSchemaError
from include.contract.history import read_until
from include.contract.replay import ReplaySelection
from include.contract.routes import RouteSpec, Routing
from include.contract.silver_stand import (
    BronzePosition,
    SilverCommit,
    SilverStand,
    newest_silver_commit,
    resolve_silver_stand,
    silver_epochs,
    silver_history_covered,
)
from include.contract.transform_spec import TransformSpec
from include.readers import spark_checkpoint
from spark_jobs.delta_commits import (
    LogHistory,
    delta_snapshot,
    fence_of,
    txn_versions,
)
from spark_jobs.formats.schemas import ValueSchemas, read_registry_file
from spark_jobs.hadoop_files import checkpoint_files
from spark_jobs.job_common import BatchWriter

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

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
    #: A routed transform's routes (the spec file holds them); ``spec`` is then the first route's, and each
    #: route's writer runs with its own configuration (:meth:`for_route`).
    routing: Routing | None = None

    def for_route(self, route: RouteSpec) -> TransformConfig:
        """The configuration route ``route``'s writer runs with: its rules and its tables."""
        return replace(self, spec=route.transform, silver_path=route.silver_path,
                       quarantine_path=route.quarantine_path, routing=None)  # fmt: skip

    @property
    def fence(self) -> tuple[str, int] | None:
        """``(pipeline, lock epoch)`` checked before each write to silver and quarantine, or ``None``."""
        return fence_of(self.pipeline, self.lock_epoch)


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


def plan_routed(lasts: Mapping[str, SilverStand | None], checkpoints: dict[int, DeltaCheckpointState | None],
                damaged: dict[int, str] | None = None) -> dict[str, TransformPlan]:  # fmt: skip
    """Each route's plan for a routed transform's one stream (``lasts``: where each route's silver stands).

    The stream resumes its checkpoint only when every route agrees with it
    (:func:`plan_transform` per route); a route resumed mid-batch (an earlier
    attempt committed some routes' batch and died) replays that batch, and the
    routes that hold it skip it. Otherwise every route moves to one new epoch,
    starting at the least of their starts: a route added later (no silver yet)
    makes the stream read bronze from its start, a RESTORE of one route's silver
    from where that route stood then, and the routes that stood further on
    recognise what they re-read (``replayed``) instead of applying it twice.
    """
    plans = {name: plan_transform(last, checkpoints, damaged) for name, last in lasts.items()}
    first = next(iter(plans.values()))
    if all(p.rebuilt_reason is None and p.epoch == first.epoch for p in plans.values()):
        return plans
    epoch = max(p.epoch for p in plans.values())
    start = min((p.start for p in plans.values()), key=lambda s: (s.version, s.index))
    reasons = "; ".join(f"route {name}: {p.rebuilt_reason}" for name, p in plans.items() if p.rebuilt_reason)
    reason = reasons or "the routes stood in different checkpoint epochs"
    if any(p.start != start for p in plans.values()):
        reason += (f"; every route re-reads bronze from version {start.version}, the least of where they stood, "
                   "and recognises what it holds already")  # fmt: skip
    latest = max(checkpoints) if checkpoints else None
    return {name: TransformPlan(epoch, start, reason, latest) for name in plans}


def already_in_silver(last: SilverStand | SilverCommit | None, plan: TransformPlan, batch_id: int | None) -> bool:
    """Whether batch ``batch_id`` of the epoch ``plan`` runs is in silver already (``last``: silver's newest
    commit): an earlier attempt committed it and was stopped before the checkpoint committed it."""
    return batch_id is not None and last is not None and last.epoch == plan.epoch and batch_id <= last.batch_id


def read_whole(files: spark_checkpoint.Files, bronze_path: str, start: BronzePosition) -> bool:
    """Whether bronze ends just before ``start``: the version before it is bronze's newest (its commit file is
    there, ``start``'s is not). A version whose file log cleanup removed says nothing: ``False``."""
    log_dir = f"{bronze_path.rstrip('/')}/_delta_log"
    return (start.index == -1 and start.version > 0 and not files.exists(f"{log_dir}/{start.version:020d}.json")
            and files.exists(f"{log_dir}/{start.version - 1:020d}.json"))  # fmt: skip


def is_delta(spark: SparkSession, path: str) -> bool:
    from delta.tables import DeltaTable

    return DeltaTable.isDeltaTable(spark, path)


def read_silver_stand(spark: SparkSession, path: str, pipeline: str) -> SilverStand | None:
    """Where the transform stands: silver's txn actions (its state) with its newest batch commit.

    The state survives Delta's log cleanup; the commit, while the log still
    holds it, adds the batch's detail. ``None``: no silver yet, or no batch.
    """
    if not is_delta(spark, path):
        return None
    snapshot = delta_snapshot(spark, path)
    state = silver_epochs(txn_versions(spark, snapshot), pipeline)
    log = LogHistory(spark, path, snapshot)
    history = read_until(log.rows, silver_history_covered)
    try:
        return resolve_silver_stand(state, newest_silver_commit(history), history)
    except ValueError as exc:
        raise TransformError(f"{path}: {exc}") from None


def drain_bronze(spark: SparkSession, cfg: TransformConfig, plan: TransformPlan, checkpoint: str,
                 pending: DeltaCheckpointState | None, writer: BatchWriter,
                 skip_replay: Callable[[int | None], object]) -> None:  # fmt: skip
    """Bronze's versions from ``plan.start`` on through ``writer`` (:func:`stream_bronze`), or, when there are
    none, the checkpoint's pending batch (``pending``: the state of ``plan``'s epoch) through ``skip_replay``."""
    if read_whole(checkpoint_files(spark, cfg.bronze_path), cfg.bronze_path, plan.start):
        # Silver has read every bronze version (a retried transform, or a replay run with nothing new):
        # Delta's source would fail on the version that does not exist yet instead of reading nothing.
        log.info("bronze holds nothing after version %s; no batch to run", plan.start.version - 1)
        # The stream would replay the checkpoint's pending batch and skip it if silver has it; say so as it
        # would, so the earlier attempt's commits are accounted for (include/contract/continuity.py).
        skip_replay(pending.pending_batch if pending is not None else None)
    else:
        stream_bronze(spark, cfg, plan, checkpoint, writer)


def stream_bronze(spark: SparkSession, cfg: TransformConfig, plan: TransformPlan, checkpoint: str,
                  writer: BatchWriter) -> None:  # fmt: skip
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


def value_schemas(spark: SparkSession, cfg: TransformConfig) -> ValueSchemas | None:
    """The run's value schemas (formats that need ``transform.value_schema``; the loader refuses one for any other
    format); a reader schema that cannot be had stops the run."""
    vs = cfg.spec.value_schema
    if vs is None:
        return None
    try:
        registry = read_registry_file(cfg.registry_file) if vs.registry else None
        return ValueSchemas(spark, cfg.spec, registry=registry)
    except ValueSchemaError as exc:
        raise TransformError(f"pipeline {cfg.pipeline!r}: {exc}") from None
