"""Quarantine replay: the transform's rules again over quarantined records, after the cause is fixed.

Run by the transform job after its batches when the run's request is ``replay_quarantine``
(``--replay-file``, a :class:`~include.contract.replay.ReplaySelection`). Quarantine keeps each record's
Kafka coordinates and raw key and value bytes under bronze's column names, so the selected rows go
through the very rules a bronze batch does (:func:`spark_jobs.silver_rules.decode`, :func:`spark_jobs.silver_table.classify`,
``silver_rows``) with the pipeline file as it is now:

1. the records that now pass change silver in one MERGE, under the same ordering rules as any record
   (an old event never overwrites newer state; one silver already holds is recognised);
2. then quarantine records what became of each selected row (``replay_outcome``, ``replay_run_id``,
   ``replayed_at``; a row that fails again gets its new ``reason`` and ``fields``), in one MERGE.

Neither commit is a transform batch (their ``userMetadata`` kind is ``kde-replay``), so where the
transform stands in bronze is untouched. A replay that dies between the two commits is finished by the
next one: its records are taken again, and those the first already applied are recognised as
``replayed`` by Kafka coordinates and marked ``applied`` without a second change to silver.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from include.contract.errors import TransformError
from include.contract.replay import REPLAY_COLUMNS, REPLAY_KIND, ReplaySelection
from include.contract.transform_spec import FieldSpec, TransformSpec
from spark_jobs.delta_commits import Fence, check_fence
from spark_jobs.job_common import failpoint
from spark_jobs.table_properties import delta_table_sql, with_user_metadata

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_jobs.formats.schemas import ValueSchemas

log = logging.getLogger("kde.quarantine_replay")

#: ``replay_outcome`` by the action classify gave a record that passed.
_OUTCOME = {"insert": "applied", "update": "applied", "delete": "applied", "replayed": "applied",
            "superseded": "superseded", "skipped": "skipped"}  # fmt: skip


@dataclass
class ReplayResult:
    """What one replay did, for the transform's summary."""

    selected: int = 0
    outcomes: dict[str, int] = field(default_factory=dict)
    silver_version: int | None = None
    quarantine_version: int | None = None
    selection: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {"selected": self.selected, "outcomes": self.outcomes, "silver_version": self.silver_version,
                "quarantine_version": self.quarantine_version, "selection": self.selection}  # fmt: skip


def _add_replay_columns(spark: SparkSession, path: str, fence: Fence, metadata: dict[str, str]) -> None:
    """Quarantine's replay columns, added once (a schema change commit that says so)."""
    have = {f.name for f in spark.read.format("delta").load(path).schema.fields}
    missing = [(n, t) for n, t in REPLAY_COLUMNS if n not in have]
    if not missing:
        return
    check_fence(spark, path, fence)
    cols = ", ".join(f"`{n}` {t}" for n, t in missing)
    meta = json.dumps({"kind": REPLAY_KIND, **metadata, "columns_added": [n for n, _ in missing]})
    with_user_metadata(spark, meta, lambda: spark.sql(f"ALTER TABLE {delta_table_sql(path)} ADD COLUMNS ({cols})"))


def replay(spark: SparkSession, *, pipeline: str, run_id: str, silver_path: str, quarantine_path: str,
           spec: TransformSpec, fields: Sequence[FieldSpec], selection: ReplaySelection,
           values: ValueSchemas | None = None, fence: Fence = None) -> ReplayResult:  # fmt: skip
    """Replay the quarantined records ``selection`` takes; returns what became of them.

    ``fields``: silver's effective fields; ``values``: the run's
    :class:`~spark_jobs.formats.schemas.ValueSchemas` for registry formats.
    """
    from delta.tables import DeltaTable
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    from spark_jobs import cdc_rules, silver_rules, silver_table

    result = ReplayResult(selection=selection.to_json())
    if not DeltaTable.isDeltaTable(spark, quarantine_path):
        return result
    metadata = {"pipeline": pipeline, "run_id": run_id}
    _add_replay_columns(spark, quarantine_path, fence, metadata)
    quarantine = DeltaTable.forPath(spark, quarantine_path)
    start_version = quarantine.history(1).collect()[0]["version"]
    selected = (
        spark.read.format("delta").option("versionAsOf", start_version).load(quarantine_path)
        .where(selection.sql())
        .select("topic", "partition", "offset", "timestamp", "key", "value")
        # A record quarantined twice (a backfill put it back into bronze before the transform knew it held
        # it) is one record: two source rows for it would make the quarantine MERGE fail.
        .dropDuplicates(["topic", "partition", "offset"])
        .persist(StorageLevel.MEMORY_AND_DISK)
    )  # fmt: skip
    try:
        result.selected = selected.count()
        if not result.selected:
            return result
        plan = values.plan(selected) if values is not None else None
        decoded = silver_rules.decode(selected, spec, fields, plan).persist(StorageLevel.MEMORY_AND_DISK)
        valid = silver_rules.valid_records(decoded)
        current = spark.read.format("delta").load(silver_path)
        # A truncate replayed long after it happened would delete rows written since: replayed change
        # events are compared by position only.
        classified = silver_table.classify(valid, current, spec, fields, {}).persist(StorageLevel.MEMORY_AND_DISK)
        actions = {r["_action"]: r["n"] for r in classified.groupBy("_action").agg(F.count("*").alias("n")).collect()}
        if actions.pop(cdc_rules.UNKNOWN_VALUE, 0):
            # A change whose unsent value nothing holds still fails, with that reason.
            decoded = cdc_rules.with_unknown_values(decoded, classified).persist(StorageLevel.MEMORY_AND_DISK)
            classified = classified.where(F.col("_action") != cdc_rules.UNKNOWN_VALUE)
        rows = silver_table.silver_rows(classified, fields, spec, run_id)
        changes = sum(actions.get(a, 0) for a in ("insert", "update", "delete"))
        outcome_counts: dict[str, int] = {}
        for action, n in actions.items():
            outcome_counts[_OUTCOME[action]] = outcome_counts.get(_OUTCOME[action], 0) + n
        failing = decoded.where(F.size("_problems") > 0).count()
        if failing:
            outcome_counts["still_failing"] = failing
        result.outcomes = outcome_counts
        meta = json.dumps({"kind": REPLAY_KIND, **metadata, "table": "silver", "quarantine_version": start_version,
                           "actions": actions, "selection": selection.to_json()})  # fmt: skip
        if changes:
            check_fence(spark, silver_path, fence)
            target = DeltaTable.forPath(spark, silver_path)
            merge = silver_table.silver_merge(target, rows, current.columns, fields, spec)
            # The quarantine version the replay read identifies it: a replay that dies after this
            # commit and runs again reads the same version and skips the silver commit.
            with_user_metadata(spark, meta, merge.execute, txn=(f"kde-replay.{pipeline}", start_version))
            result.silver_version = target.history(1).collect()[0]["version"]
        failpoint("replay-silver", 0)
        marks = (
            classified.select("_kafka_topic", "_kafka_partition", "_kafka_offset", "_action")
            .withColumn("_outcome", F.create_map(*[F.lit(x) for kv in _OUTCOME.items() for x in kv])[F.col("_action")])
            .select(F.col("_kafka_topic").alias("topic"), F.col("_kafka_partition").alias("partition"),
                    F.col("_kafka_offset").alias("offset"), "_outcome",
                    F.lit(None).cast("string").alias("_reason"), F.lit(None).cast("array<string>").alias("_fields"))
            .unionByName(silver_rules.quarantine_rows(decoded, run_id, 0, 0).select(
                "topic", "partition", "offset", F.lit("still_failing").alias("_outcome"),
                F.col("reason").alias("_reason"), F.col("fields").alias("_fields")))
        )  # fmt: skip
        check_fence(spark, quarantine_path, fence)
        q_meta = json.dumps({"kind": REPLAY_KIND, **metadata, "table": "quarantine",
                             "quarantine_version": start_version, "outcomes": outcome_counts})  # fmt: skip
        merge = (
            quarantine.alias("q")
            .merge(marks.alias("m"), "q.topic = m.topic AND q.partition = m.partition AND q.offset = m.offset")
            .whenMatchedUpdate(set={
                "replay_outcome": "m._outcome",
                "replay_run_id": F.lit(run_id),
                "replayed_at": F.current_timestamp(),
                "reason": F.coalesce(F.col("m._reason"), F.col("q.reason")),
                "fields": F.coalesce(F.col("m._fields"), F.col("q.fields")),
            })
        )  # fmt: skip
        with_user_metadata(spark, q_meta, merge.execute)
        result.quarantine_version = quarantine.history(1).collect()[0]["version"]
        marked = sum(outcome_counts.values())
        if marked != result.selected:
            raise TransformError(
                f"{quarantine_path}: the replay selected {result.selected} records but accounted for {marked} "
                f"({outcome_counts}); quarantine version {result.quarantine_version} holds the marks; report "
                "this as a bug"
            )
        log.warning("quarantine replay: %s selected (%s): %s", result.selected, selection.describe(), outcome_counts)
        return result
    finally:
        selected.unpersist()

