"""Schemas of ``avro``, ``json_schema`` and ``protobuf`` record values: the reader schema of a run, the writer
schema of each id.

The transform makes one :class:`ValueSchemas` per run. With a schema file the
file's schema reads every value (plain Avro binary). With a registry the
reader schema is the subject's pinned version, or its latest when the run
starts; each micro-batch then looks up the writer schema ids its values carry
(once per id and run) and checks, with Avro's own ``SchemaCompatibility`` in
the driver's JVM, that the reader can read what each writer wrote. What it
finds becomes a :class:`~spark_jobs.silver_rules.ValuePlan`: decoding itself is
``from_avro`` in the executors, never Python.

Protobuf values are decoded with their writer schema, as Protobuf reads any
message: fields the reader does not know are left out, fields the writer did not
send take their defaults or are absent. Each writer schema and its imports are
compiled once per run into a descriptor set (:mod:`spark_jobs.protobuf_descriptors`);
a writer none of whose messages declares the pipeline's fields, or whose files do
not compile, sends its records to quarantine naming the id. Decoding is the
project's own Java function (``kde_protobuf_json``), registered here.

Registry URL and credentials come from a file only its owner reads
(``--registry-file``, written by the operator from the Airflow connection and
deleted after the run).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include.contract.errors import ValueSchemaError as ValueSchemaError  # the jobs and tests import it here
from include.contract.transform_spec import TransformSpec
from include.readers.schema_registry import (
    SCHEMA_TYPES,
    RegisteredSchema,
    RegistryClient,
    SchemaRegistryError,
    is_not_found,
    referenced_texts,
)
from spark_jobs import protobuf_descriptors
from spark_jobs.silver_rules import (
    HEADER_BYTES,
    PROTOBUF_FUNCTION,
    PROTOBUF_FUNCTION_CLASS,
    PROTOBUF_FUNCTION_TYPE,
    ValuePlan,
    Writer,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger("value_formats")


def read_registry_file(path: str | None) -> dict[str, str]:
    """``{url, username?, password?}`` from ``--registry-file``."""
    if not path:
        raise ValueSchemaError(
            "transform.value_schema.registry is set but the job got no --registry-file; the operator writes "
            "it from the registry's Airflow connection"
        )
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise ValueSchemaError(f"--registry-file {path}: cannot read a JSON object: {exc}") from None
    if not isinstance(data, dict) or not data.get("url"):
        raise ValueSchemaError(f"--registry-file {path}: expected a JSON object with 'url'")
    return {str(k): str(v) for k, v in data.items()}


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


def chosen_ids(counts: dict[int, int], *, known: set[int], cap: int) -> list[int]:
    """The schema ids of a batch to look up, at most ``cap``: the ``known`` ones the batch holds, then the others
    by how many records carry them (most first, then the lower id); ``counts`` is records per id."""
    ranked = sorted(counts, key=lambda i: (i not in known, -counts[i], i))
    return sorted(ranked[:cap])


class ValueSchemas:
    """The schemas one transform run reads values with (see the module's docstring)."""

    def __init__(self, spark: SparkSession, spec: TransformSpec, *, registry: dict[str, str] | None = None,
                 client: RegistryClient | None = None) -> None:  # fmt: skip
        vs = spec.value_schema
        if spec.format == "json" or vs is None:
            raise ValueSchemaError(f"transform.format {spec.format} has no value schema to read with")
        self.spark = spark
        self.spec = spec
        self.writers: dict[int, Writer] = {}
        self.reader: RegisteredSchema | None = None
        if vs.registry:
            settings = registry or {}
            self.client: RegistryClient | None = client or RegistryClient(
                settings["url"], username=settings.get("username"), password=settings.get("password")
            )
            self.source = f"schema registry {self.client.url}"
            try:
                self.reader = self.client.subject_version(vs.subject or "", vs.version)
            except SchemaRegistryError as exc:
                raise ValueSchemaError(
                    f"transform.value_schema: cannot read the reader schema of subject {vs.subject!r} "
                    f"({'latest' if vs.version is None else f'version {vs.version}'}): {exc}"
                ) from None
            expected = SCHEMA_TYPES[spec.format]
            if self.reader.schema_type != expected:
                raise ValueSchemaError(
                    f"transform.value_schema: subject {vs.subject!r} version {self.reader.version} is a schema "
                    f"of type {self.reader.schema_type}; transform.format {spec.format} needs {expected}"
                )
            self.reader_text = self.reader.schema
            where = f"subject {vs.subject!r} version {self.reader.version} (id {self.reader.id})"
        else:
            self.client = None
            self.source = f"the schema file {vs.file}"
            self.reader_text = vs.text or ""
            where = self.source
        self.required_field = None
        self._jvm_reader = None
        if spec.format == "avro":
            # Parsed once per run: every writer id's compatibility check reads it.
            self._jvm_reader = self._jvm_schema(self.reader_text, f"the reader schema, {where}")
            fields = _avro_fields(self.reader_text)
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
            self.required_field = next((f["name"] for f in fields if _never_null(f.get("type"))), None)
        if spec.format == "protobuf":
            assert self.reader is not None  # a registry format (the loader refuses a schema file)
            try:
                reader = self._protobuf_writer(self.reader)
            except SchemaRegistryError as exc:
                raise ValueSchemaError(f"transform.value_schema: cannot read the imports of {where}: {exc}") from None
            if reader.problem:
                raise ValueSchemaError(f"transform: the reader schema ({where}): {reader.problem}; declare only "
                                       "fields of the message the values hold, or register a schema version that has "
                                       "them")  # fmt: skip
            self.writers[reader.id] = reader  # values written with the reader schema itself: compiled once
            try:
                spark.udf.registerJavaFunction(PROTOBUF_FUNCTION, PROTOBUF_FUNCTION_CLASS, PROTOBUF_FUNCTION_TYPE)
            except Exception as exc:  # noqa: BLE001 (py4j wraps the JVM's ClassNotFoundException)
                raise ValueSchemaError(
                    f"transform.format protobuf: the JVM has no {PROTOBUF_FUNCTION_CLASS} ({str(exc).splitlines()[0]}); "
                    "its jar is built by `make setup` and goes on spark.jars with the project's other jars"
                ) from None
        log.info("values read with %s", where)

    def _protobuf_writer(self, schema: RegisteredSchema) -> Writer:
        """``schema`` compiled with its imports into a descriptor set; or why its values cannot give the
        declared fields: its files do not compile, or none of its messages declares them all. A registry
        that cannot answer for an import raises :class:`SchemaRegistryError`."""
        assert self.client is not None
        try:
            descriptor, file = protobuf_descriptors.build(schema.id, schema.schema,
                                                          referenced_texts(self.client, schema))  # fmt: skip
        except protobuf_descriptors.DescriptorError as exc:
            return Writer(schema.id, problem=str(exc))
        messages = protobuf_descriptors.message_types(descriptor, file)
        wanted = [f.name for f in self.spec.fields]
        if not any(all(name in m.fields for name in wanted) for m in messages):
            return Writer(schema.id, problem=(
                f"has no message declaring every declared field ({', '.join(wanted)}); its messages: "
                + "; ".join(f"{m.name} ({', '.join(m.fields) or 'no fields'})" for m in messages[:8])))  # fmt: skip
        return Writer(schema.id, schema=schema.schema, descriptor=descriptor, file=file)

    def recorded(self) -> dict[str, Any] | None:
        """What a silver commit records of the reader schema (registry only: the subject's version and id)."""
        return self.reader.to_json() if self.reader else None

    def _jvm_schema(self, text: str, what: str) -> Any:
        jvm: Any = self.spark._jvm
        try:
            return jvm.org.apache.avro.Schema.Parser().parse(text)
        except Exception as exc:  # noqa: BLE001 (py4j wraps Avro's SchemaParseException)
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise ValueSchemaError(f"{what} is not a valid Avro schema: {message}") from None

    def _writer(self, schema_id: int) -> Writer:
        assert self.client is not None
        fmt = self.spec.format
        try:
            found = self.client.schema_by_id(schema_id)
        except SchemaRegistryError as exc:
            if is_not_found(exc):
                return Writer(schema_id, problem=f"unknown to {self.source} (it answered HTTP 404)")
            raise ValueSchemaError(f"cannot look up writer schema id {schema_id}: {exc}") from None
        if found.schema_type != SCHEMA_TYPES[fmt]:
            return Writer(schema_id, problem=f"a schema of type {found.schema_type} in {self.source}; transform.format "
                                             f"{fmt} reads {SCHEMA_TYPES[fmt]} values")  # fmt: skip
        if fmt == "protobuf":
            try:
                return self._protobuf_writer(found)
            except SchemaRegistryError as exc:
                if is_not_found(exc):
                    return Writer(schema_id, problem=f"imports a schema that is not registered: {exc}")
                raise ValueSchemaError(f"cannot read the imports of writer schema id {schema_id}: {exc}") from None
        if fmt != "avro":
            return Writer(schema_id, schema=found.schema)
        jvm: Any = self.spark._jvm
        try:
            writer = self._jvm_schema(found.schema, f"writer schema id {schema_id}")
        except ValueSchemaError as exc:
            return Writer(schema_id, problem=str(exc))
        result = jvm.org.apache.avro.SchemaCompatibility.checkReaderWriterCompatibility(self._jvm_reader, writer)
        if result.getType().toString() == "COMPATIBLE":
            return Writer(schema_id, schema=found.schema)
        reasons = [f"{i.getType().toString()} at {i.getLocation()}: {i.getMessage()}"
                   for i in result.getResult().getIncompatibilities()]  # fmt: skip
        reader = f"id {self.reader.id}" if self.reader else "the reader schema"
        return Writer(schema_id, problem=f"written with a schema the reader schema ({reader}) cannot read: "
                                         + "; ".join(reasons[:3]))  # fmt: skip

    def plan(self, bronze: DataFrame) -> ValuePlan:
        """The plan for one micro-batch: looks up the writer ids ``bronze`` holds that this run has not seen."""
        if self.client is None:
            return ValuePlan(self.spec.format, framed=False, reader=self.reader_text,
                             required_field=self.required_field, source=self.source)  # fmt: skip
        from pyspark.sql import functions as F

        value = F.col("value")
        framed = (F.octet_length(value) >= HEADER_BYTES) & (F.hex(F.substring(value, 1, 1)) == "00")
        cap = self.spec.limits.schema_ids
        # At most the cap's ids reach the registry: random leading bytes in every record would otherwise cost
        # one lookup per record. Which ones: those this run knows and the reader's first, then by how many
        # records carry them, so that a producer writing a few values under made-up ids cannot push the
        # batch's real records out (taking the lowest ids let ids 0..19 do exactly that).
        known = set(self.writers) | ({self.reader.id} if self.reader else set())
        per_id = (bronze.where(framed).select(F.conv(F.hex(F.substring(value, 2, 4)), 16, 10).cast("long").alias("id"))
                  .groupBy("id").agg(F.count("*").alias("n")))  # fmt: skip
        if known:
            per_id = per_id.orderBy(F.col("id").isin(*known).desc(), F.desc("n"), "id")
        else:
            per_id = per_id.orderBy(F.desc("n"), "id")
        counts = {int(r["id"]): int(r["n"]) for r in per_id.limit(cap + 1).collect()}
        ids = chosen_ids(counts, known=known, cap=cap)
        capped = len(counts) > len(ids)
        if capped:
            log.warning("more than %s distinct schema ids in this batch (transform.limits.schema_ids); records "
                        "with the %s others go to quarantine", cap, len(counts) - len(ids))  # fmt: skip
        for schema_id in ids:
            if schema_id not in self.writers:
                self.writers[schema_id] = self._writer(schema_id)
                w = self.writers[schema_id]
                if w.problem:
                    log.warning("schema id %s: %s; its records go to quarantine", schema_id, w.problem)
        return ValuePlan(self.spec.format, framed=True, reader=self.reader_text,
                         writers=tuple(self.writers[i] for i in ids), required_field=self.required_field,
                         source=self.source, id_cap=cap if capped else None)  # fmt: skip
