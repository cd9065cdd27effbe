"""``protobuf``: a Protobuf message behind the Confluent wire format's header and its message-index path.

Values are decoded with their writer schema, as Protobuf reads any message:
fields the reader does not know are left out, fields the writer did not send take
their defaults or are absent. Each writer schema and its imports are compiled
once per run into a descriptor set (:mod:`spark_jobs.formats.protobuf_descriptors`);
a writer none of whose messages declares the pipeline's fields, or whose files do
not compile, sends its records to quarantine naming the id. Decoding is the
project's own Java function (:data:`PROTOBUF_FUNCTION`), registered when the run opens.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

from include.contract.errors import ValueSchemaError
from include.contract.value_formats import PROTOBUF, FormatRules
from include.readers.schema_registry import (
    RegisteredSchema,
    SchemaRegistryError,
    is_not_found,
    referenced_texts,
)
from spark_jobs.formats import protobuf_descriptors
from spark_jobs.formats.base import Writer
from spark_jobs.formats.framing import frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from spark_jobs.formats.base import ValuePlan
    from spark_jobs.formats.schemas import ValueSchemas

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


def compiled(schemas: ValueSchemas, schema: RegisteredSchema) -> Writer:
    """``schema`` compiled with its imports into a descriptor set; or why its values cannot give the
    declared fields: its files do not compile, or none of its messages declares them all. A registry
    that cannot answer for an import raises :class:`SchemaRegistryError`."""
    assert schemas.client is not None  # a registry format: the run has a registry client
    try:
        descriptor, file = protobuf_descriptors.build(schema.id, schema.schema,
                                                      referenced_texts(schemas.client, schema))  # fmt: skip
    except protobuf_descriptors.DescriptorError as exc:
        return Writer(schema.id, problem=str(exc))
    messages = protobuf_descriptors.message_types(descriptor, file)
    wanted = [f.name for f in schemas.spec.fields]
    if not any(all(name in m.fields for name in wanted) for m in messages):
        return Writer(schema.id, problem=(
            f"has no message declaring every declared field ({', '.join(wanted)}); its messages: "
            + "; ".join(f"{m.name} ({', '.join(m.fields) or 'no fields'})" for m in messages[:8])))  # fmt: skip
    return Writer(schema.id, schema=schema.schema, descriptor=descriptor, file=file)


class ProtobufValues:
    """Protobuf values: each writer schema compiled once per run, decoded in the JVM with it."""

    rules: FormatRules = PROTOBUF

    def open(self, schemas: ValueSchemas, where: str) -> None:
        """Compile the reader schema (values written with it need no second compile) and register the function."""
        assert schemas.reader is not None  # a registry format (the loader refuses a schema file)
        try:
            reader = compiled(schemas, schemas.reader)
        except SchemaRegistryError as exc:
            raise ValueSchemaError(f"transform.value_schema: cannot read the imports of {where}: {exc}") from None
        if reader.problem:
            raise ValueSchemaError(f"transform: the reader schema ({where}): {reader.problem}; declare only "
                                   "fields of the message the values hold, or register a schema version that has "
                                   "them")  # fmt: skip
        schemas.writers[reader.id] = reader  # values written with the reader schema itself: compiled once
        try:
            schemas.spark.udf.registerJavaFunction(PROTOBUF_FUNCTION, PROTOBUF_FUNCTION_CLASS, PROTOBUF_FUNCTION_TYPE)
        except Exception as exc:  # noqa: BLE001 (py4j wraps the JVM's ClassNotFoundException)
            raise ValueSchemaError(
                f"transform.format protobuf: the JVM has no {PROTOBUF_FUNCTION_CLASS} ({str(exc).splitlines()[0]}); "
                "its jar is built by `make setup` and goes on spark.jars with the project's other jars"
            ) from None

    def writer(self, schemas: ValueSchemas, found: RegisteredSchema) -> Writer:
        """The writer schema compiled with its imports; an import the registry does not hold is the id's problem."""
        try:
            return compiled(schemas, found)
        except SchemaRegistryError as exc:
            if is_not_found(exc):
                return Writer(found.id, problem=f"imports a schema that is not registered: {exc}")
            raise ValueSchemaError(f"cannot read the imports of writer schema id {found.id}: {exc}") from None

    def value_text(self, df: DataFrame, plan: ValuePlan | None, max_value_bytes: int) -> tuple[DataFrame, Column, Column]:
        """:data:`PROTOBUF_FUNCTION` in the JVM, one branch per usable writer id, each with the writer's descriptor
        set as a literal (each executor parses it once, under a key naming id and content). A value over
        ``max_value_bytes`` is never decoded (its record's problem is its size), and the JSON of one within it is
        bounded (:data:`PROTOBUF_JSON_FACTOR`)."""
        from pyspark.sql import functions as F

        assert plan is not None  # a schema format: the transform always plans its values
        df, problem = frame(df, plan)
        sid, payload = F.col("_sid"), F.col("_payload")
        max_json = F.lit(min(PROTOBUF_JSON_FACTOR * max_value_bytes, PROTOBUF_JSON_MAX))
        too_large = F.octet_length(F.col("_kafka_value")) > max_value_bytes
        decoded = F.when(too_large, F.lit(None).cast(PROTOBUF_FUNCTION_TYPE))
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
        df = df.select("*", F.col("_pb.json").alias("_vt"), fp.alias("_fp"))
        return df, F.col("_vt"), F.col("_fp")
