"""One replay selection, two forms: the Spark SQL the replay job filters quarantine with, and the Python rule
``plan_replay`` counts with before a cluster starts (``include/contract/replay.py``). Both must take the
same rows of a real quarantine-shaped frame (real Spark, no Kafka, no tables)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from include.contract.replay import ReplaySelection

pytestmark = pytest.mark.integration

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SCHEMA = "id int, reason string, fields array<string>, timestamp timestamp, replay_outcome string"
ROWS = [
    (1, "currency: expected one of 'EUR', got 'GBP'", ["currency"], T0 + timedelta(days=4), None),
    (2, "currency: expected one of 'EUR', got 'GBP'", ["currency"], T0 + timedelta(days=4), "applied"),
    (3, "currency: expected one of 'EUR', got 'GBP'", ["currency"], T0 + timedelta(days=4), "still_failing"),
    (4, "amount: expected at least 0, got -5", ["amount"], T0 + timedelta(days=4), None),
    (5, "currency: it's got a quote", ["currency", "amount"], T0 + timedelta(days=31), "superseded"),
    (6, "currency: it's got a quote", ["currency", "amount"], T0, None),
    (7, "value: got a tombstone", ["value"], T0 - timedelta(seconds=1), "skipped"),
]
SELECTIONS = [
    ReplaySelection(),
    ReplaySelection(reason_contains="currency"),
    ReplaySelection(reason_contains="it's"),  # a quote in the text
    ReplaySelection(field="amount"),
    ReplaySelection(from_time=T0, to_time=T0 + timedelta(days=31)),
    ReplaySelection("currency", "currency", T0, T0 + timedelta(days=5)),
]


@pytest.mark.parametrize("selection", SELECTIONS, ids=lambda s: s.describe()[38:] or "all")
def test_spark_sql_and_python_take_the_same_quarantine_rows(spark, selection):
    frame = spark.createDataFrame(ROWS, SCHEMA)
    in_spark = sorted(r["id"] for r in frame.where(selection.sql()).collect())
    names = ("id", "reason", "fields", "timestamp", "replay_outcome")
    in_python = sorted(row[0] for row in ROWS if selection.matches(dict(zip(names, row, strict=True))))
    assert in_spark == in_python
    assert in_python  # every selection here takes some row and leaves others
    assert len(in_python) < len(ROWS)
