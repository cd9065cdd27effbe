"""The bronze → silver transform of a pipeline: record schema, merge key, ordering and policies.

Pure data, shared by both sides: ``include/config/transform.py`` builds a
:class:`TransformSpec` from the pipeline file (and validates it there, with
file and field in every error); the Spark job ``spark_jobs/bronze_to_silver.py``
receives it as JSON. Nothing here imports Spark or YAML. The value formats are
:mod:`include.contract.value_formats`; where silver stands (its batch commit
record and position) is :mod:`include.contract.silver_stand`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from include.contract.errors import ContractError

#: Simple field types and what a JSON value must be to take them.
SIMPLE_TYPES = ("string", "int", "long", "double", "boolean", "date", "timestamp", "json")
#: ``decimal(precision, scale)``: 1 <= precision <= 38, 0 <= scale <= precision.
DECIMAL = re.compile(r"decimal\(\s*(\d{1,2})\s*,\s*(\d{1,2})\s*\)")
NUMERIC_TYPES = ("int", "long", "double")
#: Types an ordering field may have: ones whose order means "newer".
ORDERING_TYPES = ("int", "long", "double", "date", "timestamp", "string")
#: Types a merge key field may have.
KEY_TYPES = ("string", "int", "long", "date", "boolean")

TombstonePolicy = Literal["quarantine", "delete"]
TOMBSTONE_POLICIES: tuple[str, ...] = get_args(TombstonePolicy)
NewFieldPolicy = Literal["ignore", "add"]
NEW_FIELD_POLICIES: tuple[str, ...] = get_args(NewFieldPolicy)
#: Change-event envelopes the transform unwraps: ``debezium`` (Debezium's change events, JSON with or
#: without Connect's schemas, or Avro).
Envelope = Literal["debezium"]
ENVELOPES: tuple[str, ...] = get_args(Envelope)
#: Debezium connectors whose source position the transform orders by (``source.connector``).
CdcSource = Literal["postgresql"]
CDC_SOURCES: tuple[str, ...] = get_args(CdcSource)
#: Debezium's stand-in for an unchanged TOASTed value that PostgreSQL did not send.
DEBEZIUM_UNAVAILABLE = "__debezium_unavailable_value"
#: How a registry subject is named from the topic and the record (Confluent's strategies).
SubjectStrategy = Literal["topic_name", "record_name", "topic_record_name"]
SUBJECT_STRATEGIES: tuple[str, ...] = get_args(SubjectStrategy)

#: Field and column names: what Delta and Spark SQL take without quoting.
FIELD_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_]{0,127}")
#: Silver's own columns start with ``_``; record fields never do.
SYSTEM_PREFIX = "_"

DEFAULT_MAX_VALUE_BYTES = 1024 * 1024


def normalize_type(text: str) -> str | None:
    """The canonical spelling of a field type (``'Decimal(10, 2)'`` → ``'decimal(10,2)'``), or ``None``."""
    t = text.strip().lower()
    if t in SIMPLE_TYPES:
        return t
    m = DECIMAL.fullmatch(t)
    if m:
        precision, scale = int(m.group(1)), int(m.group(2))
        if 1 <= precision <= 38 and 0 <= scale <= precision:
            return f"decimal({precision},{scale})"
    return None


def is_decimal(type_name: str) -> bool:
    """Whether ``type_name`` (canonical) is a decimal type."""
    return type_name.startswith("decimal(")


def spark_type(type_name: str) -> str:
    """The Spark SQL type of a field type; ``json`` fields are kept as their JSON text."""
    return {"long": "bigint", "json": "string"}.get(type_name, type_name)


@dataclass(frozen=True)
class FieldSpec:
    """One declared field of the record value.

    Attributes:
        name: The JSON key and the silver column name.
        type: Canonical type (see :data:`SIMPLE_TYPES`, or ``decimal(p,s)``).
        required: The key must be present with a non-null value.
        minimum: For numeric and decimal fields: the smallest allowed value.
        maximum: For numeric and decimal fields: the largest allowed value.
        allowed: The only values allowed (strings for ``string``, integers for
            ``int``/``long``).
        max_length: For ``string`` and ``json`` fields: at most this many characters.
    """

    name: str
    type: str
    required: bool = False
    minimum: float | None = None
    maximum: float | None = None
    allowed: tuple[Any, ...] | None = None
    max_length: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "type": self.type,
            "required": self.required,
            "minimum": self.minimum,
            "maximum": self.maximum,
            "allowed": list(self.allowed) if self.allowed is not None else None,
            "max_length": self.max_length,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> FieldSpec:
        allowed = data.get("allowed")
        return cls(
            name=data["name"],
            type=data["type"],
            required=bool(data.get("required", False)),
            minimum=data.get("minimum"),
            maximum=data.get("maximum"),
            allowed=tuple(allowed) if allowed is not None else None,
            max_length=data.get("max_length"),
        )


def subject_name(strategy: str, topic: str | None, record_name: str | None) -> str:
    """The value subject Confluent's naming ``strategy`` gives a topic and a record's full name."""
    if strategy == "topic_name":
        if not topic:
            raise ContractError("subject strategy topic_name needs the topic")
        return f"{topic}-value"
    if not record_name:
        raise ContractError(f"subject strategy {strategy} needs the record's full name")
    if strategy == "record_name":
        return record_name
    if strategy == "topic_record_name":
        if not topic:
            raise ContractError("subject strategy topic_record_name needs the topic")
        return f"{topic}-{record_name}"
    raise ContractError(f"unknown subject strategy {strategy!r}")


@dataclass(frozen=True)
class ValueSchema:
    """Where the schema of a non-JSON value comes from (``transform.value_schema``).

    Exactly one of ``text`` (the schema itself, read from ``file`` when the
    pipeline file was loaded: values are plain Avro binary written with it) and
    ``registry`` (an Airflow connection id: values are in the Confluent wire
    format, magic byte 0 and a 4-byte schema id before the payload).

    Attributes:
        file: The schema file as error messages show it.
        text: The schema file's content.
        registry: The Airflow connection of the schema registry (URL and credentials live there).
        subject: The registry subject of the reader schema, named by ``subject_strategy``.
        subject_strategy: How ``subject`` was named (:data:`SUBJECT_STRATEGIES`).
        version: The subject's version to read with; ``None`` takes the latest at the run's start.
    """

    file: str | None = None
    text: str | None = None
    registry: str | None = None
    subject: str | None = None
    subject_strategy: str | None = None
    version: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "text": self.text,
            "registry": self.registry,
            "subject": self.subject,
            "subject_strategy": self.subject_strategy,
            "version": self.version,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ValueSchema:
        version = data.get("version")
        return cls(
            file=data.get("file"),
            text=data.get("text"),
            registry=data.get("registry"),
            subject=data.get("subject"),
            subject_strategy=data.get("subject_strategy"),
            version=int(version) if version is not None else None,
        )


@dataclass(frozen=True)
class TransformLimits:
    """Caps on what one producer's records can make the transform keep or do (``transform.limits``).

    Attributes:
        field_names: Unknown field names a batch records by name (the rest only counted).
        new_columns: Silver columns one run may add with ``new_fields: add``; records that would
            add more go to quarantine naming this cap.
        schema_ids: Distinct writer schema ids a batch looks up in the registry; records with
            further ids go to quarantine naming this cap.
        silver_columns: Columns silver may hold in all (the pipeline's fields and those added); records
            that would add one past it go to quarantine naming this cap.
    """

    field_names: int = 20
    new_columns: int = 20
    schema_ids: int = 20
    silver_columns: int = 500

    def to_json(self) -> dict[str, int]:
        return {
            "field_names": self.field_names,
            "new_columns": self.new_columns,
            "schema_ids": self.schema_ids,
            "silver_columns": self.silver_columns,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> TransformLimits:
        data = data or {}
        default = cls()
        return cls(
            field_names=int(data.get("field_names", default.field_names)),
            new_columns=int(data.get("new_columns", default.new_columns)),
            schema_ids=int(data.get("schema_ids", default.schema_ids)),
            silver_columns=int(data.get("silver_columns", default.silver_columns)),
        )


@dataclass(frozen=True)
class TransformSpec:
    """How bronze records become silver rows (section ``transform`` of a pipeline file).

    Attributes:
        fields: The declared fields, in column order.
        key: Names of the fields that identify a row (the MERGE key); each is required.
        ordering: Name of the field that says which record of a key is newer
            (event time); required unless ``envelope`` is set (then ``None``: the source's commit
            position orders). Kafka offset breaks ties.
        format: Record value format (:data:`~include.contract.value_formats.FORMATS`); each record is one object of ``fields``.
        value_schema: Where ``avro`` and ``json_schema`` values find their schemas; ``None`` for ``json``.
        tombstones: ``quarantine`` or ``delete`` (a null value deletes its key,
            named by the Kafka key).
        new_fields: ``ignore`` or ``add`` (fields not declared become silver columns).
        max_value_bytes: Larger values go to quarantine.
        limits: Caps on what one producer can make a run keep or do (:class:`TransformLimits`).
        envelope: ``debezium``: each value is a change event whose row is the record (:data:`ENVELOPES`);
            ``None``: each value is the record itself.
        source: With ``envelope``, the connector (:data:`CDC_SOURCES`) whose events the topic holds.
    """

    fields: tuple[FieldSpec, ...]
    key: tuple[str, ...]
    ordering: str | None
    format: str = "json"
    tombstones: str = "quarantine"
    new_fields: str = "ignore"
    max_value_bytes: int = DEFAULT_MAX_VALUE_BYTES
    value_schema: ValueSchema | None = None
    limits: TransformLimits = field(default_factory=TransformLimits)
    envelope: str | None = None
    source: str | None = None

    @property
    def cdc(self) -> bool:
        """Values are change events (``envelope`` set): the source's position orders, not a field."""
        return self.envelope is not None

    def field_named(self, name: str) -> FieldSpec:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(name)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": self.format,
            "fields": [f.to_json() for f in self.fields],
            "key": list(self.key),
            "ordering": self.ordering,
            "tombstones": self.tombstones,
            "new_fields": self.new_fields,
            "max_value_bytes": self.max_value_bytes,
            "limits": self.limits.to_json(),
            "value_schema": self.value_schema.to_json() if self.value_schema else None,
            **({"envelope": self.envelope, "source": self.source} if self.envelope else {}),
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> TransformSpec:
        value_schema = data.get("value_schema")
        return cls(
            fields=tuple(FieldSpec.from_json(f) for f in data["fields"]),
            key=tuple(data["key"]),
            ordering=data.get("ordering"),
            format=data.get("format", "json"),
            tombstones=data.get("tombstones", "quarantine"),
            new_fields=data.get("new_fields", "ignore"),
            max_value_bytes=int(data.get("max_value_bytes", DEFAULT_MAX_VALUE_BYTES)),
            limits=TransformLimits.from_json(data.get("limits")),
            value_schema=ValueSchema.from_json(value_schema) if value_schema else None,
            envelope=data.get("envelope"),
            source=data.get("source"),
        )
