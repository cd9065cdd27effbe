"""What a batch's valid records do to silver: classify each, the rows to write, the MERGE, and silver's columns.

No I/O here: each function takes DataFrames (or silver's ``DeltaTable``) and the
pipeline's :class:`~include.contract.transform_spec.TransformSpec`. Change events
are classified by :mod:`spark_jobs.cdc_rules` instead, and add their ``_cdc_*``
columns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from include.contract.transform_spec import FieldSpec, TransformSpec, spark_type
from spark_jobs import cdc_rules, silver_state

if TYPE_CHECKING:
    from delta.tables import DeltaMergeBuilder, DeltaTable
    from pyspark.sql import Column, DataFrame


#: Silver's own columns after the record's fields.
SILVER_SYSTEM_COLUMNS = (
    ("_kafka_topic", "string"),
    ("_kafka_partition", "int"),
    ("_kafka_offset", "bigint"),
    ("_kafka_timestamp", "timestamp"),
    ("_deleted", "boolean"),
    ("_run_id", "string"),
    ("_updated_at", "timestamp"),
)
ACTIONS = ("insert", "update", "delete", "superseded", "replayed", "skipped")


def classify(valid: DataFrame, current: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec] | None = None,
             truncates: dict[str, int] | None = None) -> DataFrame:  # fmt: skip
    """Decide what each valid record does to silver: a ``_action`` from :data:`ACTIONS`.

    ``valid`` are decoded records without problems (tombstones included when
    the policy deletes); ``current`` is silver's state for the keys (the
    table, or an empty frame of its schema). Per key the newest record wins —
    newest by the ordering field, then Kafka offset, then partition — and it
    changes silver only if it is newer than silver's row, so a late or
    replayed record never overwrites newer state. A tombstone takes the
    ordering value of the newest state before it (in the batch or in silver),
    so an older record arriving after a delete does not bring the key back.
    Adds ``_ordering`` (the effective ordering value) for the silver row and
    ``_present`` (silver holds a row for the key).

    Change events (``transform.envelope``) are classified by :func:`spark_jobs.cdc_rules.classify`
    instead, which needs the effective ``fields`` for the values a change did not send, and the batch's
    ``truncates``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if spec.cdc:
        return cdc_rules.classify(valid, current, spec, fields or (), truncates)
    keys = list(spec.key)
    # Set whenever the envelope is not (the pipeline loader requires one, include/config/transform.py); the
    # spec comes from the job's JSON file.
    ordering = cast(str, spec.ordering)
    df = silver_state.with_silver_state(valid, current, keys, {ordering: "_t_ord"})
    earlier = (
        Window.partitionBy(*keys)
        .orderBy("_kafka_offset", "_kafka_partition")
        .rowsBetween(Window.unboundedPreceding, Window.currentRow)
    )
    seen = F.greatest(F.max(F.col(ordering)).over(earlier), F.col("_t_ord"))
    df = df.withColumn("_ordering", F.when(F.col("_tombstone"), seen).otherwise(F.col(ordering)))
    newest_first = Window.partitionBy(*keys).orderBy(
        F.col("_ordering").desc_nulls_last(), F.col("_kafka_offset").desc(), F.col("_kafka_partition").desc()
    )
    df = df.withColumn("_winner", F.row_number().over(newest_first) == 1)
    present = silver_state.held()
    ours, theirs = F.col("_ordering"), F.col("_t_ord")
    later_in_log = silver_state.later_in_log()
    newer = (
        F.when(~present, True)
        .when(ours.isNull() & theirs.isNull(), later_in_log)
        .when(ours.isNull(), False)
        .when(theirs.isNull(), True)
        .when(ours != theirs, ours > theirs)
        .otherwise(later_in_log)
    )
    action = (
        F.when(~F.col("_winner"), "superseded")
        .when(silver_state.same_record(), "replayed")
        .when(~newer, "superseded")
        .when(F.col("_tombstone"), "delete")
        .when(~present, "insert")
        .otherwise("update")
    )
    return (
        df.withColumn("_action", action)
        .withColumn("_present", present)
        .drop("_t_ord", *silver_state.STATE_COLUMNS, "_winner")
    )


def silver_rows(classified: DataFrame, fields: Sequence[FieldSpec], spec: TransformSpec, run_id: str) -> DataFrame:
    """The rows a batch MERGEs into silver (inserts, updates, deletes), in silver's column order.

    A deleted key keeps a row with ``_deleted = true``, its key, and the
    ordering value it was deleted at; every other field is null.

    Change events add silver's ``_cdc_*`` columns (the source position the row was written at) and, for
    each text or JSON field, its ``_ph_<field>`` flag: the change did not send the value, and the MERGE
    keeps silver's (:func:`silver_merge`).
    """
    from pyspark.sql import functions as F

    keys = set(spec.key)
    cols = []
    for f in fields:
        if f.name in keys:
            cols.append(F.col(f.name))
        elif f.name == spec.ordering:
            cols.append(F.col("_ordering").cast(spark_type(f.type)).alias(f.name))
        else:
            cols.append(F.when(~F.col("_tombstone"), F.col(f.name)).alias(f.name))
    cdc = []
    if spec.cdc:
        cdc = [F.col(name) for name, _ in cdc_rules.CDC_COLUMNS]
        cdc += [(F.col(cdc_rules.placeholder_column(f)) & ~F.col("_tombstone")).alias(cdc_rules.placeholder_column(f))
                for f in cdc_rules.placeholder_fields(fields)]  # fmt: skip
    return classified.where(F.col("_action").isin("insert", "update", "delete")).select(
        *cols,
        "_kafka_topic",
        "_kafka_partition",
        "_kafka_offset",
        "_kafka_timestamp",
        F.col("_tombstone").alias("_deleted"),
        F.lit(run_id).alias("_run_id"),
        F.current_timestamp().alias("_updated_at"),
        *cdc,
    )


def silver_merge(silver: DeltaTable, rows: DataFrame, columns: Sequence[str], fields: Sequence[FieldSpec],
                 spec: TransformSpec, *, insert: bool = True) -> DeltaMergeBuilder:  # fmt: skip
    """The MERGE of ``rows`` (:func:`silver_rows`) into ``silver`` (a ``DeltaTable`` of those ``columns``) on
    the key: a matched row takes the batch's values, an unmatched one is inserted when ``insert`` (without,
    Delta runs the MERGE with an inner join instead of an outer join over the files it rewrites).

    For change events a value the change did not send (``s._ph_<field>``) keeps silver's own.
    """
    on = " AND ".join(f"t.`{k}` = s.`{k}`" for k in spec.key)
    merge = silver.alias("t").merge(rows.alias("s"), on)
    if not spec.cdc:
        return merge.whenMatchedUpdateAll().whenNotMatchedInsertAll() if insert else merge.whenMatchedUpdateAll()
    flagged = {f.name: cdc_rules.placeholder_column(f) for f in cdc_rules.placeholder_fields(fields)}
    values: dict[str, str | Column] = {f"`{c}`": f"s.`{c}`" for c in columns}
    kept = {f"`{c}`": f"CASE WHEN s.`{flag}` THEN t.`{c}` ELSE s.`{c}` END" for c, flag in flagged.items()}
    merge = merge.whenMatchedUpdate(set={**values, **kept})
    return merge.whenNotMatchedInsert(values=values) if insert else merge


def silver_columns(fields: Sequence[FieldSpec], *, cdc: bool = False) -> list[tuple[str, str]]:
    """Silver's columns, ``(name, Spark SQL type)``: the fields, then :data:`SILVER_SYSTEM_COLUMNS` (and, for
    change events, the source position's :data:`~spark_jobs.cdc_rules.CDC_COLUMNS`)."""
    cols = [(f.name, spark_type(f.type)) for f in fields] + list(SILVER_SYSTEM_COLUMNS)
    if cdc:
        cols += list(cdc_rules.CDC_COLUMNS)
    return cols


def silver_ddl(fields: Sequence[FieldSpec], *, cdc: bool = False) -> str:
    """Silver's schema as a DDL string (:func:`silver_columns`)."""
    return ", ".join(f"`{n}` {t}" for n, t in silver_columns(fields, cdc=cdc))


#: Column comment that marks an added column holding JSON text (type ``json``, stored as string).
JSON_COMMENT = "kde:json"


def fields_of_table(columns: Sequence[tuple[str, str, str | None]], spec: TransformSpec) -> list[FieldSpec]:
    """The effective fields of a silver table: declared fields, then columns a run added.

    ``columns`` are ``(name, spark simple type, comment)`` of the table's
    schema. An added column's type is read back from the table (``bigint`` →
    ``long``; a ``string`` commented :data:`JSON_COMMENT` → ``json``).
    """
    declared = {f.name for f in spec.fields}
    added = []
    for name, type_, comment in columns:
        if name.startswith("_") or name in declared:
            continue
        t = {"bigint": "long", "integer": "int"}.get(type_, type_)
        if t == "string" and comment == JSON_COMMENT:
            t = "json"
        added.append(FieldSpec(name=name, type=t))
    return [*spec.fields, *added]
