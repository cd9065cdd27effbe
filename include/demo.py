"""End-to-end demo: local broker, generated events, the pipeline DAG run twice by Airflow, a summary.

    make demo          # or: .venv/bin/python -m include.demo

1. starts the local Kafka broker (``var/demo/kafka``), creates ``demo.orders``
   with 4 partitions and produces generated order events;
2. prepares an embedded Airflow (``var/demo/airflow``, SQLite) on this
   project's DAG folder, with the ``kafka_default`` connection pointing at the
   broker;
3. runs the ``demo_orders`` DAG (``include/pipelines/demo_orders.yaml``) with
   ``airflow dags test``: lag sensor, preflight, a transient Spark standalone
   cluster, the ingestion job, continuity check, consumer-group mirror, run
   ledger;
4. produces more events and runs the DAG again: only the new ones are read;
5. prints per partition the offsets, rows and lag of each run, the continuity
   verdict, the consumer group's lag as Kafka's own tool reports it, where the
   tables are, and checks bronze against an independent read of the topic.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

from include import airflow_local, local_kafka, run_ledger, settings
from include.kafka_admin import create_topic
from include.pipeline_config import load_pipeline

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


def _run_dag(env: dict[str, str], workdir: Path, run_no: int, ledger: Path) -> dict:
    log_file = workdir / "logs" / f"dag-run-{run_no}.log"
    print(f"  airflow dags test demo_orders   (log: {log_file})", flush=True)
    started = time.monotonic()
    proc = airflow_local.dags_test(env, "demo_orders", log_file=log_file)
    for line in airflow_local.summary_lines(proc.stdout + proc.stderr):
        print(f"    {line}")
    print(f"  DAG run took {time.monotonic() - started:.0f}s")
    if proc.returncode != 0:
        tail = log_file.read_text(errors="replace")[-4000:]
        raise SystemExit(f"DAG run {run_no} failed (exit {proc.returncode}); end of {log_file}:\n{tail}")
    return run_ledger.read_runs(ledger, limit=1)[0]


def _print_run(no: int, run: dict) -> None:
    print(f"\nrun {no} ({run['outcome']}): {run['rows']} rows in {run['commits']} Delta commit(s), "
          f"lag {run['lag_before']} -> {run['lag_after']}, continuity {run['continuity']}, "
          f"bronze version {run['bronze_version_after']}, {run['duration_s']:.0f}s")  # fmt: skip
    for part in run["partitions_json"]:
        span = f"[{part['from']}, {part['until']})" if part["from"] is not None else "nothing new"
        print(f"  {part['topic']}-{part['partition']}: offsets {span} -> {part['rows']} rows; "
              f"lag {part['lag_before']} -> {part['lag_after']}; Kafka offsets {part['earliest']}..{part['latest']}")


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit code 0 only when both DAG runs succeed and bronze matches the topic exactly."""
    parser = argparse.ArgumentParser(prog="python -m include.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--events", type=int, default=20000, help="events before the first run")
    parser.add_argument("--more-events", type=int, default=5000, help="events before the second run")
    parser.add_argument("--dir", type=Path, default=settings.VAR_DIR / "demo")
    args = parser.parse_args(argv)

    workdir: Path = args.dir.resolve()
    if workdir.exists():
        local_kafka.stop(workdir / "kafka")
        shutil.rmtree(workdir)
    lakehouse = workdir / "lakehouse"
    os.environ["KDE_LAKEHOUSE_ROOT"] = str(lakehouse)  # before the pipeline file is read
    cfg = load_pipeline(settings.PROJECT_ROOT / "include" / "pipelines" / "demo_orders.yaml")
    print(f"starting the local Kafka broker in {workdir / 'kafka'} ...", flush=True)
    broker = local_kafka.start(workdir / "kafka")
    try:
        bootstrap = broker.bootstrap_servers
        print(f"broker ready at {bootstrap}")
        env = airflow_local.environment(
            workdir / "airflow", kafka_bootstrap=bootstrap,
            extra={"KDE_LAKEHOUSE_ROOT": str(lakehouse), "KDE_VAR_DIR": str(workdir)},
        )  # fmt: skip
        print(f"preparing Airflow's metadata database in {workdir / 'airflow'} ...", flush=True)
        airflow_local.migrate(env)
        create_topic(bootstrap, TOPIC, PARTITIONS)

        print(f"\nproducing {args.events} events to {TOPIC} ({PARTITIONS} partitions)", flush=True)
        _produce_orders(bootstrap, args.events, 0)
        first = _run_dag(env, workdir, 1, Path(cfg.tables.ledger_path))
        _print_run(1, first)

        print(f"\nproducing {args.more_events} more events", flush=True)
        _produce_orders(bootstrap, args.more_events, args.events)
        second = _run_dag(env, workdir, 2, Path(cfg.tables.ledger_path))
        _print_run(2, second)

        group = cfg.consumer_group
        tool = local_kafka.run_kafka_tool("consumer-groups", "--bootstrap-server", bootstrap,
                                          "--describe", "--group", group)  # fmt: skip
        lags = [line.split()[5] for line in tool.stdout.splitlines() if line.startswith(group)]
        print(f"\nKafka's kafka-consumer-groups --describe --group {group}: LAG per partition {lags}")

        from deltalake import DeltaTable

        bronze = DeltaTable(cfg.tables.bronze_path).to_pyarrow_table(columns=["partition", "offset"])
        keys = set(zip(bronze.column("partition").to_pylist(), bronze.column("offset").to_pylist(), strict=True))
        total = args.events + args.more_events
        ok = (
            len(keys) == bronze.num_rows == total
            and lags == ["0"] * PARTITIONS
            and first["continuity"] == second["continuity"] == "CONTINUOUS"
        )
        print(f"\ntables: bronze {cfg.tables.bronze_path}\n        run ledger {cfg.tables.ledger_path}\n"
              f"        checkpoints {cfg.tables.checkpoint_root}")  # fmt: skip
        print(f"bronze rows {bronze.num_rows}, distinct (partition, offset) {len(keys)}, produced {total}: "
              f"{'EXACTLY ONCE' if ok else 'MISMATCH'}")  # fmt: skip
        print("\nsee it in the Airflow UI: make ui   (then http://127.0.0.1:8080, user admin, password admin)")
        return 0 if ok else 1
    finally:
        broker.stop()
        print("broker stopped")


if __name__ == "__main__":
    sys.exit(main())
