"""Smoke test of ``python -m include.benchmark`` on a tiny backlog (no timing assertions).

Runs the whole benchmark (consumer-perf-test, the plain job and the project's
job through spark-submit) against the session broker, once.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from include import benchmark

pytestmark = pytest.mark.integration

RECORDS = 2000


def _table_rows(markdown: str) -> dict[str, list[str]]:
    """The main table's rows keyed by their job label."""
    rows = {}
    for line in markdown.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("| ") and cells[0] in benchmark.JOBS.values():
            rows[cells[0]] = cells
    return rows


def _median(cell: str) -> float:
    """The median of a ``median (min–max)`` cell, e.g. ``1,234 (1,000–1,500)`` -> 1234."""
    return float(cell.split(" (")[0].replace(",", ""))


def test_benchmark_measures_all_three_jobs(bootstrap: str, tmp_path: Path, capsys) -> None:
    output = tmp_path / "ingest.md"
    code = benchmark.main([
        "--bootstrap-servers", bootstrap, "--records", str(RECORDS), "--partitions", "2",
        "--repetitions", "1", "--output", str(output), "--work-dir", str(tmp_path / "work"),
    ])  # fmt: skip
    assert code == 0

    markdown = output.read_text()
    assert capsys.readouterr().out == markdown
    assert "nproc" in markdown and "CPU" in markdown

    header = next(line for line in markdown.splitlines() if line.startswith("| job |"))
    columns = [c.strip() for c in header.strip().strip("|").split("|")]
    rows = _table_rows(markdown)
    assert set(rows) == set(benchmark.JOBS.values())
    for label, cells in rows.items():
        assert cells[columns.index("rows checked")] == f"{RECORDS:,} = backlog x1", label
        for column in ("drain records/s", "wall records/s", "drain MB/s"):
            assert _median(cells[columns.index(column)]) > 0, (label, column)

    assert re.search(r"^\| project / plain \| [0-9.]+ \| [0-9.]+ \|$", markdown, re.M)
    assert re.search(r"^\| project / ceiling \| [0-9.]+ \| [0-9.]+ \|$", markdown, re.M)
    assert (tmp_path / "ingest-logs" / "rep1-plain.log").exists()
    assert (tmp_path / "ingest-logs" / "rep1-project-summary.json").exists()
