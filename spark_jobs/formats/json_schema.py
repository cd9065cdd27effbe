"""``json_schema``: JSON text behind the Confluent wire format's header, as Confluent's JSON Schema serializer writes it.

The text after the header is the record; the writer schema is looked up only to
check that the id is one of the registry's JSON schemas (the field rules check
the record itself).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from include.contract.value_formats import JSON_SCHEMA, FormatRules
from spark_jobs.formats.base import Writer
from spark_jobs.formats.framing import frame

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from include.readers.schema_registry import RegisteredSchema
    from spark_jobs.formats.base import ValuePlan
    from spark_jobs.formats.schemas import ValueSchemas


class JsonSchemaValues:
    """Framed JSON text: the payload is the record."""

    rules: FormatRules = JSON_SCHEMA

    def open(self, schemas: ValueSchemas, where: str) -> None:
        """Nothing to ready: the reader schema's type was checked when it was read."""

    def writer(self, schemas: ValueSchemas, found: RegisteredSchema) -> Writer:
        """Any JSON schema of the registry: the field rules judge the records it wrote."""
        return Writer(found.id, schema=found.schema)

    def value_text(self, df: DataFrame, plan: ValuePlan | None, max_value_bytes: int) -> tuple[DataFrame, Column, Column]:
        """The payload after the header as text, and the framing's problem."""
        from pyspark.sql import functions as F

        assert plan is not None  # a schema format: the transform always plans its values
        df, problem = frame(df, plan)
        df = df.select("*", F.col("_payload").cast("string").alias("_vt"), problem.alias("_fp"))
        return df, F.col("_vt"), F.col("_fp")
