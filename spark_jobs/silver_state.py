"""Silver's row of a record's key, beside the record: what both classifiers (plain records in
:mod:`spark_jobs.silver_rules`, change events in :mod:`spark_jobs.cdc_rules`) compare a record with.

:func:`with_silver_state` joins silver's columns a classifier needs, as ``_t_<name>``, and where silver's
row came from in Kafka (``_t_partition``, ``_t_offset``); the predicates below then read those columns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame


def with_silver_state(records: DataFrame, current: DataFrame, keys: Sequence[str],
                      columns: Mapping[str, str]) -> DataFrame:  # fmt: skip
    """``records`` left-joined on ``keys`` with silver's row (``current``): each of ``columns`` (silver column
    -> the name it takes) and the Kafka position silver's row was written from."""
    from pyspark.sql import functions as F

    state = current.select(
        *keys,
        *(F.col(name).alias(alias) for name, alias in columns.items()),
        F.col("_kafka_partition").alias("_t_partition"),
        F.col("_kafka_offset").alias("_t_offset"),
    )
    return records.join(state, on=list(keys), how="left")


#: The columns :func:`with_silver_state` adds besides the caller's, dropped once classified.
STATE_COLUMNS = ("_t_partition", "_t_offset")


def held() -> Column:
    """Silver holds a row for the record's key."""
    from pyspark.sql import functions as F

    return F.col("_t_offset").isNotNull()


def same_record() -> Column:
    """The record is the one silver's row was written from (a batch read again)."""
    from pyspark.sql import functions as F

    return (
        held()
        & (F.col("_kafka_partition") == F.col("_t_partition"))
        & (F.col("_kafka_offset") == F.col("_t_offset"))
    )


def later_in_log() -> Column:
    """The record comes after silver's row in Kafka (by offset, then partition)."""
    from pyspark.sql import functions as F

    return (F.col("_kafka_offset") > F.col("_t_offset")) | (
        (F.col("_kafka_offset") == F.col("_t_offset")) & (F.col("_kafka_partition") > F.col("_t_partition"))
    )
