"""What a record value format is at run time (:class:`ValueFormat`), and what a batch reads values with.

A batch's :class:`ValuePlan` (made by :class:`spark_jobs.formats.schemas.ValueSchemas`
in the driver) names the format, the reader schema and each writer schema id the
batch carries (:class:`Writer`); the format's :meth:`ValueFormat.value_text`
turns that into JVM expressions, so decoding runs in the executors, never in Python.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from include.contract.value_formats import FormatRules
    from include.readers.schema_registry import RegisteredSchema
    from spark_jobs.formats.schemas import ValueSchemas


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
    """How to read the values of a batch of a schema format (:class:`spark_jobs.formats.schemas.ValueSchemas` makes it).

    Attributes:
        format: The format's name (``transform.format``).
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


class ValueFormat(Protocol):
    """One record value format at run time (one module each under ``spark_jobs/formats/``).

    A run makes one per transform (:func:`spark_jobs.formats.registry.value_format`), so a format may keep what
    it readied from the reader schema for the writer schemas that follow.
    """

    @property
    def rules(self) -> FormatRules:
        """What the format needs (a value schema, a schema file or a registry, the registry's schema type) and
        how messages name its values: its entry in :data:`include.contract.value_formats.VALUE_FORMATS`."""
        ...

    def open(self, schemas: ValueSchemas, where: str) -> None:
        """Ready the run's reader schema (``schemas.reader_text``; ``where`` names it in messages): check that it
        gives the declared fields and keep what decoding needs. Raises
        :class:`~include.contract.errors.ValueSchemaError` when the run cannot read values with it."""
        ...

    def writer(self, schemas: ValueSchemas, found: RegisteredSchema) -> Writer:
        """Writer schema ``found`` (of the format's registry type) as a batch decodes with it, or why the records
        written with it go to quarantine."""
        ...

    def value_text(self, df: DataFrame, plan: ValuePlan | None, max_value_bytes: int) -> tuple[DataFrame, Column, Column]:
        """``df`` (``_kafka_value`` holds the value) with what reading it needs, the value's JSON text, and why the
        value is unreadable (null when it is not), naming its schema id where it has one. ``plan`` is ``None``
        only for a format that needs no value schema."""
        ...
