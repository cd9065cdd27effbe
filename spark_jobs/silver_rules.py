"""Pure DataFrame rules of the bronze → silver transform: decode, validate, evolve, classify.

No I/O here: each function takes DataFrames and the pipeline's
:class:`~include.contract.transform_spec.TransformSpec` and returns DataFrames, so the
rules are tested on small inline data (``tests/spark_jobs/test_silver_rules.py``).

Every check runs in the JVM (Spark 4's ``try_parse_json`` / variant functions,
``is_valid_utf8``); no Python UDF, so no Python worker per executor core.

A record's problems are collected as ``(field, message)`` pairs whose message
names the field, what was expected and what was found. A record with any
problem goes to quarantine whole; silver only ever gets records that passed.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from include.contract.errors import ContractError
from include.contract.transform_spec import (
    DEBEZIUM_UNAVAILABLE,
    FIELD_NAME,
    FieldSpec,
    TransformSpec,
    is_decimal,
    spark_type,
)
from spark_jobs import cdc_rules, silver_state

if TYPE_CHECKING:
    from delta.tables import DeltaMergeBuilder, DeltaTable
    from pyspark.sql import Column, DataFrame

#: The Confluent wire format's header: magic byte 0, then the writer schema's 4-byte id.
HEADER_BYTES = 5

#: Bronze columns carried into silver and quarantine under these names.
KAFKA_COLUMNS = {
    "topic": "_kafka_topic",
    "partition": "_kafka_partition",
    "offset": "_kafka_offset",
    "timestamp": "_kafka_timestamp",
    "key": "_kafka_key",
    "value": "_kafka_value",
}
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


@dataclass(frozen=True)
class Writer:
    """One writer schema id seen in a batch of framed values: its schema, or why its records are quarantined."""

    id: int
    schema: str | None = None
    problem: str | None = None
    #: ``protobuf``: the ``FileDescriptorSet`` of the schema and its imports, and the schema's file in it.
    descriptor: bytes | None = None
    file: str | None = None


@dataclass(frozen=True)
class ValuePlan:
    """How to read the values of an ``avro`` or ``json_schema`` batch (``spark_jobs/value_formats.py`` makes it).

    Attributes:
        format: ``avro`` or ``json_schema``.
        framed: Values carry the Confluent wire format's header (a registry); else plain Avro binary.
        reader: The reader schema (Avro JSON); what every decoded record looks like.
        writers: Per writer schema id in the batch, its schema or its problem (framed values only).
        required_field: A reader field that is never null in a decoded record, so a null there means the bytes
            did not decode (Spark's PERMISSIVE ``from_avro`` gives a record of nulls); ``None`` when every field
            may be null.
        source: How messages name where schema ids are looked up (e.g. the registry's URL).
    """

    format: str
    framed: bool
    reader: str | None = None
    writers: tuple[Writer, ...] = field(default_factory=tuple)
    #: ``transform.limits.schema_ids`` when the batch held more distinct ids than it: ids outside
    #: ``writers`` were not looked up because of it.
    id_cap: int | None = None
    required_field: str | None = None
    source: str = "the schema registry"


_NOUN = {"json": "a JSON object", "avro": "an Avro record", "json_schema": "a JSON object",
         "protobuf": "a Protobuf message"}
#: The project's Spark SQL function that prints a Protobuf value as JSON (include/spark/jvm/src/kde/functions).
PROTOBUF_FUNCTION = "kde_protobuf_json"
PROTOBUF_FUNCTION_CLASS = "kde.functions.ProtobufJson"
PROTOBUF_FUNCTION_TYPE = "struct<json:string,error:string>"
#: The most characters a Protobuf value's JSON may take, as a multiple of ``transform.max_value_bytes``: JSON
#: repeats field names and prints defaults, so a legitimate message can print several times its size, while
#: empty sub-messages of a repeated field print at tens of times theirs.
PROTOBUF_JSON_FACTOR = 16
#: ... and at most this many, whatever the setting: one record's text stays far below a JVM string's limit.
PROTOBUF_JSON_MAX = 256 * 1024 * 1024

_INTEGER_KINDS = ("BIGINT", "INT", "SMALLINT", "TINYINT")
_NUMBER_KINDS = (*_INTEGER_KINDS, "DOUBLE", "FLOAT")


def describe_type(type_name: str) -> str:
    """How a field type reads in a quarantine reason."""
    return {
        "string": "a string",
        "int": "an int (32-bit integer)",
        "long": "a long (64-bit integer)",
        "double": "a number",
        "boolean": "true or false",
        "date": "a date string like '2026-01-31'",
        "timestamp": "a timestamp string like '2026-01-31T12:00:00Z'",
        "json": "any JSON value",
    }.get(type_name, type_name)


def infer_type(variant_schema: str | None) -> str | None:
    """The silver type for a new field whose values Spark's ``schema_of_variant_agg`` described.

    Integers become ``long``, fractions ``double``, text ``string``, objects,
    arrays and mixed kinds ``json`` (their JSON text); ``None`` when every value
    was null (the field is added once a value shows its type).
    """
    if not variant_schema or variant_schema == "VOID":
        return None
    s = variant_schema.upper()
    if s in _INTEGER_KINDS:
        return "long"
    if s.startswith("DECIMAL("):
        precision, scale = (int(x) for x in s[len("DECIMAL(") : -1].split(","))
        return "long" if scale == 0 and precision <= 18 else "double"
    if s in ("DOUBLE", "FLOAT"):
        return "double"
    if s == "BOOLEAN":
        return "boolean"
    if s == "STRING":
        return "string"
    return "json"


def _kind_text(kind: Column) -> Column:
    """A JSON value's kind (from ``schema_of_variant``) in words."""
    from pyspark.sql import functions as F

    return (
        F.when(kind.startswith("OBJECT"), F.lit("a JSON object"))
        .when(kind.startswith("ARRAY"), F.lit("a JSON array"))
        .when(kind == "STRING", F.lit("a string"))
        .when(kind == "BOOLEAN", F.lit("a boolean"))
        .when(kind == "VOID", F.lit("null"))
        .otherwise(F.lit("a number"))
    )


def _kind_ok(type_name: str, kind: Column) -> Column:
    from pyspark.sql import functions as F

    if type_name == "json":
        return F.lit(True)
    if type_name == "string":
        return ~(kind.startswith("OBJECT") | kind.startswith("ARRAY"))
    if type_name in ("int", "long", "double") or is_decimal(type_name):
        return kind.isin("STRING", *_NUMBER_KINDS) | kind.startswith("DECIMAL")
    if type_name == "boolean":
        return kind.isin("BOOLEAN", "STRING")
    return kind == "STRING"  # date, timestamp: ISO text only, never epoch numbers of unknown unit


def _needs_exact_check(f: FieldSpec) -> bool:
    return f.type in ("int", "long") or is_decimal(f.type)


def field_parts(f: FieldSpec, v: Column, i: int) -> list[Column]:
    """Field ``f``'s own columns, read once from the parsed record ``v``: ``_fv{i}`` (its JSON value as a
    variant), ``_val{i}`` (its typed value) and, for integer and decimal types, ``_dbl{i}`` (its value
    as a double, to tell whether the typed value kept it exactly).
    """
    from pyspark.sql import functions as F

    path = f"$.{f.name}"
    fv = F.variant_get(v, path, "variant")
    value = F.to_json(fv) if f.type == "json" else F.try_variant_get(v, path, spark_type(f.type))
    parts = [fv.alias(f"_fv{i}"), value.alias(f"_val{i}")]
    if _needs_exact_check(f):
        parts.append(F.try_variant_get(v, path, "double").alias(f"_dbl{i}"))
    return parts


def field_problem(f: FieldSpec, i: int) -> Column:
    """The problem of field ``f`` (a message naming it, or null when the value is fine), from the columns
    :func:`field_parts` made and ``_kind{i}`` (the value's kind from ``schema_of_variant``).

    Numbers must fit the type exactly: ``2.5`` is no ``int`` and ``12.345`` no
    ``decimal(10,2)``, instead of being truncated or rounded quietly.
    """
    from pyspark.sql import functions as F

    fv, value, kind = F.col(f"_fv{i}"), F.col(f"_val{i}"), F.col(f"_kind{i}")
    snippet = F.substring(F.to_json(fv), 1, 80)
    expected = f"{f.name}: expected {describe_type(f.type)}, got "
    wrong_type = F.concat(F.lit(expected), _kind_text(kind), F.lit(" "), snippet)
    problem = F.when(
        fv.isNull(),
        F.lit(f"{f.name}: required, got nothing (the field is missing)") if f.required else F.lit(None),
    )
    problem = problem.when(
        F.is_variant_null(fv), F.lit(f"{f.name}: required, got null") if f.required else F.lit(None)
    )
    problem = problem.when(~_kind_ok(f.type, kind), wrong_type).when(value.isNull(), wrong_type)
    if _needs_exact_check(f):
        problem = problem.when(
            F.col(f"_dbl{i}") != value.cast("double"),
            F.concat(
                F.lit(f"{f.name}: expected {describe_type(f.type)}, got "),
                snippet,
                F.lit(", which does not fit without rounding"),
            ),
        )
    if f.minimum is not None:
        problem = problem.when(
            value < F.lit(f.minimum),
            F.concat(F.lit(f"{f.name}: expected at least {f.minimum:g}, got "), snippet),
        )
    if f.maximum is not None:
        problem = problem.when(
            value > F.lit(f.maximum),
            F.concat(F.lit(f"{f.name}: expected at most {f.maximum:g}, got "), snippet),
        )
    if f.allowed is not None:
        shown = ", ".join(repr(a) for a in f.allowed)
        problem = problem.when(
            ~value.isin(*f.allowed), F.concat(F.lit(f"{f.name}: expected one of {shown}, got "), snippet)
        )
    if f.max_length is not None:
        problem = problem.when(
            F.length(value) > f.max_length,
            F.concat(
                F.lit(f"{f.name}: expected at most {f.max_length} characters, got "),
                F.length(value).cast("string"),
                F.lit(" characters"),
            ),
        )
    return problem


def _tombstone_key(spec: TransformSpec, f: FieldSpec) -> Column:
    """A tombstone's key field, read from the Kafka key: its text for one key field, else a JSON object."""
    from pyspark.sql import functions as F

    text = F.when(F.is_valid_utf8(F.col("_kafka_key").cast("string")), F.col("_kafka_key").cast("string"))
    if len(spec.key) == 1:
        return text.try_cast(spark_type(f.type))
    return F.try_variant_get(F.try_parse_json(text), f"$.{f.name}", spark_type(f.type))


def _with_value_text(df: DataFrame, plan: ValuePlan, max_value_bytes: int) -> DataFrame:
    """``df`` plus ``_vt`` (the value as JSON text) and ``_fp`` (why the value cannot be read, naming its schema id).

    Framed values: the 4-byte id after magic byte 0. Avro: Spark's ``from_avro`` in PERMISSIVE mode, one
    branch per usable writer id, each resolving its writer schema to the reader schema (Avro's own schema
    resolution: added fields take their defaults, removed ones are skipped).
    """
    from pyspark.sql import functions as F

    value = F.col("_kafka_value")
    size = F.octet_length(value)
    present = value.isNotNull() & (size > 0)
    if plan.framed:
        magic = (size >= HEADER_BYTES) & (F.hex(F.substring(value, 1, 1)) == "00")
        sid = F.when(magic, F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long"))
        payload = F.expr(f"substring(_kafka_value, {HEADER_BYTES + 1})")
    else:
        sid, payload = F.lit(None).cast("long"), value
    df = df.select("*", sid.alias("_sid"), payload.alias("_payload"))
    sid, payload = F.col("_sid"), F.col("_payload")
    problem = F.when(~present, F.lit(None).cast("string"))
    if plan.framed:
        problem = problem.when(
            sid.isNull(),
            F.concat(
                F.lit("value: expected the Confluent wire format (magic byte 0, a 4-byte schema id, then the "
                      "payload), got "),
                size.cast("string"),
                F.lit(" bytes starting with 0x"),
                F.lower(F.hex(F.substring(value, 1, HEADER_BYTES))),
            ),
        )  # fmt: skip
        for w in plan.writers:
            if w.problem:
                problem = problem.when(sid == w.id, F.lit(f"value: schema id {w.id}: {w.problem}"))
        known = [w.id for w in plan.writers]
        # Every id of the batch within transform.limits.schema_ids was looked up before decode; any other id
        # is one beyond the cap (or, without a cap reached, this code's fault).
        why = (" was not looked up in this batch" if plan.id_cap is None else
               f" was not looked up: the batch holds more than transform.limits.schema_ids ({plan.id_cap}) "
               "distinct schema ids; raise the limit or fix the producer, then replay these records "
               "(trigger-form action replay_quarantine)")  # fmt: skip
        problem = problem.when(
            ~sid.isin(*known) if known else F.lit(True),
            F.concat(F.lit("value: schema id "), sid.cast("string"), F.lit(why)),
        )
    if plan.format == "protobuf":
        return _with_protobuf_text(df, plan, problem, max_value_bytes)
    if plan.format != "avro":
        return df.select("*", payload.cast("string").alias("_vt"), problem.alias("_fp"))
    from pyspark.sql.avro.functions import from_avro

    if plan.reader is None:  # value_formats.plan_values always gives an Avro plan its reader schema
        raise ContractError("transform.format avro: the value plan has no reader schema")
    if not plan.framed:
        avro = from_avro(payload, plan.reader, {"mode": "PERMISSIVE"})
        written_with = "the reader schema"
    else:
        usable = [(w.id, w.schema) for w in plan.writers if w.schema is not None and not w.problem]
        avro = F.when(F.lit(False), from_avro(payload, plan.reader, {"mode": "PERMISSIVE"}))
        for writer_id, schema in usable:
            avro = avro.when(
                sid == writer_id, from_avro(payload, schema, {"mode": "PERMISSIVE", "avroSchema": plan.reader})
            )
        written_with = "writer schema id "
    df = df.select("*", problem.alias("_fp0"), avro.alias("_avro"))
    avro = F.col("_avro")
    # PERMISSIVE from_avro gives a record of nulls for bytes it cannot decode.
    failed = avro[plan.required_field].isNull() if plan.required_field else F.to_json(avro) == "{}"
    hedge = "" if plan.required_field else " (or every field of the record is null)"
    where = F.concat(F.lit(written_with), sid.cast("string")) if plan.framed else F.lit(written_with)
    fp = F.when(F.col("_fp0").isNotNull(), F.col("_fp0")).when(
        present & failed,
        F.concat(F.lit("value: the bytes do not decode as Avro with "), where, F.lit(hedge)),
    )
    return df.select("*", F.to_json(avro).alias("_vt"), fp.alias("_fp"))


def _with_protobuf_text(df: DataFrame, plan: ValuePlan, problem: Column, max_value_bytes: int) -> DataFrame:
    """Protobuf values: :data:`PROTOBUF_FUNCTION` in the JVM, one branch per usable writer id, each with the
    writer's descriptor set as a literal (each executor parses it once, under a key naming id and content).
    A value over ``max_value_bytes`` is never decoded (its record's problem is its size), and the JSON of one
    within it is bounded (:data:`PROTOBUF_JSON_FACTOR`)."""
    import hashlib

    from pyspark.sql import functions as F

    sid, payload = F.col("_sid"), F.col("_payload")
    max_json = F.lit(min(PROTOBUF_JSON_FACTOR * max_value_bytes, PROTOBUF_JSON_MAX))
    decoded = F.when(F.octet_length(F.col("_kafka_value")) > max_value_bytes, F.lit(None).cast(PROTOBUF_FUNCTION_TYPE))
    for w in plan.writers:
        if w.descriptor is None or w.problem:
            continue
        key = f"{w.id}:{hashlib.sha256(w.descriptor).hexdigest()[:16]}"
        decoded = decoded.when(sid == w.id, F.call_function(PROTOBUF_FUNCTION, payload, F.lit(w.descriptor),
                                                            F.lit(w.file), F.lit(key), max_json))  # fmt: skip
    df = df.select("*", problem.alias("_fp0"), decoded.alias("_pb"))
    fp = F.when(F.col("_fp0").isNotNull(), F.col("_fp0")).when(
        F.col("_pb.error").isNotNull(),
        F.concat(F.lit("value: schema id "), sid.cast("string"), F.lit(": "), F.col("_pb.error")),
    )
    return df.select("*", F.col("_pb.json").alias("_vt"), fp.alias("_fp"))


#: The ``field`` of the problem a record gets for a new field beyond ``transform.limits.new_columns``.
NEW_FIELD_PROBLEM = "(new field)"


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

    ``avro`` and ``json_schema`` values (``value_plan``) become JSON text first, in the JVM: Avro through
    Spark's ``from_avro`` with each record's writer schema resolved to the reader schema, then ``to_json``;
    JSON Schema values by dropping the wire format's header. Every field rule below then reads them as it
    reads JSON. A value that is not framed, names a schema id the registry lacks, was written with a schema
    the reader cannot read, or does not decode gets one ``value`` problem naming the schema id.
    """
    from pyspark.sql import functions as F

    if spec.format != "json" and value_plan is None:
        raise ContractError(f"transform.format {spec.format} needs a ValuePlan (spark_jobs/value_formats.py)")
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
    if value_plan is None:
        text, format_problem = F.col("_kafka_value").cast("string"), F.lit(None).cast("string")
    else:
        df = _with_value_text(df, value_plan, spec.max_value_bytes)
        text, format_problem = F.col("_vt"), F.col("_fp")
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
    noun = _NOUN[spec.format]
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
            F.concat(F.lit("value: expected a JSON object, got "), _kind_text(F.schema_of_variant(v))),
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


def unknown_fields(decoded: DataFrame, known: Iterable[str]) -> DataFrame:
    """Distinct top-level keys of readable records that are not in ``known`` (a small DataFrame ``name``)."""
    from pyspark.sql import functions as F

    return (
        decoded.where("_object")
        .select(F.explode(F.json_object_keys(F.col("_text"))).alias("name"))
        .where(~F.col("name").isin(*known))
        .distinct()
    )


@dataclass(frozen=True)
class NewFields:
    """What a batch does about the fields its records carry that silver does not have.

    ``added``: fields that become silver columns. ``ignored``: at most
    ``transform.limits.field_names`` names, each with why it stays out.
    ``unknown``: how many distinct names stay out in all (named or not).
    ``refused``: records carrying a usable new name beyond the run's column
    cap go to quarantine (:func:`refuse_new_fields`). ``waiting``: usable
    names with only nulls so far, to be added once a value shows a type (never
    refused meanwhile).
    """

    added: list[FieldSpec]
    ignored: dict[str, str]
    unknown: int
    refused: bool
    waiting: tuple[str, ...] = ()


def plan_new_fields(decoded: DataFrame, spec: TransformSpec, fields: Sequence[FieldSpec], *,
                    budget: int | None = None) -> NewFields:  # fmt: skip
    """New fields seen in this batch, within the caps of ``transform.limits``.

    With ``new_fields: add``, a new field with a usable name becomes a column of
    the type its values show (:func:`infer_type`), up to ``budget`` columns
    (what is left of ``limits.new_columns`` this run); with ``ignore``, or when
    the name cannot be a column, it is reported and left out of silver. Only
    the first names in order are brought to the driver, so a producer writing
    a new name into every record costs a count, not a list of them all.
    """
    from pyspark.sql import functions as F

    limits = spec.limits
    budget = limits.new_columns if budget is None else max(0, budget)
    known = [f.name for f in fields]
    lowered = {n.lower(): n for n in known}
    unknown = unknown_fields(decoded, known)
    wanted = limits.field_names + budget + 1
    names = sorted(r["name"] for r in unknown.orderBy("name").limit(wanted).collect())
    total = len(names) if len(names) < wanted else unknown.count()
    ignored: dict[str, str] = {}
    usable = []
    for name in names:
        if spec.new_fields == "ignore":
            ignored[name] = "transform.new_fields is 'ignore'"
        elif not FIELD_NAME.fullmatch(name):
            ignored[name] = "not usable as a column name (letters, digits and '_', starting with a letter)"
        elif name.lower() in lowered:
            ignored[name] = f"differs only in case from field {lowered[name.lower()]!r}"
        else:
            usable.append(name)
    # More usable names than the cap allows, or names never brought here: records with such names
    # are refused by one exact filter, whatever this sample holds.
    refused = spec.new_fields == "add" and (len(usable) > budget or len(names) < total)
    usable = usable[:budget]
    added, waiting = [], []
    if usable:
        parsed = F.try_parse_json(F.col("_text"))  # parsed again only here: a new field is rare
        row = (
            decoded.where(F.size("_problems") == 0)
            .agg(*(F.schema_of_variant_agg(F.variant_get(parsed, f"$.{n}", "variant")).alias(n) for n in usable))
            .collect()[0]
        )
        for name in usable:
            inferred = infer_type(row[name])
            if inferred is None:
                ignored[name] = "only null values so far; added once a value shows its type"
                waiting.append(name)
            else:
                added.append(FieldSpec(name=name, type=inferred))
    named = dict(sorted(ignored.items())[: limits.field_names])
    return NewFields(added=added, ignored=named, unknown=total - len(added), refused=refused, waiting=tuple(waiting))


def refuse_new_fields(decoded: DataFrame, allowed: Sequence[str], cap: int | str) -> DataFrame:
    """``decoded`` with a problem for each readable record that carries a usable field name not in ``allowed``:
    silver has taken the columns a cap allows, and such a record would need more. ``cap`` names the cap
    (``transform.limits.silver_columns (500 silver columns in all)``); a number is the run's
    ``transform.limits.new_columns``."""
    from pyspark.sql import functions as F

    named = cap if isinstance(cap, str) else f"transform.limits.new_columns ({cap} new silver columns a run)"
    lowered = sorted({a.lower() for a in allowed})
    keys = F.json_object_keys(F.col("_text"))
    beyond = F.filter(keys, lambda k: k.rlike(f"^{FIELD_NAME.pattern}$") & ~F.lower(k).isin(*lowered))
    problem = F.struct(
        F.lit(NEW_FIELD_PROBLEM).alias("field"),
        F.concat(
            F.lit("new field "), beyond[0],
            F.lit(f" beyond {named}; raise the limit "
                  "or fix the producer, then replay these records (trigger-form action replay_quarantine)"),
        ).alias("message"),
    )  # fmt: skip
    refused = F.col("_object") & (F.size(beyond) > 0)
    return decoded.withColumn(
        "_problems", F.when(refused, F.concat(F.col("_problems"), F.array(problem))).otherwise(F.col("_problems"))
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
