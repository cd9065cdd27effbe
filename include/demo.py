"""End-to-end demo: local broker, generated events, the ingestion job twice, a summary.

    make demo          # or: .venv/bin/python -m include.demo

1. starts the local Kafka broker (``var/demo/kafka``) and creates a topic with
   4 partitions;
2. produces generated order events, runs the ingestion job with spark-submit
   (``local[2]``, exactly the command the orchestrator renders);
3. produces more events and runs the job again: only the new ones are read;
4. prints per partition: the offset ranges each run wrote, rows, the table's
   next offset and Kafka's end offset, and checks bronze against an
   independent read of the topic; stops the broker.
"""

from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
import uuid
from pathlib import Path

from include import local_kafka, settings
from include.delta_progress import read_progress
from include.kafka_admin import create_topic, watermarks
from include.spark_submit import submit_command, submit_environment

TOPIC = "demo.orders"
PARTITIONS = 4


def _produce_orders(bootstrap: str, count: int, start: int) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(start)
    for i in range(start, start + count):
        order = {
            "order_id": f"o-{i:06d}",
            "customer_id": f"c-{rng.randrange(500):03d}",
            "amount": round(rng.uniform(1, 500), 2),
            "event_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        }
        producer.produce(TOPIC, key=order["customer_id"].encode(), value=json.dumps(order).encode())
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(30)


def _run_ingestion(bootstrap: str, lake: Path, run_no: int) -> dict:
    summary_path = lake / f"run-{run_no}-summary.json"
    args = [
        "--pipeline", "demo_orders", "--bootstrap-servers", bootstrap, "--topics", TOPIC,
        "--bronze-path", str(lake / "bronze"), "--checkpoint-root", str(lake / "_checkpoints" / "bronze"),
        "--max-offsets-per-trigger", "20000", "--run-id", f"demo-{run_no}-{uuid.uuid4().hex[:6]}",
        "--run-type", "manual", "--summary-path", str(summary_path),
    ]  # fmt: skip
    cmd = submit_command("spark_jobs/kafka_to_bronze.py", args, master="local[2]",
                         conf={"spark.ui.enabled": "false"})  # fmt: skip
    log_file = lake / f"run-{run_no}.log"
    print(f"  spark-submit ... spark_jobs/kafka_to_bronze.py (log: {log_file})", flush=True)
    with open(log_file, "w") as log:
        proc = subprocess.run(cmd, env=submit_environment(), stdout=log, stderr=subprocess.STDOUT)
    if proc.returncode != 0:
        tail = log_file.read_text(errors="replace")[-3000:]
        raise SystemExit(f"ingestion run {run_no} failed (exit {proc.returncode}); end of {log_file}:\n{tail}")
    return json.loads(summary_path.read_text())


def _print_run(no: int, summary: dict) -> None:
    print(f"\nrun {no}: {summary['rows']} rows in {len(summary['batches'])} batch(es), epoch "
          f"{summary['epoch']}, bronze version {summary['bronze_version']}, "
          f"{summary['duration_s']:.1f}s in the job")  # fmt: skip
    for p, r in sorted(summary["partitions"].get(TOPIC, {}).items(), key=lambda kv: int(kv[0])):
        print(f"  {TOPIC}-{p}: offsets [{r['from']}, {r['until']}) -> {r['rows']} rows")


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit code 0 only when bronze matches the topic exactly."""
    parser = argparse.ArgumentParser(prog="python -m include.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--events", type=int, default=20000, help="events before the first run")
    parser.add_argument("--more-events", type=int, default=5000, help="events before the second run")
    parser.add_argument("--dir", type=Path, default=settings.VAR_DIR / "demo")
    args = parser.parse_args(argv)

    workdir: Path = args.dir.resolve()
    lake = workdir / "lakehouse" / "demo_orders"
    if workdir.exists():
        local_kafka.stop(workdir / "kafka")
        import shutil

        shutil.rmtree(workdir)
    lake.mkdir(parents=True)
    print(f"starting the local Kafka broker in {workdir / 'kafka'} ...", flush=True)
    broker = local_kafka.start(workdir / "kafka")
    try:
        bootstrap = broker.bootstrap_servers
        print(f"broker ready at {bootstrap}")
        create_topic(bootstrap, TOPIC, PARTITIONS)
        print(f"producing {args.events} events to {TOPIC} ({PARTITIONS} partitions)", flush=True)
        _produce_orders(bootstrap, args.events, 0)
        first = _run_ingestion(bootstrap, lake, 1)
        _print_run(1, first)

        print(f"\nproducing {args.more_events} more events", flush=True)
        _produce_orders(bootstrap, args.more_events, args.events)
        second = _run_ingestion(bootstrap, lake, 2)
        _print_run(2, second)

        progress = read_progress(lake / "bronze")
        ends = {p: end for p, (_, end) in watermarks(bootstrap, TOPIC).items()}
        print(f"\nbronze table {lake / 'bronze'} (Delta version {progress.table_version}, "
              f"epoch {progress.epoch}) vs Kafka:")  # fmt: skip
        lag_total = 0
        for p in range(PARTITIONS):
            nxt = progress.next_offsets.get(TOPIC, {}).get(p, 0)
            lag_total += ends[p] - nxt
            print(f"  {TOPIC}-{p}: table next offset {nxt}, Kafka end offset {ends[p]}, lag {ends[p] - nxt}")

        from deltalake import DeltaTable

        bronze = DeltaTable(str(lake / "bronze")).to_pyarrow_table(columns=["partition", "offset"])
        keys = set(zip(bronze.column("partition").to_pylist(), bronze.column("offset").to_pylist(), strict=True))
        total = args.events + args.more_events
        ok = len(keys) == bronze.num_rows == total and lag_total == 0
        print(f"\nbronze rows {bronze.num_rows}, distinct (partition, offset) {len(keys)}, produced {total}, "
              f"lag {lag_total}: {'EXACTLY ONCE' if ok else 'MISMATCH'}")  # fmt: skip
        return 0 if ok else 1
    finally:
        broker.stop()
        print("broker stopped")


if __name__ == "__main__":
    sys.exit(main())
