"""``avro``: Avro binary, plain (written with a schema file's schema) or framed with registry schema ids.

The reader schema is parsed once per run in the driver's JVM; each writer schema
id a batch carries is checked with Avro's own ``SchemaCompatibility`` against
it. Decoding is Spark's ``from_avro`` in the executors (PERMISSIVE), each writer
schema resolved to the reader schema (added fields take their defaults, removed
ones are skipped), then ``to_json``.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from include.contract.errors import ContractError, ValueSchemaError
from include.contract.value_formats import AVRO, FormatRules
from spark_jobs.formats.base import Writer
from spark_jobs.formats.framing import frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from include.readers.schema_registry import RegisteredSchema
    from spark_jobs.formats.base import ValuePlan
    from spark_jobs.formats.schemas import ValueSchemas


def _avro_fields(schema_text: str) -> list[dict[str, Any]]:
    try:
        schema = json.loads(schema_text)
    except ValueError:
        return []
    return schema.get("fields", []) if isinstance(schema, dict) else []


def _row_fields(fields: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A change-event envelope's row fields: those of the record its ``after`` holds (a union with null,
    the record defined there or, as Debezium writes it, named after its definition in ``before``)."""
    named: dict[str, dict[str, Any]] = {}

    def collect(t: Any, namespace: str = "") -> None:
        if isinstance(t, list):
            for member in t:
                collect(member, namespace)
        elif isinstance(t, dict) and t.get("type") == "record":
            ns = t.get("namespace", namespace)
            named[str(t.get("name"))] = named[f"{ns}.{t.get('name')}" if ns else str(t.get("name"))] = t
            for f in t.get("fields", []):
                collect(f.get("type"), ns)

    for f in fields:
        collect(f.get("type"))
    after = next((f.get("type") for f in fields if f.get("name") == "after"), None)
    for member in after if isinstance(after, list) else [after]:
        record = named.get(member) if isinstance(member, str) else member
        if isinstance(record, dict) and record.get("type") == "record":
            return list(record.get("fields", []))
    return []


def _never_null(avro_type: object) -> bool:
    """Whether a field of this Avro type always has a value (not a union holding null, not null itself)."""
    if isinstance(avro_type, list):
        return "null" not in avro_type
    if isinstance(avro_type, dict):
        return avro_type.get("type") != "null"
    return avro_type != "null"


def jvm_schema(schemas: ValueSchemas, text: str, what: str) -> Any:
    """``text`` parsed by Avro in the driver's JVM; :class:`ValueSchemaError` naming ``what`` if it is no schema."""
    jvm: Any = schemas.spark._jvm
    try:
        return jvm.org.apache.avro.Schema.Parser().parse(text)
    except Exception as exc:  # noqa: BLE001 (py4j wraps Avro's SchemaParseException)
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise ValueSchemaError(f"{what} is not a valid Avro schema: {message}") from None


class AvroValues:
    """Avro values: the reader schema parsed once, writer ids checked for compatibility with it."""

    rules: FormatRules = AVRO

    def __init__(self) -> None:
        self._jvm_reader: Any = None

    def open(self, schemas: ValueSchemas, where: str) -> None:
        """Parse the reader schema (every writer id's check reads it), check it declares the pipeline's fields,
        and note a field that is never null (a null there means the bytes did not decode)."""
        spec = schemas.spec
        self._jvm_reader = jvm_schema(schemas, schemas.reader_text, f"the reader schema, {where}")
        fields = _avro_fields(schemas.reader_text)
        # Change events: the declared fields are the row's, inside the envelope's ``after``.
        names = {f.get("name") for f in (_row_fields(fields) if spec.cdc else fields)}
        missing = [f.name for f in spec.fields if f.name not in names]
        if missing:
            raise ValueSchemaError(
                f"transform: field(s) {', '.join(missing)} are declared in the pipeline file but the reader "
                f"schema ({where}) has no such field; declare only fields of the "
                f"{'row in its after field' if spec.cdc else 'record'} "
                f"({', '.join(sorted(str(n) for n in names))}), or register a schema version that has them"
            )
        schemas.required_field = next((f["name"] for f in fields if _never_null(f.get("type"))), None)

    def writer(self, schemas: ValueSchemas, found: RegisteredSchema) -> Writer:
        """The writer schema if the reader schema can read what it wrote (Avro's own compatibility check)."""
        jvm: Any = schemas.spark._jvm
        try:
            writer = jvm_schema(schemas, found.schema, f"writer schema id {found.id}")
        except ValueSchemaError as exc:
            return Writer(found.id, problem=str(exc))
        result = jvm.org.apache.avro.SchemaCompatibility.checkReaderWriterCompatibility(self._jvm_reader, writer)
        if result.getType().toString() == "COMPATIBLE":
            return Writer(found.id, schema=found.schema)
        reasons = [f"{i.getType().toString()} at {i.getLocation()}: {i.getMessage()}"
                   for i in result.getResult().getIncompatibilities()]  # fmt: skip
        reader = f"id {schemas.reader.id}" if schemas.reader else "the reader schema"
        return Writer(found.id, problem=f"written with a schema the reader schema ({reader}) cannot read: "
                                        + "; ".join(reasons[:3]))  # fmt: skip

    def value_text(self, df: DataFrame, plan: ValuePlan | None, max_value_bytes: int) -> tuple[DataFrame, Column, Column]:
        """Spark's ``from_avro`` in PERMISSIVE mode, one branch per usable writer id when framed, then ``to_json``;
        bytes that do not decode get a problem naming the schema they were read with."""
        from pyspark.sql import functions as F
        from pyspark.sql.avro.functions import from_avro

        if plan is None or plan.reader is None:  # ValueSchemas.plan always gives an Avro plan its reader schema
            raise ContractError("transform.format avro: the value plan has no reader schema")
        df, problem = frame(df, plan)
        sid, payload = F.col("_sid"), F.col("_payload")
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
        present = F.col("_kafka_value").isNotNull() & (F.octet_length(F.col("_kafka_value")) > 0)
        fp = F.when(F.col("_fp0").isNotNull(), F.col("_fp0")).when(
            present & failed,
            F.concat(F.lit("value: the bytes do not decode as Avro with "), where, F.lit(hedge)),
        )
        df = df.select("*", F.to_json(avro).alias("_vt"), fp.alias("_fp"))
        return df, F.col("_vt"), F.col("_fp")
