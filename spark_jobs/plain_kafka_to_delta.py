"""The plain Kafka -> Delta job a user would write from the Spark and Delta docs.

Baseline for ``python -m include.tooling.benchmark``: ``readStream`` kafka ->
``Trigger.AvailableNow`` -> ``writeStream.format("delta")`` with a checkpoint,
nothing else (no offset bookkeeping, no idempotent commits, no summary)::

    spark-submit ... spark_jobs/plain_kafka_to_delta.py \\
        --bootstrap-servers 127.0.0.1:9092 --topic orders \\
        --table lakehouse/plain --checkpoint lakehouse/_checkpoints/plain

It prints one line the benchmark parses, timed around ``start()`` and
``awaitTermination()`` (session start-up excluded)::

    plain_kafka_to_delta: rows=2000000 seconds=41.234 batches=1
"""

from __future__ import annotations

import argparse
import sys
import time


def build_arg_parser() -> argparse.ArgumentParser:
    """The job's four arguments."""
    p = argparse.ArgumentParser(prog="plain_kafka_to_delta.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--bootstrap-servers", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--table", required=True, help="path of the Delta table to append to")
    p.add_argument("--checkpoint", required=True, help="the streaming query's checkpoint folder")
    p.add_argument("--max-offsets-per-trigger", type=int, default=None,
                   help="Spark's maxOffsetsPerTrigger (default: everything in one batch)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """Drain what the topic holds now into the Delta table; print rows and seconds."""
    args = build_arg_parser().parse_args(sys.argv[1:] if argv is None else argv)

    from pyspark.sql import SparkSession

    spark = (
        SparkSession.builder.appName("plain_kafka_to_delta")
        .config("spark.sql.extensions", "io.delta.sql.DeltaSparkSessionExtension")
        .config("spark.sql.catalog.spark_catalog", "org.apache.spark.sql.delta.catalog.DeltaCatalog")
        .getOrCreate()
    )
    try:
        source = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", args.bootstrap_servers)
            .option("subscribe", args.topic)
            .option("startingOffsets", "earliest")
            .options(**({"maxOffsetsPerTrigger": str(args.max_offsets_per_trigger)}
                        if args.max_offsets_per_trigger else {}))  # fmt: skip
            .load()
        )
        started = time.monotonic()
        query = (
            source.writeStream.format("delta")
            .option("checkpointLocation", args.checkpoint)
            .trigger(availableNow=True)
            .start(args.table)
        )
        query.awaitTermination()
        seconds = time.monotonic() - started
        progress = query.recentProgress
        rows = sum(int(p["numInputRows"]) for p in progress)
        batches = sum(1 for p in progress if int(p["numInputRows"]) > 0)
        # Each batch's whole trigger (offsets, planning, the Delta write and commit, Spark's checkpoint).
        trigger_ms = [int(p["durationMs"]["triggerExecution"]) for p in progress if int(p["numInputRows"]) > 0]
    finally:
        spark.stop()
    print(f"plain_kafka_to_delta: rows={rows} seconds={seconds:.3f} batches={batches}", flush=True)
    print(f"plain_kafka_to_delta: trigger_ms={','.join(map(str, trigger_ms))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
