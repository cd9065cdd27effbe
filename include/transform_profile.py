"""Where the bronze → silver transform spends its time, phase by phase, on a silver of many keys.

Starts a local broker and an in-process Spark, produces ``--keys`` orders
(one per key) and runs the real ingestion and transform jobs on them (the
first transform: every record an insert), then ``--batches`` times produces
``--updates`` updates of random existing keys plus ``--tombstones`` deletes,
ingests them and transforms them (a MERGE into the full silver). Prints each
transform batch's phases (decode, counting, classify, the silver commit and
its confirmation) and Delta's own MERGE metrics.

    python -m include.transform_profile --keys 500000

A profile, not a comparison: the figures are one machine's, for finding
where a batch's seconds go; `make bench` holds the side-by-side figures.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from include import local_kafka
from include.kafka_admin import create_topic
from include.transform_spec import FieldSpec, TransformSpec

SPEC = TransformSpec(
    fields=(
        FieldSpec("order_id", "string", required=True),
        FieldSpec("customer", "string"),
        FieldSpec("amount", "decimal(10,2)", required=True, minimum=0),
        FieldSpec("event_time", "timestamp", required=True),
    ),
    key=("order_id",),
    ordering="event_time",
    tombstones="delete",
    new_fields="add",
)
PARTITIONS = 3
T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _order(key: int, minute: int, amount: float) -> bytes:
    at = (T0 + timedelta(minutes=minute)).isoformat().replace("+00:00", "Z")
    return json.dumps({"order_id": f"o{key}", "customer": f"c{key % 997}", "amount": amount, "event_time": at}).encode()


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes | None]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i, (key, value) in enumerate(records):
        producer.produce(topic, key=f"o{key}".encode(), value=value, partition=key % PARTITIONS)
        if i % 10000 == 9999:
            producer.flush()
    if producer.flush(60):
        raise RuntimeError(f"records not delivered to {topic}")


def _ingest(spark, bootstrap: str, topic: str, lake: Path) -> None:
    from spark_jobs import kafka_to_bronze
    from spark_jobs.ingest_plan import parse_config

    kafka_to_bronze.run(spark, parse_config([
        "--pipeline", "profile", "--bootstrap-servers", bootstrap, "--topics", topic,
        "--bronze-path", str(lake / "bronze"), "--checkpoint-root", str(lake / "checkpoints" / "bronze"),
    ]))  # fmt: skip


def _transform(spark, lake: Path, run_id: str) -> tuple[float, list[dict]]:
    from spark_jobs import bronze_to_silver

    spec_file = lake / "spec.json"
    spec_file.write_text(json.dumps(SPEC.to_json()))
    started = time.monotonic()
    summary = bronze_to_silver.run(spark, bronze_to_silver.parse_config([
        "--pipeline", "profile", "--bronze-path", str(lake / "bronze"), "--silver-path", str(lake / "silver"),
        "--quarantine-path", str(lake / "quarantine"), "--checkpoint-root", str(lake / "checkpoints" / "silver"),
        "--spec-file", str(spec_file), "--run-id", run_id,
    ]))  # fmt: skip
    return time.monotonic() - started, [
        {"batch": b.batch_id, "seconds": round(b.duration_s, 2), **{k: round(v, 2) for k, v in b.phases.items()}}
        for b in summary.batches
    ]


def _merge_metrics(spark, lake: Path) -> dict:
    from delta.tables import DeltaTable

    row = DeltaTable.forPath(spark, str(lake / "silver")).history(1).collect()[0]
    wanted = ("numTargetRowsUpdated", "numTargetRowsInserted", "numTargetRowsCopied", "scanTimeMs",
              "rewriteTimeMs", "executionTimeMs", "numOutputRows")  # fmt: skip
    return {"operation": row["operation"], **{k: v for k, v in (row["operationMetrics"] or {}).items() if k in wanted}}


def main(argv: list[str] | None = None) -> int:
    """Run the profile and print one JSON line per transform run."""
    p = argparse.ArgumentParser(prog="python -m include.transform_profile", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--keys", type=int, default=500_000, help="orders of the first run (default %(default)s)")
    p.add_argument("--updates", type=int, default=2000, help="updates per later batch (default %(default)s)")
    p.add_argument("--tombstones", type=int, default=50, help="deletes per later batch (default %(default)s)")
    p.add_argument("--batches", type=int, default=3, help="later batches (default %(default)s)")
    p.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)

    from include.spark_submit import local_session

    root = Path(tempfile.mkdtemp(prefix="kde-transform-profile-"))
    broker = local_kafka.start(root / "kafka")
    try:
        spark = local_session("kde-transform-profile", warehouse=root / "warehouse")
        bootstrap, topic, lake = broker.bootstrap_servers, "orders", root / "lake"
        lake.mkdir(parents=True)
        create_topic(bootstrap, topic, PARTITIONS)
        _produce(bootstrap, topic, [(k, _order(k, 1, 10.0)) for k in range(args.keys)])
        _ingest(spark, bootstrap, topic, lake)
        seconds, batches = _transform(spark, lake, "first")
        print(json.dumps({"run": "first", "records": args.keys, "seconds": round(seconds, 2), "batches": batches,
                          "silver_commit": _merge_metrics(spark, lake)}), flush=True)  # fmt: skip
        rnd = random.Random(args.seed)
        for n in range(args.batches):
            records = [(k, _order(k, 2 + n, 20.0 + j)) for j, k in enumerate(rnd.randrange(args.keys)
                                                                            for _ in range(args.updates))]  # fmt: skip
            records += [(rnd.randrange(args.keys), None) for _ in range(args.tombstones)]
            _produce(bootstrap, topic, records)
            _ingest(spark, bootstrap, topic, lake)
            seconds, batches = _transform(spark, lake, f"update-{n + 1}")
            print(json.dumps({"run": f"update-{n + 1}", "records": len(records), "seconds": round(seconds, 2),
                              "batches": batches, "silver_commit": _merge_metrics(spark, lake)}), flush=True)  # fmt: skip
        spark.stop()
        return 0
    finally:
        broker.stop()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
