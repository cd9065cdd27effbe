"""The record value formats a transform reads, one entry each: what a format needs and how it is named.

Pure data, read by both sides: ``include/config`` validates ``transform.format``
and ``transform.value_schema`` against it (and documents each format from its
``description``), the Spark job (``spark_jobs/formats/``, one runtime module per
format, registered under the same name) names a value in its quarantine reasons
with ``noun`` and checks a registry's schema type with ``registry_type``.

Adding a format: its :class:`FormatRules` here and one line of
:data:`VALUE_FORMATS`, then its runtime module under ``spark_jobs/formats/`` and
one line of that package's registry. The Debezium envelope
(``transform.envelope``) sits on top of any format whose ``envelope_refused`` is
``None``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FormatRules:
    """What one record value format needs, and how messages and the pipeline file reference name it.

    Attributes:
        name: The value of ``transform.format``.
        description: The format's sentences in ``transform.format``'s description (the reference).
        noun: A value of the format in a quarantine reason (``value: expected <noun>, got ...``).
        needs_schema: Values need ``transform.value_schema`` (refused for a format without).
        schema_file: The value schema may be a file (``value_schema.file``: plain values, no registry ids);
            without, ``value_schema.registry`` only (the values carry registry schema ids).
        registry_type: The registry's ``schemaType`` of the format's schemas; ``None`` when it reads none.
        envelope_refused: What ``transform.envelope`` expects instead when it cannot sit on this format;
            ``None``: change events may come in this format.
    """

    name: str
    description: str
    noun: str
    needs_schema: bool = False
    schema_file: bool = False
    registry_type: str | None = None
    envelope_refused: str | None = None


JSON = FormatRules(
    name="json",
    description="json (default): each record value is a JSON object.",
    noun="a JSON object",
)
AVRO = FormatRules(
    name="avro",
    description="avro: Avro binary, decoded in the JVM by Spark's from_avro (needs value_schema).",
    noun="an Avro record",
    needs_schema=True,
    schema_file=True,
    registry_type="AVRO",
)
JSON_SCHEMA = FormatRules(
    name="json_schema",
    description="json_schema: a JSON object behind the Confluent wire format's header, as Confluent's JSON "
    "Schema serializer writes it (needs value_schema.registry).",
    noun="a JSON object",
    needs_schema=True,
    registry_type="JSON",
)
PROTOBUF = FormatRules(
    name="protobuf",
    description="protobuf: a Protobuf message behind that header and its message-index path, as Confluent's "
    "Protobuf serializer writes it, decoded in the JVM against the registry's schema and its imports (needs "
    "value_schema.registry).",
    noun="a Protobuf message",
    needs_schema=True,
    registry_type="PROTOBUF",
    envelope_refused="format json or avro with transform.envelope (Debezium's converters write change events "
    "as JSON or Avro; no test runs its Protobuf converter)",
)

#: Every format by name, in the order the reference lists them (``json``, the default, first).
VALUE_FORMATS: dict[str, FormatRules] = {f.name: f for f in (JSON, AVRO, JSON_SCHEMA, PROTOBUF)}
#: Record value formats (``transform.format``).
FORMATS: tuple[str, ...] = tuple(VALUE_FORMATS)
#: Formats that need ``transform.value_schema``.
SCHEMA_FORMATS: tuple[str, ...] = tuple(n for n, f in VALUE_FORMATS.items() if f.needs_schema)
#: Formats whose values carry registry schema ids: ``value_schema.registry`` only, never a schema file.
REGISTRY_FORMATS: tuple[str, ...] = tuple(n for n in SCHEMA_FORMATS if not VALUE_FORMATS[n].schema_file)
