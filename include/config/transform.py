"""The ``transform`` section: how bronze records become silver rows.

Its fields (``transform.schema`` or a YAML schema file) are
:mod:`include.config.transform_fields`; where a schema format's values find
their schema (``transform.value_schema``) is :mod:`include.config.value_schema`;
what each value format needs is :mod:`include.contract.value_formats` (one entry
per format: this section documents and checks ``transform.format`` from it). The
section loads into a :class:`~include.contract.transform_spec.TransformSpec`,
what the Spark job reads.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, ValidationInfo, model_validator
from pydantic.dataclasses import dataclass as pydantic_dataclass

from include.config.errors import _choices, _did_you_mean, _invalid, _problem
from include.config.route_match import MatchSection
from include.config.sections import _SECTION_CONFIG, _optional, _Section
from include.config.transform_fields import _SCHEMA_FILE_EXPECTED, SchemaField, _read_schema_file, _Schema
from include.config.validators import _choice, _integer, _text
from include.config.value_schema import ValueSchemaSection
from include.contract.routes import (
    OVERLAP_POLICIES,
    ROUTE_NAME,
    UNROUTED,
    UNROUTED_POLICIES,
    OverlapPolicy,
    UnroutedPolicy,
)
from include.contract.transform_spec import (
    CDC_SOURCES,
    DEFAULT_MAX_VALUE_BYTES,
    ENVELOPES,
    KEY_TYPES,
    NEW_FIELD_POLICIES,
    ORDERING_TYPES,
    TOMBSTONE_POLICIES,
    CdcSource,
    Envelope,
    NewFieldPolicy,
    TombstonePolicy,
    TransformLimits,
    TransformSpec,
)
from include.contract.value_formats import FORMATS, SCHEMA_FORMATS, VALUE_FORMATS

#: Largest ``transform.max_value_bytes``: 64 MiB.
MAX_VALUE_BYTES_LIMIT = 64 * 1024**2
#: The formats that need a value schema, and those that take none, as the reference names them.
_SCHEMA_FORMATS_TEXT = ", ".join(SCHEMA_FORMATS[:-1]) + f" and {SCHEMA_FORMATS[-1]}"
_PLAIN_FORMATS_TEXT = " and ".join(f for f in FORMATS if f not in SCHEMA_FORMATS)


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
class _TransformRules(_Section):
    """What a transform and each of its routes declare: the value's format, fields, key, ordering and policies."""

    format: Annotated[str, BeforeValidator(_check_format)] = Field(
        default="json",
        # One sentence per format, from its entry in include.contract.value_formats.
        description=" ".join(f.description for f in VALUE_FORMATS.values()),
        json_schema_extra={"enum": list(FORMATS)},
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
    key: Annotated[str | tuple[str, ...], BeforeValidator(_check_key)] = _optional(
        "Required (with routes: in each route, not here): a field name or a list of them, the silver table's "
        "MERGE key; each of type string, int, long, date or boolean. Key fields are required."
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
        description=f"Section, required for format {_SCHEMA_FORMATS_TEXT} and refused for {_PLAIN_FORMATS_TEXT}: "
        "where the value's schema comes from, exactly one of a schema file and a schema registry.",
    )
    limits: LimitsSection | None = Field(
        default=None,
        description="Section, optional: caps on what one producer's records can make a run keep or do "
        "(field_names, new_columns, schema_ids, silver_columns); left out, each has its default.",
    )

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        if data.get("key") is None:
            raise _problem(f"expected a field name or a non-empty list of field names declared in "
                           f"{data.get('schema_file') or 'the schema'}, the silver table's MERGE key, got nothing "
                           "(the key is missing)", ".key")  # fmt: skip
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
            rules = VALUE_FORMATS.get(data.get("format", "json"))
            if rules is not None and rules.envelope_refused:
                raise _invalid(rules.envelope_refused, rules.name,
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
    def _key_and_ordering_are_declared(self) -> _TransformRules:
        if getattr(self, "routes", None) is not None:  # each route declares its own
            return self
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
        return (self.key,) if isinstance(self.key, str) else tuple(self.key or ())

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


#: Keys a routed transform states once for every route; a route's own value wins (``value_schema`` and
#: ``limits`` key by key).
INHERITED_KEYS = ("format", "value_schema", "tombstones", "new_fields", "max_value_bytes", "limits")
#: Keys each route states for itself, refused beside ``routes``.
ROUTE_KEYS = ("schema", "schema_file", "key", "ordering", "envelope", "source")


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class RouteSection(_TransformRules):
    """One route of a transform (section ``transform.routes.<route>``): which records it takes and how they become
    its own silver table's rows.

    It takes every key of ``transform`` but ``routes``, ``unrouted`` and
    ``overlap``; the keys ``transform`` states beside ``routes`` (format,
    value_schema, tombstones, new_fields, max_value_bytes, limits) are its
    defaults. Its silver table is ``<tables.silver_path>/<route>``, its quarantine
    ``<tables.quarantine_path>/<route>``.
    """

    match: MatchSection = Field(
        description="Required section: which records the route takes (topic, header, key, field, record_name, "
        "subject; every one given must hold)."
    )


def _check_routes(value: Any) -> dict[str, Any]:
    if not isinstance(value, dict) or not value:
        raise _invalid("a mapping of route names to routes (match, schema, key, ...)", value)
    for name in value:
        if not isinstance(name, str) or not ROUTE_NAME.fullmatch(name) or name == UNROUTED:
            hint = f"; {UNROUTED!r} names the unrouted records' quarantine" if name == UNROUTED else ""
            raise _invalid("a route name: lower-case letters, digits and _, starting with a letter, at most 63 "
                           "characters", name, hint, at=f".{name}")  # fmt: skip
    return value


def _inherit(route: Any, top: dict[str, Any]) -> Any:
    """A route's mapping with the transform's shared keys filled in where the route leaves them out."""
    if not isinstance(route, dict):
        return route  # the route's own check says what it expected
    merged = dict(route)
    for key in INHERITED_KEYS:
        if top.get(key) is None:
            continue
        if key == "value_schema" and merged.get("format", top.get("format", "json")) not in SCHEMA_FORMATS:
            continue  # a route whose format takes no schema (json) does not take the shared one
        mine = merged.get(key)
        if key in ("value_schema", "limits") and isinstance(mine, dict) and isinstance(top[key], dict):
            merged[key] = {**top[key], **mine}
        elif mine is None:
            merged[key] = top[key]
    schema, match = merged.get("value_schema"), merged.get("match")
    if isinstance(schema, dict) and isinstance(match, dict) and schema.get("registry") is not None:
        # A route taking one record name reads with that record's subject, unless it names another.
        names = match.get("record_name")
        one = (
            names
            if isinstance(names, str)
            else names[0]
            if isinstance(names, list) and len(names) == 1
            else None
        )
        strategy = schema.get("subject_strategy")
        if one and schema.get("subject") is None and schema.get("record_name") is None and strategy in (
                "record_name", "topic_record_name"):  # fmt: skip
            merged["value_schema"] = {**schema, "record_name": one}
    return merged


@pydantic_dataclass(frozen=True, kw_only=True, config=_SECTION_CONFIG)
class TransformSection(_TransformRules):
    """How bronze records become silver rows (section ``transform``; without it the pipeline stops at bronze).

    Loads into a :class:`~include.contract.transform_spec.TransformSpec`, or, with ``routes``, one per route in a
    :class:`~include.contract.routes.Routing`.
    """

    routes: Annotated[dict[str, RouteSection], BeforeValidator(_check_routes)] | None = Field(
        default=None,
        description="Mapping of route name to route: one topic into several silver tables. Each route takes the "
        "records its match selects into a table of its own, with its own schema, key, ordering and format. With "
        "routes, schema, schema_file, key, ordering, envelope and source belong in each route, and the other "
        "keys of transform are the routes' defaults. Route names: lower-case letters, digits and _, starting "
        "with a letter; they name the tables' folders, so renaming a route starts its tables afresh.",
    )
    unrouted: Annotated[UnroutedPolicy, _choice(UNROUTED_POLICIES)] = Field(
        default="quarantine",
        description="With routes: what a record no route matches does. quarantine (default): it goes to the "
        "quarantine table <tables.quarantine_path>/unrouted, naming why. ignore: it is counted in the batch's "
        "account and the run's summary, and kept only in bronze. fail: the transform stops before writing the "
        "batch, naming the record's topic, partition and offset; add a route that takes it or change this "
        "policy, and the next run goes on from there.",
    )
    overlap: Annotated[OverlapPolicy, _choice(OVERLAP_POLICIES)] = Field(
        default="first",
        description="With routes: what a record several routes match does. first (default): the first of them "
        "in the file's order takes it. all: each of them does (a copy per route; the batch's account counts "
        "the extra copies).",
    )

    @classmethod
    def _check_given(cls, data: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        routes = data.get("routes")
        if routes is None:
            for key in ("unrouted", "overlap"):
                if data.get(key) is not None:
                    raise _invalid(f"no transform.{key} without transform.routes (it says what routing does)",
                                   data[key], f"; remove transform.{key}, or declare routes", at=f".{key}")  # fmt: skip
            return super()._check_given(data, info)
        for key in ROUTE_KEYS:
            if data.get(key) is not None:
                raise _invalid(f"no transform.{key} beside transform.routes (each route states its own)",
                               data[key], f"; move {key} into each route", at=f".{key}")  # fmt: skip
        if isinstance(routes, dict):
            data = {**data, "routes": {name: _inherit(route, data) for name, route in routes.items()}}
        return data

    def route_sections(self) -> dict[str, RouteSection]:
        """The routes by name, in the file's order; empty without ``routes``."""
        return dict(self.routes or {})
