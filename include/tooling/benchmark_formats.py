"""What Avro costs against JSON, side by side: the same orders as JSON and as registry-framed Avro through
the same transform (``make bench BENCH_ARGS="--parts formats"``).

One backlog of order records of the demo's shape is produced twice: as JSON
text to one topic and as Avro in the Confluent wire format (schema
registered in the local registry the benchmark starts) to another. Both are
ingested into their own bronze table, then each repetition runs the real
transform job (``spark_jobs/bronze_to_silver.py``) over the whole bronze
table into a fresh silver, in one warm in-process SparkSession, JSON and
Avro alternating. A first run of each, not counted, warms the session.

Reported per format: the transform's records per second (median and range),
its decode phase, and Avro / JSON. Both runs must put the same rows in silver
(compared row by row), or the benchmark fails.
"""

from __future__ import annotations

import io
import json
import logging
import os
import random
import shutil
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from include.contract.errors import PipelineError
from include.contract.jobs import IngestArgs

FORMATS = ("json", "avro")
ORDER_SCHEMA = {
    "type": "record", "name": "Order", "namespace": "bench.shop",
    "fields": [
        {"name": "order_id", "type": "string"},
        {"name": "customer_id", "type": "string"},
        {"name": "amount", "type": {"type": "bytes", "logicalType": "decimal", "precision": 10, "scale": 2}},
        {"name": "currency", "type": "string"},
        {"name": "status", "type": "string"},
        {"name": "event_time", "type": {"type": "long", "logicalType": "timestamp-millis"}},
    ],
}  # fmt: skip


class FormatsBenchError(PipelineError, RuntimeError):
    """A transform failed, or the two formats did not give the same silver."""


@dataclass(frozen=True)
class FormatsParams:
    """The backlog and repetitions of ``--parts formats``."""

    records: int = 200_000
    partitions: int = 4
    repetitions: int = 3


@dataclass
class FormatsReport:
    """Seconds per transform run and its decode phase, per format."""

    params: FormatsParams
    seconds: dict[str, list[float]] = field(default_factory=dict)
    decode_s: dict[str, list[float]] = field(default_factory=dict)
    silver_rows: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    registry: str = ""


def _orders(count: int, seed: int = 7) -> list[dict]:
    """Order events of the demo's shape: new orders and updates of earlier ones."""
    rng = random.Random(seed)
    base = 1_770_000_000
    out = []
    for i in range(count):
        order_id = f"o-{rng.randrange(i):07d}" if i and rng.random() < 0.3 else f"o-{i:07d}"
        out.append({"order_id": order_id, "customer_id": f"c-{rng.randrange(500):03d}",
                    "amount": f"{rng.uniform(1, 500):.2f}", "currency": rng.choice(["EUR", "USD", "GBP"]),
                    "status": rng.choice(["created", "paid", "shipped"]), "event_time": base + i})  # fmt: skip
    return out


def _produce(bootstrap: str, topic: str, partitions: int, values: list[tuple[bytes, bytes]]) -> None:
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000})
    for i, (key, value) in enumerate(values):
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=i % partitions)
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise FormatsBenchError(f"records not delivered to {topic}")


def run_formats_bench(work: Path, bootstrap: str, topics: dict[str, str], registry_url: str,
                      register: Callable[[str, dict], int], params: FormatsParams,
                      log: Callable[[str], None]) -> FormatsReport:  # fmt: skip
    """Produce, ingest and transform both formats; ``topics`` (per format) exist, with ``params.partitions``."""
    import fastavro
    import yaml

    from include.config import load_pipeline
    from include.orchestration.spark_operator import transform_job_args
    from include.readers.schema_registry import frame
    from include.spark.spark_submit import local_session
    from include.tooling import demo
    from spark_jobs import bronze_to_silver, kafka_to_bronze

    p = params
    report = FormatsReport(p, registry=registry_url)
    orders = _orders(p.records)
    schema_id = register(f"{topics['avro']}-value", ORDER_SCHEMA)
    parsed = fastavro.parse_schema(ORDER_SCHEMA)

    def avro(order: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {**order, "amount": Decimal(order["amount"]),
                                                 "event_time": order["event_time"] * 1000})  # fmt: skip
        return frame(schema_id, out.getvalue())

    def as_json(order: dict) -> bytes:
        return json.dumps({**order, "event_time": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                               time.gmtime(order["event_time"]))}).encode()  # fmt: skip

    log(f"formats: producing {p.records:,} orders as JSON to {topics['json']} and as Avro to {topics['avro']}")
    for fmt, encode in (("json", as_json), ("avro", avro)):
        _produce(bootstrap, topics[fmt], p.partitions, [(o["order_id"].encode(), encode(o)) for o in orders])

    transform = yaml.safe_load(demo.PIPELINE_FILE.read_text())["transform"]
    transform.pop("tombstones", None)
    cfgs = {}
    for fmt in FORMATS:
        section = dict(transform)
        if fmt == "avro":
            section.update(format="avro", value_schema={"registry": "bench_registry"})
        data = {"name": f"formats-{fmt}", "kafka": {"connection_id": "kafka_default", "topics": [topics[fmt]]},
                "tables": {"lakehouse_root": str(work / "lake")}, "schedule": None, "transform": section}  # fmt: skip
        path = work / f"formats-{fmt}.yaml"
        path.write_text(yaml.safe_dump(data))
        cfgs[fmt] = load_pipeline(path)
    # The connection the avro pipeline names, as Airflow reads it from the environment.
    os.environ["AIRFLOW_CONN_BENCH_REGISTRY"] = json.dumps({"conn_type": "http", "extra": {"url": registry_url}})
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    # A session this process already has (the test suite's) is used and left running.
    own_session = SparkSession.getActiveSession() is None
    spark = local_session("kde-benchmark-formats", warehouse=work / "warehouse")
    try:
        for fmt, cfg in cfgs.items():
            folder = work / "runs" / fmt
            folder.mkdir(parents=True)
            kafka_to_bronze.run(spark, kafka_to_bronze.parse_config(
                IngestArgs.for_pipeline(cfg, bootstrap_servers=bootstrap, run_id="ingest", run_type="manual",
                                        summary_path=str(folder / "ingest.json")).to_args()))  # fmt: skip
        silver: dict[str, dict] = {}
        for rep in range(p.repetitions + 1):  # repetition 0 warms the session, not counted
            for fmt in FORMATS if rep % 2 == 0 else reversed(FORMATS):
                cfg = cfgs[fmt]
                t = cfg.tables
                for stale in (t.silver_path, t.quarantine_path, t.transform_checkpoint_root):
                    shutil.rmtree(stale, ignore_errors=True)
                folder = work / "runs" / fmt / f"rep-{rep}"
                folder.mkdir(parents=True)
                args = transform_job_args(cfg, folder, f"rep-{rep}", folder / "transform.json")
                started = time.monotonic()
                done = bronze_to_silver.run(spark, bronze_to_silver.parse_config(args))
                seconds = time.monotonic() - started
                summary = done.to_json()
                if summary["read"] != p.records:
                    raise FormatsBenchError(f"{fmt}: the transform read {summary['read']} of {p.records} records")
                report.quarantined[fmt] = summary["quarantined"]
                if rep == 0:
                    silver[fmt] = _silver(spark, t.silver_path)
                    continue
                report.seconds.setdefault(fmt, []).append(seconds)
                decode = sum(b.get("phases", {}).get("decode", 0.0) for b in summary["batches"])
                report.decode_s.setdefault(fmt, []).append(decode)
                log(f"formats: {fmt} repetition {rep}: {seconds:.1f}s ({p.records / seconds:,.0f} records/s)")
        if silver["json"] != silver["avro"]:
            differing = [k for k in silver["json"] if silver["json"][k] != silver["avro"].get(k)][:3]
            raise FormatsBenchError(f"JSON and Avro gave different silver rows, e.g. {differing}")
        report.silver_rows = len(silver["json"])
    finally:
        if own_session:
            spark.stop()
    return report


def _silver(spark, path: str) -> dict[str, tuple]:
    rows = spark.read.format("delta").load(path).collect()
    return {r["order_id"]: (r["customer_id"], str(r["amount"]), r["currency"], r["status"], r["event_time"])
            for r in rows}  # fmt: skip


def render_formats_markdown(report: FormatsReport) -> str:
    """The ``## Value formats`` section of the report."""
    p = report.params
    lines = [
        "## Value formats: the same orders as JSON and as Avro",
        "",
        f"{p.records:,} order records of the demo's shape, {p.partitions} partitions, produced once as JSON text "
        f"and once as Avro in the Confluent wire format (schema in the registry at {report.registry}); each "
        f"repetition transforms the whole bronze table into a fresh silver (one warm in-process session, "
        f"formats alternating; a first run of each not counted). Both formats gave the same "
        f"{report.silver_rows:,} silver rows.",
        "",
        "| format | transform records/s | seconds | decode phase s | quarantined |",
        "| --- | --- | --- | --- | --- |",
    ]
    rates = {}
    for fmt in FORMATS:
        secs = report.seconds.get(fmt, [])
        if not secs:
            continue
        rate = [p.records / s for s in secs]
        rates[fmt] = statistics.median(rate)
        lines.append(
            f"| {fmt} | {statistics.median(rate):,.0f} ({min(rate):,.0f}–{max(rate):,.0f}) "
            f"| {statistics.median(secs):.1f} | {statistics.median(report.decode_s[fmt]):.1f} "
            f"| {report.quarantined.get(fmt, 0)} |"
        )
    if len(rates) == 2:
        lines += ["", f"Avro / JSON records/s: **{rates['avro'] / rates['json']:.2f}**."]
    return "\n".join(lines) + "\n"
