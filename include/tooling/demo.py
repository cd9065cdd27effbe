"""End-to-end demo: local broker, generated events, the pipeline DAG run twice by Airflow, a summary.

    make demo          # or: .venv/bin/python -m include.tooling.demo

1. starts the local Kafka broker (``var/demo/kafka``), creates ``demo.orders``
   with 4 partitions and produces generated order events: new orders,
   updates, late events, tombstones, and about 1 in 100 spoiled on purpose;
2. prepares an embedded Airflow (``var/demo/airflow``, SQLite) on this
   project's DAG folder, with the ``kafka_default`` connection pointing at the
   broker;
3. runs the ``demo_orders`` DAG (``include/pipelines/demo_orders.yaml``) with
   ``airflow dags test``: lag sensor, preflight, a transient Spark standalone
   cluster, the ingestion job, the bronze → silver transform, continuity
   check, consumer-group mirror, run ledger;
   then the same for ``demo_payments`` (``include/pipelines/demo_payments.yaml``):
   Avro payments in the Confluent wire format, their schema registered in a
   local schema registry (Apicurio, started here), decoded by Spark's
   ``from_avro``;
4. produces more events (with a field the schema does not declare) and more
   payments written with schema v2 (a new field, with a default), and runs
   both DAGs again: only the new records are read;
5. prints per partition the offsets, rows and lag of each run, the continuity
   verdict, the consumer group's lag as Kafka's own tool reports it, where the
   tables are, and checks bronze against an independent read of the topic;
   then where the transform put the records (silver, deleted, quarantine by
   field with an example reason) and that every one is accounted for.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from decimal import Decimal
from pathlib import Path

from include import settings
from include.config import load_pipeline
from include.readers import run_ledger
from include.readers.kafka_admin import create_topic
from include.tooling import airflow_local, local_kafka, local_registry, local_s3

TOPIC = "demo.orders"
#: The second pipeline: Avro payments, schemas in a schema registry.
PAYMENTS_TOPIC = "demo.payments"
PAYMENTS_FILE = settings.PROJECT_ROOT / "include" / "pipelines" / "demo_payments.yaml"
PAYMENT_SCHEMAS = settings.PROJECT_ROOT / "include" / "pipelines" / "schemas"
#: Airflow connection the payments pipeline names for its registry.
REGISTRY_CONNECTION = "schema_registry_default"
#: The demo's pipeline file; the transform profile and the benchmark's silver part run its shape too.
PIPELINE_FILE = settings.PROJECT_ROOT / "include" / "pipelines" / "demo_orders.yaml"
PARTITIONS = 4


#: Bad records the demo mixes in, one kind per position in a cycle: (field the
#: quarantine reason names, how the value is spoiled).
_BAD_KINDS = (
    ("value", lambda order: b'{"order_id": "' + order["order_id"].encode() + b'", "amount": '),  # cut-off JSON
    ("amount", lambda order: json.dumps({**order, "amount": "ten euros"}).encode()),  # wrong type
    ("customer_id", lambda order: json.dumps({k: v for k, v in order.items() if k != "customer_id"}).encode()),
    ("currency", lambda order: json.dumps({**order, "currency": "XYZ"}).encode()),  # not allowed
    ("value", lambda order: b""),  # empty value
    ("value", lambda order: b'{"order_id": "\xff\xfe"}'),  # not UTF-8
)


def produce_orders(bootstrap: str, count: int, start: int, *, new_field: bool = False,
                   topic: str = TOPIC) -> dict[str, int]:
    """Produce ``count`` order events keyed by order id; returns how many of each kind were sent.

    Most events create an order; some update an earlier one (paid, shipped,
    sometimes late: older than what silver holds), about 1 in 100 is spoiled
    in one of the :data:`_BAD_KINDS` ways, and about 1 in 200 is a tombstone
    (a cancelled order deleted). ``new_field`` adds a ``channel`` field the
    schema does not declare. ``topic``: where they go (the demo's own by default).
    """
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(start)
    base = time.time()
    sent = {"orders": 0, "updates": 0, "late": 0, "tombstones": 0, "bad": 0}
    bad_fields: dict[str, int] = {}
    for i in range(start, start + count):
        earlier = f"o-{rng.randrange(max(i, 1)):06d}"
        roll = rng.random()
        if i % 100 == 37:
            field, spoil = _BAD_KINDS[(i // 100) % len(_BAD_KINDS)]
            order = _order(f"o-{i:06d}", rng, base + i)
            producer.produce(topic, key=order["order_id"].encode(), value=spoil(order))
            sent["bad"] += 1
            bad_fields[field] = bad_fields.get(field, 0) + 1
            continue
        if i % 200 == 11 and i > start:
            producer.produce(topic, key=earlier.encode(), value=None)
            sent["tombstones"] += 1
            continue
        if roll < 0.7 or i == start:
            order = _order(f"o-{i:06d}", rng, base + i)
            sent["orders"] += 1
        elif roll < 0.95:
            order = _order(earlier, rng, base + i, status=rng.choice(["paid", "shipped"]))
            sent["updates"] += 1
        else:  # late: an event from long before, which must not overwrite newer state
            order = _order(earlier, rng, base - 86400 + i, status="created")
            sent["late"] += 1
        if new_field:
            order["channel"] = rng.choice(["web", "app", "store"])
        producer.produce(topic, key=order["order_id"].encode(), value=json.dumps(order).encode())
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(30)
    return {**sent, **{f"bad {k}": v for k, v in sorted(bad_fields.items())}}


def produce_payments(bootstrap: str, registry: local_registry.LocalRegistry, count: int, start: int, *,
                     version: int = 1, topic: str = PAYMENTS_TOPIC) -> dict[str, int]:  # fmt: skip
    """Register payment schema ``version`` as a producer's serializer does, then produce ``count`` payments.

    Values are Avro in the Confluent wire format under the registered id. Some
    payments are later refunded or captured (same key, newer time); about 1 in
    200 is spoiled: not in the wire format, an id the registry does not know,
    or bytes that are no payment.
    """
    import io

    import fastavro
    from confluent_kafka import Producer

    from include.readers.schema_registry import frame

    schema = json.loads((PAYMENT_SCHEMAS / f"payment-v{version}.avsc").read_text())
    schema_id = registry.register(f"{topic}-value", schema)
    parsed = fastavro.parse_schema(schema)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    rng = random.Random(10_000 + start)
    base = time.time()
    sent = {"payments": 0, "updates": 0, "bad": 0}
    spoil = (lambda v: v[5:], lambda v: frame(999_999, v[5:]), lambda v: frame(schema_id, b"\x09\x09\x09"))
    for i in range(start, start + count):
        updating = i > start and rng.random() < 0.2
        payment_id = f"p-{rng.randrange(max(i, 1)):06d}" if updating else f"p-{i:06d}"
        record = {"payment_id": payment_id, "order_id": f"o-{rng.randrange(max(i, 1)):06d}",
                  "amount": Decimal(f"{rng.uniform(1, 500):.2f}"),
                  "method": rng.choice(["card", "paypal", "transfer"]),
                  "status": rng.choice(["captured", "refunded"]) if updating else "authorized",
                  "paid_at": int((base + i) * 1000)}  # fmt: skip
        if version >= 2:
            record["country"] = rng.choice(["DE", "FR", "GB", None])
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, record)
        value = frame(schema_id, out.getvalue())
        if i % 200 == 77:
            value = spoil[(i // 200) % len(spoil)](value)
            sent["bad"] += 1
        else:
            sent["updates" if updating else "payments"] += 1
        producer.produce(topic, key=payment_id.encode(), value=value)
        if i % 5000 == 0:
            producer.poll(0)
    producer.flush(30)
    return {**sent, "bad value": sent["bad"], "schema id": schema_id}


def _order(order_id: str, rng: random.Random, when: float, status: str = "created") -> dict:
    return {
        "order_id": order_id,
        "customer_id": f"c-{rng.randrange(500):03d}",
        "amount": round(rng.uniform(1, 500), 2),
        "currency": rng.choice(["EUR", "USD", "GBP"]),
        "status": status,
        "event_time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(when)),
    }


def _run_dag(env: dict[str, str], workdir: Path, run_no: int, ledger: str, dag_id: str = "demo_orders", *,
             storage_options: dict[str, str] | None = None) -> dict:  # fmt: skip
    log_file = workdir / "logs" / f"{dag_id}-run-{run_no}.log"
    print(f"  airflow dags test {dag_id}   (log: {log_file})", flush=True)
    started = time.monotonic()
    proc = airflow_local.dags_test(env, dag_id, log_file=log_file)
    for line in airflow_local.summary_lines(proc.stdout + proc.stderr):
        print(f"    {line}")
    print(f"  DAG run took {time.monotonic() - started:.0f}s")
    if proc.returncode != 0:
        tail = log_file.read_text(errors="replace")[-4000:]
        raise SystemExit(f"DAG run {run_no} failed (exit {proc.returncode}); end of {log_file}:\n{tail}")
    return run_ledger.read_runs(ledger, limit=1, storage_options=storage_options)[0]


def _print_run(no: int, run: dict) -> None:
    print(f"\nrun {no} ({run['outcome']}): {run['rows']} rows in {run['commits']} Delta commit(s), "
          f"lag {run['lag_before']} -> {run['lag_after']}, continuity {run['continuity']}, "
          f"bronze version {run['bronze_version_after']}, {run['duration_s']:.0f}s")  # fmt: skip
    for part in run["partitions_json"]:
        span = f"[{part['from']}, {part['until']})" if part["from"] is not None else "nothing new"
        print(f"  {part['topic']}-{part['partition']}: offsets {span} -> {part['rows']} rows; "
              f"lag {part['lag_before']} -> {part['lag_after']}; Kafka offsets {part['earliest']}..{part['latest']}")
    if run.get("silver_read") is not None:
        job = (run.get("transform_json") or {}).get("job") or {}
        added = ", ".join(f"{f['name']} ({f['type']})" for f in job.get("fields_added", []))
        print(f"  transform: {run['silver_read']} bronze records -> {run['silver_upserted']} upserted into silver, "
              f"{run['silver_deleted']} deleted, {run['quarantined']} quarantined, {run['superseded']} superseded "
              f"by newer events{'; new field(s) added: ' + added if added else ''}")  # fmt: skip


def _print_transform(cfg, runs: list[dict], produced: list[dict[str, int]], options: dict[str, str] | None) -> bool:
    """Where the records went, and whether every one is accounted for; True when all checks hold."""
    from deltalake import DeltaTable

    key = cfg.transform.key[0]
    silver = DeltaTable(cfg.tables.silver_path, storage_options=options).to_pyarrow_table(
        columns=[key, "_deleted"]).to_pylist()  # fmt: skip
    quarantine = DeltaTable(cfg.tables.quarantine_path, storage_options=options).to_pyarrow_table(
        columns=["fields", "reason"]).to_pylist()  # fmt: skip
    by_field: dict[str, list[str]] = {}
    for r in quarantine:
        by_field.setdefault(r["fields"][0], []).append(r["reason"])
    print(f"\nsilver {cfg.tables.silver_path}: {sum(not r['_deleted'] for r in silver)} {cfg.name} rows, "
          f"{sum(r['_deleted'] for r in silver)} deleted (kept as _deleted rows so late events cannot revive them)")  # fmt: skip
    print(f"quarantine {cfg.tables.quarantine_path}: {len(quarantine)} records, by the field their reason names:")
    for field, reasons in sorted(by_field.items()):
        print(f"  {field:12} {len(reasons):4}   e.g. {reasons[0][:110]}")
    produced = [{k: v for k, v in p.items() if k != "schema id"} for p in produced]
    sent_bad = {k.removeprefix("bad "): 0 for p in produced for k in p if k.startswith("bad ")}
    for p in produced:
        for k, v in p.items():
            if k.startswith("bad "):
                sent_bad[k.removeprefix("bad ")] += v
    read = sum(r["silver_read"] for r in runs)
    accounted = sum(r["silver_upserted"] + r["silver_deleted"] + r["quarantined"] + r["superseded"] for r in runs)
    bronze = DeltaTable(cfg.tables.bronze_path, storage_options=options).to_pyarrow_table(columns=["offset"]).num_rows
    got_bad = {f: len(v) for f, v in by_field.items()}
    ok = read == accounted == bronze and got_bad == sent_bad
    print(f"transform: read {read}, accounted for {accounted} (upserted + deleted + quarantined + superseded), "
          f"bronze holds {bronze}; quarantined by field {got_bad}, spoiled on purpose {sent_bad}: "
          f"{'ALL ACCOUNTED FOR' if ok else 'MISMATCH'}")  # fmt: skip
    return ok


def main(argv: list[str] | None = None) -> int:
    """Run the demo; exit code 0 only when every DAG run succeeds and each bronze table matches its topic exactly."""
    parser = argparse.ArgumentParser(prog="python -m include.tooling.demo", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--events", type=int, default=20000, help="events before the first run")
    parser.add_argument("--more-events", type=int, default=5000, help="events before the second run")
    parser.add_argument("--payments", type=int, default=4000, help="Avro payments before the first run")
    parser.add_argument("--more-payments", type=int, default=1000, help="Avro payments (schema v2) before the second")
    parser.add_argument("--dir", type=Path, default=settings.VAR_DIR / "demo")
    parser.add_argument("--store", choices=("disk", "s3"), default="disk",
                        help="where the lakehouse lives: this disk, or a local S3-compatible server (s3proxy, "
                        "started here) reached through the Airflow connection aws_default (make demo STORE=s3)")  # fmt: skip
    args = parser.parse_args(argv)

    workdir: Path = args.dir.resolve()
    if workdir.exists():
        local_kafka.stop(workdir / "kafka")
        shutil.rmtree(workdir)
    print(f"starting the local Kafka broker in {workdir / 'kafka'} ...", flush=True)
    broker = local_kafka.start(workdir / "kafka")
    registry = store = None
    try:
        lakehouse, store_env = str(workdir / "lakehouse"), {}
        if args.store == "s3":
            store, lakehouse, store_env = _start_store(workdir)
        os.environ["KDE_LAKEHOUSE_ROOT"] = lakehouse  # before the pipeline files are read
        cfg, payments_cfg = load_pipeline(PIPELINE_FILE), load_pipeline(PAYMENTS_FILE)
        bootstrap = broker.bootstrap_servers
        print(f"broker ready at {bootstrap}")
        print("starting the local schema registry (Apicurio, Confluent-compatible API) ...", flush=True)
        registry = local_registry.start(workdir / "registry")
        print(f"schema registry ready at {registry.url}")
        connection = {"conn_type": "http", "extra": {"url": registry.url}}
        env = airflow_local.environment(
            workdir / "airflow", kafka_bootstrap=bootstrap,
            extra={"KDE_LAKEHOUSE_ROOT": lakehouse, "KDE_VAR_DIR": str(workdir),
                   f"AIRFLOW_CONN_{REGISTRY_CONNECTION.upper()}": json.dumps(connection), **store_env},
        )  # fmt: skip
        print(f"preparing Airflow's metadata database in {workdir / 'airflow'} ...", flush=True)
        airflow_local.migrate(env)
        # delta-rs options for the demo's tables, all under one lakehouse root (None: this disk).
        options = store.settings().object_store_options() if store is not None else None
        create_topic(bootstrap, TOPIC, PARTITIONS)
        create_topic(bootstrap, PAYMENTS_TOPIC, 2)

        print(f"\nproducing {args.events} events to {TOPIC} ({PARTITIONS} partitions)", flush=True)
        produced = [produce_orders(bootstrap, args.events, 0)]
        print(f"  {produced[0]}")
        print(f"producing {args.payments} Avro payments to {PAYMENTS_TOPIC} (schema v1 registered)", flush=True)
        paid = [produce_payments(bootstrap, registry, args.payments, 0, version=1)]
        print(f"  {paid[0]}")
        first = _run_dag(env, workdir, 1, cfg.tables.ledger_path, storage_options=options)
        _print_run(1, first)
        pay_first = _run_dag(env, workdir, 1, payments_cfg.tables.ledger_path, "demo_payments",
                             storage_options=options)  # fmt: skip
        _print_run(1, pay_first)

        print(f"\nproducing {args.more_events} more events, now with a field the schema does not declare", flush=True)
        produced.append(produce_orders(bootstrap, args.more_events, args.events, new_field=True))
        print(f"  {produced[1]}")
        print(f"producing {args.more_payments} Avro payments with schema v2 (adds country, with a default)", flush=True)
        paid.append(produce_payments(bootstrap, registry, args.more_payments, args.payments, version=2))
        print(f"  {paid[1]}")
        second = _run_dag(env, workdir, 2, cfg.tables.ledger_path, storage_options=options)
        _print_run(2, second)
        pay_second = _run_dag(env, workdir, 2, payments_cfg.tables.ledger_path, "demo_payments",
                              storage_options=options)  # fmt: skip
        _print_run(2, pay_second)

        group = cfg.consumer_group
        tool = local_kafka.run_kafka_tool("consumer-groups", "--bootstrap-server", bootstrap,
                                          "--describe", "--group", group)  # fmt: skip
        lags = [line.split()[5] for line in tool.stdout.splitlines() if line.startswith(group)]
        print(f"\nKafka's kafka-consumer-groups --describe --group {group}: LAG per partition {lags}")

        ok = lags == ["0"] * PARTITIONS
        ok = _print_pipeline(cfg, [first, second], produced, args.events + args.more_events, options) and ok
        ok = _print_pipeline(payments_cfg, [pay_first, pay_second], paid, args.payments + args.more_payments,
                             options) and ok  # fmt: skip
        print("\nsee it in the Airflow UI: make ui   (then http://127.0.0.1:8080, user admin, password admin)")
        return 0 if ok else 1
    finally:
        if registry is not None:
            registry.stop()
        broker.stop()
        if store is not None:
            store.stop()
        print("broker, registry" + (" and object store" if store is not None else "") + " stopped")


def _start_store(workdir: Path) -> tuple[local_s3.LocalS3, str, dict[str, str]]:
    """The local S3-compatible server, the lakehouse's URI on it, and the Airflow connection that reaches it
    (``aws_default``, the pipelines' default ``tables.storage_connection_id``) as an environment variable."""
    print(f"starting the local S3-compatible server (s3proxy) in {workdir / 's3'} ...", flush=True)
    store = local_s3.start(workdir / "s3")
    lakehouse = f"{store.create_bucket('demo')}/lakehouse"
    print(f"object store ready at {store.endpoint}; the lakehouse is {lakehouse}")
    return store, lakehouse, {"AIRFLOW_CONN_AWS_DEFAULT": json.dumps(store.connection())}


def _print_pipeline(cfg, runs: list[dict], produced: list[dict[str, int]], total: int,
                    options: dict[str, str] | None) -> bool:  # fmt: skip
    """Bronze against the count produced, continuity, and where the transform put the records."""
    from deltalake import DeltaTable

    bronze = DeltaTable(cfg.tables.bronze_path, storage_options=options).to_pyarrow_table(
        columns=["partition", "offset"])  # fmt: skip
    keys = set(zip(bronze.column("partition").to_pylist(), bronze.column("offset").to_pylist(), strict=True))
    ok = len(keys) == bronze.num_rows == total and all(r["continuity"] == "CONTINUOUS" for r in runs)
    print(f"\n{cfg.name}: bronze {cfg.tables.bronze_path}\n        run ledger {cfg.tables.ledger_path}\n"
          f"        checkpoints {cfg.tables.checkpoint_root}")  # fmt: skip
    print(f"bronze rows {bronze.num_rows}, distinct (partition, offset) {len(keys)}, produced {total}: "
          f"{'EXACTLY ONCE' if ok else 'MISMATCH'}")  # fmt: skip
    if cfg.transform is not None:
        ok = _print_transform(cfg, runs, produced, options) and ok
    return ok


if __name__ == "__main__":
    sys.exit(main())
