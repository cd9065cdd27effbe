"""``json``: each record value is JSON text, read as it is (no value schema, no registry)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from include.contract.errors import ValueSchemaError
from include.contract.value_formats import JSON, FormatRules

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from include.readers.schema_registry import RegisteredSchema
    from spark_jobs.formats.base import ValuePlan, Writer
    from spark_jobs.formats.schemas import ValueSchemas


class JsonValues:
    """The value is the text; the field rules tell whether it is a JSON object."""

    rules: FormatRules = JSON

    def open(self, schemas: ValueSchemas, where: str) -> None:
        """Never called: ``json`` has no value schema (:class:`~spark_jobs.formats.schemas.ValueSchemas` refuses it)."""
        raise ValueSchemaError(f"transform.format json has no value schema to read with ({where})")

    def writer(self, schemas: ValueSchemas, found: RegisteredSchema) -> Writer:
        """Never called: ``json`` values carry no schema id."""
        raise ValueSchemaError(f"transform.format json reads no writer schema (id {found.id})")

    def value_text(self, df: DataFrame, plan: ValuePlan | None, max_value_bytes: int) -> tuple[DataFrame, Column, Column]:
        """The value cast to text; a JSON value has no problem of its format (the record's checks name them)."""
        from pyspark.sql import functions as F

        return df, F.col("_kafka_value").cast("string"), F.lit(None).cast("string")
