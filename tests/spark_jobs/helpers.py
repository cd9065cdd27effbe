"""What the Spark rule tests share: bronze's row shape, a bronze frame of key/value pairs, and the table the
Debezium fixtures captured.

A test module is not a library: the spark_jobs tests and the integration tests that reuse these import them
from here.
"""

from __future__ import annotations

from datetime import UTC, datetime

from include.contract.transform_spec import FieldSpec, TransformSpec

#: Bronze's columns as the transform reads them (headers left out).
BRONZE_SCHEMA = "topic string, partition int, offset long, timestamp timestamp, key binary, value binary"
#: The Kafka timestamp the tests' bronze rows carry.
T0 = datetime(2026, 1, 1, tzinfo=UTC)

#: The ``accounts`` table of ``tests/fixtures/debezium`` (its README has the SQL), as a pipeline declares it.
ACCOUNTS_SPEC = TransformSpec(
    fields=(
        FieldSpec("id", "int", required=True),
        FieldSpec("owner", "string", required=True),
        FieldSpec("balance", "decimal(12,2)"),
        FieldSpec("body", "string"),
        FieldSpec("updated", "timestamp"),
    ),
    key=("id",),
    ordering=None,
    tombstones="delete",
    envelope="debezium",
    source="postgresql",
)


def bronze(spark, values: list[tuple[bytes | None, bytes | None]]):
    """A bronze frame of ``(key, value)`` pairs: topic ``t``, partition 0, offsets from 0."""
    rows = [("t", 0, i, T0, key, value) for i, (key, value) in enumerate(values)]
    return spark.createDataFrame(rows, BRONZE_SCHEMA)
