"""The ``transform`` section (how bronze records become silver rows) and the files it names.

A transform's fields are given in the pipeline file (``transform.schema``)
or in a YAML schema file beside it; an Avro value's schema comes from an
``.avsc`` file or a schema registry (``transform.value_schema``). The section
loads into a :class:`~include.contract.transform_spec.TransformSpec`, what the
Spark job reads.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Annotated, Any

from pydantic import (
    BeforeValidator,
    Field,
    GetJsonSchemaHandler,
    TypeAdapter,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic.dataclasses import dataclass as pydantic_dataclass
from pydantic_core import PydanticUseDefault

from include import settings
from include.config import owned_files
from include.config.errors import (
    _choices,
    _config_error,
    _did_you_mean,
    _display_path,
    _invalid,
    _problem,
    _suffix,
    _unquote_hint,
)
from include.config.sections import _SECTION_CONFIG, _optional, _Section
from include.config.validators import _choice, _integer, _text
from include.config.yaml_reader import _parse_yaml
from include.contract.transform_spec import (
    CDC_SOURCES,
    DEFAULT_MAX_VALUE_BYTES,
    ENVELOPES,
    FIELD_NAME,
    FORMATS,
    KEY_TYPES,
    NEW_FIELD_POLICIES,
    NUMERIC_TYPES,
    ORDERING_TYPES,
    SIMPLE_TYPES,
    SUBJECT_STRATEGIES,
    SYSTEM_PREFIX,
    TOMBSTONE_POLICIES,
    CdcSource,
    Envelope,
    FieldSpec,
    NewFieldPolicy,
    SubjectStrategy,
    TombstonePolicy,
    TransformLimits,
    TransformSpec,
    ValueFormat,
    ValueSchema,
    is_decimal,
    normalize_type,
    subject_name,
)

#: Largest ``transform.max_value_bytes``: 64 MiB.
MAX_VALUE_BYTES_LIMIT = 64 * 1024**2
_TYPE_EXPECTED = (
    f"a field type: one of {', '.join(SIMPLE_TYPES)}, or decimal(p,s) with precision p "
    "from 1 to 38 and scale s from 0 to p"
)
#: Other spellings of a field type, for the did-you-mean of an unknown type.
_TYPE_ALIASES = {
    "str": "string",
    "text": "string",
    "varchar": "string",
    "integer": "int",
    "bigint": "long",
    "float": "double",
    "number": "double",
    "bool": "boolean",
    "datetime": "timestamp",
    "decimal": "decimal(p,s)",
    "numeric": "decimal(p,s)",
    "object": "json",
}
_FIELD_NAME_EXPECTED = (
    "a field name (letters, digits and '_', starting with a letter, at most 128 characters)"
)


def _check_field_type(value: Any) -> str:
    canonical = normalize_type(value) if isinstance(value, str) else None
    if canonical is None:
        hint = ""
        if isinstance(value, str):
            word = value.strip().lower()
            hint = f"; did you mean {_TYPE_ALIASES[word]!r}?" if word in _TYPE_ALIASES else ""
            hint = hint or _did_you_mean(word, SIMPLE_TYPES)
        raise _invalid(_TYPE_EXPECTED, value, hint)
    return canonical


def _check_required(value: Any) -> bool:
    if not isinstance(value, bool):
        raise _invalid("true or false", value)
    return value


def _check_bound(value: Any, info: ValidationInfo) -> int | float:
    """``minimum`` or ``maximum``: a number, on numeric fields only, the maximum at least the minimum."""
    bound, type_name = info.field_name, info.data.get("type")
    if type_name is not None and not (type_name in NUMERIC_TYPES or is_decimal(type_name)):
        expected = f"no {bound} on {type_name} fields (only int, long, double and decimal fields take one)"
        raise _invalid(expected, value)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _invalid("a number", value, _unquote_hint(value))
    minimum = info.data.get("minimum")
    if bound == "maximum" and minimum is not None and value < minimum:
        raise _invalid(f"a number >= the minimum {minimum!r}", value)
    return value


def _check_allowed(value: Any, info: ValidationInfo) -> tuple[str | int, ...]:
    type_name = info.data.get("type")
    if type_name is None:  # the type is wrong (and reported): which values fit it cannot be told
        raise PydanticUseDefault()
    if type_name not in ("string", "int", "long"):
        expected = f"no allowed list on {type_name} fields (only string, int and long fields take one)"
        raise _invalid(expected, value)
    what = "string" if type_name == "string" else "integer"
    if not isinstance(value, list) or not value:
        hint = f"; write [{value}]" if isinstance(value, (str, int)) and not isinstance(value, bool) else ""
        raise _invalid(f"a non-empty list of {what}s", value, hint)
    for i, item in enumerate(value):
        if what == "string" and not isinstance(item, str):
            hint = ""
            if isinstance(item, bool):
                hint = "; quote it (YAML reads yes, no, on, off, true and false as booleans)"
            elif isinstance(item, (int, float)):
                hint = "; quote it"
            raise _invalid("a string", item, hint, at=f"[{i}]")
        if what == "integer" and (isinstance(item, bool) or not isinstance(item, int)):
            raise _invalid("an integer", item, _unquote_hint(item), at=f"[{i}]")
        if item in value[:i]:
            raise _invalid("each value once", item, " a second time", at=f"[{i}]")
    return tuple(value)


def _check_max_length(value: Any, info: ValidationInfo) -> int:
    type_name = info.data.get("type")
    if type_name is not None and type_name not in ("string", "json"):
        expected = f"no max_length on {type_name} fields (only string and json fields take one)"
        raise _invalid(expected, value)
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid("a positive integer", value, _unquote_hint(value))
    return value


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class SchemaField(_Section):
    """One field of the record value (an entry of ``transform.schema``): its type, or its settings."""

    type: Annotated[str, BeforeValidator(_check_field_type)] = Field(
        description="Required: string, int, long, double, boolean, date, timestamp, json or decimal(p,s) "
        "(precision 1-38, scale 0-p; quote it inside {...}, where the comma splits). Writing only the type "
        "(status: string) is short for {type: string}."
    )
    required: Annotated[bool, BeforeValidator(_check_required)] = Field(
        default=False, description="true or false (default): the key must be present with a non-null value."
    )
    minimum: Annotated[int | float, BeforeValidator(_check_bound)] = _optional(
        "Smallest allowed value; int, long, double and decimal fields only. Left out: no lower bound."
    )
    maximum: Annotated[int | float, BeforeValidator(_check_bound)] = _optional(
        "Largest allowed value, at least minimum; int, long, double and decimal fields only. Left out: no "
        "upper bound."
    )
    allowed: Annotated[tuple[str | int, ...], BeforeValidator(_check_allowed)] = _optional(
        "The only values allowed: a non-empty list of distinct strings for string fields, of integers for "
        "int and long fields; each within minimum, maximum and max_length. Left out: any value of the type."
    )
    max_length: Annotated[int, Field(ge=1), BeforeValidator(_check_max_length)] = _optional(
        "Positive integer: at most this many characters; string and json fields only. Left out: no limit."
    )

    @classmethod
    def __get_pydantic_json_schema__(cls, core_schema: Any, handler: GetJsonSchemaHandler) -> dict[str, Any]:
        # The type alone (status: string) is read by _shorthand; the schema says so too, for editors.
        return {"anyOf": [{"type": "string", "description": "The field's type alone."}, handler(core_schema)]}

    @classmethod
    def _expected(cls, value: Any) -> str:
        return f"a field type (e.g. string) or {super()._expected(value)}"

    @classmethod
    def _shorthand(cls, data: Any) -> Any:
        if isinstance(data, str):  # just the type
            return {"type": _check_field_type(data)}
        split = data.get("type") if isinstance(data, dict) else None
        if isinstance(split, str) and split.strip().lower().startswith("decimal(") and ")" not in split:
            # {type: decimal(10,2)}: in a flow mapping the comma ends the value and '2)' becomes a key.
            hint = '; inside {...} quote the type, e.g. "decimal(10,2)", as a bare comma ends the value'
            raise _invalid(_TYPE_EXPECTED, split, hint, at=".type")
        return data

    @model_validator(mode="after")
    def _allowed_values_pass_the_other_rules(self) -> SchemaField:
        low, high, longest = self.minimum, self.maximum, self.max_length
        for i, item in enumerate(self.allowed or ()):
            if isinstance(item, str):  # a string field's value: _check_allowed takes strings for no other
                rule, outside = f"max_length {longest}", longest is not None and len(item) > longest
            else:
                rule = f"minimum {low!r} and maximum {high!r}"
                outside = (low is not None and item < low) or (high is not None and item > high)
            if outside:
                raise _invalid(f"a value the field's {rule} let through", item, at=f".allowed[{i}]")
        return self

    def spec(self, name: str, required: bool) -> FieldSpec:
        """The field as the transform job reads it; ``required`` forces it (key and ordering fields)."""
        required = self.required or required
        return FieldSpec(name, self.type, required, self.minimum, self.maximum, self.allowed, self.max_length)


def _check_schema(value: Any) -> dict[str, Any]:
    """The mapping of field names to fields: names Delta and Spark SQL take, none twice in any case."""
    if not isinstance(value, dict) or not value:
        raise _invalid("a non-empty mapping of field names to a type or to field settings", value)
    seen: dict[str, str] = {}  # lower-case name -> name as declared
    for name in value:
        at = _suffix(name)
        if not isinstance(name, str):
            raise _invalid("a text key (quote it)", name, at=at)
        if not FIELD_NAME.fullmatch(name):
            reserved = name.startswith(SYSTEM_PREFIX)
            hint = "; names starting with '_' are reserved for silver's own columns" if reserved else ""
            raise _invalid(_FIELD_NAME_EXPECTED, name, hint, at=at)
        other = seen.setdefault(name.lower(), name)
        if other != name:
            expected = (
                f"a field name that differs from {other!r} in more than case "
                "(Delta column names are case-insensitive)"
            )
            raise _invalid(expected, name, at=at)
    return value


_Schema = Annotated[dict[str, SchemaField], BeforeValidator(_check_schema)]
_SCHEMA_FILE_EXPECTED = "the path of a YAML file of fields (relative to the pipeline file's folder)"
#: Checks a schema file's content, which has no pipeline around it.
_SCHEMA_FILE = TypeAdapter(_Schema)


def _declared_in(info: ValidationInfo) -> str:
    """Where the fields that ``transform.key`` and ``ordering`` name are declared."""
    shown = info.data.get("schema_file")
    return f"the schema file {shown}" if shown else "transform.schema"


def _check_key(value: Any, info: ValidationInfo) -> str | tuple[str, ...]:
    if isinstance(value, str):  # one field; whether it is declared is checked with the schema
        return value
    if not isinstance(value, (list, tuple)) or not value:
        expected = f"a field name or a non-empty list of field names declared in {_declared_in(info)}"
        raise _invalid(expected, value)
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _invalid(f"the name of a field declared in {_declared_in(info)}", item, at=f"[{i}]")
    return tuple(value)


def _check_ordering(value: Any, info: ValidationInfo) -> str:
    if not isinstance(value, str):
        raise _invalid(f"the name of a field declared in {_declared_in(info)}", value)
    return value


_AVSC_EXPECTED = "the path of an Avro schema file (.avsc, JSON; relative to the pipeline file's folder)"


def _check_source(value: Any) -> str:
    if value in ("mysql", "mariadb"):
        raise _invalid(
            f"one of {_choices(CDC_SOURCES)}",
            value,
            "; MySQL and MariaDB change events are not supported yet: their source position (binlog file, "
            "position and row) is not read, and no test runs such a source",
        )
    if value == "postgres":
        return "postgresql"  # what Debezium's source.connector says
    if not isinstance(value, str) or value not in CDC_SOURCES:
        raise _invalid(f"one of {_choices(CDC_SOURCES)}", value, _did_you_mean(value, CDC_SOURCES))
    return value


def _check_format(value: Any) -> str:
    if not isinstance(value, str) or value not in FORMATS:
        raise _invalid(f"one of {_choices(FORMATS)}", value, _did_you_mean(value, FORMATS))
    return value


def _check_version(value: Any) -> int | None:
    if value == "latest":
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _invalid("'latest' or a registered version number (a positive integer)", value)
    return value


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class ValueSchemaSection(_Section):
    """Where ``avro``, ``json_schema`` and ``protobuf`` values find their schema (section ``transform.value_schema``).

    Give exactly one of ``file`` (Avro only: each value is plain Avro binary
    written with the file's schema) and ``registry`` (each value is in the
    Confluent wire format; the reader schema is a subject's version and each
    record's writer schema is looked up by the id it carries).
    """

    file: Annotated[str, _text(_AVSC_EXPECTED)] | None = Field(
        default=None,
        description="An Avro schema file (.avsc), relative to the pipeline file's folder: the record schema "
        "every value was written with (plain Avro binary, no header). Read when the pipeline file is loaded. "
        "It must be a regular file of at most 1 MiB inside the pipelines folder (symlinks resolved) or under a "
        "folder the operator lists in KDE_PIPELINE_FILE_ROOTS; any other path is refused unread.",
    )
    registry: Annotated[str, _text("an Airflow connection id")] | None = Field(
        default=None,
        description="The Airflow connection (type http: host and port, or url in its extra; login and "
        "password when the registry wants them) of a Confluent-compatible schema registry. Values are in the "
        "Confluent wire format (magic byte 0, 4-byte schema id, payload).",
    )
    subject_strategy: Annotated[SubjectStrategy, _choice(SUBJECT_STRATEGIES)] = Field(
        default="topic_name",
        description="With registry: how the reader schema's subject is named, as Confluent's serializers do: "
        "topic_name (default: <topic>-value; needs exactly one topic in kafka.topics), record_name "
        "(<record_name>) or topic_record_name (<topic>-<record_name>).",
    )
    record_name: Annotated[str, _text("a record's full name, e.g. shop.Order")] | None = Field(
        default=None,
        description="With registry: the record's full name, for subject_strategy record_name and "
        "topic_record_name.",
    )
    subject: Annotated[str, _text("a registry subject")] | None = Field(
        default=None, description="With registry: the subject itself, instead of subject_strategy."
    )
    version: Annotated[int | None, BeforeValidator(_check_version)] = Field(
        default=None,
        description="With registry: latest (the default: the subject's newest version when the run starts) or "
        "a version number. The version read with is recorded in every silver batch commit.",
        json_schema_extra=lambda s: s.update(
            {
                "anyOf": [{"type": "integer", "minimum": 1}, {"const": "latest"}, {"type": "null"}],
                "default": "latest",
            }
        ),
    )

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        file, registry = data.get("file"), data.get("registry")
        if (file is None) == (registry is None):
            raise _problem(
                "expected exactly one of transform.value_schema.file (an Avro schema file) and "
                "transform.value_schema.registry (a schema registry's Airflow connection), got "
                + ("both" if file is not None else "neither"),
            )
        if file is not None:
            for key in ("record_name", "subject", "version"):
                if data.get(key) is not None and data.get(key) != "latest":
                    raise _problem(
                        f"expected no {key} with a schema file (it names a registry subject)", f".{key}"
                    )
            folder = Path((info.context or {}).get("folder", "."))
            data = {**data, "file": _read_avro_schema_file(file, folder)[1]}  # shown: how messages name it
        return data

    def resolve(self, topics: tuple[str, ...], pattern: str | None) -> ValueSchema:
        """The :class:`ValueSchema` the Spark job reads: the registry subject named, or the file's schema."""
        if self.file is not None:
            shown = Path(self.file)
            # The loader checked that the file is the pipeline's own; here it must still be a bounded regular file.
            text, _ = _read_avro_schema_file(
                self.file, settings.PROJECT_ROOT if not shown.is_absolute() else Path("/"), owned=False
            )
            return ValueSchema(file=self.file, text=text)
        subject = self.subject
        if subject is None:
            if self.subject_strategy != "record_name" and (pattern or len(topics) != 1):
                raise _ValueSchemaProblem(
                    "subject_strategy",
                    f"expected one topic in kafka.topics for subject strategy {self.subject_strategy} (the "
                    f"subject is named after the topic), got {'a topic_pattern' if pattern else len(topics)}; "
                    "set transform.value_schema.subject, or use subject_strategy record_name",
                )
            if self.subject_strategy != "topic_name" and self.record_name is None:
                raise _ValueSchemaProblem(
                    "record_name",
                    f"expected the record's full name (e.g. shop.Order) for subject strategy "
                    f"{self.subject_strategy}, got none",
                )
            subject = subject_name(self.subject_strategy, topics[0] if topics else None, self.record_name)
        return ValueSchema(
            registry=self.registry,
            subject=subject,
            subject_strategy=self.subject_strategy,
            version=self.version,
        )


class _ValueSchemaProblem(Exception):
    """A value schema that cannot be resolved: the key of ``transform.value_schema`` to blame, and why."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key, self.message = key, message


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class LimitsSection(_Section):
    """Caps on what one producer's records can make a run keep or do (section ``transform.limits``).

    A producer bug (a uuid in a field name, random leading bytes) must not
    grow the commit metadata, the ledger, XCom, the task log or silver's
    columns without bound; records beyond a cap go to quarantine with a
    reason that names it.
    """

    field_names: Annotated[int, *_integer(1, 1000)] = Field(
        default=20,
        description="Integer 1-1000, default 20: unknown field names a batch records by name in the job's "
        "summary, the silver commit and the ledger; beyond it they are only counted.",
    )
    new_columns: Annotated[int, *_integer(1, 1000)] = Field(
        default=20,
        description="Integer 1-1000, default 20: silver columns one run may add with new_fields add; records "
        "carrying a further new field go to quarantine naming this cap.",
    )
    schema_ids: Annotated[int, *_integer(1, 1000)] = Field(
        default=20,
        description="Integer 1-1000, default 20: distinct writer schema ids a batch looks up in the schema "
        "registry; records framed with further ids go to quarantine naming this cap.",
    )

    silver_columns: Annotated[int, *_integer(10, 10000)] = Field(
        default=500,
        description="Integer 10-10000, default 500: columns silver may hold in all with new_fields add (the "
        "declared fields and those added); records carrying a field past it go to quarantine naming this cap.",
    )

    def spec(self) -> TransformLimits:
        """The caps as the Spark job reads them."""
        return TransformLimits(
            field_names=self.field_names,
            new_columns=self.new_columns,
            schema_ids=self.schema_ids,
            silver_columns=self.silver_columns,
        )


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class TransformSection(_Section):
    """How bronze records become silver rows (section ``transform``; without it the pipeline stops at bronze).

    Loads into a :class:`~include.contract.transform_spec.TransformSpec`.
    """

    format: Annotated[ValueFormat, BeforeValidator(_check_format)] = Field(
        default="json",
        description="json (default): each record value is a JSON object. avro: Avro binary, decoded in the JVM "
        "by Spark's from_avro (needs value_schema). json_schema: a JSON object behind the Confluent wire "
        "format's header, as Confluent's JSON Schema serializer writes it (needs value_schema.registry). "
        "protobuf: a Protobuf message behind that header and its message-index path, as Confluent's Protobuf "
        "serializer writes it, decoded in the JVM against the registry's schema and its imports (needs "
        "value_schema.registry).",
    )
    schema: _Schema | None = Field(
        default=None,
        description="Mapping of field name to its type (status: string) or to its settings. Field names: "
        "letters, digits and _, starting with a letter, at most 128 characters (_ names are silver's own "
        "columns); no two may differ only in case (Delta column names are case-insensitive). Give exactly "
        "one of schema and schema_file.",
    )
    schema_file: Annotated[str, _text(_SCHEMA_FILE_EXPECTED)] | None = Field(
        default=None,
        description="Instead of schema: a YAML file holding that same mapping; a relative path is taken from "
        "the pipeline file's folder. Errors in it name that file. It must be a regular file of at most 1 MiB "
        "inside the pipelines folder (symlinks resolved) or under a folder the operator lists in "
        "KDE_PIPELINE_FILE_ROOTS; any other path is refused unread.",
    )
    key: Annotated[str | tuple[str, ...], BeforeValidator(_check_key)] = Field(
        description="Required: a field name or a list of them, the silver table's MERGE key; each of type "
        "string, int, long, date or boolean. Key fields are required."
    )
    ordering: Annotated[str, BeforeValidator(_check_ordering)] | None = Field(
        default=None,
        description="Required unless envelope is set: the field telling which record of a key is newer (int, "
        "long, double, date, timestamp or string; not a key field). It is required; the Kafka offset breaks "
        "ties. Refused with an envelope, whose changes are ordered by the source database's own commit "
        "position.",
    )
    envelope: Annotated[Envelope, _choice(ENVELOPES)] | None = Field(
        default=None,
        description="debezium: each value is a Debezium change event (JSON with or without Connect's schema, "
        "or Avro) and the schema declares the table's columns. Creates, snapshot reads and updates upsert "
        "the row after the change, deletes delete the key, the tombstone after a delete is skipped, and "
        "changes are ordered by the source's commit position (kept in silver's _cdc_* columns), so a change "
        "sent again never overwrites newer state. Left out: each value is the record itself.",
    )
    source: Annotated[CdcSource, BeforeValidator(_check_source)] | None = Field(
        default=None,
        description="With envelope: the database the connector reads, postgresql (also written postgres); "
        "left out, each event's source.connector says, and an event of another database goes to "
        "quarantine. Refused without an envelope.",
    )
    tombstones: Annotated[TombstonePolicy, _choice(TOMBSTONE_POLICIES)] = Field(
        default="quarantine",
        description="quarantine (default): a record with a null value goes to quarantine. delete: it deletes "
        "its key, taken from the Kafka key (its text for a one-field key, a JSON object for more); silver keeps "
        "the row with _deleted = true and its last ordering value, so an older event arriving later cannot "
        "bring it back, and a newer one does.",
    )
    new_fields: Annotated[NewFieldPolicy, _choice(NEW_FIELD_POLICIES)] = Field(
        default="ignore",
        description="ignore (default): a field the schema does not declare is left out of silver and named "
        "in the job's summary. add: it becomes a silver column of the type its values show (integers long, "
        "fractions double, text string, objects, arrays or mixed values json), added in a schema-change "
        "commit that records it; later values of another type go to quarantine.",
    )
    max_value_bytes: Annotated[
        int,
        *_integer(
            1, MAX_VALUE_BYTES_LIMIT, f"a positive integer of at most {MAX_VALUE_BYTES_LIMIT} (64 MiB)"
        ),
    ] = Field(
        default=DEFAULT_MAX_VALUE_BYTES,
        description="Positive integer, at most 64 MiB, default 1048576: larger record values go to "
        "quarantine.",
    )
    value_schema: ValueSchemaSection | None = Field(
        default=None,
        description="Section, required for format avro, json_schema and protobuf and refused for json: where the "
        "value's schema comes from, exactly one of a schema file and a schema registry.",
    )
    limits: LimitsSection | None = Field(
        default=None,
        description="Section, optional: caps on what one producer's records can make a run keep or do "
        "(field_names, new_columns, schema_ids, silver_columns); left out, each has its default.",
    )

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        schema, schema_file = data.get("schema"), data.get("schema_file")
        if (schema is None) == (schema_file is None):
            raise _problem(
                "expected exactly one of transform.schema (a mapping of field names to types) and "
                "transform.schema_file (a YAML file holding that mapping), got "
                + ("both" if schema is not None else "neither"),
                ".schema",
            )
        if schema_file is not None:
            folder = Path((info.context or {}).get("folder", "."))
            schema, shown = _read_schema_file(schema_file, folder)
            data = {**data, "schema": schema, "schema_file": shown}  # shown: how messages name the file
        if data.get("envelope") is not None:
            for name, why in (("ordering", "the source database's commit position orders a key's changes"),
                              ("tombstones", "a Debezium delete is the event itself, and the tombstone after "
                                             "it is skipped")):  # fmt: skip
                if name in data:
                    raise _invalid(f"no transform.{name} with transform.envelope ({why})", data[name],
                                   f"; remove transform.{name}", at=f".{name}")  # fmt: skip
            if data.get("format") == "protobuf":
                raise _invalid("format json or avro with transform.envelope (Debezium's converters write "
                               "change events as JSON or Avro; no test runs its Protobuf converter)", "protobuf",
                               "; set transform.format to the converter's format", at=".format")  # fmt: skip
        else:
            if data.get("ordering") is None:
                raise _problem("expected the name of a field declared in the schema, the one telling which "
                               "record of a key is newer, got nothing (the key is missing); for change events "
                               "set transform.envelope instead", ".ordering")  # fmt: skip
            if data.get("source") is not None:
                raise _invalid("no transform.source without transform.envelope (it names the database of "
                               "change events)", data["source"], "; set transform.envelope: debezium, or remove "
                               "transform.source", at=".source")  # fmt: skip
        return data

    @model_validator(mode="after")
    def _key_and_ordering_are_declared(self) -> TransformSection:
        declared_in = f"the schema file {self.schema_file}" if self.schema_file else "transform.schema"
        fields = self.schema or {}

        def declared(name: str, at: str) -> SchemaField:
            if name in fields:
                return fields[name]
            same = [n for n in fields if n.lower() == name.lower()]
            hint = f"; did you mean {same[0]!r}?" if same else _did_you_mean(name, list(fields))
            raise _invalid(f"the name of a field declared in {declared_in}", name, hint, at=at)

        key = self.key_fields()
        for i, name in enumerate(key):
            at = ".key" if isinstance(self.key, str) else f".key[{i}]"
            field_type = declared(name, at).type
            if field_type not in KEY_TYPES:
                expected = f"a key field of type {', '.join(KEY_TYPES)}"
                raise _invalid(expected, name, f", a {field_type} field", at=at)
            if name in key[:i]:
                raise _invalid("each key field once", name, " a second time", at=at)
        if self.ordering is None:
            return self
        field_type = declared(self.ordering, ".ordering").type
        if field_type not in ORDERING_TYPES:
            expected = f"an ordering field of type {', '.join(ORDERING_TYPES)}"
            raise _invalid(expected, self.ordering, f", a {field_type} field", at=".ordering")
        if self.ordering in key:
            raise _invalid("a field that is not part of transform.key", self.ordering, at=".ordering")
        return self

    def key_fields(self) -> tuple[str, ...]:
        """The key field names, however ``key`` was written."""
        return (self.key,) if isinstance(self.key, str) else self.key

    def spec(self) -> TransformSpec:
        """The transform as the Spark job reads it; key and ordering fields are required."""
        required = {*self.key_fields(), *([self.ordering] if self.ordering else [])}
        return TransformSpec(
            fields=tuple(f.spec(name, name in required) for name, f in (self.schema or {}).items()),
            envelope=self.envelope,
            source=self.source,
            key=self.key_fields(),
            ordering=self.ordering,
            format=self.format,
            # A change event's delete is a delete: its key comes from the event's Kafka key.
            tombstones="delete" if self.envelope else self.tombstones,
            new_fields=self.new_fields,
            max_value_bytes=self.max_value_bytes,
            limits=(self.limits or LimitsSection()).spec(),
        )


def _file_beside(value: Any, folder: Path, expected: str, at: str) -> tuple[Path, str]:
    """A file the pipeline file names (``~`` expanded, relative to ``folder``) and how messages show it."""
    if not isinstance(value, str) or not value.strip():
        raise _invalid(expected, value, at=at)
    path = Path(os.path.expanduser(value.strip()))
    path = Path(os.path.normpath(path if path.is_absolute() else folder / path))
    return path, _display_path(path)


def _read_avro_schema_file(value: Any, folder: Path, *, owned: bool = True) -> tuple[str, str]:
    """The text of ``transform.value_schema.file`` and the file as shown; it must hold an Avro record schema.

    ``owned``: the file must be the pipeline file's own (:mod:`include.config.owned_files`); a job reading
    the file the loader already checked passes ``False``, and the file must still be a bounded regular file.
    """
    path, shown = _file_beside(value, folder, _AVSC_EXPECTED, ".file")
    try:
        real = owned_files.check_owned(path, shown, folder if owned else path.parent)
        text = owned_files.read_owned(real, shown)
    except (OSError, owned_files.NotOwnedFile) as exc:
        raise _problem(f"expected {_AVSC_EXPECTED}: {exc}", ".file") from None
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise _problem(f"expected the Avro schema file {shown} to hold JSON, got: {exc}", ".file") from None
    if (
        not isinstance(schema, dict)
        or schema.get("type") != "record"
        or not isinstance(schema.get("fields"), list)
    ):
        raise _problem(
            f"expected the Avro schema file {shown} to hold a record schema "
            '({"type": "record", "name": ..., "fields": [...]}), got '
            + (f"type {schema.get('type')!r}" if isinstance(schema, dict) else type(schema).__name__),
            ".file",
        )
    return text, shown


def _read_schema_file(value: Any, folder: Path) -> tuple[dict[str, SchemaField], str]:
    """The fields of ``transform.schema_file`` and the file as shown; errors in it name that file."""
    expected = _SCHEMA_FILE_EXPECTED
    path, shown = _file_beside(value, folder, expected, ".schema_file")
    try:
        is_file = path.is_file()
    except OSError:  # e.g. a name too long for the file system: no such file either
        is_file = False
    if not is_file:
        raise _invalid(f"{expected}; looked for {shown!r}, which is not a file", value, at=".schema_file")
    try:
        text = owned_files.read_owned(owned_files.check_owned(path, shown, folder), shown)
    except (OSError, owned_files.NotOwnedFile) as exc:
        # Never what the file holds: it may be a file the pipeline does not own.
        raise _problem(f"expected {expected}: {exc}", ".schema_file") from None
    data = _parse_yaml(text, shown)
    try:
        return _SCHEMA_FILE.validate_python(data), shown
    except ValidationError as exc:
        # A ValueError: pydantic carries it out of the pipeline file's validation as it is.
        raise _config_error(exc, shown) from None
