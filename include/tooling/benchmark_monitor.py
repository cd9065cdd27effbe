"""What the monitoring page reads of a run ledger as the ledger grows (``--parts monitor``).

Ledgers of a few and of thousands of runs, written with delta-rs as the
``record_run`` task writes them (in appends of many rows, so that building a
large one takes seconds). Each is read three ways, median of several reads:
the whole ledger as :func:`include.readers.run_ledger.read_runs` reads it,
the page's first view (a fresh cache: the newest runs and the columns the page
shows) and a view of the unchanged ledger (one version lookup). No broker, no
JVM.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

#: The three reads, as the report names them.
READS = ("whole ledger", "page, first view", "page, unchanged ledger")


@dataclass(frozen=True)
class MonitorParams:
    """The ledgers of ``--parts monitor``: their sizes in runs, and the reads timed of each."""

    sizes: tuple[int, ...] = (10, 1_000, 5_000)
    repetitions: int = 7
    #: Rows per append while building a ledger.
    rows_per_append: int = 250


@dataclass
class MonitorReport:
    """Median milliseconds of each read (:data:`READS`), per ledger size."""

    params: MonitorParams
    #: ``{runs: {read: ms}}``; the last two sizes are compared (at least two are measured).
    read_ms: dict[int, dict[str, float]] = field(default_factory=dict)


def _row(i: int) -> dict:
    at = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(minutes=10 * i)
    partitions = [{"topic": "orders", "partition": p, "from": 100 * i, "until": 100 * i + 50, "rows": 50}
                  for p in range(4)]  # fmt: skip
    return {"pipeline": "bench", "run_id": f"scheduled__{at.isoformat()}", "run_type": "scheduled",
            "outcome": "success", "started_at": at, "finished_at": at + timedelta(seconds=40), "duration_s": 40.0,
            "rows": 200, "commits": 1, "continuity": "CONTINUOUS", "partitions_json": partitions,
            "tasks_json": {"ingest": "success", "transform": "success"}}  # fmt: skip


def build_ledger(path: Path, runs: int, rows_per_append: int) -> None:
    """A ledger of ``runs`` rows in the columns and encoding :func:`include.readers.run_ledger.append_run` writes."""
    from deltalake import write_deltalake

    from include.readers import run_ledger

    for start in range(0, runs, rows_per_append):
        rows = [_row(i) for i in range(start, min(start + rows_per_append, runs))]
        write_deltalake(str(path), run_ledger.arrow_rows(rows), mode="append")


def _median_ms(action, repetitions: int) -> float:
    times = []
    for _ in range(repetitions):
        started = time.perf_counter()
        action()
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times)


def run_monitor_bench(work: Path, params: MonitorParams) -> MonitorReport:
    """Build each ledger under ``work`` and time the three reads of it."""
    from include.monitoring import monitor
    from include.readers import run_ledger

    report = MonitorReport(params)
    for size in params.sizes:
        path = work / f"ledger-{size}"
        build_ledger(path, size, params.rows_per_append)
        warm = monitor.LedgerCache()
        shown = len(warm.recent_runs(str(path)))
        if shown != min(size, monitor.HISTORY_RUNS):
            raise RuntimeError(f"the page read {shown} runs of a ledger of {size}")
        report.read_ms[size] = {
            "whole ledger": _median_ms(lambda p=path: run_ledger.read_runs(p), params.repetitions),
            "page, first view": _median_ms(lambda p=path: monitor.LedgerCache().recent_runs(str(p)),
                                           params.repetitions),  # fmt: skip
            "page, unchanged ledger": _median_ms(lambda p=path, c=warm: c.recent_runs(str(p)), params.repetitions),
        }
    return report


def render_monitor_markdown(report: MonitorReport) -> str:
    """The ``## Monitoring page`` section of the report."""
    from include.monitoring import monitor

    p = report.params
    sizes = sorted(report.read_ms)
    lines = [
        "## Monitoring page: what a view reads of the run ledger",
        "",
        f"Ledgers of {' and '.join(f'{s:,}' for s in sizes)} runs (delta-rs, appends of {p.rows_per_append} rows); "
        f"median ms of {p.repetitions} reads. The page reads the newest {monitor.HISTORY_RUNS:,} runs and only "
        "the columns it shows, and reads again only when the ledger's version changed.",
        "",
        "| read | " + " | ".join(f"{s:,} runs" for s in sizes) + f" | {sizes[-1]:,} / {sizes[-2]:,} runs |",
        "| --- | " + " | ".join("---" for _ in sizes) + " | --- |",
    ]
    for name in READS:
        ms = [report.read_ms[s][name] for s in sizes]
        lines.append(f"| {name} | " + " | ".join(f"{m:.1f}" for m in ms) + f" | {ms[-1] / ms[-2]:.2f}x |")
    return "\n".join(lines) + "\n"
