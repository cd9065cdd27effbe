"""Ingestion throughput side by side (Kafka's own consumer, a plain Spark job, the project's job),
then what a DAG run costs with little or nothing to read, as history grows, and through silver.

    make bench BENCH_ARGS="--records 500000 --repetitions 2"
    .venv/bin/python -m include.tooling.benchmark [--records N] [--partitions P] [--record-bytes B]
                                          [--repetitions R] [--bootstrap-servers HOST:PORT]
                                          [--parts throughput,batches,runs,silver] [--small-records N]
                                          [--batch-records N] [--batch-count K]
                                          [--history 10,200] [--run-repetitions R]
                                          [--maintenance-runs 50] [--maintenance-every 10]

One run, so every figure comes from the same machine state. Throughput:

1. starts a local broker in a temporary folder (or uses ``--bootstrap-servers``),
   creates one topic and produces the backlog once with confluent-kafka
   (unique values of exactly ``--record-bytes`` bytes, no keys, round-robin
   over the partitions);
2. per repetition, reads the whole backlog with
   a. Kafka's ``consumer-perf-test`` (a fresh group): the ceiling;
   b. ``spark_jobs/plain_kafka_to_delta.py`` (readStream -> AvailableNow ->
      Delta, nothing else), via spark-submit on ``local[2]``;
   c. ``spark_jobs/kafka_to_bronze.py``, the project's job, submitted the same way;
   each Spark job to a fresh table and checkpoint, and the table's rows are
   checked against the backlog (count and distinct partition/offset);
3. prints a markdown table (records/s, MB/s of value bytes, median/min/max
   over repetitions, project/plain and project/ceiling ratios) and writes it
   to ``--output``; Spark logs go next to it;
4. stops the broker it started, always.

Micro-batches (``--parts batches``, on a topic of their own): the plain job
and the project's job each read ``--batch-records`` x ``--batch-count``
records with ``maxOffsetsPerTrigger = --batch-records``; the report gives
each job's seconds per warm batch (Spark's own trigger time) and, for the
project, how much of it is reading and writing the rows and how much is
fixed overhead.

DAG runs (``--parts runs``, on a topic of their own) and DAG runs through bronze
and silver (``--parts silver``, the demo's pipeline shape on the demo's order
events): see :mod:`include.tooling.benchmark_runs`; their tables are added to
the same report.

Table maintenance (``--parts maintenance``, not in the default parts: about 12
minutes): two pipelines of the demo's shape over ``--maintenance-runs`` runs,
one maintained every ``--maintenance-every``, one never; files per table and
delta-rs read costs side by side (:mod:`include.tooling.benchmark_maintenance`).

Value formats (``--parts formats``): the same 100,000 orders as JSON and as
registry-framed Avro and Protobuf through the transform, records/s side by side
(:mod:`include.tooling.benchmark_formats`; starts the local schema registry).

Change data capture (``--parts cdc``): the same 100,000 changes as plain
records (upsert by key) and as Debezium's PostgreSQL change events through the
transform, records/s side by side (:mod:`include.tooling.benchmark_formats`).

Routes (``--parts routes``): 100,000 records of three kinds, once through one
routed transform into three tables and once through three single-table
pipelines, records/s side by side (:mod:`include.tooling.benchmark_formats`).

The monitoring page (``--parts monitor``, seconds, no broker or JVM): what a view
reads of run ledgers of a few and of thousands of runs
(:mod:`include.tooling.benchmark_monitor`).

The demo (``--parts demo``, first, before the benchmark's broker starts):
``make demo`` in a fresh clone of the commit, set-up included
(:mod:`include.tooling.benchmark_demo`).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from include import settings
from include.contract.errors import PipelineError
from include.contract.jobs import IngestArgs, positive
from include.contract.summaries import IngestSummary
from include.readers.kafka_admin import create_topic, delete_topic, watermarks
from include.spark.spark_submit import submit_environment
from include.tooling import airflow_local, local_kafka, local_s3
from include.tooling.benchmark_demo import DemoBenchError, DemoTiming, measure_demo, render_demo_markdown
from include.tooling.benchmark_demo import summary_line as demo_summary_line
from include.tooling.benchmark_formats import (
    CDC_MODES,
    FORMATS,
    ROUTE_KINDS,
    ROUTES_MODES,
    SideBySideBenchError,
    SideBySideParams,
    SideBySideReport,
    render_cdc_markdown,
    render_formats_markdown,
    render_routes_markdown,
    run_cdc_bench,
    run_formats_bench,
    run_routes_bench,
)
from include.tooling.benchmark_maintenance import (
    MaintenanceBenchError,
    MaintenanceParams,
    MaintenanceReport,
    median_ms,
    render_maintenance_markdown,
    run_maintenance_bench,
)
from include.tooling.benchmark_monitor import (
    MonitorParams,
    MonitorReport,
    render_monitor_markdown,
    run_monitor_bench,
)
from include.tooling.benchmark_runs import (
    CROSSOVER_MODES,
    CROSSOVER_SIZES,
    DEFAULTS,
    DagRunBench,
    DagRunTiming,
    RunBenchmarkError,
    RunParams,
    beyond_read_and_write,
    crossover_verdict,
    first_batch,
    measure_side_by_side,
    median_range,
    render_runs_markdown,
    render_side_by_side_markdown,
)
from include.tooling.job_submit import submit_command

#: The parts of the benchmark, as ``--parts`` names them, in the order they run.
PARTS = ("demo", "throughput", "batches", "runs", "silver", "store", "crossover", "maintenance", "formats", "cdc",
         "routes", "monitor")  # fmt: skip
#: What ``make bench`` measures unless ``--parts`` says otherwise (maintenance takes about 12 minutes).
DEFAULT_PARTS = ("demo", "throughput", "batches", "runs", "silver", "store", "crossover", "formats", "cdc", "routes",
                 "monitor")  # fmt: skip

JOBS: dict[str, str] = {
    "ceiling": "Kafka consumer-perf-test (ceiling)",
    "plain": "plain Spark job (plain_kafka_to_delta.py)",
    "project": "project job (kafka_to_bronze.py)",
}

_PLAIN_LINE = re.compile(r"plain_kafka_to_delta: rows=(\d+) seconds=([0-9.]+) batches=(\d+)")
_PLAIN_TRIGGERS = re.compile(r"plain_kafka_to_delta: trigger_ms=([0-9,]*)")
_PROGRESS_MARKER = "Streaming query made progress: "


class BenchmarkError(PipelineError, RuntimeError):
    """A measurement failed or ingested the wrong number of records."""


@dataclass(frozen=True)
class BenchmarkParams:
    """What to measure and where (see ``python -m include.tooling.benchmark --help``)."""

    records: int = 2_000_000
    partitions: int = 6
    record_bytes: int = 200
    repetitions: int = 3
    bootstrap_servers: str | None = None
    output: Path = settings.PROJECT_ROOT / "docs" / "benchmarks" / "report.md"
    work_dir: Path | None = None
    keep_work_dir: bool = False
    master: str = "local[2]"
    project_max_offsets_per_trigger: int | None = None
    job_timeout_s: float = 3600.0
    parts: tuple[str, ...] = DEFAULT_PARTS
    maintenance: MaintenanceParams = field(default_factory=MaintenanceParams)
    formats: SideBySideParams = field(default_factory=SideBySideParams)
    cdc: SideBySideParams = field(default_factory=lambda: SideBySideParams(records=100_000))
    routes: SideBySideParams = field(default_factory=lambda: SideBySideParams(records=100_000))
    monitor: MonitorParams = field(default_factory=MonitorParams)
    #: The micro-batch part: this many batches of ``batch_records`` records each, both Spark jobs.
    batch_records: int = 2000
    batch_count: int = 12
    runs: RunParams = field(default_factory=RunParams)
    airflow_home: Path | None = None
    #: Backlogs of the crossover part, records a run, and runs of each pipeline at each (its largest
    #: backlog takes minutes a run, and the gap it measures is wide except near the crossover).
    crossover_sizes: tuple[int, ...] = CROSSOVER_SIZES
    crossover_repetitions: int = 1

    @property
    def value_bytes(self) -> int:
        """Bytes of record values in the backlog (what MB/s counts)."""
        return self.records * self.record_bytes


@dataclass(frozen=True)
class Measurement:
    """One job's read of the whole backlog in one repetition."""

    job: str
    repetition: int
    rows: int
    drain_s: float
    wall_s: float
    log: Path | None = None
    progress: list[dict] = field(default_factory=list)
    detail: dict = field(default_factory=dict)


@dataclass
class BenchmarkReport:
    """Everything the markdown is rendered from."""

    params: BenchmarkParams
    machine: str
    topic: str
    broker: str
    produce_s: float
    measurements: list[Measurement] = field(default_factory=list)
    load_before: str = ""
    load_after: str = ""
    #: Seconds of :func:`speed_reference` at the start and at the end: how fast this machine was then.
    speed_reference_s: tuple[float, float] | None = None
    total_s: float = 0.0
    #: The checkout the figures come from (``git describe``-like, ``-dirty`` with uncommitted changes).
    commit: str = "unknown"
    #: The command that wrote the report. No date: the commit and the speed reference say where the
    #: figures come from, and a date in a checked-in report reads as a narrative.
    command: str = "make bench"
    runs: list[DagRunTiming] = field(default_factory=list)
    #: The silver part: the demo's shape with the pipeline's defaults and with a cluster forced.
    silver: list[DagRunTiming] = field(default_factory=list)
    #: The store part: the same DAG run with the lakehouse on this disk and on a local S3-compatible server.
    store: list[DagRunTiming] = field(default_factory=list)
    #: The crossover part: the same backlogs in local mode and on the run's own cluster.
    crossover: list[DagRunTiming] = field(default_factory=list)
    batch_runs: list[BatchRun] = field(default_factory=list)
    maintenance: MaintenanceReport | None = None
    formats: SideBySideReport | None = None
    cdc: SideBySideReport | None = None
    routes: SideBySideReport | None = None
    monitor: MonitorReport | None = None
    #: The demo part: ``make demo`` in a fresh clone.
    demo: DemoTiming | None = None


@dataclass(frozen=True)
class BatchRun:
    """One Spark job's per-batch seconds over a backlog read in many small batches."""

    job: str
    repetition: int
    #: Spark's whole trigger per batch with rows (offsets, planning, the write and commit, its checkpoint).
    trigger_s: list[float]
    #: The project only: per batch, seconds of reading the rows and writing their files (one pass).
    write_s: list[float] = field(default_factory=list)
    #: The project only: per batch, the rest of its writer (offset check, ranges, Delta commit).
    writer_rest_s: list[float] = field(default_factory=list)


# --------------------------------------------------------------------------- machine


def _first_match(path: str, prefix: str) -> str | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        return None
    return None


def machine_description() -> str:
    """``host: nproc N, memory X GiB, CPU <model>`` from the OS and ``/proc``."""
    nproc = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    mem_kb = _first_match("/proc/meminfo", "MemTotal")
    memory = f"{int(mem_kb.split()[0]) / 1024**2:.1f} GiB" if mem_kb else "unknown"
    cpu = _first_match("/proc/cpuinfo", "model name") or platform.processor() or "unknown"
    return f"{platform.node()}: nproc {nproc}, memory {memory}, CPU {cpu}"


#: Iterations of :func:`speed_reference`'s loop: a few tenths of a second, long enough to smooth a
#: scheduler tick, short enough to take at the start and the end of every run.
SPEED_REFERENCE_LOOPS = 3_000_000


def speed_reference(loops: int = SPEED_REFERENCE_LOOPS, repeats: int = 3) -> float:
    """Median seconds of a fixed single-core pure-Python loop: lower is faster.

    The same commit's figures have differed about 2x between days of the
    same kind of VM; a report carries this number so that its figures can be
    set against another day's or machine's.
    """
    def loop() -> None:
        total = 0
        for i in range(loops):
            total += i * i % 7

    return median_ms(loop, repeats) / 1000


def load_average() -> str:
    """The 1/5/15-minute load averages, e.g. ``1.02 0.80 0.55``."""
    try:
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "unknown"


# --------------------------------------------------------------------------- Kafka


def produce_backlog(bootstrap: str, topic: str, records: int, partitions: int, record_bytes: int) -> float:
    """Produce the backlog with confluent-kafka in large batches; returns the seconds it took.

    Values are exactly ``record_bytes`` bytes: a 12-digit record number then
    hex text from a pool of 4096 random strings, so every value is distinct
    and compresses like ordinary text, not like one repeated payload. No
    keys; record ``i`` goes to partition ``i % partitions``. Faster than
    Kafka's producer-perf-test, whose JVM start alone outlasts a small backlog.
    """
    from confluent_kafka import KafkaException, Producer

    pad = record_bytes - 12
    pool = [os.urandom((pad + 1) // 2).hex().encode()[:pad] for _ in range(4096)]
    producer = Producer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 20,
        "batch.size": 1_000_000,
        "batch.num.messages": 100_000,
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": 1_048_576,
        "compression.type": "none",
    })  # fmt: skip
    failures: list[str] = []

    def on_delivery(err, _msg) -> None:
        if err is not None and len(failures) < 10:
            failures.append(str(err))

    started = time.monotonic()
    for i in range(records):
        value = b"%012d" % i + pool[i & 4095]
        while True:
            try:
                producer.produce(topic, value, partition=i % partitions, on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.05)
        if i % 50_000 == 0:
            producer.poll(0)
    remaining = producer.flush(300)
    elapsed = time.monotonic() - started
    if remaining or failures:
        raise KafkaException(f"producing the backlog to {topic}: {remaining} undelivered, errors {failures}")
    return elapsed


def parse_consumer_perf(stdout: str) -> dict[str, str]:
    """The result line of ``consumer-perf-test`` as ``{column: value}`` (header names as keys)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    for i, line in enumerate(lines):
        if line.startswith("start.time") and i + 1 < len(lines):
            header = [h.strip() for h in line.split(",")]
            values = [v.strip() for v in lines[i + 1].split(",")]
            if len(values) == len(header):
                return dict(zip(header, values, strict=True))
    raise BenchmarkError(f"cannot find consumer-perf-test's result in its output:\n{stdout[-2000:]}")


def measure_ceiling(
    bootstrap: str, topic: str, records: int, repetition: int, timeout_s: float
) -> Measurement:
    """Kafka's ConsumerPerformance reading the whole topic with a fresh group.

    Drain time is the tool's own start.time -> end.time (group join included,
    JVM start-up not); wall time is the tool's whole process.
    """
    started = time.monotonic()
    result = local_kafka.run_kafka_tool(
        "consumer-perf-test",
        "--bootstrap-server", bootstrap, "--topic", topic, "--num-records", str(records),
        "--group", f"bench-ceiling-{uuid.uuid4().hex[:8]}", "--timeout", "30000",
        timeout_s=timeout_s, short=False,
    )  # fmt: skip
    wall = time.monotonic() - started
    if result.returncode != 0:
        raise BenchmarkError(
            f"consumer-perf-test exited {result.returncode}:\n{(result.stderr or result.stdout)[-3000:]}"
        )
    row = parse_consumer_perf(result.stdout)
    fmt = "%Y-%m-%d %H:%M:%S:%f"
    drain = (
        datetime.strptime(row["end.time"], fmt) - datetime.strptime(row["start.time"], fmt)
    ).total_seconds()
    rows = int(row["data.consumed.in.nMsg"])
    if rows != records:
        raise BenchmarkError(f"consumer-perf-test read {rows} records of {topic}, the backlog is {records}")
    return Measurement("ceiling", repetition, rows, drain, wall, detail=row)


# --------------------------------------------------------------------------- Spark


def run_spark_job(
    application: str, args: Sequence[str], log_path: Path, *, master: str, timeout_s: float
) -> float:
    """spark-submit ``application`` the way the orchestrator does; returns the wall seconds.

    Output (driver log included) goes to ``log_path``; a failure raises with its tail.
    """
    cmd = submit_command(application, list(args), master=master, conf={"spark.ui.enabled": "false"})
    log_path.parent.mkdir(parents=True, exist_ok=True)
    started = time.monotonic()
    with open(log_path, "w") as log:
        try:
            proc = subprocess.run(cmd, env=submit_environment(), stdout=log, stderr=subprocess.STDOUT,
                                  timeout=timeout_s)  # fmt: skip
        except subprocess.TimeoutExpired:
            raise BenchmarkError(
                f"{application} did not finish within {timeout_s:.0f}s; log {log_path}"
            ) from None
    wall = time.monotonic() - started
    if proc.returncode != 0:
        tail = log_path.read_text(errors="replace")[-3000:]
        raise BenchmarkError(f"{application} exited {proc.returncode}; end of {log_path}:\n{tail}")
    return wall


def query_progress(log_path: Path) -> list[dict]:
    """The ``Streaming query made progress`` JSON objects Spark logged, in order."""
    text = log_path.read_text(errors="replace")
    decoder = json.JSONDecoder()
    found: list[dict] = []
    start = text.find(_PROGRESS_MARKER)
    while start >= 0:
        try:
            obj, end = decoder.raw_decode(text, start + len(_PROGRESS_MARKER))
            found.append(obj)
        except ValueError:
            end = start + len(_PROGRESS_MARKER)
        start = text.find(_PROGRESS_MARKER, end)
    return [p for p in found if isinstance(p, dict)]


def verify_delta_rows(path: Path, expected: int, what: str) -> int:
    """Rows of the Delta table at ``path``; raises unless it holds exactly ``expected``
    distinct (partition, offset) records and no duplicates."""
    from deltalake import DeltaTable

    table = DeltaTable(str(path)).to_pyarrow_table(columns=["partition", "offset"])
    distinct = table.group_by(["partition", "offset"]).aggregate([]).num_rows
    if table.num_rows != expected or distinct != expected:
        raise BenchmarkError(
            f"{what}: the Delta table {path} holds {table.num_rows} rows ({distinct} distinct "
            f"partition/offset), the backlog is {expected} records"
        )
    return table.num_rows


def measure_plain(bootstrap: str, topic: str, rep_dir: Path, params: BenchmarkParams, repetition: int,
                  log_dir: Path) -> Measurement:  # fmt: skip
    """The plain job into a fresh table; drain time is the job's own start() -> awaitTermination()."""
    table, checkpoint = rep_dir / "plain" / "table", rep_dir / "plain" / "checkpoint"
    log = log_dir / f"rep{repetition}-plain.log"
    wall = run_spark_job(
        "spark_jobs/plain_kafka_to_delta.py",
        ["--bootstrap-servers", bootstrap, "--topic", topic, "--table", str(table), "--checkpoint", str(checkpoint)],
        log, master=params.master, timeout_s=params.job_timeout_s,
    )  # fmt: skip
    match = _PLAIN_LINE.search(log.read_text(errors="replace"))
    if match is None:
        raise BenchmarkError(f"plain job printed no 'plain_kafka_to_delta: rows=' line; log {log}")
    job_rows, seconds, batches = int(match[1]), float(match[2]), int(match[3])
    if job_rows != params.records:
        raise BenchmarkError(f"plain job read {job_rows} rows, the backlog is {params.records}; log {log}")
    rows = verify_delta_rows(table, params.records, "plain job")
    return Measurement(
        "plain", repetition, rows, seconds, wall, log, query_progress(log), {"batches": batches}
    )


def measure_project(bootstrap: str, topic: str, rep_dir: Path, params: BenchmarkParams, repetition: int,
                    log_dir: Path) -> Measurement:  # fmt: skip
    """The project's job into a fresh table; drain time is its summary's ``duration_s``."""
    bronze, checkpoints = rep_dir / "project" / "bronze", rep_dir / "project" / "checkpoints"
    summary_path = rep_dir / "project" / "summary.json"
    log = log_dir / f"rep{repetition}-project.log"
    args = IngestArgs(
        pipeline="benchmark", bootstrap_servers=bootstrap, topics=(topic,), bronze_path=str(bronze),
        checkpoint_root=str(checkpoints), run_id=f"benchmark-{repetition}-{uuid.uuid4().hex[:6]}", run_type="manual",
        summary_path=str(summary_path), max_offsets_per_trigger=params.project_max_offsets_per_trigger or None,
    ).to_args()  # fmt: skip
    wall = run_spark_job("spark_jobs/kafka_to_bronze.py", args, log, master=params.master,
                         timeout_s=params.job_timeout_s)  # fmt: skip
    summary = IngestSummary.from_json(json.loads(summary_path.read_text()))
    if summary.rows != params.records:
        raise BenchmarkError(
            f"project job's summary says {summary.rows} rows, the backlog is {params.records}"
        )
    rows = verify_delta_rows(bronze, params.records, "project job")
    shutil.copy(summary_path, log_dir / f"rep{repetition}-project-summary.json")
    detail = {
        "batches": len(summary.batches),
        "batch_s": sum(b["duration_s"] for b in summary.batches),
        **{f"{phase}_s": sum(b.get("phases", {}).get(phase, 0.0) for b in summary.batches)
           for phase in ("check", "write", "stats", "commit")},
    }  # fmt: skip
    return Measurement("project", repetition, rows, float(summary.duration_s or 0.0), wall, log,
                       query_progress(log), detail)  # fmt: skip


def measure_batches(bootstrap: str, topic: str, rep_dir: Path, params: BenchmarkParams, repetition: int,
                    log_dir: Path) -> list[BatchRun]:  # fmt: skip
    """Both Spark jobs over the micro-batch topic with ``maxOffsetsPerTrigger = batch_records``."""
    n = str(params.batch_records)
    records = params.batch_records * params.batch_count
    plain_log = log_dir / f"batches-rep{repetition}-plain.log"
    run_spark_job(
        "spark_jobs/plain_kafka_to_delta.py",
        ["--bootstrap-servers", bootstrap, "--topic", topic, "--table", str(rep_dir / "plain" / "table"),
         "--checkpoint", str(rep_dir / "plain" / "checkpoint"), "--max-offsets-per-trigger", n],
        plain_log, master=params.master, timeout_s=params.job_timeout_s,
    )  # fmt: skip
    match = _PLAIN_TRIGGERS.search(plain_log.read_text(errors="replace"))
    if match is None or not match[1]:
        raise BenchmarkError(f"plain job printed no 'trigger_ms=' line; log {plain_log}")
    verify_delta_rows(rep_dir / "plain" / "table", records, "plain job (micro-batches)")
    plain = BatchRun("plain", repetition, [int(x) / 1000 for x in match[1].split(",")])

    summary_path = rep_dir / "project" / "summary.json"
    run_spark_job(
        "spark_jobs/kafka_to_bronze.py",
        IngestArgs(pipeline="benchmark-batches", bootstrap_servers=bootstrap, topics=(topic,),
                   bronze_path=str(rep_dir / "project" / "bronze"), checkpoint_root=str(rep_dir / "project" / "cp"),
                   run_id=f"batches-{repetition}", run_type="manual", summary_path=str(summary_path),
                   max_offsets_per_trigger=params.batch_records).to_args(),
        log_dir / f"batches-rep{repetition}-project.log", master=params.master, timeout_s=params.job_timeout_s,
    )  # fmt: skip
    verify_delta_rows(rep_dir / "project" / "bronze", records, "project job (micro-batches)")
    batches = [b for b in IngestSummary.from_json(json.loads(summary_path.read_text())).batches if b["rows"]]
    if any("trigger" not in b["phases"] for b in batches):
        raise BenchmarkError(f"the project's summary lacks Spark's trigger time for some batch: {summary_path}")
    project = BatchRun(
        "project", repetition, [b["phases"]["trigger"] for b in batches],
        write_s=[b["phases"]["write"] for b in batches],
        writer_rest_s=[b["duration_s"] - b["phases"]["write"] for b in batches],
    )
    return [plain, project]


def _batch_lines(report: BenchmarkReport) -> list[str]:
    """The micro-batch table: per-batch seconds of each job, warm batches only (the first is dropped)."""
    p = report.params
    lines = [
        "## Micro-batches",
        "",
        f"- parameters: {p.batch_records * p.batch_count:,} records x {p.record_bytes} B in {p.partitions} "
        f"partitions, read with maxOffsetsPerTrigger {p.batch_records:,} by each Spark "
        f"job on `{p.master}`; figures are medians over the warm batches (every batch but the first) of all "
        f"{p.repetitions} repetition(s)",
        "",
        "| job | warm batches | per batch s (Spark's trigger) | reading + writing the rows s | "
        "rest of the writer s | overhead beyond reading and writing s |",
        "|---|---|---|---|---|---|",
    ]
    for job in ("plain", "project"):
        runs = [r for r in report.batch_runs if r.job == job]
        trig = [t for r in runs for t in r.trigger_s[1:]]
        if not trig:
            continue
        if job == "project":
            write = [t for r in runs for t in r.write_s[1:]]
            rest = [t for r in runs for t in r.writer_rest_s[1:]]
            over = [t - w for r in runs for t, w in zip(r.trigger_s[1:], r.write_s[1:], strict=True)]
            cells = (f"{statistics.median(write):.2f}", f"{statistics.median(rest):.2f}",
                     f"{statistics.median(over):.2f}")  # fmt: skip
        else:
            cells = ("(inside Delta's writer)", "-", "-")
        lines.append(f"| {job} | {len(trig)} | {statistics.median(trig):.2f} "
                     f"({min(trig):.2f}–{max(trig):.2f}) | {' | '.join(cells)} |")  # fmt: skip
    lines += [
        "",
        "- per batch: Spark's `triggerExecution` for the batch (latest offsets, planning, the sink, Spark's "
        "offset and commit log writes); the plain job's sink is Delta's own streaming writer.",
        "- overhead beyond reading and writing: the project's trigger minus the one pass that reads the rows "
        "from Kafka and writes their Parquet files (Delta's `writeFiles`): the offset check, the ranges from the "
        "files' statistics, the Delta commit with its txn actions, Delta's post-commit work (a log checkpoint "
        "every 10 commits) and Spark's own per-trigger work.",
    ]
    return lines


# --------------------------------------------------------------------------- report


def checkout_commit(root: Path = settings.PROJECT_ROOT) -> str:
    """The checkout's short commit, with ``-dirty`` when tracked files differ from it; ``unknown`` outside git."""
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=True, timeout=10).stdout.strip()  # fmt: skip
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True, timeout=10).stdout.strip()  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return f"{commit}-dirty" if dirty else commit


def summary_lines(report: BenchmarkReport) -> list[str]:
    """The report's headline figures, one line each, for whatever parts ran: what ``docs/performance.md``
    shows between its markers (with the commit, machine and speed reference, and no date)."""
    p = report.params
    lines: list[str] = []
    by_job = {job: [m for m in report.measurements if m.job == job] for job in JOBS}
    if by_job["project"] and by_job["plain"]:
        drain = _median_rate(by_job["project"], "drain", p.records) / _median_rate(by_job["plain"], "drain", p.records)
        lines.append(f"| drain of {p.records:,} records, this project's job / a plain `writeStream` Delta job "
                     f"| **{drain:.2f}x** the records/s |")  # fmt: skip
    if by_job["project"] and by_job["ceiling"]:
        ceiling = (_median_rate(by_job["project"], "drain", p.records)
                   / _median_rate(by_job["ceiling"], "drain", p.records))  # fmt: skip
        lines.append(f"| the same drain / Kafka's own consumer-perf-test | {ceiling:.2f}x the records/s |")
    project = [r for r in report.batch_runs if r.job == "project"]
    over = [t - w for r in project for t, w in zip(r.trigger_s[1:], r.write_s[1:], strict=True)]
    if over:
        lines.append(f"| a warm micro-batch of {p.batch_records:,} records, beyond reading and writing its rows "
                     f"| {statistics.median(over):.2f} s |")  # fmt: skip
    for kind, label in (("empty", "a DAG run with nothing new (no cluster starts)"),
                        ("small", f"a bronze-only DAG run of {p.runs.small_records:,} records on the cluster")):
        rs = [r for r in report.runs if r.kind == kind]
        if rs:
            lines.append(f"| {label}, first task to last | {statistics.median(r.end_to_end_s for r in rs):.1f} s |")
    for label in SILVER_MODES:
        rs = [r for r in report.silver if r.kind.startswith(f"{label} ")]
        if rs:
            lines.append(f"| a bronze + silver DAG run of {p.runs.small_records:,} events, {label}, first task "
                         f"to last | {statistics.median(r.end_to_end_s for r in rs):.1f} s |")  # fmt: skip
        if label != SILVER_DEFAULTS:
            continue
        cold = [b for r in rs if (b := first_batch(r))]
        if cold:
            lines.append(f"| its transform's micro-batch of {p.runs.small_records:,} events, cold (the first of the "
                         f"run's Spark application), reading and writing included "
                         f"| {statistics.median(b['duration_s'] for b in cold):.1f} s |")  # fmt: skip
        beyond = [x for b in cold if (x := beyond_read_and_write(b)) is not None]
        if beyond:
            lines.append(f"| the same cold batch beyond reading its rows and writing silver's files "
                         f"| {statistics.median(beyond):.1f} s |")  # fmt: skip
    store = {label: [r.end_to_end_s for r in report.store if r.kind.startswith(f"{label} ")] for label in STORE_MODES}
    if all(store.values()):
        disk, s3 = (statistics.median(v) for v in store.values())
        lines.append(f"| the same DAG run with the lakehouse on a local S3-compatible server / on this disk, first "
                     f"task to last | {s3:.1f} s / {disk:.1f} s: **{s3 / disk:.2f}x** |")  # fmt: skip
    if report.formats is not None and all(report.formats.seconds.get(m) for m in FORMATS):
        json_s, avro_s, proto_s = (statistics.median(report.formats.seconds[m]) for m in FORMATS)
        lines.append(f"| a transform of {report.formats.params.records:,} Protobuf values / of the same values as "
                     f"Avro / as JSON | {proto_s:.1f} s / {avro_s:.1f} s / {json_s:.1f} s: **{proto_s / avro_s:.2f}x** "
                     f"Avro's time |")  # fmt: skip
    if report.cdc is not None and all(report.cdc.seconds.get(m) for m in CDC_MODES):
        upsert, debezium = (statistics.median(report.cdc.seconds[m]) for m in CDC_MODES)
        lines.append(f"| a transform of {report.cdc.params.records:,} Debezium change events / of the same changes "
                     f"as plain upserts | {debezium:.1f} s / {upsert:.1f} s: **{debezium / upsert:.2f}x** |")  # fmt: skip
    if report.routes is not None and all(report.routes.seconds.get(m) for m in ROUTES_MODES):
        routed, single = (statistics.median(report.routes.seconds[m]) for m in ROUTES_MODES)
        lines.append(f"| a routed transform of {report.routes.params.records:,} records into three tables / three "
                     f"single-table transforms of the same records | {routed:.1f} s / {single:.1f} s: "
                     f"**{routed / single:.2f}x** |")  # fmt: skip
    if report.crossover:
        for verdict in crossover_verdict(report.crossover, CROSSOVER_PAIRS):
            lines.append(f"| where a cluster pays off | {verdict.removeprefix('- ')} |")
    if report.demo is not None:
        lines.append(demo_summary_line(report.demo))
    if not lines:
        return []
    head = [f"Commit {report.commit}; {report.machine}; speed reference "
            + (f"{report.speed_reference_s[0]:.2f}–{report.speed_reference_s[1]:.2f} s" if report.speed_reference_s
               else "not measured") + ".", "", "| figure | value |", "|---|---|"]  # fmt: skip
    return head + lines


#: The pairs of the crossover part that have as many cores: (local mode, the run's own cluster).
CROSSOVER_PAIRS = (("local[1]", "cluster, 1 worker"), ("local[2]", "cluster, 2 workers"))
#: The page that shows the newest report's summary between these two lines.
PERFORMANCE_PAGE = settings.PROJECT_ROOT / "docs" / "performance.md"
BENCH_BEGIN, BENCH_END = "<!-- bench:begin -->", "<!-- bench:end -->"


def with_summary(page: str, summary: Sequence[str], report_link: str) -> str:
    """``page`` with the text between its bench markers replaced by ``summary`` and a link to the report."""
    begin, end = page.find(BENCH_BEGIN), page.find(BENCH_END)
    if begin < 0 or end < begin:
        raise BenchmarkError(f"{PERFORMANCE_PAGE}: expected the lines {BENCH_BEGIN} and {BENCH_END}")
    block = "\n".join([*summary, "", f"The whole report: [{report_link}]({report_link})."])
    return page[: begin + len(BENCH_BEGIN)] + "\n" + block + "\n" + page[end:]


def _fmt_int(x: float) -> str:
    return f"{x:,.0f}"


def _fmt_mb(x: float) -> str:
    """MB/s with three significant digits below 100 (tiny backlogs must not round to 0)."""
    return f"{x:,.0f}" if x >= 100 else f"{x:.3g}"


def _median_rate(ms: list[Measurement], basis: str, records: int) -> float:
    return statistics.median(records / getattr(m, f"{basis}_s") for m in ms)


def _progress_breakdown(ms: list[Measurement]) -> str | None:
    """Median per-run sums of Spark's ``durationMs`` parts (for the Spark jobs)."""
    keys = ("latestOffset", "queryPlanning", "walCommit", "addBatch", "commitOffsets", "triggerExecution")
    per_run: dict[str, list[float]] = {k: [] for k in keys}
    batches: list[int] = []
    for m in ms:
        if not m.progress:
            return None
        for k in keys:
            per_run[k].append(sum(float(p.get("durationMs", {}).get(k, 0)) for p in m.progress) / 1000)
        batches.append(sum(1 for p in m.progress if int(p.get("numInputRows", 0)) > 0))
    parts = ", ".join(f"{k} {statistics.median(v):.1f}s" for k, v in per_run.items())
    return f"{int(statistics.median(batches))} batch(es) with rows; {parts}"


def render_markdown(report: BenchmarkReport) -> str:
    """The report as markdown: header, then each part that ran (throughput: one row per job, ratios,
    definitions; DAG runs: :func:`include.tooling.benchmark_runs.render_runs_markdown`)."""
    p = report.params
    lines = [
        "# Kafka -> Delta benchmark",
        "",
        f"- commit: {report.commit}; written by `{report.command}`",
        f"- machine: {report.machine}; load average {report.load_before} at start, {report.load_after} at end",
        *([f"- speed reference: {report.speed_reference_s[0]:.2f}s at the start, {report.speed_reference_s[1]:.2f}s "
           "at the end, for a fixed single-core Python loop (lower is faster; set figures from another day or "
           "machine against it)"] if report.speed_reference_s is not None else []),
        f"- broker: {report.broker}",
        f"- total benchmark wall time: {report.total_s:.0f}s",
    ]
    summary = summary_lines(report)
    if summary:
        lines += ["", "## Summary", "", *summary]
    if report.measurements:
        lines += ["", *_throughput_lines(report)]
    if report.batch_runs:
        lines += ["", *_batch_lines(report)]
    text = "\n".join(lines) + "\n"
    if report.runs:
        text += "\n" + render_runs_markdown(report.runs, p.runs)
    if report.silver:
        text += "\n" + render_side_by_side_markdown(
            report.silver, list(SILVER_MODES), "A DAG run through bronze and silver: defaults against a cluster",
            f"The demo's pipeline shape (its transform) on the demo's order events, {p.runs.small_records:,} new "
            "events a run: with no `cluster` section (the defaults decide where the run goes) and with "
            f"`local_max_records: 0` (every run starts its standalone cluster). Median (min–max) of "
            f"{p.runs.repetitions} run(s), the pipelines taking turns.")  # fmt: skip
    if report.store:
        text += "\n" + render_side_by_side_markdown(
            report.store, list(STORE_MODES), "The lakehouse on this disk and on an object store",
            f"The demo's pipeline shape with the pipeline defaults, {p.runs.small_records:,} new events a run: bronze, "
            "silver, quarantine, the run ledger, both checkpoints and the run lock in a folder of this disk, and "
            "under an `s3a://` prefix of a local S3-compatible server (s3proxy on this disk, so the gap is the "
            "S3 protocol's requests, not a network's). Median (min–max) of "
            f"{p.runs.repetitions} run(s), the pipelines taking turns.")  # fmt: skip
    if report.crossover:
        text += "\n" + render_side_by_side_markdown(
            report.crossover, list(CROSSOVER_MODES), "Where a cluster starts to pay off",
            "The same pipeline shape and events at growing backlogs: local mode in the driver against the run's "
            "own standalone cluster with as many cores (one worker of one core; two workers of one core each). "
            f"Median (min–max) of {p.crossover_repetitions} run(s) per backlog, the pipelines taking turns.")  # fmt: skip
        text += "\n" + "\n".join(crossover_verdict(report.crossover, CROSSOVER_PAIRS)) + "\n"
    if report.maintenance is not None:
        text += "\n" + render_maintenance_markdown(report.maintenance)
    if report.formats is not None:
        text += "\n" + render_formats_markdown(report.formats)
    if report.cdc is not None:
        text += "\n" + render_cdc_markdown(report.cdc)
    if report.routes is not None:
        text += "\n" + render_routes_markdown(report.routes)
    if report.monitor is not None:
        text += "\n" + render_monitor_markdown(report.monitor)
    if report.demo is not None:
        text += "\n" + render_demo_markdown(report.demo)
    return text


def _throughput_lines(report: BenchmarkReport) -> list[str]:
    p = report.params
    by_job = {job: [m for m in report.measurements if m.job == job] for job in JOBS}
    mb = p.value_bytes / 1e6
    lines = [
        "## Throughput",
        "",
        f"- parameters: {p.records:,} records x {p.record_bytes} B values ({mb:,.1f} MB of values, no keys) "
        f"in {p.partitions} partitions of topic `{report.topic}`; {p.repetitions} repetition(s); "
        f"Spark `{p.master}`, spark-submit via include.tooling.job_submit (driver memory 1g, UI off)"
        + (f"; project --max-offsets-per-trigger {p.project_max_offsets_per_trigger}"
           if p.project_max_offsets_per_trigger else "; no maxOffsetsPerTrigger for either Spark job"),
        f"- backlog produced once with confluent-kafka in {report.produce_s:.1f}s "
        f"({p.records / report.produce_s:,.0f} records/s)",
        "",
        "| job | rows checked | drain s | drain records/s | drain MB/s | wall s | wall records/s | wall MB/s |",
        "|---|---|---|---|---|---|---|---|",
    ]  # fmt: skip
    for job, label in JOBS.items():
        ms = by_job[job]
        if not ms:
            continue
        rows_ok = all(m.rows == p.records for m in ms)
        checked = f"{ms[0].rows:,} = backlog x{len(ms)}" if rows_ok else "MISMATCH"
        cells = [label, checked]
        for basis in ("drain", "wall"):
            secs = [getattr(m, f"{basis}_s") for m in ms]
            cells += [
                median_range(secs),
                median_range([p.records / s for s in secs], _fmt_int),
                median_range([mb / s for s in secs], _fmt_mb),
            ]
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "| ratio of median records/s | drain | wall |", "|---|---|---|"]
    project = by_job["project"]
    for other, name in (("plain", "project / plain"), ("ceiling", "project / ceiling")):
        if project and by_job[other]:
            ratios = [
                f"{_median_rate(project, basis, p.records) / _median_rate(by_job[other], basis, p.records):.2f}"
                for basis in ("drain", "wall")
            ]
            lines.append(f"| {name} | {ratios[0]} | {ratios[1]} |")
    lines += [
        "",
        "Cells are median (min–max) over repetitions. MB/s counts record value bytes only "
        f"({p.records:,} x {p.record_bytes} B, 10^6 B per MB): no keys, headers, timestamps or protocol overhead.",
        "",
        "- drain: ceiling = consumer-perf-test's own start.time -> end.time (group join included); "
        "plain = the job's `start()` -> `awaitTermination()`; project = the summary's `duration_s` "
        "(topic check, bronze/checkpoint inspection and the query).",
        "- wall: the whole process (JVM start, spark-submit, session start-up and stop included).",
        "- rows checked: consumer-perf-test's record count; for the Spark jobs the Delta table read "
        "with deltalake (rows and distinct partition/offset), and the project's summary rows.",
    ]
    for job in ("plain", "project"):
        breakdown = _progress_breakdown(by_job[job])
        if breakdown:
            lines.append(f"- Spark query progress, {job} (median per run): {breakdown}")
    if project and all("batch_s" in m.detail for m in project):
        med = {k: statistics.median(m.detail.get(f"{k}_s", 0.0) for m in project)
               for k in ("batch", "check", "write", "stats", "commit")}  # fmt: skip
        lines.append(
            f"- project, inside its foreachBatch writer (median per run): {med['batch']:.1f}s = checking the "
            f"batch's start against the table {med['check']:.1f}s + reading the batch from Kafka and writing its "
            f"files, one pass {med['write']:.1f}s + its ranges from the files' statistics {med['stats']:.1f}s + "
            f"the Delta commit with its txn actions (where the table stands) {med['commit']:.1f}s"
        )
    return lines


# --------------------------------------------------------------------------- run


def _log(message: str) -> None:
    print(f"[benchmark {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def run_benchmark(params: BenchmarkParams) -> BenchmarkReport:
    """Start/reuse the broker, then each part: throughput (produce once, measure every repetition),
    DAG runs (:class:`include.tooling.benchmark_runs.DagRunBench`); always stop what it started."""
    started = time.monotonic()
    # The code measured is the code at the start: a commit or an edit while it runs must not rename it.
    commit = checkout_commit()
    load_before = load_average()
    reference_start_s = speed_reference()
    work = Path(params.work_dir or tempfile.mkdtemp(prefix="kde-benchmark-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    log_dir = settings.VAR_DIR / "benchmark" / f"{params.output.stem}-logs"
    if log_dir.exists():
        shutil.rmtree(log_dir)
    log_dir.mkdir(parents=True)
    topic = f"benchmark-{uuid.uuid4().hex[:8]}"
    runs_topic = f"{topic}-runs"
    #: An Airflow home already migrated (the runs part's, or the one given), for the silver part.
    home = params.airflow_home
    broker: local_kafka.LocalBroker | None = None
    created: list[str] = []
    demo = None
    try:
        if "demo" in params.parts:  # first, and on its own: the demo starts its own broker and Airflow
            demo = measure_demo(work / "demo", log_dir / "demo.log", log=_log)
        if params.bootstrap_servers:
            bootstrap = params.bootstrap_servers
            broker_text = f"given, {bootstrap}"
        else:
            _log(f"starting a local broker in {work / 'kafka'}")
            broker = local_kafka.start(work / "kafka", short_jit=False)  # its drain is measured
            bootstrap = broker.bootstrap_servers
            broker_text = f"started by the benchmark (local_kafka, KRaft, heap 1g), {bootstrap}"
        report = BenchmarkReport(
            params, machine_description(), topic, broker_text, 0.0, load_before=load_before, demo=demo
        )
        if "throughput" in params.parts:
            create_topic(bootstrap, topic, params.partitions)
            created.append(topic)
            _measure_throughput(report, bootstrap, work, log_dir)
        if "batches" in params.parts:
            batch_topic = f"{topic}-batches"
            create_topic(bootstrap, batch_topic, params.partitions)
            created.append(batch_topic)
            records = params.batch_records * params.batch_count
            _log(f"micro-batches: producing {records:,} records to {batch_topic}")
            produce_backlog(bootstrap, batch_topic, records, params.partitions, params.record_bytes)
            for rep in range(1, params.repetitions + 1):
                _log(f"micro-batches, repetition {rep}/{params.repetitions}: plain job, then project job")
                report.batch_runs += measure_batches(bootstrap, batch_topic, work / f"batches{rep}", params, rep,
                                                     log_dir)  # fmt: skip
        if "runs" in params.parts:
            r = params.runs
            create_topic(bootstrap, runs_topic, r.partitions)
            created.append(runs_topic)
            _log(f"DAG runs on topic {runs_topic}: fixed cost, then history {list(r.history)}")
            bench = DagRunBench(
                work / "runs", bootstrap, runs_topic, r, airflow_home=params.airflow_home, log=_log,
                produce=lambda n: produce_backlog(bootstrap, runs_topic, n, r.partitions, r.record_bytes),
            )  # fmt: skip
            if params.airflow_home is None:
                _log(f"preparing an embedded Airflow in {bench.home}")
                airflow_local.migrate(bench.env)
            report.runs = bench.measure()
            home = bench.home
        if "silver" in params.parts or "crossover" in params.parts:
            home = home or _migrated_home(work / "airflow", bootstrap)
        if "silver" in params.parts:
            report.silver = _measure_side_by_side(params, bootstrap, f"{topic}-orders", work / "silver", home, created,
                                                  SILVER_MODES, (params.runs.small_records,))  # fmt: skip
        if "store" in params.parts:
            home = home or _migrated_home(work / "airflow", bootstrap)
            report.store = _measure_stores(params, bootstrap, f"{topic}-store", work / "store", home, created)
        if "crossover" in params.parts:
            report.crossover = _measure_side_by_side(params, bootstrap, f"{topic}-crossover", work / "crossover",
                                                     home, created, CROSSOVER_MODES, params.crossover_sizes,
                                                     params.crossover_repetitions)  # fmt: skip
        if "maintenance" in params.parts:
            report.maintenance = _measure_maintenance(params, bootstrap, f"{topic}-maintenance", work / "maintenance",
                                                      created)  # fmt: skip
        if "formats" in params.parts:
            report.formats = _measure_formats(params, bootstrap, topic, work / "formats", created)
        if "cdc" in params.parts:
            report.cdc = _measure_cdc(params, bootstrap, topic, work / "cdc", created)
        if "routes" in params.parts:
            report.routes = _measure_routes(params, bootstrap, topic, work / "routes", created)
        if "monitor" in params.parts:
            _log(f"monitoring page: ledgers of {', '.join(map(str, params.monitor.sizes))} runs")
            report.monitor = run_monitor_bench(work / "monitor", params.monitor)
        report.load_after = load_average()
        report.speed_reference_s = (reference_start_s, speed_reference())
        report.total_s = time.monotonic() - started
        report.commit = commit
        return report
    finally:
        if broker is not None:
            _log("stopping the broker")
            broker.stop()
        else:
            for name in created:
                try:
                    delete_topic(bootstrap, name)
                except Exception as exc:  # noqa: BLE001 - cleanup must not hide the result
                    _log(f"could not delete topic {name}: {exc}")
        if not params.keep_work_dir and params.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)


#: The silver part: the demo's pipeline shape with no ``cluster`` section (the defaults decide) and with
#: local mode turned off, so every run starts its cluster.
#: The bronze + silver pipeline with no cluster section, whose cold transform batch the summary gives.
SILVER_DEFAULTS = "pipeline defaults"
SILVER_MODES: dict[str, dict | None] = {
    SILVER_DEFAULTS: DEFAULTS,
    "cluster forced (local_max_records: 0)": {"local_max_records": 0},
}


def _migrated_home(home: Path, bootstrap: str) -> Path:
    """An embedded Airflow home with its database migrated, for the side-by-side parts."""
    _log(f"preparing an embedded Airflow in {home}")
    airflow_local.migrate(airflow_local.environment(home, kafka_bootstrap=bootstrap))
    return home


#: The store part's two pipelines: the lakehouse in a folder of this disk, and on the local S3-compatible server.
STORE_MODES = ("local disk", "object store")


def _measure_stores(params: BenchmarkParams, bootstrap: str, topic: str, work: Path, home: Path,
                    created: list[str]) -> list[DagRunTiming]:  # fmt: skip
    """The demo's pipeline shape with its defaults, its lakehouse on this disk and on a local S3-compatible
    server, side by side at the demo's backlog."""
    _log(f"starting a local S3-compatible server (s3proxy) in {work / 's3'}")
    server = local_s3.start(work / "s3")
    try:
        return _measure_side_by_side(params, bootstrap, topic, work, home, created, dict.fromkeys(STORE_MODES),
                                     (params.runs.small_records,), stores={STORE_MODES[1]: server})  # fmt: skip
    finally:
        server.stop()


def _measure_side_by_side(params: BenchmarkParams, bootstrap: str, topic: str, work: Path, home: Path,
                          created: list[str], modes: dict[str, dict | None], sizes: Sequence[int],
                          repetitions: int | None = None, stores: Mapping[str, local_s3.LocalS3] | None = None,
                          ) -> list[DagRunTiming]:  # fmt: skip
    """Pipelines of the demo's shape (its transform, one cluster section each from ``modes``) on one topic
    of the demo's order events, side by side at each backlog of ``sizes``. ``stores``: the object-store
    server a pipeline keeps its lakehouse on, by label (the others: this disk)."""
    import yaml

    from include.tooling import demo

    create_topic(bootstrap, topic, demo.PARTITIONS)
    created.append(topic)
    transform = yaml.safe_load(demo.PIPELINE_FILE.read_text())["transform"]
    produced = [0]

    def produce(n: int) -> None:
        demo.produce_orders(bootstrap, n, produced[0], topic=topic)
        produced[0] += n

    benches = {
        label: DagRunBench(work / f"pipeline{i}", bootstrap, topic, params.runs, airflow_home=home, log=_log,
                           produce=produce, transform=transform, store=(stores or {}).get(label),
                           cluster=None if cluster is None else {"profile": "local_standalone", **cluster})
        for i, (label, cluster) in enumerate(modes.items())
    }  # fmt: skip
    _log(f"DAG runs through bronze and silver on topic {topic}: {', '.join(modes)} at {list(sizes)} records")
    return measure_side_by_side(benches, produce, sizes, repetitions or params.runs.repetitions,
                                params.runs.small_records)


def _measure_maintenance(params: BenchmarkParams, bootstrap: str, topic: str, work: Path,
                         created: list[str]) -> MaintenanceReport:  # fmt: skip
    """Two pipelines of the demo's shape over many runs, maintained and never (``--parts maintenance``)."""
    from include.tooling import demo

    create_topic(bootstrap, topic, demo.PARTITIONS)
    created.append(topic)
    produced = [0]

    def produce(n: int) -> None:
        demo.produce_orders(bootstrap, n, produced[0], topic=topic)
        produced[0] += n

    m = params.maintenance
    _log(f"table maintenance on topic {topic}: {m.runs} runs of two pipelines, one maintained every {m.every_runs}")
    return run_maintenance_bench(work, bootstrap, topic, m, produce, _log)


def _measure_formats(params: BenchmarkParams, bootstrap: str, topic: str, work: Path,
                     created: list[str]) -> SideBySideReport:  # fmt: skip
    """The same orders as JSON, and as registry-framed Avro and Protobuf, through the transform (``--parts formats``)."""
    from include.tooling import local_registry

    f = params.formats
    topics = {fmt: f"{topic}-{fmt}" for fmt in FORMATS}
    for name in topics.values():
        create_topic(bootstrap, name, f.partitions)
        created.append(name)
    work.mkdir(parents=True, exist_ok=True)
    registry = local_registry.start(work / "registry")
    try:
        return run_formats_bench(work, bootstrap, topics, registry.url, registry.register, f, _log)
    finally:
        registry.stop()


def _measure_cdc(params: BenchmarkParams, bootstrap: str, topic: str, work: Path,
                 created: list[str]) -> SideBySideReport:  # fmt: skip
    """The same changes as plain records and as Debezium envelopes through the transform (``--parts cdc``)."""
    c = params.cdc
    topics = {mode: f"{topic}-{mode}" for mode in CDC_MODES}
    for name in topics.values():
        create_topic(bootstrap, name, c.partitions)
        created.append(name)
    work.mkdir(parents=True, exist_ok=True)
    return run_cdc_bench(work, bootstrap, topics, c, _log)


def _measure_routes(params: BenchmarkParams, bootstrap: str, topic: str, work: Path,
                    created: list[str]) -> SideBySideReport:  # fmt: skip
    """One routed transform into three tables against three single-table pipelines (``--parts routes``)."""
    r = params.routes
    topics = {name: f"{topic}-routes-{name}" for name in ("routed", *ROUTE_KINDS)}
    for name in topics.values():
        create_topic(bootstrap, name, r.partitions)
        created.append(name)
    work.mkdir(parents=True, exist_ok=True)
    return run_routes_bench(work, bootstrap, topics, r, _log)


def _measure_throughput(report: BenchmarkReport, bootstrap: str, work: Path, log_dir: Path) -> None:
    """Produce the backlog once, then read it with each job per repetition (into ``report``)."""
    params, topic = report.params, report.topic
    _log(f"producing {params.records:,} records of {params.record_bytes} B to {topic}")
    report.produce_s = produce_backlog(
        bootstrap, topic, params.records, params.partitions, params.record_bytes
    )
    size = sum(high - low for low, high in watermarks(bootstrap, topic).values())
    if size != params.records:
        raise BenchmarkError(f"topic {topic} holds {size} records after producing {params.records}")
    _log(f"produced in {report.produce_s:.1f}s")
    for rep in range(1, params.repetitions + 1):
        rep_dir = work / f"rep{rep}"
        for job in JOBS:
            _log(f"repetition {rep}/{params.repetitions}: {JOBS[job]}")
            if job == "ceiling":
                m = measure_ceiling(bootstrap, topic, params.records, rep, params.job_timeout_s)
            elif job == "plain":
                m = measure_plain(bootstrap, topic, rep_dir, params, rep, log_dir)
            else:
                m = measure_project(bootstrap, topic, rep_dir, params, rep, log_dir)
            report.measurements.append(m)
            _log(f"  {m.rows:,} rows, drain {m.drain_s:.1f}s ({params.records / m.drain_s:,.0f} records/s), "
                 f"wall {m.wall_s:.1f}s")  # fmt: skip
        if not params.keep_work_dir:
            shutil.rmtree(rep_dir, ignore_errors=True)


def build_arg_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m include.tooling.benchmark``."""
    d = BenchmarkParams()

    p = argparse.ArgumentParser(prog="python -m include.tooling.benchmark", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("--records", type=positive(int), default=d.records, help="backlog size (default %(default)s)")
    p.add_argument(
        "--partitions", type=positive(int), default=d.partitions, help="topic partitions (default %(default)s)"
    )
    p.add_argument(
        "--record-bytes",
        type=positive(int),
        default=d.record_bytes,
        help="bytes per record value, at least 16 (default %(default)s)",
    )
    p.add_argument("--repetitions", type=positive(int), default=d.repetitions, help="default %(default)s")
    p.add_argument(
        "--bootstrap-servers",
        default=None,
        help="use this broker (a fresh topic is created and deleted) instead of starting one",
    )
    p.add_argument(
        "--output",
        type=Path,
        default=d.output,
        help="markdown report (default %(default)s); Spark logs and project summaries go to "
        "<output stem>-logs/ beside it, replaced each run",
    )
    p.add_argument(
        "--work-dir",
        type=Path,
        default=None,
        help="folder for the broker, tables and checkpoints (default: a temporary folder)",
    )
    p.add_argument("--keep-work-dir", action="store_true", help="keep tables and checkpoints")
    p.add_argument("--master", default=d.master, help="spark-submit --master (default %(default)s)")
    p.add_argument(
        "--project-max-offsets-per-trigger",
        type=positive(int),
        default=None,
        help="pass --max-offsets-per-trigger to the project's job (default: none, like the plain job)",
    )
    p.add_argument(
        "--job-timeout-s", type=float, default=d.job_timeout_s, help="per job run (default %(default)s)"
    )

    def parts(text: str) -> tuple[str, ...]:
        chosen = tuple(x.strip() for x in text.split(",") if x.strip())
        unknown = [x for x in chosen if x not in PARTS]
        if not chosen or unknown:
            raise argparse.ArgumentTypeError(
                f"expected a comma-separated list of {', '.join(PARTS)}, got {text!r}"
            )
        return chosen

    def levels(text: str) -> tuple[int, ...]:
        try:
            values = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            values = ()
        if not values or any(v <= 0 for v in values) or list(values) != sorted(set(values)):
            raise argparse.ArgumentTypeError(
                f"expected increasing positive counts like 10,200, got {text!r}"
            )
        return values

    b = p.add_argument_group("micro-batches (--parts batches)")
    b.add_argument("--batch-records", type=positive(int), default=d.batch_records,
                   help="maxOffsetsPerTrigger of both Spark jobs (default %(default)s)")  # fmt: skip
    b.add_argument("--batch-count", type=positive(int), default=d.batch_count,
                   help="batches of that size in the backlog (default %(default)s)")  # fmt: skip
    r = d.runs
    g = p.add_argument_group("DAG runs (--parts runs)")
    p.add_argument("--parts", type=parts, default=d.parts,
                   help=f"what to measure, comma-separated (default {','.join(d.parts)})")  # fmt: skip
    g.add_argument("--small-records", type=positive(int), default=r.small_records,
                   help="records of the small DAG run (default %(default)s)")  # fmt: skip
    g.add_argument("--history", type=levels, default=r.history,
                   help="bronze commit counts at which the small run is measured again "
                        f"(default {','.join(map(str, r.history))})")  # fmt: skip
    g.add_argument("--run-repetitions", type=positive(int), default=r.repetitions,
                   help="measured runs of each kind (default %(default)s)")  # fmt: skip
    mg = p.add_argument_group("table maintenance (--parts maintenance)")
    mg.add_argument("--maintenance-runs", type=positive(int), default=d.maintenance.runs,
                    help="runs of each of the two pipelines (default %(default)s)")  # fmt: skip
    mg.add_argument("--maintenance-every", type=positive(int), default=d.maintenance.every_runs,
                    help="maintenance.every_runs of the maintained one (default %(default)s)")  # fmt: skip
    cg = p.add_argument_group("where a cluster pays off (--parts crossover)")
    cg.add_argument("--crossover-sizes", type=levels, default=d.crossover_sizes,
                    help=f"backlogs, records a run (default {','.join(map(str, d.crossover_sizes))})")  # fmt: skip
    cg.add_argument("--crossover-repetitions", type=positive(int), default=d.crossover_repetitions,
                    help="runs of each pipeline at each backlog (default %(default)s)")  # fmt: skip
    fg = p.add_argument_group("value formats (--parts formats)")
    fg.add_argument("--format-records", type=positive(int), default=d.formats.records,
                    help="orders produced once per format (default %(default)s)")  # fmt: skip
    rg = p.add_argument_group("routes (--parts routes)")
    rg.add_argument("--route-records", type=positive(int), default=d.routes.records,
                    help="records of three kinds, produced once mixed and once per kind (default %(default)s)")  # fmt: skip
    dg = p.add_argument_group("change data capture (--parts cdc)")
    dg.add_argument("--cdc-changes", type=positive(int), default=d.cdc.records,
                    help="changes produced once as plain records and once as Debezium events "
                         "(default %(default)s)")  # fmt: skip
    g.add_argument("--airflow-home", type=Path, default=None,
                   help="an Airflow home whose SQLite database is already migrated (default: a new one "
                        "in the work folder)")  # fmt: skip
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the benchmark, print the markdown to stdout and write it to ``--output``; 1 on failure."""
    args = build_arg_parser().parse_args(argv)
    if args.record_bytes < 16:
        print("benchmark: --record-bytes must be at least 16", file=sys.stderr)
        return 2
    params = BenchmarkParams(
        records=args.records,
        partitions=args.partitions,
        record_bytes=args.record_bytes,
        repetitions=args.repetitions,
        bootstrap_servers=args.bootstrap_servers,
        output=args.output,
        work_dir=args.work_dir,
        keep_work_dir=args.keep_work_dir,
        master=args.master,
        project_max_offsets_per_trigger=args.project_max_offsets_per_trigger,
        job_timeout_s=args.job_timeout_s,
        parts=args.parts,
        batch_records=args.batch_records,
        batch_count=args.batch_count,
        runs=RunParams(
            small_records=args.small_records,
            history=args.history,
            repetitions=args.run_repetitions,
            partitions=args.partitions,
            record_bytes=args.record_bytes,
            timeout_s=args.job_timeout_s,
        ),
        airflow_home=args.airflow_home,
        crossover_sizes=args.crossover_sizes,
        crossover_repetitions=args.crossover_repetitions,
        maintenance=MaintenanceParams(runs=args.maintenance_runs, every_runs=args.maintenance_every),
        formats=SideBySideParams(records=args.format_records, repetitions=args.repetitions),
        cdc=SideBySideParams(records=args.cdc_changes, repetitions=args.repetitions),
        routes=SideBySideParams(records=args.route_records, repetitions=args.repetitions),
    )
    try:
        report = run_benchmark(params)
    except (BenchmarkError, RunBenchmarkError, MaintenanceBenchError, SideBySideBenchError, DemoBenchError,
            local_kafka.BrokerError) as exc:
        print(f"benchmark FAILED: {exc}", file=sys.stderr)
        return 1
    report.command = "python -m include.tooling.benchmark" + "".join(f" {a}" for a in (argv or sys.argv[1:]))
    text = render_markdown(report)
    params.output.parent.mkdir(parents=True, exist_ok=True)
    params.output.write_text(text)
    print(text, end="")
    _log(f"written to {params.output}")
    if params.output.resolve() == BenchmarkParams().output.resolve() and (summary := summary_lines(report)):
        link = os.path.relpath(params.output.resolve(), PERFORMANCE_PAGE.parent.resolve())
        PERFORMANCE_PAGE.write_text(with_summary(PERFORMANCE_PAGE.read_text(), summary, link))
        _log(f"its summary copied into {PERFORMANCE_PAGE}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
