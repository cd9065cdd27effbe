"""A producer's value fails only itself, and silver's lag is work: two real DAG runs.

An Avro topic read with a schema file holds 100 good orders and one 5-byte value whose string length
claims about 2 GiB. Before Avro's own limits were set on the jobs' JVMs, decoding it made the executor
allocate that much: OutOfMemoryError, the transform failed, and silver got none of the 100.

The first run's transform is also killed before its silver commit, twice (in the run's application and
in the transform task's own submit), so the run fails with all 101 records in bronze and none in silver.
Kafka has nothing new after it; the second run must not be skipped as "no new records": it applies what
bronze holds. ``airflow dags test`` with the test pipelines' ``retries: 0``: the retries are the real
scheduler's test (test_scheduler_retries.py); here the failed run is the point.
"""

from __future__ import annotations

import io
import json

import pytest

from tests.kafka_helpers import produce

pytestmark = pytest.mark.integration

ORDER = {"type": "record", "name": "Order", "namespace": "shop", "fields": [
    {"name": "order_id", "type": "string"}, {"name": "amount", "type": "double"},
    {"name": "event_time", "type": "string"}]}  # fmt: skip
#: A string whose length varint says 2,147,483,632 bytes: the record's first field, and nothing after it.
POISON = bytes.fromhex("e0ffffff0f")


def _avro(order: dict) -> bytes:
    import fastavro

    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(ORDER), order)
    return out.getvalue()


def test_a_poisoned_value_goes_to_quarantine_alone_and_a_failed_transform_is_applied_with_nothing_new(pipeline,
                                                                                                    bootstrap, tmp_path):  # fmt: skip
    p = pipeline
    (p.dir / "order.avsc").write_text(json.dumps(ORDER))
    p.write(transform={"format": "avro", "value_schema": {"file": "order.avsc"},
                       "schema": {"order_id": {"type": "string", "required": True}, "amount": "double",
                                  "event_time": {"type": "timestamp", "required": True}},
                       "key": "order_id", "ordering": "event_time"})  # fmt: skip
    good = [(i % 3, f"o{i}".encode(), _avro({"order_id": f"o{i}", "amount": 1.5 + i,
                                             "event_time": f"2026-03-01T10:{i % 60:02d}:00Z"})) for i in range(100)]
    produce(bootstrap, p.topic, [*good[:50], (0, b"poison", POISON), *good[50:]])

    fired = tmp_path / "failpoints"
    proc, log = p.run(KDE_FAILPOINT="kill-driver-before-silver-commit:0*2", KDE_FAILPOINT_STATE=str(fired))
    assert proc.returncode == 1, log[-3000:]
    assert len(list(fired.iterdir())) == 2, "the transform died before its commit in both submits"
    first = p.ledger()[0]
    assert first["outcome"] == "failed" and first["reason"].startswith("failed at transform"), first["reason"]
    assert len(p.bronze_keys()) == 101

    proc, log = p.run()  # nothing new in Kafka: silver's lag alone makes the run
    assert proc.returncode == 0, log[-5000:]
    assert "silver lag 101 records: bronze holds records silver has not applied" in log
    second = p.ledger()[0]
    assert (second["outcome"], second["continuity"], second["rows"]) == ("success", "CONTINUOUS", 0)
    assert (second["silver_read"], second["silver_upserted"], second["quarantined"]) == (101, 100, 1)

    from deltalake import DeltaTable

    silver = DeltaTable(str(p.lake / p.name / "silver")).to_pyarrow_table(columns=["order_id"])
    assert sorted(silver.column("order_id").to_pylist()) == sorted(f"o{i}" for i in range(100))
    (bad,) = DeltaTable(str(p.lake / p.name / "quarantine")).to_pyarrow_table().to_pylist()
    assert (bad["partition"], bad["value"]) == (0, POISON)
    assert bad["reason"].startswith("value:"), bad["reason"]
