"""Pure DataFrame rules for change events (``transform.envelope: debezium``): unwrap, position, classify.

A Debezium change event is an envelope around a row: ``op`` (``c`` create, ``r`` snapshot read, ``u``
update, ``d`` delete, ``t`` truncate, ``m`` message), ``before`` and ``after`` (the row's images), and
``source`` (where in the database's log the change is). With Connect's JSON schemas on, the envelope is
the ``payload`` beside a ``schema``. :func:`with_envelope` unwraps it during decode, so that the field
rules of :mod:`spark_jobs.silver_rules` read the row's columns exactly as they read a plain record.

**Order.** A key's changes reach Kafka in the database's commit order, in one partition, so within a batch
the last change of a key by Kafka offset is its newest. Across batches and runs the source's own position
decides, kept in silver (``_cdc_commit_lsn``, ``_cdc_lsn``): PostgreSQL's ``source.sequence`` is the pair
[LSN of the last commit before this change, LSN of this change], which grows in emission order, while the
change's LSN alone interleaves across transactions. A change at a position silver already holds is a
replay (a connector that restarted sends again what it had not recorded); one below it is older and never
overwrites newer state. A snapshot read reflects the committed table, so between it and any other change
Kafka order decides. Event time (``ts_ms``) is never used.

**Row images.** With PostgreSQL's default replica identity an update's ``before`` is null and a delete's
holds the key columns only (and defaults for NOT NULL columns), so a delete is judged on its key columns.
An unchanged TOASTed column arrives as :data:`~include.contract.transform_spec.DEBEZIUM_UNAVAILABLE`: such a
value is flagged (``_ph_<field>``), never checked or written, and silver keeps the value it holds. A
primary-key change is a delete of the old key and a create of the new one, whose unchanged TOASTed
values are placeholders too: the create carries the old key (header ``__debezium.oldkey``), and the value
comes from the old key's row as it stood just before the change, in the batch or in silver
(:func:`carry_over`). A value that cannot be known that way is never written as null: the change goes to
quarantine naming the column (action :data:`UNKNOWN_VALUE`).

Not row changes, skipped with a count: the tombstone that follows a delete, logical-decoding messages,
transaction markers, heartbeats and schema-change events. A truncate deletes silver's rows of its topic
written before it, in a commit of its own (``spark_jobs/bronze_to_silver.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING

from include.contract.transform_spec import CDC_SOURCES, FieldSpec, TransformSpec
from spark_jobs import silver_state

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

#: Silver's columns for the source's position and the change that wrote the row.
CDC_COLUMNS = (
    ("_cdc_op", "string"),
    ("_cdc_commit_lsn", "bigint"),
    ("_cdc_lsn", "bigint"),
    ("_cdc_tx_id", "bigint"),
    ("_cdc_source_ts", "timestamp"),
)
#: Row operations: they carry a row image and change silver.
ROW_OPS = ("c", "r", "u", "d")
#: The header Debezium puts on the create of a row whose primary key changed: the old key, as the
#: worker's header converter wrote it (Connect's default writes the key struct as a JSON object).
OLD_KEY_HEADER = "__debezium.oldkey"
#: The action of a change whose unsent value nothing in the batch or silver holds: it goes to quarantine.
UNKNOWN_VALUE = "unknown value"
#: What a record the transform skips is (``_skip``), as its count and the run's summary name it.
SKIP_KINDS = ("tombstone after a delete", "logical decoding message", "transaction marker", "heartbeat",
              "schema change")  # fmt: skip


def placeholder_fields(fields: Sequence[FieldSpec]) -> list[FieldSpec]:
    """Fields that can hold Debezium's unavailable-value placeholder: text and JSON columns."""
    return [f for f in fields if f.type in ("string", "json")]


def placeholder_column(f: FieldSpec) -> str:
    """The flag column telling that ``f``'s value was not sent (an unchanged TOASTed value)."""
    return f"_ph_{f.name}"


def with_envelope(df: DataFrame, spec: TransformSpec) -> DataFrame:
    """Decode step 1b: ``df`` (with ``_v``, the parsed value, and ``_text``) unwrapped.

    Adds ``_cdc_*`` (:data:`CDC_COLUMNS`, ``_cdc_snapshot``), ``_env_problem`` (what is wrong with the
    envelope, naming the field; null when fine) and ``_skip`` (which :data:`SKIP_KINDS` a record that is not
    a row change is; null for a row change). ``_v`` and ``_text`` become the row (``after``, or ``before``
    for a delete), and ``_tombstone`` is true for a delete as for a null value.
    """
    from pyspark.sql import functions as F

    v = F.col("_v")
    # Valid JSON text is an object exactly when it opens with "{".
    df = df.select("*", (v.isNotNull() & F.ltrim(F.col("_text"), F.lit(" \t\n\r")).startswith("{"))
                   .alias("_value_object"))  # fmt: skip
    key = F.try_parse_json(F.col("_kafka_key").try_cast("string"))
    df = df.select("*", _unwrapped(v).alias("_env"), _unwrapped(key).alias("_key_v"))
    env = F.col("_env")

    def text(path: str) -> Column:
        return F.try_variant_get(env, path, "string")

    def number(path: str) -> Column:
        return F.try_variant_get(env, path, "bigint")

    # source.sequence is text holding a JSON array of two LSNs as text, parsed once.
    df = df.select("*", text("$.source.sequence").alias("_sequence"))
    sequence = F.try_parse_json(F.col("_sequence"))
    df = df.select("*", *(F.variant_get(sequence, f"$[{i}]", "variant").alias(f"_seq{i}") for i in (0, 1)))
    seq = [(F.col(f"_seq{i}"), F.try_variant_get(F.col(f"_seq{i}"), "$", "bigint")) for i in (0, 1)]
    df = df.select(
        "*",
        text("$.op").alias("_cdc_op"),
        text("$.source.connector").alias("_connector"),
        seq[0][1].alias("_cdc_commit_lsn"),
        F.coalesce(seq[1][1], number("$.source.lsn")).alias("_cdc_lsn"),
        # Either element may be null; one that is there must be a number.
        reduce(lambda a, b: a | b, (lsn.isNull() & ~F.coalesce(F.is_variant_null(raw), F.lit(False))
                                    for raw, lsn in seq))
        .alias("_bad_sequence"),
        number("$.source.txId").alias("_cdc_tx_id"),
        F.timestamp_millis(number("$.source.ts_ms")).alias("_cdc_source_ts"),
        text("$.source.snapshot").alias("_cdc_snapshot"),
        F.variant_get(env, "$.after", "variant").alias("_after"),
        F.variant_get(env, "$.before", "variant").alias("_before"),
        F.variant_get(env, "$.status", "string").alias("_status"),
    )
    op, after, before = F.col("_cdc_op"), F.col("_after"), F.col("_before")
    null_value = F.col("_kafka_value").isNull()
    is_object = F.col("_value_object")
    skip = (
        F.when(null_value, F.lit(SKIP_KINDS[0]))
        .when(~is_object, F.lit(None))
        .when(op == "m", F.lit(SKIP_KINDS[1]))
        .when(op.isNotNull(), F.lit(None))
        .when(F.col("_status").isin("BEGIN", "END"), F.lit(SKIP_KINDS[2]))
        .when(
            F.variant_get(env, "$.ddl", "variant").isNotNull()
            | F.variant_get(env, "$.tableChanges", "variant").isNotNull(),
            F.lit(SKIP_KINDS[4]),
        )
        .when(
            F.variant_get(env, "$.ts_ms", "variant").isNotNull()
            & F.variant_get(env, "$.source", "variant").isNull()
            & F.variant_get(env, "$.after", "variant").isNull(),
            F.lit(SKIP_KINDS[3]),
        )
    )
    df = df.select("*", skip.alias("_skip"))
    row = F.when(op == "d", before).when(op.isin("c", "r", "u"), after)
    shown = F.substring(F.to_json(env), 1, 120)
    expected_source = (spec.source,) if spec.source else CDC_SOURCES
    source_named = f"'{spec.source}' (transform.source)" if spec.source else f"one of {', '.join(CDC_SOURCES)}"
    problem = (
        F.when(~is_object | F.col("_skip").isNotNull(), F.lit(None))
        .when(
            op.isNull(),
            F.concat(F.lit("value: expected a Debezium change event (an object with op, before, after and "
                           "source), got "), shown),
        )
        .when(
            ~F.coalesce(F.col("_connector"), F.lit("")).isin(*expected_source),
            F.concat(F.lit(f"value: source.connector: expected {source_named}, got "),
                     F.coalesce(F.col("_connector"), F.lit("nothing"))),
        )
        .when(
            ~op.isin(*ROW_OPS, "t"),
            F.concat(F.lit("value: op: expected one of c, r, u, d, t (or m, skipped), got "),
                     F.to_json(F.variant_get(env, "$.op", "variant"))),
        )
        .when(
            F.col("_sequence").isNotNull() & F.col("_bad_sequence"),
            F.concat(F.lit("value: source.sequence: expected a JSON array of two decimal LSNs as text, got "),
                     F.substring(F.col("_sequence"), 1, 80)),
        )
        .when((op == "t") & F.col("_cdc_lsn").isNull(),
              F.lit("value: source.lsn: a truncate must carry its position (source.lsn), got nothing"))
        .when(op == "t", F.lit(None))
        .when(
            (op == "d") & (before.isNull() | ~F.startswith(F.to_json(before), F.lit("{"))),
            F.lit("value: before: a delete (op d) must carry the deleted row's key columns, got null; "
                  "the table's replica identity sends none"),
        )
        .when(
            (op != "d") & (after.isNull() | ~F.startswith(F.to_json(after), F.lit("{"))),
            F.concat(F.lit("value: after: a change with op "), op,
                     F.lit(" must carry the row after the change (an object), got null")),
        )
    )  # fmt: skip
    row_variant = F.when(problem.isNull(), row)
    return df.select(
        *(c for c in df.columns if c not in ("_v", "_text", "_tombstone", "_env", "_after", "_before", "_status",
                                             "_connector", "_sequence", "_seq0", "_seq1", "_bad_sequence")),
        v.alias("_value_v"),
        null_value.alias("_null_value"),
        F.col("_key_v").isNotNull().alias("_key_json"),
        problem.alias("_env_problem"),
        (null_value | F.coalesce(op == "d", F.lit(False))).alias("_tombstone"),
        row_variant.alias("_v"),
        F.when(row_variant.isNotNull(), F.to_json(row_variant)).alias("_text"),
    )  # fmt: skip


def _unwrapped(value: Column) -> Column:
    """Connect's JSON ``value`` without its schema: ``payload`` when it is ``{"schema": ..., "payload": ...}``."""
    from pyspark.sql import functions as F

    has_schema = F.variant_get(value, "$.schema", "variant").isNotNull()
    return F.when(has_schema, F.variant_get(value, "$.payload", "variant")).otherwise(value)


def key_from_kafka(f: FieldSpec) -> Column:
    """A change event's key field from its Kafka key (Connect's JSON, ``{"id": 1}`` with or without schema),
    as :func:`with_envelope` parsed it (``_key_v``)."""
    from pyspark.sql import functions as F

    from include.contract.transform_spec import spark_type

    return F.try_variant_get(F.col("_key_v"), f"$.{f.name}", spark_type(f.type))


def truncated_at(valid: DataFrame) -> dict[str, int]:
    """Per topic, the LSN of the last truncate among the valid change events ``valid`` (usually none)."""
    from pyspark.sql import functions as F

    rows = valid.where(F.col("_cdc_op") == "t").groupBy("_kafka_topic").agg(F.max("_cdc_lsn").alias("lsn"))
    return {r["_kafka_topic"]: int(r["lsn"]) for r in rows.collect()}


def _before_truncate(topic_col: Column, lsn_col: Column, truncates: dict[str, int]) -> Column:
    """Whether a change at ``lsn_col`` of ``topic_col`` came before the topic's truncate in ``truncates``.

    A truncate takes the table's exclusive lock, so every change committed before it has a lower LSN than
    the truncate's, and every change after it a higher one."""
    from pyspark.sql import functions as F

    before = F.lit(False)
    for topic, lsn in sorted(truncates.items()):
        before = before | ((topic_col == topic) & (F.coalesce(lsn_col, F.lit(-1)) < F.lit(lsn)))
    return before


def truncate_condition(truncates: dict[str, int]) -> str:
    """SQL over silver (alias-free) selecting the live rows the batch's truncates delete."""
    parts = [f"(_kafka_topic = '{t.replace(chr(39), chr(39) * 2)}' AND coalesce(_cdc_lsn, -1) < {lsn})"
             for t, lsn in sorted(truncates.items())]  # fmt: skip
    return f"NOT _deleted AND ({' OR '.join(parts)})"


def old_key_text(bronze: DataFrame) -> Column:
    """The text of a record's ``__debezium.oldkey`` header (null without one, or without a ``headers``
    column: a quarantined record replayed, or a test's frame)."""
    from pyspark.sql import functions as F

    if "headers" not in bronze.columns:
        return F.lit(None).cast("string")
    found = F.filter(F.col("headers"), lambda h: h["key"] == OLD_KEY_HEADER)
    return F.try_element_at(found, F.lit(1))["value"].cast("string")


def _position(commit: Column, lsn: Column) -> Column:
    """A change's place in the source's log, comparable as a struct (a snapshot read has no commit LSN)."""
    from pyspark.sql import functions as F

    return F.struct(F.coalesce(commit, F.lit(-1)).alias("c"), lsn.alias("l"))


def carry_over(df: DataFrame, current: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec]) -> DataFrame:
    """``df`` with the values a primary-key change's create did not send filled from the old key's row.

    The old key's row as it stood just before the change is the old key's last change in the batch that
    sent the value, below the create's source position, else silver's live row of the old key when it was
    written below that position. A value found clears the field's flag; one not found leaves it set, and
    :func:`classify` then sends the change to quarantine unless silver holds the new key's row. Only the
    creates that carry the header and a flag are joined, so a batch without one costs a filter.
    """
    from pyspark.sql import functions as F

    from include.contract.transform_spec import spark_type

    flagged = placeholder_fields(fields)
    by_name = {f.name: f for f in fields}
    old_key = _unwrapped(F.try_parse_json(F.col("_cdc_old_key")))
    mover = F.coalesce(F.col("_cdc_old_key").isNotNull() & reduce(lambda a, b: a | b, (
        F.col(placeholder_column(f)) for f in flagged)), F.lit(False))  # fmt: skip
    # A record's place in Kafka names it: the key the lookups below are grouped and joined back on.
    movers = df.where(mover).withColumn("_mv", F.struct("_kafka_topic", "_kafka_partition", "_kafka_offset"))
    movers = movers.select("*", *(F.try_variant_get(old_key, f"$.{k}", spark_type(by_name[k].type)).alias(f"_ok_{k}")
                                  for k in spec.key))  # fmt: skip
    here = _position(F.col("_cdc_commit_lsn"), F.col("_cdc_lsn"))
    # The old key's changes in the batch that sent values (never a delete: its row image is the key alone).
    sent = df.where(~F.col("_null_value") & (F.col("_cdc_op") != "d")).select(
        *(F.col(k).alias(f"_ok_{k}") for k in spec.key),
        _position(F.col("_cdc_commit_lsn"), F.col("_cdc_lsn")).alias("_op_pos"),
        *(F.when(~F.col(placeholder_column(f)), F.struct(F.col(f.name).alias("v"))).alias(f"_ob_{f.name}")
          for f in flagged),
    )  # fmt: skip
    keys = [f"_ok_{k}" for k in spec.key]
    earlier = movers.select("_mv", *keys, here.alias("_mv_pos")).join(sent, keys).where(
        F.col("_op_pos") < F.col("_mv_pos"))  # fmt: skip
    # Per create, the newest of those below it that sent each value (a struct's max is by its first field).
    in_batch = earlier.groupBy("_mv").agg(*(
        F.max(F.when(F.col(f"_ob_{f.name}").isNotNull(), F.struct(F.col("_op_pos").alias("p"),
                                                                  F.col(f"_ob_{f.name}").alias("o"))))["o"]
        .alias(f"_ob_{f.name}") for f in flagged))  # fmt: skip
    held = current.where(~F.col("_deleted")).select(
        *(F.col(k).alias(f"_ok_{k}") for k in spec.key),
        _position(F.col("_cdc_commit_lsn"), F.col("_cdc_lsn")).alias("_os_pos"),
        *(F.col(f.name).alias(f"_os_{f.name}") for f in flagged),
    )  # fmt: skip
    joined = movers.join(in_batch, "_mv", "left").join(held, keys, "left")
    below = F.coalesce(F.col("_os_pos") < here, F.lit(False))
    for f in flagged:
        flag = F.col(placeholder_column(f))
        found = F.coalesce(F.col(f"_ob_{f.name}"), F.when(below & F.col(f"_os_{f.name}").isNotNull(),
                                                           F.struct(F.col(f"_os_{f.name}").alias("v"))))  # fmt: skip
        joined = joined.withColumn(f.name, F.when(flag & found.isNotNull(), found["v"]).otherwise(F.col(f.name)))
        joined = joined.withColumn(placeholder_column(f), flag & found.isNull())
    joined = joined.select(*df.columns)
    return df.where(~mover).unionByName(joined)


def with_unknown_values(decoded: DataFrame, classified: DataFrame) -> DataFrame:
    """``decoded`` with a problem on each change :func:`classify` found :data:`UNKNOWN_VALUE`, naming the field
    and the fix, so that it goes to quarantine instead of writing null (the batch's few such records joined
    back by their Kafka position)."""
    from pyspark.sql import functions as F

    from include.contract.transform_spec import DEBEZIUM_UNAVAILABLE

    where = ["_kafka_topic", "_kafka_partition", "_kafka_offset"]
    moved = F.when(F.col("_cdc_old_key").isNotNull(),
                   F.concat(F.lit(" or in the old key's row after this primary-key change from key "),
                            F.substring(F.col("_cdc_old_key"), 1, 200)))  # fmt: skip
    message = F.concat(
        F.col("_unknown"),
        F.lit(f": the change did not send its value (an unchanged TOASTed column, sent as {DEBEZIUM_UNAVAILABLE}) "
              "and it is not in this batch, in silver's row of the key"),
        F.coalesce(moved, F.lit("")),
        F.lit("; writing it would put null where the table holds a value. Re-snapshot the row (a Debezium "
              "incremental snapshot of the table) to bring it whole, and give the source table REPLICA "
              "IDENTITY FULL so that every change carries every column"),
    )
    unknown = classified.where(F.col("_action") == UNKNOWN_VALUE).select(
        *where, F.struct(F.col("_unknown").alias("field"), message.alias("message")).alias("_unknown_problem"))
    problem = F.col("_unknown_problem")
    return decoded.join(unknown, where, "left").withColumn(
        "_problems", F.when(problem.isNotNull(), F.concat(F.col("_problems"), F.array(problem)))
        .otherwise(F.col("_problems"))).drop("_unknown_problem")  # fmt: skip


def classify(valid: DataFrame, current: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec],
             truncates: dict[str, int] | None = None) -> DataFrame:  # fmt: skip
    """What each valid change event does to silver: a ``_action`` of ``insert``, ``update``, ``delete``,
    ``superseded``, ``replayed`` or ``skipped``.

    Per key the last row change by Kafka order wins the batch (a key's changes are in one partition, in
    commit order). It changes silver only if it is newer than silver's row: between two streamed changes
    the source position decides (equal or below: ``superseded``, a change sent again); where either is a
    snapshot read (``r``: a snapshot reads the committed state, newer than every change before it in the
    topic) or has no position, Kafka order decides. A Kafka tombstone after a delete is ``skipped``; one
    whose delete is gone (a compacted topic) deletes a live key. Values a change did not send (unchanged
    TOASTed ones) take the key's last value sent earlier in the batch, else silver keeps its own; after a
    primary-key change the old key's (:func:`carry_over`). Where neither is there and silver holds no live
    row of the key, the change is :data:`UNKNOWN_VALUE`, its ``_unknown`` the first such field.

    ``truncates`` (:func:`truncated_at`): a change before its topic's truncate is ``superseded``; the
    truncate itself (``skipped`` here) deletes silver's rows in a commit of its own. Adds ``_present``.
    """
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    keys = list(spec.key)
    op = F.col("_cdc_op")
    # A null value whose key could not be read names no row.
    keyless = F.col("_null_value") & reduce(lambda a, b: a | b, (F.col(k).isNull() for k in keys))
    row_change = (F.col("_skip").isNull() | F.col("_null_value") & ~keyless) & F.coalesce(op != "t", F.lit(True))
    not_rows = valid.where(~row_change)
    rows = valid.where(row_change)
    flagged = placeholder_fields(fields)
    if flagged and rows.where(F.col("_cdc_old_key").isNotNull()).limit(1).count():
        rows = carry_over(rows, current, spec, fields)
    df = silver_state.with_silver_state(rows, current, keys, {"_cdc_op": "_t_op", "_cdc_commit_lsn": "_t_commit",
                                                             "_cdc_lsn": "_t_lsn", "_deleted": "_t_deleted"})  # fmt: skip
    in_log = Window.partitionBy(*keys).orderBy("_kafka_offset", "_kafka_partition")
    last_first = Window.partitionBy(*keys).orderBy(F.col("_kafka_offset").desc(), F.col("_kafka_partition").desc())
    present = silver_state.held()
    null_value = F.col("_null_value")
    # A null value deletes only a key that is live just before it: after a delete (the usual case) or
    # for a key silver lacks it is skipped.
    before_live = F.coalesce(
        F.lag(F.when(null_value, F.lit(False)).otherwise(op != "d")).over(in_log),
        present & ~F.coalesce(F.col("_t_deleted"), F.lit(True)),
    )
    df = df.withColumn("_deletes", null_value & before_live & (F.row_number().over(last_first) == 1))
    candidate = ~null_value | F.col("_deletes")
    df = df.withColumn(
        "_rank",
        F.when(candidate, F.row_number().over(
            Window.partitionBy(*keys, candidate).orderBy(F.col("_kafka_offset").desc(),
                                                       F.col("_kafka_partition").desc()))),
    )  # fmt: skip
    upto_here = in_log.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    for f in placeholder_fields(fields):
        flag = F.col(placeholder_column(f))
        # The key's last value sent in this batch up to this change (never one from before a delete: a
        # create after a delete sends every column).
        sent = F.last(F.when(~flag & ~null_value, F.struct(F.col(f.name).alias("v"))), ignorenulls=True).over(
            upto_here)
        df = df.withColumn(f.name, F.when(flag & sent.isNotNull(), sent["v"]).otherwise(F.col(f.name)))
        df = df.withColumn(placeholder_column(f), flag & sent.isNull())
    # A null value that deletes stands at the position of the change before it, in the batch or in silver.
    inherit = F.last(F.when(~null_value, F.struct(op.alias("op"), F.col("_cdc_commit_lsn").alias("commit"),
                                                  F.col("_cdc_lsn").alias("lsn"), F.col("_cdc_tx_id").alias("tx"))),
                     ignorenulls=True).over(in_log.rowsBetween(Window.unboundedPreceding, -1))  # fmt: skip
    df = df.withColumn("_inherit", F.when(F.col("_deletes"), inherit))
    deleting = F.col("_deletes")
    df = (
        df.withColumn("_cdc_op", F.when(deleting, F.lit("d")).otherwise(op))
        .withColumn("_cdc_commit_lsn", F.when(deleting, F.coalesce(F.col("_inherit.commit"), F.col("_t_commit")))
                    .otherwise(F.col("_cdc_commit_lsn")))
        .withColumn("_cdc_lsn", F.when(deleting, F.coalesce(F.col("_inherit.lsn"), F.col("_t_lsn")))
                    .otherwise(F.col("_cdc_lsn")))
        .withColumn("_cdc_tx_id", F.when(deleting, F.col("_inherit.tx")).otherwise(F.col("_cdc_tx_id")))
    )  # fmt: skip
    ours = _position(F.col("_cdc_commit_lsn"), F.col("_cdc_lsn"))
    theirs = _position(F.col("_t_commit"), F.col("_t_lsn"))
    comparable = (
        (F.col("_cdc_op") != "r") & F.col("_cdc_lsn").isNotNull()
        & (F.col("_t_op") != "r") & F.col("_t_lsn").isNotNull()
    )  # fmt: skip
    later_in_log = silver_state.later_in_log()
    before_truncate = _before_truncate(F.col("_kafka_topic"), F.col("_cdc_lsn"), truncates or {})
    action = (
        F.when(null_value & ~deleting, "skipped")
        .when(F.col("_rank") != 1, "superseded")
        .when(silver_state.same_record(), "replayed")
        .when(before_truncate, "superseded")
        .when(deleting, "delete")
        .when(~present, F.when(F.col("_tombstone"), "delete").otherwise("insert"))
        .when(comparable & (ours <= theirs), "superseded")
        .when(~comparable & ~later_in_log, "superseded")
        .when(F.col("_tombstone"), "delete")
        .otherwise("update")
    )
    # A value not sent, found neither in the batch nor in the old key's row, with no live row of the key in
    # silver to keep it from: writing the change would write null where the table holds a value.
    live = present & ~F.coalesce(F.col("_t_deleted"), F.lit(True))
    unsent = [F.when(F.col(placeholder_column(f)), F.lit(f.name)) for f in flagged]
    df = df.withColumn("_unknown", F.when(~live, F.coalesce(*unsent, F.lit(None).cast("string"))))
    action = F.when(action.isin("insert", "update") & F.col("_unknown").isNotNull(),
                    F.lit(UNKNOWN_VALUE)).otherwise(action)  # fmt: skip
    classified = (
        df.withColumn("_action", action)
        .withColumn("_present", present)
        .drop("_t_op", "_t_commit", "_t_lsn", "_t_deleted", *silver_state.STATE_COLUMNS, "_deletes", "_rank",
              "_inherit")
    )  # fmt: skip
    not_rows = not_rows.withColumn("_action", F.lit("skipped")).withColumn("_present", F.lit(False))
    return classified.unionByName(not_rows, allowMissingColumns=True)
