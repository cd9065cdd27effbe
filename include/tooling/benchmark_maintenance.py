"""What table maintenance buys, side by side: two pipelines fed the same records for many runs, one
maintained every N runs, the other never (``make bench BENCH_ARGS="--parts maintenance"``).

Each run of each pipeline is what a DAG run's Spark application and checks do,
in one warm in-process SparkSession so that the comparison is of the tables,
not of JVM starts: the ingest step, the transform step, the maintenance step
when the run ledger says it is due (:func:`include.orchestration.preflight_run.maintenance_due`),
the ``check_continuity`` task's checks (which must pass, or the benchmark
fails), and the ledger row with the ledger's own maintenance. Every
``no_data_every``-th run has no new records: it only adds its ledger row, as
a skipped DAG run does.

Reported: files per table after every ``every_runs`` runs, and what delta-rs
reads cost at the end in both pipelines (median of several reads each): where
bronze stands (what every Airflow-side check opens), the whole silver table,
and the run ledger as the monitoring page reads it.
"""

from __future__ import annotations

import logging
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from include.contract.errors import PipelineError
from include.contract.jobs import IngestArgs

#: The two pipelines: maintained, and never.
VARIANTS = ("maintained", "never")
#: The tables whose files are counted.
TABLES = ("bronze", "silver", "quarantine", "ledger")


class MaintenanceBenchError(PipelineError, RuntimeError):
    """A run of the benchmark failed its checks or its job."""


@dataclass(frozen=True)
class MaintenanceParams:
    """The runs of ``--parts maintenance``."""

    runs: int = 50
    every_runs: int = 10
    records_per_run: int = 500
    max_offsets_per_trigger: int = 250
    no_data_every: int = 7
    read_repetitions: int = 7


@dataclass
class MaintenanceReport:
    """Files per table after each checkpoint run, read costs at the end, per variant."""

    params: MaintenanceParams
    files: dict[str, dict[int, dict[str, int | None]]] = field(default_factory=dict)
    #: The most files each table had after any run.
    peak_files: dict[str, dict[str, int]] = field(default_factory=dict)
    reads_ms: dict[str, dict[str, float]] = field(default_factory=dict)
    ledger_read_ms: dict[str, dict[int, float]] = field(default_factory=dict)
    maintenance_s: list[float] = field(default_factory=list)
    run_s: dict[str, list[float]] = field(default_factory=dict)
    checks_ok: int = 0


def median_ms(action: Callable[[], Any], repetitions: int) -> float:
    """Median milliseconds of ``action`` over ``repetitions`` calls, after one call that is not timed."""
    action()  # the first call warms caches (delta-rs', the OS's) alike for every variant measured
    times = []
    for _ in range(repetitions):
        t = time.perf_counter()
        action()
        times.append((time.perf_counter() - t) * 1000)
    return statistics.median(times)


def _pipeline_file(folder: Path, name: str, topic: str, transform: dict, lake: Path, every_runs: int | None,
                   max_per_trigger: int) -> Path:  # fmt: skip
    import yaml

    data = {
        "name": name, "kafka": {"connection_id": "kafka_default", "topics": [topic],
                                "max_offsets_per_trigger": max_per_trigger},
        "tables": {"lakehouse_root": str(lake)}, "schedule": None, "transform": transform,
        "maintenance": {"every_runs": every_runs},
    }  # fmt: skip
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_maintenance_bench(work: Path, bootstrap: str, topic: str, params: MaintenanceParams,
                          produce: Callable[[int], None], log: Callable[[str], None]) -> MaintenanceReport:  # fmt: skip
    """Both pipelines through ``params.runs`` runs on ``topic`` (created by the caller); raises
    :class:`MaintenanceBenchError` when a run's checks fail."""
    import yaml

    from include.config import load_pipeline
    from include.orchestration import post_run, preflight_run
    from include.orchestration.job_args import maintain_job_args, transform_job_args
    from include.readers import delta_progress, run_ledger
    from include.spark.spark_submit import local_session
    from include.tooling import demo
    from spark_jobs import bronze_to_silver, kafka_to_bronze, maintain_tables

    p = params
    report = MaintenanceReport(p)
    shape = yaml.safe_load(demo.PIPELINE_FILE.read_text())
    work.mkdir(parents=True, exist_ok=True)
    cfgs = {}
    for variant in VARIANTS:
        path = _pipeline_file(work, f"maint-{variant}", topic, shape["transform"], work / "lake",
                              p.every_runs if variant == "maintained" else None, p.max_offsets_per_trigger)  # fmt: skip
        cfgs[variant] = load_pipeline(path)
        report.files[variant], report.ledger_read_ms[variant], report.run_s[variant] = {}, {}, []
    client = {"bootstrap.servers": bootstrap}
    logging.getLogger("py4j").setLevel(logging.WARNING)  # one INFO line per JVM call otherwise
    spark = local_session("kde-benchmark-maintenance", warehouse=work / "warehouse")
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    try:
        for run in range(1, p.runs + 1):
            data = run % p.no_data_every != 0
            if data:
                produce(p.records_per_run)
            now = t0 + timedelta(minutes=10 * run)
            for variant, cfg in cfgs.items():
                started = time.monotonic()
                folder = work / "runs" / variant / f"run-{run}"
                folder.mkdir(parents=True)
                run_id = f"scheduled__{now.isoformat()}"
                row: dict[str, Any] = {"pipeline": cfg.name, "run_id": run_id, "run_type": "scheduled",
                                       "dag_id": cfg.name, "outcome": "skipped", "reason": "no new records",
                                       "started_at": now, "finished_at": now}  # fmt: skip
                maintenance: dict[str, Any] = {"tables": {}}
                if data:
                    progress = delta_progress.read_progress(cfg.tables.bronze_path, cfg.name)
                    version_before = delta_progress.table_version(cfg.tables.bronze_path)
                    before = post_run.transform_versions(cfg)
                    due = preflight_run.maintenance_due(cfg, "tables", now)
                    ingest = kafka_to_bronze.run(spark, kafka_to_bronze.parse_config(
                        IngestArgs.for_pipeline(cfg, bootstrap_servers=bootstrap, run_id=run_id, run_type="scheduled",
                                                summary_path=str(folder / "ingest.json")).to_args()))  # fmt: skip
                    done = bronze_to_silver.run(spark, bronze_to_silver.parse_config(
                        transform_job_args(cfg, folder, run_id, folder / "transform.json"))).to_json()  # fmt: skip
                    if due:
                        t = time.monotonic()
                        maintained = maintain_tables.run(spark, maintain_tables.parse_config(
                            maintain_job_args(cfg, run_id, folder / "maintain.json")))  # fmt: skip
                        report.maintenance_s.append(time.monotonic() - t)
                        maintenance = {"due": due, "tables": maintained["tables"]}
                    check = post_run.check_continuity(
                        cfg, client, run_id=run_id, version_before=version_before,
                        start=progress.next_offsets if progress else None, job_summary=ingest.to_json(),
                        transform_before=before, transform_summary=done,
                    )  # fmt: skip
                    problems = check.violations + (check.transform.violations if check.transform else [])
                    if problems:
                        raise MaintenanceBenchError(f"{cfg.name} run {run}: the checks failed: {problems}")
                    report.checks_ok += 1
                    row.update(outcome="success", reason="", rows=ingest.rows, continuity="CONTINUOUS",
                               commits=len(ingest.batches), silver_read=done["read"])  # fmt: skip
                ledger_due = preflight_run.maintenance_due(cfg, "ledger", now)
                if ledger_due:
                    maintenance["tables"]["ledger"] = run_ledger.maintain(cfg.tables.ledger_path)
                    maintenance["ledger_due"] = ledger_due
                row["maintenance_json"] = maintenance if maintenance["tables"] else None
                run_ledger.append_run(cfg.tables.ledger_path, row, properties=cfg.tables.retention_properties())
                report.run_s[variant].append(time.monotonic() - started)
                paths = _paths(cfg)
                files = {n: delta_progress.file_count(paths[n]) or 0 for n in TABLES}
                peak = report.peak_files.setdefault(variant, {})
                for n, count in files.items():
                    peak[n] = max(peak.get(n, 0), count)
                if run % p.every_runs == 0:
                    report.files[variant][run] = files
                    report.ledger_read_ms[variant][run] = median_ms(
                        lambda c=cfg: run_ledger.read_runs(c.tables.ledger_path), p.read_repetitions)  # fmt: skip
            if run % p.every_runs == 0:
                log(f"maintenance: run {run}/{p.runs}; files {report.files}")
        for variant, cfg in cfgs.items():
            paths = _paths(cfg)
            report.reads_ms[variant] = {
                "bronze position (read_progress)": median_ms(
                    lambda c=cfg: delta_progress.read_progress(c.tables.bronze_path, c.name), p.read_repetitions),
                "silver, whole table": median_ms(lambda s=paths["silver"]: _read_all(s), p.read_repetitions),
                "bronze, whole table": median_ms(lambda b=paths["bronze"]: _read_all(b), p.read_repetitions),
                "run ledger (monitoring page)": median_ms(
                    lambda c=cfg: run_ledger.read_runs(c.tables.ledger_path), p.read_repetitions),
            }  # fmt: skip
    finally:
        spark.stop()
    return report


def _paths(cfg) -> dict[str, str]:
    t = cfg.tables
    return {"bronze": t.bronze_path, "silver": t.silver_path, "quarantine": t.quarantine_path, "ledger": t.ledger_path}


def _read_all(path: str) -> int:
    from deltalake import DeltaTable

    return DeltaTable(path).to_pyarrow_table().num_rows


def render_maintenance_markdown(report: MaintenanceReport) -> str:
    """The part's section: files per table over the runs, then the read costs, maintained vs never."""
    p = report.params
    data_runs = p.runs - p.runs // p.no_data_every
    lines = [
        "## Table maintenance (`--parts maintenance`)",
        "",
        f"Two pipelines of the demo's shape read the same records for {p.runs} runs ({data_runs} with "
        f"{p.records_per_run} new records in micro-batches of at most {p.max_offsets_per_trigger}, every "
        f"{p.no_data_every}th with none): one maintained every {p.every_runs} runs, one never. Each run is the "
        "ingest and transform steps, the maintenance step when the ledger says it is due, the check_continuity "
        "task's checks and the ledger row, in one warm in-process SparkSession "
        f"({report.checks_ok} runs checked, every check passed).",
        "",
        "| after run | " + " | ".join(f"{t} maintained / never" for t in TABLES) + " |",
        "| --- | " + " | ".join("---" for _ in TABLES) + " |",
    ]
    for run in sorted(report.files.get("maintained", {})):
        m, n = report.files["maintained"][run], report.files["never"][run]
        lines.append(f"| {run} | " + " | ".join(f"{m[t]} / {n[t]}" for t in TABLES) + " |")
    if report.peak_files:
        m, n = report.peak_files["maintained"], report.peak_files["never"]
        lines.append("| most after any run | " + " | ".join(f"{m[t]} / {n[t]}" for t in TABLES) + " |")
    lines += [
        "",
        "Reads with delta-rs at the end (median of "
        f"{p.read_repetitions} after one warm-up read):",
        "",
        "| read | maintained ms | never ms | never / maintained |",
        "| --- | --- | --- | --- |",
    ]
    for what, ms in report.reads_ms.get("maintained", {}).items():
        other = report.reads_ms["never"][what]
        lines.append(f"| {what} | {ms:.1f} | {other:.1f} | {other / ms:.2f} |")
    ledger = report.ledger_read_ms
    lines += ["", "The monitoring page's read of the run ledger as it grows (ms):", "",
              "| after run | maintained | never |", "| --- | --- | --- |"]  # fmt: skip
    for run in sorted(ledger.get("maintained", {})):
        lines.append(f"| {run} | {ledger['maintained'][run]:.1f} | {ledger['never'][run]:.1f} |")
    if report.maintenance_s:
        lines += ["", f"Maintenance steps: {len(report.maintenance_s)}, "
                      f"{statistics.median(report.maintenance_s):.1f} s each (median, three tables, warm session). "
                      f"Seconds per run (median): maintained {statistics.median(report.run_s['maintained']):.1f}, "
                      f"never {statistics.median(report.run_s['never']):.1f}."]  # fmt: skip
    return "\n".join(lines) + "\n"
