"""The schemas one transform run reads values with: the reader schema of the run, the writer schema of each id.

The transform makes one :class:`ValueSchemas` per run for a format that needs a
value schema. With a schema file the file's schema reads every value (plain Avro
binary). With a registry the reader schema is the subject's pinned version, or its
latest when the run starts; each micro-batch then looks up the writer schema ids
its values carry (once per id and run), and the run's format
(:class:`~spark_jobs.formats.base.ValueFormat`) decides whether it can read what
each writer wrote. What it finds becomes a
:class:`~spark_jobs.formats.base.ValuePlan`: decoding itself runs in the executors.

Registry URL and credentials come from a file only its owner reads
(``--registry-file``, written by the operator from the Airflow connection and
deleted after the run).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include.contract.errors import ValueSchemaError
from include.contract.transform_spec import TransformSpec
from include.contract.value_formats import VALUE_FORMATS
from include.readers.schema_registry import (
    RegisteredSchema,
    RegistryClient,
    SchemaRegistryError,
    is_not_found,
)
from spark_jobs.formats.base import ValuePlan, Writer
from spark_jobs.formats.framing import schema_id_of
from spark_jobs.formats.registry import value_format

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
        if not VALUE_FORMATS[spec.format].needs_schema or vs is None:
            raise ValueSchemaError(f"transform.format {spec.format} has no value schema to read with")
        self.spark = spark
        self.spec = spec
        self.format = value_format(spec.format)
        self.writers: dict[int, Writer] = {}
        self.reader: RegisteredSchema | None = None
        #: Set by the format when it opens the reader schema: a field never null in a decoded record.
        self.required_field: str | None = None
        self.client: RegistryClient | None = None
        if vs.registry:
            settings = registry or {}
            self.client = client or RegistryClient(
                settings["url"], username=settings.get("username"), password=settings.get("password")
            )
            self.source = f"schema registry {self.client.url}"
            where = self._read_reader(vs.subject or "", vs.version)
        else:
            self.source = f"the schema file {vs.file}"
            self.reader_text = vs.text or ""
            where = self.source
        self.format.open(self, where)
        log.info("values read with %s", where)

    def _read_reader(self, subject: str, version: int | None) -> str:
        """The reader schema, the subject's ``version`` (``None``: its latest) of the format's type; how
        messages name it."""
        assert self.client is not None
        try:
            self.reader = self.client.subject_version(subject, version)
        except SchemaRegistryError as exc:
            raise ValueSchemaError(
                f"transform.value_schema: cannot read the reader schema of subject {subject!r} "
                f"({'latest' if version is None else f'version {version}'}): {exc}"
            ) from None
        expected = self.format.rules.registry_type
        if self.reader.schema_type != expected:
            raise ValueSchemaError(
                f"transform.value_schema: subject {subject!r} version {self.reader.version} is a schema "
                f"of type {self.reader.schema_type}; transform.format {self.spec.format} needs {expected}"
            )
        self.reader_text = self.reader.schema
        return f"subject {subject!r} version {self.reader.version} (id {self.reader.id})"

    def recorded(self) -> dict[str, Any] | None:
        """What a silver commit records of the reader schema (registry only: the subject's version and id)."""
        return self.reader.to_json() if self.reader else None

    def _writer(self, schema_id: int) -> Writer:
        assert self.client is not None
        fmt, expected = self.spec.format, self.format.rules.registry_type
        try:
            found = self.client.schema_by_id(schema_id)
        except SchemaRegistryError as exc:
            if is_not_found(exc):
                return Writer(schema_id, problem=f"unknown to {self.source} (it answered HTTP 404)")
            raise ValueSchemaError(f"cannot look up writer schema id {schema_id}: {exc}") from None
        if found.schema_type != expected:
            return Writer(schema_id, problem=f"a schema of type {found.schema_type} in {self.source}; transform.format "
                                             f"{fmt} reads {expected} values")  # fmt: skip
        return self.format.writer(self, found)

    def plan(self, bronze: DataFrame) -> ValuePlan:
        """The plan for one micro-batch: looks up the writer ids ``bronze`` holds that this run has not seen."""
        if self.client is None:
            return ValuePlan(self.spec.format, framed=False, reader=self.reader_text,
                             required_field=self.required_field, source=self.source)  # fmt: skip
        cap = self.spec.limits.schema_ids
        counts = self._ids_in(bronze, cap)
        ids = chosen_ids(counts, known=self._known(), cap=cap)
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

    def _known(self) -> set[int]:
        """The ids this run has looked up, and the reader's."""
        return set(self.writers) | ({self.reader.id} if self.reader else set())

    def _ids_in(self, bronze: DataFrame, cap: int) -> dict[int, int]:
        """Records per schema id of ``bronze``'s framed values (:func:`schema_id_counts`), the ids this run
        knows and the reader's first."""
        return schema_id_counts(bronze, cap, self._known())


def schema_id_counts(bronze: DataFrame, cap: int, known: set[int]) -> dict[int, int]:
    """Records per schema id of ``bronze``'s framed values, for at most ``cap + 1`` ids.

    At most the cap's ids reach the registry: random leading bytes in every record would otherwise cost
    one lookup per record. Which ones: the ``known`` ones first (those a run has looked up), then by how many
    records carry them, so that a producer writing a few values under made-up ids cannot push the
    batch's real records out (taking the lowest ids let ids 0..19 do exactly that).
    """
    from pyspark.sql import functions as F

    per_id = (bronze.select(schema_id_of(F.col("value")).alias("id")).where(F.col("id").isNotNull())
              .groupBy("id").agg(F.count("*").alias("n")))  # fmt: skip
    if known:
        per_id = per_id.orderBy(F.col("id").isin(*known).desc(), F.desc("n"), "id")
    else:
        per_id = per_id.orderBy(F.desc("n"), "id")
    return {int(r["id"]): int(r["n"]) for r in per_id.limit(cap + 1).collect()}
