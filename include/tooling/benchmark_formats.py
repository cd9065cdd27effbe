"""Transforms side by side over the same orders, in one warm session: what Avro and Protobuf cost against JSON
(``--parts formats``), what reading Debezium change events costs against a plain upsert (``--parts cdc``), and
what one routed transform into three tables costs against three single-table pipelines (``--parts routes``).

Each part produces one backlog of order records of the demo's shape in two
encodings, each to a topic of its own, ingests each into its own bronze table,
then each repetition runs the real transform job
(``spark_jobs/bronze_to_silver.py``) over the whole bronze table into a fresh
silver, in one warm in-process SparkSession, the two variants alternating. A
first run of each, not counted, warms the session.

- ``formats``: JSON text against Avro and Protobuf in the Confluent wire
  format (schemas registered in the local registry the benchmark starts).
- ``cdc``: the plain pipeline (JSON records, upsert by ``order_id``, the newest
  by ``event_time``) against the same changes as Debezium's PostgreSQL connector
  writes them (JSON without schemas, ``transform.envelope: debezium``): each
  order's first change a create, later ones updates, each in a transaction of
  its own at a growing LSN. Both are keyed by ``order_id`` into partitions, as
  Debezium keys a table's changes.

- ``routes``: the orders, each of one of three kinds named by a Kafka header,
  once in one topic read by one pipeline whose transform routes each kind to a
  table of its own, and once as three topics, one per kind, read by three
  single-table pipelines. The figure is the routed transform's time against the
  three transforms' times added up.

Reported per variant: the transform's records per second (median and range),
its decode phase, and the ratio. Both variants must put the same rows in silver
(compared row by row; each route against its kind's own pipeline), or the
benchmark fails.
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
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path

from include.contract.errors import PipelineError
from include.contract.jobs import IngestArgs

FORMATS = ("json", "avro", "protobuf")
#: The cdc part's variants: the plain pipeline and the same changes as Debezium envelopes.
CDC_MODES = ("upsert", "debezium")
#: The routes part's record kinds (a header ``kind`` names each), and its two sides.
ROUTE_KINDS = ("orders", "payments", "refunds")
ROUTES_MODES = ("routed", "single")
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
#: The same orders as a Protobuf message (amount as decimal text, as JSON carries it).
ORDER_PROTO = """syntax = "proto3";
package bench.shop;
import "google/protobuf/timestamp.proto";
message Order {
  string order_id = 1;
  string customer_id = 2;
  string amount = 3;
  string currency = 4;
  string status = 5;
  google.protobuf.Timestamp event_time = 6;
}
"""
#: The first LSN of the cdc part's changes, and how far apart consecutive commits are.
_FIRST_LSN, _LSN_STEP = 24_000_000, 160


class SideBySideBenchError(PipelineError, RuntimeError):
    """A transform failed, or the two variants did not give the same silver."""


@dataclass(frozen=True)
class SideBySideParams:
    """The backlog and repetitions of ``--parts formats`` or ``--parts cdc``."""

    records: int = 100_000
    partitions: int = 4
    repetitions: int = 3


@dataclass
class SideBySideReport:
    """Seconds per transform run and its decode phase, per variant (``modes``)."""

    params: SideBySideParams
    modes: tuple[str, ...] = FORMATS
    seconds: dict[str, list[float]] = field(default_factory=dict)
    decode_s: dict[str, list[float]] = field(default_factory=dict)
    silver_rows: int = 0
    quarantined: dict[str, int] = field(default_factory=dict)
    registry: str = ""


@dataclass(frozen=True)
class _Variant:
    """One side: its topic, its records as (partition, key, value), and its pipeline's transform section."""

    topic: str
    records: list[tuple[int, bytes, bytes]]
    transform: dict


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


def _iso(epoch_s: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


def _as_json(order: dict) -> bytes:
    return json.dumps({**order, "event_time": _iso(order["event_time"])}).encode()


def debezium_changes(orders: list[dict], partitions: int) -> list[tuple[int, bytes, bytes]]:
    """``orders`` as Debezium's PostgreSQL connector writes a table's changes with JSON values without schemas,
    ``decimal.handling.mode=string`` and ``time.precision.mode=isostring``: (partition, key, value) each, keyed
    and partitioned by ``order_id``; a key's first change a create, later ones updates (``before`` null, as under
    the default replica identity), each its own transaction at a growing LSN."""
    seen: set[str] = set()
    out = []
    for i, order in enumerate(orders):
        lsn = _FIRST_LSN + i * _LSN_STEP
        op = "u" if order["order_id"] in seen else "c"
        seen.add(order["order_id"])
        ts_ms = order["event_time"] * 1000
        source = {"version": "3.6.1.Final", "connector": "postgresql", "name": "bench", "ts_ms": ts_ms,
                  "snapshot": "false", "db": "shop", "sequence": json.dumps([str(lsn - _LSN_STEP // 2), str(lsn)]),
                  "schema": "public", "table": "orders", "txId": 1000 + i, "lsn": lsn, "xmin": None}  # fmt: skip
        after = {**order, "event_time": _iso(order["event_time"])}
        value = {"before": None, "after": after, "source": source, "transaction": None, "op": op, "ts_ms": ts_ms}
        key = json.dumps({"order_id": order["order_id"]}).encode()
        out.append((_key_partition(order["order_id"], partitions), key, json.dumps(value).encode()))
    return out


def _key_partition(key: str, partitions: int) -> int:
    return zlib.crc32(key.encode()) % partitions


def _produce(bootstrap: str, topic: str, records: list[tuple[int, bytes, bytes]],
             headers: list[list[tuple[str, bytes]]] | None = None) -> None:  # fmt: skip
    """``records`` (partition, key, value) to ``topic``, in order; ``headers``: each record's, when given."""
    from confluent_kafka import Producer

    # Idempotence keeps each partition in the order produced, which the cdc part's changes rely on.
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20, "batch.num.messages": 10000,
                         "enable.idempotence": True})  # fmt: skip
    for i, (partition, key, value) in enumerate(records):
        while True:
            try:
                producer.produce(topic, key=key, value=value, partition=partition,
                                 headers=headers[i] if headers is not None else None)  # fmt: skip
                break
            except BufferError:  # the local queue is full: let deliveries drain it
                producer.poll(0.5)
        if i % 10000 == 0:
            producer.poll(0)
    if producer.flush(60):
        raise SideBySideBenchError(f"records not delivered to {topic}")


def _demo_transform() -> dict:
    import yaml

    from include.tooling import demo

    transform = yaml.safe_load(demo.PIPELINE_FILE.read_text())["transform"]
    transform.pop("tombstones", None)
    return transform


def _protobuf_order_class() -> type:
    """:data:`ORDER_PROTO`'s message class, from protoc's descriptor set, in a descriptor pool of its own."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    from spark_jobs.formats import protobuf_descriptors

    found, _ = protobuf_descriptors.build(0, ORDER_PROTO, {})
    pool = descriptor_pool.DescriptorPool()
    for file in descriptor_pb2.FileDescriptorSet.FromString(found).file:
        pool.Add(file)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.shop.Order"))


def run_formats_bench(work: Path, bootstrap: str, topics: dict[str, str], registry_url: str,
                      register: Callable[..., int], params: SideBySideParams,
                      log: Callable[[str], None]) -> SideBySideReport:  # fmt: skip
    """JSON against Avro and Protobuf; ``topics`` (per format) exist, with ``params.partitions``.
    ``register(subject, schema, schema_type)`` registers a schema and returns its id."""
    import fastavro

    from include.readers.schema_registry import frame

    p = params
    orders = _orders(p.records)
    schema_id = register(f"{topics['avro']}-value", ORDER_SCHEMA, "AVRO")
    parsed = fastavro.parse_schema(ORDER_SCHEMA)
    proto_id = register(f"{topics['protobuf']}-value", ORDER_PROTO, "PROTOBUF")
    order_class = _protobuf_order_class()

    def avro(order: dict) -> bytes:
        out = io.BytesIO()
        fastavro.schemaless_writer(out, parsed, {**order, "amount": Decimal(order["amount"]),
                                                 "event_time": order["event_time"] * 1000})  # fmt: skip
        return frame(schema_id, out.getvalue())

    def protobuf(order: dict) -> bytes:
        message = order_class(**{k: v for k, v in order.items() if k != "event_time"})
        message.event_time.seconds = order["event_time"]
        # Message index [0] (the file's first message) is the single byte 0 after the schema id.
        return frame(proto_id, b"\x00" + message.SerializeToString())

    transform = _demo_transform()
    registry = {"value_schema": {"registry": "bench_registry"}}
    variants = {
        fmt: _Variant(topics[fmt], [(i % p.partitions, o["order_id"].encode(), encode(o))
                                    for i, o in enumerate(orders)],
                      {**transform, **extra})
        for fmt, encode, extra in (
            ("json", _as_json, {}),
            ("avro", avro, {"format": "avro", **registry}),
            ("protobuf", protobuf, {"format": "protobuf", **registry}),
        )
    }  # fmt: skip
    # The connection the registry pipelines name, as Airflow reads it from the environment.
    os.environ["AIRFLOW_CONN_BENCH_REGISTRY"] = json.dumps({"conn_type": "http", "extra": {"url": registry_url}})
    log(f"formats: producing {p.records:,} orders each as JSON, Avro and Protobuf to "
        f"{', '.join(topics[f] for f in FORMATS)}")  # fmt: skip
    report = SideBySideReport(p, FORMATS, registry=registry_url)
    _side_by_side(work, bootstrap, variants, report, log, "formats")
    return report


def run_cdc_bench(work: Path, bootstrap: str, topics: dict[str, str], params: SideBySideParams,
                  log: Callable[[str], None]) -> SideBySideReport:  # fmt: skip
    """The plain upsert against Debezium envelopes of the same changes; ``topics`` (per mode) exist."""
    p = params
    orders = _orders(p.records)
    transform = _demo_transform()
    cdc = {k: v for k, v in transform.items() if k != "ordering"}
    variants = {
        "upsert": _Variant(topics["upsert"], [(_key_partition(o["order_id"], p.partitions),
                                               o["order_id"].encode(), _as_json(o)) for o in orders], transform),
        "debezium": _Variant(topics["debezium"], debezium_changes(orders, p.partitions),
                             {**cdc, "envelope": "debezium", "source": "postgresql"}),
    }  # fmt: skip
    log(f"cdc: producing {p.records:,} changes as plain records to {topics['upsert']} and as Debezium envelopes "
        f"to {topics['debezium']}")  # fmt: skip
    report = SideBySideReport(p, CDC_MODES)
    _side_by_side(work, bootstrap, variants, report, log, "cdc")
    return report


def _side_by_side(work: Path, bootstrap: str, variants: dict[str, _Variant], report: SideBySideReport,
                  log: Callable[[str], None], part: str) -> None:  # fmt: skip
    """Produce and ingest each variant, then transform each ``repetitions + 1`` times, alternating, into
    ``report``; fails unless every variant gives the same silver."""
    import yaml

    from include.config import load_pipeline
    from include.orchestration.job_args import transform_job_args
    from include.spark.spark_submit import local_session
    from spark_jobs import bronze_to_silver, kafka_to_bronze

    p = report.params
    cfgs = {}
    for name, variant in variants.items():
        _produce(bootstrap, variant.topic, variant.records)
        data = {"name": f"{part}-{name}", "kafka": {"connection_id": "kafka_default", "topics": [variant.topic]},
                "tables": {"lakehouse_root": str(work / "lake")}, "schedule": None,
                "transform": variant.transform}  # fmt: skip
        path = work / f"{part}-{name}.yaml"
        path.write_text(yaml.safe_dump(data))
        cfgs[name] = load_pipeline(path)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    # A session this process already has (the test suite's) is used and left running.
    own_session = SparkSession.getActiveSession() is None
    spark = local_session(f"kde-benchmark-{part}", warehouse=work / "warehouse")
    try:
        for name, cfg in cfgs.items():
            folder = work / "runs" / name
            folder.mkdir(parents=True)
            kafka_to_bronze.run(spark, kafka_to_bronze.parse_config(
                IngestArgs.for_pipeline(cfg, bootstrap_servers=bootstrap, run_id="ingest", run_type="manual",
                                        summary_path=str(folder / "ingest.json")).to_args()))  # fmt: skip
        silver: dict[str, dict] = {}
        for rep in range(p.repetitions + 1):  # repetition 0 warms the session, not counted
            for name in report.modes if rep % 2 == 0 else reversed(report.modes):
                cfg = cfgs[name]
                t = cfg.tables
                for stale in (t.silver_path, t.quarantine_path, t.transform_checkpoint_root):
                    shutil.rmtree(stale, ignore_errors=True)
                folder = work / "runs" / name / f"rep-{rep}"
                folder.mkdir(parents=True)
                args = transform_job_args(cfg, folder, f"rep-{rep}", folder / "transform.json")
                started = time.monotonic()
                done = bronze_to_silver.run(spark, bronze_to_silver.parse_config(args))
                seconds = time.monotonic() - started
                summary = done.to_json()
                if summary["read"] != p.records:
                    raise SideBySideBenchError(f"{name}: the transform read {summary['read']} of {p.records} records")
                report.quarantined[name] = summary["quarantined"]
                if rep == 0:
                    silver[name] = _silver(spark, t.silver_path)
                    continue
                report.seconds.setdefault(name, []).append(seconds)
                decode = sum(b.get("phases", {}).get("decode", 0.0) for b in summary["batches"])
                report.decode_s.setdefault(name, []).append(decode)
                log(f"{part}: {name} repetition {rep}: {seconds:.1f}s ({p.records / seconds:,.0f} records/s)")
        first, *others = report.modes
        for other in others:
            if silver[first] != silver[other]:
                differing = [k for k in silver[first] if silver[first][k] != silver[other].get(k)][:3]
                raise SideBySideBenchError(f"{first} and {other} gave different silver rows, e.g. {differing}")
        report.silver_rows = len(silver[first])
    finally:
        if own_session:
            spark.stop()


def _silver(spark, path: str) -> dict[str, tuple]:
    rows = spark.read.format("delta").load(path).collect()
    return {r["order_id"]: (r["customer_id"], str(r["amount"]), r["currency"], r["status"], r["event_time"],
                            r["_deleted"])
            for r in rows}  # fmt: skip


def _section(report: SideBySideReport, title: str, intro: str, label: str,
             ratios: tuple[tuple[str, str, str], ...]) -> str:  # fmt: skip
    """A report section: ``title``, ``intro``, one row per variant (records/s median and range, seconds,
    decode phase, quarantined) and each ratio ``(numerator, denominator, its name)`` of medians."""
    p = report.params
    lines = [title, "", intro, "", f"| {label} | transform records/s | seconds | decode phase s | quarantined |",
             "| --- | --- | --- | --- | --- |"]  # fmt: skip
    rates = {}
    for mode in report.modes:
        secs = report.seconds.get(mode, [])
        if not secs:
            continue
        rate = [p.records / s for s in secs]
        rates[mode] = statistics.median(rate)
        lines.append(
            f"| {mode} | {statistics.median(rate):,.0f} ({min(rate):,.0f}–{max(rate):,.0f}) "
            f"| {statistics.median(secs):.1f} | {statistics.median(report.decode_s[mode]):.1f} "
            f"| {report.quarantined.get(mode, 0)} |"
        )
    shown = [f"{name}: **{rates[top] / rates[bottom]:.2f}**." for top, bottom, name in ratios
             if top in rates and bottom in rates]  # fmt: skip
    if shown:
        lines += ["", *shown]
    return "\n".join(lines) + "\n"


def render_formats_markdown(report: SideBySideReport) -> str:
    """The ``## Value formats`` section of the report."""
    p = report.params
    intro = (f"{p.records:,} order records of the demo's shape, {p.partitions} partitions, produced as JSON text, as "
             f"Avro and as Protobuf in the Confluent wire format (schemas in the registry at {report.registry}; "
             f"Protobuf decoded by the project's Java function); each repetition transforms the whole bronze table "
             f"into a fresh silver (one warm in-process session, formats in turn; a first run of each not counted). "
             f"Every format gave the same {report.silver_rows:,} silver rows.")  # fmt: skip
    return _section(report, "## Value formats: the same orders as JSON, Avro and Protobuf", intro, "format",
                    (("avro", "json", "Avro / JSON records/s"), ("protobuf", "avro", "Protobuf / Avro records/s"),
                     ("protobuf", "json", "Protobuf / JSON records/s")))  # fmt: skip


def render_cdc_markdown(report: SideBySideReport) -> str:
    """The ``## Change data capture`` section of the report."""
    p = report.params
    intro = (f"{p.records:,} changes of orders of the demo's shape (creates, and updates of earlier orders), "
             f"{p.partitions} partitions keyed by `order_id`, produced once as plain JSON records (upsert, the newest "
             f"by `event_time`) and once as Debezium's PostgreSQL connector writes them (JSON without schemas, one "
             f"transaction per change; `transform.envelope: debezium`, ordered by `source.sequence`); each "
             f"repetition transforms the whole bronze table into a fresh silver (one warm in-process session, the "
             f"two alternating; a first run of each not counted). Both gave the same {report.silver_rows:,} silver "
             f"rows.")  # fmt: skip
    return _section(report, "## Change data capture: Debezium change events against a plain upsert", intro,
                    "pipeline", (("debezium", "upsert", "Debezium / upsert records/s"),))  # fmt: skip


def run_routes_bench(work: Path, bootstrap: str, topics: dict[str, str], params: SideBySideParams,
                     log: Callable[[str], None]) -> SideBySideReport:  # fmt: skip
    """One routed transform into three tables against three single-table pipelines over the same records;
    ``topics`` holds ``routed`` and one per kind of :data:`ROUTE_KINDS`, each with ``params.partitions``."""
    import yaml

    from include.config import load_pipeline
    from include.orchestration.job_args import transform_job_args
    from include.spark.spark_submit import local_session
    from spark_jobs import bronze_to_silver, kafka_to_bronze

    p = params
    kinds: dict[str, list[tuple[int, bytes, bytes]]] = {kind: [] for kind in ROUTE_KINDS}
    mixed: list[tuple[int, bytes, bytes]] = []
    headers: list[list[tuple[str, bytes]]] = []
    for i, order in enumerate(_orders(p.records)):
        kind = ROUTE_KINDS[i % len(ROUTE_KINDS)]
        record = (i % p.partitions, order["order_id"].encode(), _as_json(order))
        kinds[kind].append(record)
        mixed.append(record)
        headers.append([("kind", kind.encode())])
    log(f"routes: producing {p.records:,} orders of {len(ROUTE_KINDS)} kinds to {topics['routed']} (a header "
        f"names the kind) and each kind to a topic of its own")  # fmt: skip
    _produce(bootstrap, topics["routed"], mixed, headers)
    for kind in ROUTE_KINDS:
        _produce(bootstrap, topics[kind], kinds[kind])
    transform = _demo_transform()
    files = {"routed": {"kafka": topics["routed"], "transform": {
        "routes": {kind: {**transform, "match": {"header": {"kind": kind}}} for kind in ROUTE_KINDS}}}}
    files |= {kind: {"kafka": topics[kind], "transform": transform} for kind in ROUTE_KINDS}
    cfgs = {}
    for name, f in files.items():
        data = {"name": f"routes-{name}", "kafka": {"connection_id": "kafka_default", "topics": [f["kafka"]]},
                "tables": {"lakehouse_root": str(work / "lake")}, "schedule": None, "transform": f["transform"]}
        path = work / f"routes-{name}.yaml"
        # The routes share one schema object; a pipeline file refuses the aliases the dumper would write for it.
        path.write_text(yaml.safe_dump(json.loads(json.dumps(data))))
        cfgs[name] = load_pipeline(path)
    report = SideBySideReport(p, ROUTES_MODES)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    own_session = SparkSession.getActiveSession() is None
    spark = local_session("kde-benchmark-routes", warehouse=work / "warehouse")
    try:
        for name, cfg in cfgs.items():
            folder = work / "runs" / name
            folder.mkdir(parents=True)
            kafka_to_bronze.run(spark, kafka_to_bronze.parse_config(
                IngestArgs.for_pipeline(cfg, bootstrap_servers=bootstrap, run_id="ingest", run_type="manual",
                                        summary_path=str(folder / "ingest.json")).to_args()))  # fmt: skip

        def transform_run(name: str, rep: int) -> tuple[float, dict]:
            cfg = cfgs[name]
            for stale in (*(p for t in cfg.silver_targets() for p in (t.silver_path, t.quarantine_path)),
                          cfg.tables.quarantine_path, cfg.tables.transform_checkpoint_root):  # fmt: skip
                shutil.rmtree(stale, ignore_errors=True)
            folder = work / "runs" / name / f"rep-{rep}"
            folder.mkdir(parents=True)
            args = transform_job_args(cfg, folder, f"rep-{rep}", folder / "transform.json")
            started = time.monotonic()
            summary = bronze_to_silver.run(spark, bronze_to_silver.parse_config(args)).to_json()
            return time.monotonic() - started, summary

        for rep in range(p.repetitions + 1):  # repetition 0 warms the session, not counted
            for mode in ROUTES_MODES if rep % 2 == 0 else reversed(ROUTES_MODES):
                if mode == "routed":
                    seconds, summary = transform_run("routed", rep)
                    if summary["bronze_read"] != p.records or summary["unrouted"]["records"]:
                        raise SideBySideBenchError(f"routes: the routed transform read {summary['bronze_read']} of "
                                                   f"{p.records} records, {summary['unrouted']['records']} unrouted")  # fmt: skip
                    decode = sum(b.get("phases", {}).get("decode", 0.0) for r in summary["routes"].values()
                                 for b in r["batches"])  # fmt: skip
                else:
                    runs = [transform_run(kind, rep) for kind in ROUTE_KINDS]
                    seconds = sum(s for s, _ in runs)
                    if sum(r["read"] for _, r in runs) != p.records:
                        raise SideBySideBenchError("routes: the single-table transforms did not read every record")
                    decode = sum(b.get("phases", {}).get("decode", 0.0) for _, r in runs for b in r["batches"])
                if rep == 0:
                    continue
                report.seconds.setdefault(mode, []).append(seconds)
                report.decode_s.setdefault(mode, []).append(decode)
                log(f"routes: {mode} repetition {rep}: {seconds:.1f}s ({p.records / seconds:,.0f} records/s)")
        routed = {t.route: t.silver_path for t in cfgs["routed"].silver_targets()}
        for kind in ROUTE_KINDS:
            if _silver(spark, str(routed[kind])) != _silver(spark, cfgs[kind].tables.silver_path):
                raise SideBySideBenchError(f"routes: route {kind} and pipeline routes-{kind} gave different silver rows")
        report.silver_rows = sum(len(_silver(spark, cfgs[kind].tables.silver_path)) for kind in ROUTE_KINDS)
    finally:
        if own_session:
            spark.stop()
    return report


def render_routes_markdown(report: SideBySideReport) -> str:
    """The ``## Routes`` section of the report."""
    p = report.params
    intro = (f"{p.records:,} order records of the demo's shape, each of one of {len(ROUTE_KINDS)} kinds "
             f"({', '.join(ROUTE_KINDS)}) named by a Kafka header, {p.partitions} partitions: once in one topic read "
             f"by one pipeline whose transform routes each kind to its own silver table (`transform.routes`, "
             f"matched on the header), once as one topic per kind read by {len(ROUTE_KINDS)} single-table "
             f"pipelines. `single` is the {len(ROUTE_KINDS)} transforms' times added up. Each repetition transforms "
             f"the whole bronze tables into fresh silver (one warm in-process session, the two sides alternating; a "
             f"first run of each not counted). Each route gave the rows of its kind's own pipeline: the same "
             f"{report.silver_rows:,} silver rows in all.")  # fmt: skip
    return _section(report, "## Routes: one topic into three tables beside three single-table pipelines", intro,
                    "side", (("routed", "single", "Routed / single-table records/s"),))  # fmt: skip
