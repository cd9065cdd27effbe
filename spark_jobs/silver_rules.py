"""Pure DataFrame rules of the bronze → silver transform: decode and validate each record, and quarantine's rows.

No I/O here: each function takes DataFrames and the pipeline's
:class:`~include.contract.transform_spec.TransformSpec` and returns DataFrames, so the
rules are tested on small inline data (``tests/spark_jobs/test_silver_rules.py``).
A value becomes JSON text by its format (:mod:`spark_jobs.formats`), each field is
judged by :mod:`spark_jobs.field_rules`; new fields are :mod:`spark_jobs.new_fields`,
and what valid records do to silver is :mod:`spark_jobs.silver_table`.

Every check runs in the JVM (Spark 4's ``try_parse_json`` / variant functions,
``is_valid_utf8``); no Python UDF, so no Python worker per executor core.

A record's problems are collected as ``(field, message)`` pairs whose message
names the field, what was expected and what was found. A record with any
problem goes to quarantine whole; silver only ever gets records that passed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from include.contract.errors import ContractError
from include.contract.transform_spec import DEBEZIUM_UNAVAILABLE, FieldSpec, TransformSpec, spark_type
from include.contract.value_formats import VALUE_FORMATS
from spark_jobs import cdc_rules
from spark_jobs.field_rules import describe_type, field_parts, field_problem, kind_text
from spark_jobs.formats.registry import value_format

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from spark_jobs.formats.base import ValuePlan


#: Bronze columns carried into silver and quarantine under these names.
KAFKA_COLUMNS = {
    "topic": "_kafka_topic",
    "partition": "_kafka_partition",
    "offset": "_kafka_offset",
    "timestamp": "_kafka_timestamp",
    "key": "_kafka_key",
    "value": "_kafka_value",
}


def _tombstone_key(spec: TransformSpec, f: FieldSpec) -> Column:
    """A tombstone's key field, read from the Kafka key: its text for one key field, else a JSON object."""
    from pyspark.sql import functions as F

    text = F.when(F.is_valid_utf8(F.col("_kafka_key").cast("string")), F.col("_kafka_key").cast("string"))
    if len(spec.key) == 1:
        return text.try_cast(spark_type(f.type))
    return F.try_variant_get(F.try_parse_json(text), f"$.{f.name}", spark_type(f.type))


def decode(bronze: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec],
           value_plan: ValuePlan | None = None) -> DataFrame:  # fmt: skip
    """Bronze rows → one row per record with typed fields and its list of problems.

    Output columns: the ``_kafka_*`` columns, ``_tombstone``, ``_text`` (the
    value as text; null when not readable), ``_object`` (the text is a JSON
    object), ``_problems`` (array of ``{field, message}``; empty when the
    record is good), then one typed column per field of ``fields`` (declared
    plus added).

    Each value the rules read more than once (the parsed record, each field's
    variant, kind and value, the record's own problem) is a column of an
    earlier projection rather than a repeated expression: written as one
    expression tree, the rules held 148 ``variant_get`` calls for four fields
    (Spark does not share work between the branches of a ``CASE``), and
    500,000 records took 11.5 s to decode.

    Values of a schema format (``value_plan``) become JSON text first, in the JVM, by their format
    (:mod:`spark_jobs.formats`: Avro through Spark's ``from_avro`` with each record's writer schema resolved
    to the reader schema, JSON Schema by dropping the wire format's header, Protobuf by the project's own
    function). Every field rule below then reads them as it reads JSON. A value that is not framed, names a
    schema id the registry lacks, was written with a schema the reader cannot read, or does not decode gets
    one ``value`` problem naming the schema id.
    """
    from pyspark.sql import functions as F

    if VALUE_FORMATS[spec.format].needs_schema and value_plan is None:
        raise ContractError(f"transform.format {spec.format} needs a ValuePlan (spark_jobs/formats/schemas.py)")
    old_key = [cdc_rules.old_key_text(bronze).alias("_cdc_old_key")] if spec.cdc else []
    df = bronze.select(*(F.col(src).alias(dst) for src, dst in KAFKA_COLUMNS.items()), *old_key)
    out = [*df.columns, "_tombstone", "_text"]
    if spec.cdc:
        out += ["_null_value", "_skip", "_cdc_snapshot", *(name for name, _ in cdc_rules.CDC_COLUMNS)]
    df, text, format_problem = _with_text(df, spec, value_plan)
    key_fields = set(spec.key)
    keyed_tombstones = [f.name in key_fields and spec.tombstones == "delete" for f in fields]
    df = _with_read_parts(df, spec, fields, keyed_tombstones)
    df = _with_record_problem(df, spec, fields, text, format_problem)
    df = _with_field_results(df, spec, fields, keyed_tombstones, out)
    return _with_problem_list(df, fields, out)


def _with_text(df: DataFrame, spec: TransformSpec, value_plan: ValuePlan | None) -> tuple[DataFrame, Column, Column]:
    """Decode step 1: which values are readable text. Adds ``_tombstone``, ``_text`` (null unless the value
    is non-empty, within ``max_value_bytes``, decoded by its format and valid UTF-8) and ``_v`` (the text
    parsed as a variant). Returns the frame, the value's text before those checks, and its format problem
    (always null for plain JSON), which the record's problem names."""
    from pyspark.sql import functions as F

    size = F.octet_length(F.col("_kafka_value"))
    readable = F.col("_kafka_value").isNotNull() & (size > 0) & (size <= spec.max_value_bytes)
    df, text, format_problem = value_format(spec.format).value_text(df, value_plan, spec.max_value_bytes)
    if value_plan is not None:
        readable = readable & format_problem.isNull()
    df = df.select(
        "*",
        (F.col("_kafka_value").isNull()).alias("_tombstone"),
        F.when(readable & F.is_valid_utf8(text), text).alias("_text"),
    )
    df = df.select("*", F.try_parse_json(F.col("_text")).alias("_v"))
    if spec.cdc:
        df = cdc_rules.with_envelope(df, spec)
    return df, text, format_problem


def _with_read_parts(df: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec],
                     keyed_tombstones: Sequence[bool]) -> DataFrame:  # fmt: skip
    """Decode step 2 (layer 1): what is read from the parsed record, once each: ``_object`` (the text is a
    JSON object), each field's variant, value and kind parts (:func:`field_parts`), and for a key field of a
    pipeline whose tombstones delete, the field's value from the Kafka key (``_tk<i>``)."""
    from pyspark.sql import functions as F

    v = F.col("_v")
    # Valid JSON text is an object exactly when it opens with "{": cheaper than the record's whole schema,
    # which only the message of a non-object needs.
    is_object = v.isNotNull() & F.ltrim(F.col("_text"), F.lit(" \t\n\r")).startswith("{")
    parts = [is_object.alias("_object")]
    for i, f in enumerate(fields):
        parts += field_parts(f, v, i)
        if keyed_tombstones[i]:
            key = cdc_rules.key_from_kafka(f) if spec.cdc else _tombstone_key(spec, f)
            parts.append(key.alias(f"_tk{i}"))
    return df.select("*", *parts)


def _with_record_problem(df: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec], text: Column,
                         format_problem: Column) -> DataFrame:  # fmt: skip
    """Decode step 3 (layer 2): the record's own problem ``_rp`` (a tombstone the pipeline quarantines, an
    empty or too large value, a format problem, bytes that are not UTF-8, text that is not JSON, JSON that is
    not an object; null for a readable object or a tombstone that deletes), and each field's kind ``_kind<i>``."""
    from pyspark.sql import functions as F

    # A change event's row replaced _v; the value's own checks read the whole value.
    v = F.col("_value_v") if spec.cdc else F.col("_v")
    size = F.octet_length(F.col("_kafka_value"))
    noun = VALUE_FORMATS[spec.format].noun
    start = F.substring(F.col("_kafka_value").cast("string"), 1, 60)
    record_problem = (
        F.when(
            F.col("_tombstone") & F.lit(spec.tombstones == "quarantine"),
            F.lit("value: got a tombstone (null value); the pipeline's transform.tombstones is 'quarantine'"),
        )
        .when(F.col("_null_value") if spec.cdc else F.col("_tombstone"), F.lit(None))
        .when(size == 0, F.lit(f"value: expected {noun}, got an empty value (0 bytes)"))
        .when(
            size > spec.max_value_bytes,
            F.concat(
                F.lit(f"value: expected at most {spec.max_value_bytes} bytes, got "),
                size.cast("string"),
                F.lit(" bytes"),
            ),
        )
        .when(format_problem.isNotNull(), format_problem)
        .when(~F.is_valid_utf8(text), F.lit("value: expected UTF-8 text, got bytes that are not valid UTF-8"))
        .when(
            v.isNull(),
            F.concat(
                F.lit("value: expected a JSON object, got text that is not valid JSON (or repeats a key): "),
                start,
            ),
        )
        .when(
            ~(F.col("_value_object") if spec.cdc else F.col("_object")),
            F.concat(F.lit("value: expected a JSON object, got "), kind_text(F.schema_of_variant(v))),
        )
    )
    if spec.cdc:
        record_problem = record_problem.when(F.col("_env_problem").isNotNull(), F.col("_env_problem"))
    return df.select(
        "*",
        record_problem.alias("_rp"),
        *(F.schema_of_variant(F.col(f"_fv{i}")).alias(f"_kind{i}") for i in range(len(fields))),
    )


def _with_field_results(
    df: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec], keyed_tombstones: Sequence[bool],
    out: Sequence[str],
) -> DataFrame:
    """Decode step 4 (layer 3): each field's problem ``_p<i>`` and typed value ``_t<i>``. A record with a
    problem of its own gets no field problems; a deleting tombstone is judged on its key fields only, whose
    values come from the Kafka key. Keeps ``out``, ``_rp`` and ``_object``."""
    from pyspark.sql import functions as F

    rp = F.col("_rp")
    key_fields = set(spec.key)
    # A change event that is no row change is not judged, but a null value is on its key (it may delete).
    # A truncate has no row: nothing but its envelope is judged.
    # A null value is judged on its key when that key is Connect's JSON (a key in Avro or another format
    # cannot name the row; such a tombstone is skipped, its delete having come before it).
    judged = (rp.isNull() & (F.col("_skip").isNull() | F.col("_null_value") & F.col("_key_json"))
              & F.coalesce(F.col("_cdc_op") != "t", F.lit(True))) if spec.cdc else rp.isNull()  # fmt: skip
    unsent = {f.name for f in cdc_rules.placeholder_fields(fields)} if spec.cdc else set()
    layer3 = []
    for i, f in enumerate(fields):
        problem, value = field_problem(f, i), F.col(f"_val{i}")
        if f.name in unsent:
            # Debezium's stand-in for a value PostgreSQL did not send: neither checked nor written.
            placeholder = F.coalesce(F.try_variant_get(F.col(f"_fv{i}"), "$", "string") == DEBEZIUM_UNAVAILABLE,
                                     F.lit(False))  # fmt: skip
            problem = F.when(~placeholder, problem)
            value = F.when(~placeholder, value)
            layer3.append(placeholder.alias(cdc_rules.placeholder_column(f)))
        if keyed_tombstones[i]:
            # A change event's delete carries its key columns in its row (before); only a null value
            # needs the Kafka key.
            by_key = F.col("_null_value") if spec.cdc else F.col("_tombstone")
            value = F.when(by_key, F.col(f"_tk{i}")).otherwise(value)
            problem = F.when(by_key, _tombstone_key_problem(spec, f, i)).otherwise(problem)
        # A record that cannot be read at all has one problem, the value's; its fields are not judged.
        problem = F.when(judged & (~F.col("_tombstone") | F.lit(f.name in key_fields)), problem)
        layer3 += [problem.alias(f"_p{i}"), value.alias(f"_t{i}")]
    return df.select(*out, "_rp", "_object", *layer3)


def _tombstone_key_problem(spec: TransformSpec, f: FieldSpec, i: int) -> Column:
    """A deleting tombstone's problem for key field ``f``: its Kafka key does not give the field a value."""
    from pyspark.sql import functions as F

    key_text = F.coalesce(F.substring(F.col("_kafka_key").cast("string"), 1, 80), F.lit("null"))
    wanted = (
        f"its text as {describe_type(f.type)}"
        if len(spec.key) == 1 and not spec.cdc
        else f"a JSON object with {', '.join(spec.key)}"
    )
    return F.when(
        F.col(f"_tk{i}").isNull(),
        F.concat(
            F.lit(
                f"key: a tombstone deletes the row named by its Kafka key, expected {wanted} "
                f"for field {f.name}, got "
            ),
            key_text,
        ),
    )


def _with_problem_list(df: DataFrame, fields: Sequence[FieldSpec], out: Sequence[str]) -> DataFrame:
    """Decode step 5: the output columns: ``out``, ``_object``, ``_problems`` (the record's problem, then each
    field's, as ``{field, message}``; empty for a good record) and one typed column per field, by name."""
    from pyspark.sql import functions as F

    rp = F.col("_rp")
    problems = [F.when(rp.isNotNull(), F.struct(F.lit("value").alias("field"), rp.alias("message")))]
    problems += [
        F.when(
            F.col(f"_p{i}").isNotNull(),
            F.struct(F.lit(f.name).alias("field"), F.col(f"_p{i}").alias("message")),
        )
        for i, f in enumerate(fields)
    ]
    flags = [c for c in df.columns if c.startswith("_ph_")]
    return df.select(
        *out,
        "_object",
        F.array_compact(F.array(*problems)).alias("_problems"),
        *(F.col(f"_t{i}").alias(f.name) for i, f in enumerate(fields)),
        *flags,
    )


def valid_records(decoded: DataFrame) -> DataFrame:
    """Decoded records without problems, with only the columns :func:`classify` and :func:`silver_rows` read.

    The classified batch is cached; leaving the raw bytes, the text and the (empty) problem list out of it
    keeps the cache small (Spark caches an array of structs slowly).
    """
    from pyspark.sql import functions as F

    return decoded.where(F.size("_problems") == 0).drop(
        "_problems", "_text", "_object", "_kafka_key", "_kafka_value"
    )


def quarantine_rows(decoded: DataFrame, run_id: str, epoch: int, batch_id: int) -> DataFrame:
    """Records with problems, with their raw bytes and every reason, for the quarantine table."""
    from pyspark.sql import functions as F

    return decoded.where(F.size("_problems") > 0).select(
        F.col("_kafka_topic").alias("topic"),
        F.col("_kafka_partition").alias("partition"),
        F.col("_kafka_offset").alias("offset"),
        F.col("_kafka_timestamp").alias("timestamp"),
        F.col("_kafka_key").alias("key"),
        F.col("_kafka_value").alias("value"),
        F.concat_ws("; ", F.transform("_problems", lambda p: p["message"])).alias("reason"),
        F.transform("_problems", lambda p: p["field"]).alias("fields"),
        F.lit(run_id).alias("run_id"),
        F.lit(epoch).alias("epoch"),
        F.lit(batch_id).cast("long").alias("batch_id"),
        F.current_timestamp().alias("quarantined_at"),
    )
