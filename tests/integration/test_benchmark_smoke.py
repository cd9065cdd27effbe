"""Smoke test of ``python -m include.tooling.benchmark`` on a tiny backlog (no timing assertions).

Runs the whole benchmark (consumer-perf-test, the plain job and the project's
job through spark-submit) against the session broker, once.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from include import settings
from include.tooling import benchmark

pytestmark = [pytest.mark.integration, pytest.mark.full]

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


def test_benchmark_measures_all_three_jobs(bootstrap: str, tmp_path: Path, capsys, monkeypatch) -> None:
    # The jobs' logs go under KDE_VAR_DIR, never beside the report (which lives in docs/).
    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "var")
    output = tmp_path / "ingest.md"
    code = benchmark.main([
        "--bootstrap-servers", bootstrap, "--parts", "throughput", "--records", str(RECORDS), "--partitions", "2",
        "--repetitions", "1", "--output", str(output), "--work-dir", str(tmp_path / "work"),
    ])  # fmt: skip
    assert code == 0

    markdown = output.read_text()
    assert capsys.readouterr().out == markdown
    assert "nproc" in markdown and "CPU" in markdown
    assert re.search(r"^- speed reference: [0-9.]+s at the start, [0-9.]+s at the end, for a fixed single-core", markdown, re.M)
    assert "## Throughput" in markdown and "## Fixed cost" not in markdown

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
    logs = tmp_path / "var" / "benchmark" / "ingest-logs"
    assert (logs / "rep1-plain.log").exists()
    assert (logs / "rep1-project-summary.json").exists()


def _section_rows(markdown: str, heading: str) -> list[list[str]]:
    """Data rows of the first table under ``heading`` (cells stripped)."""
    section = markdown.split(heading, 1)[1].split("\n## ", 1)[0]
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    # The first table only: a section can hold more (a side-by-side part adds the cold batch and the tasks).
    table = list(itertools.takewhile(lambda line: line.startswith("|"), lines[start:]))
    return [[c.strip() for c in line.strip().strip("|").split("|")] for line in table[2:]]


# Five real DAG runs, four of them on a transient standalone cluster (master, worker, executor, driver: four
# cold JVMs each): beside the other workers on a slow machine they can outlast the suite's default of 600 s.
@pytest.mark.timeout(1200)
def test_benchmark_measures_dag_runs(bootstrap: str, airflow_home: Path, tmp_path: Path) -> None:
    """The DAG-run half on a tiny scale: fixed cost (no cluster without data) and one history level."""
    output = tmp_path / "runs.md"
    code = benchmark.main([
        "--bootstrap-servers", bootstrap, "--parts", "runs", "--partitions", "2", "--small-records", "40",
        "--history", "4", "--run-repetitions", "1", "--airflow-home", str(airflow_home),
        "--output", str(output), "--work-dir", str(tmp_path / "work"),
    ])  # fmt: skip
    assert code == 0
    markdown = output.read_text()
    assert "## Throughput" not in markdown

    fixed = {row[0]: row for row in _section_rows(markdown, "## Fixed cost of a DAG run")}
    assert set(fixed) == {"first run (creates the table)", "no new records", "40 new records"}
    assert fixed["no new records"][1] == "no"
    assert fixed["40 new records"][1] == "yes"
    for row in fixed.values():
        dags_test_s, end_to_end_s, own_s = float(row[2]), float(row[3]), float(row[8])
        assert 0 < end_to_end_s < dags_test_s, row
        assert 0 < own_s < end_to_end_s, row  # read from the execution API's log lines of every task
    assert float(fixed["40 new records"][4]) > 0  # start_cluster
    assert float(fixed["no new records"][4]) == 0  # skipped, never started

    history = _section_rows(markdown, "## Cost of the checks as history grows")
    commits = [row[0] for row in history]
    # The fixed-cost small run (after the first run's batch commit and its one-time retention property
    # commit), then the run after history was built to 4.
    assert commits[0] == "2" and int(commits[1]) >= 4, commits
    files = [int(row[-1].replace(",", "")) for row in history]  # bronze data files before each run
    assert 0 < files[0] < files[1], files
    assert re.search(rf"Checks total at {commits[1]} commits / at {commits[0]} commits: \*\*[0-9.]+x\*\*", markdown)


def test_benchmark_micro_batches_part(bootstrap: str, tmp_path: Path) -> None:
    output = tmp_path / "batches.md"
    code = benchmark.main([
        "--bootstrap-servers", bootstrap, "--parts", "batches", "--batch-records", "100", "--batch-count", "4",
        "--partitions", "2", "--repetitions", "1", "--output", str(output), "--work-dir", str(tmp_path / "work"),
    ])  # fmt: skip
    assert code == 0
    markdown = output.read_text()
    assert "## Micro-batches" in markdown and "## Throughput" not in markdown
    rows = {
        cells[0]: cells
        for line in markdown.splitlines()
        if line.startswith("| p") and (cells := [c.strip() for c in line.strip().strip("|").split("|")])
    }
    assert set(rows) == {"plain", "project"}
    # 400 records of 2 partitions, 100 per trigger: 4 batches, the first one not counted as warm.
    assert rows["plain"][1] == "3" and rows["project"][1] == "3"
    assert _median(rows["project"][2]) > 0 and float(rows["project"][5]) >= 0


@pytest.mark.parametrize(("part", "size", "heading", "modes", "ratio", "same"), [
    ("formats", "--format-records", "## Value formats", {"json", "avro", "protobuf"}, "Protobuf / Avro",
     "Every format gave"),
    ("cdc", "--cdc-changes", "## Change data capture", {"upsert", "debezium"}, "Debezium / upsert", "Both gave"),
    ("routes", "--route-records", "## Routes", {"routed", "single"}, "Routed / single-table",
     "its kind's own pipeline:"),
])  # fmt: skip
def test_benchmark_measures_two_transforms_side_by_side(bootstrap: str, spark, tmp_path: Path, part, size,
                                                        heading, modes, ratio, same) -> None:  # fmt: skip
    """The formats part (JSON, Avro and Protobuf), the cdc part (plain upserts against Debezium change events) and the
    routes part (one routed transform against three single-table ones) on a tiny scale: both sides transformed to the same silver, nothing quarantined, the ratio reported (in the
    session the suite shares, which it must leave running)."""
    output = tmp_path / f"{part}.md"
    code = benchmark.main([
        "--bootstrap-servers", bootstrap, "--parts", part, size, "1000", "--repetitions", "1",
        "--output", str(output), "--work-dir", str(tmp_path / "work"),
    ])  # fmt: skip
    assert code == 0
    markdown = output.read_text()
    rows = {r[0]: r for r in _section_rows(markdown, heading)}
    assert set(rows) == modes
    assert all(_median(r[1]) > 0 and r[4] == "0" for r in rows.values()), rows
    assert re.search(rf"^{re.escape(ratio)} records/s: \*\*[0-9.]+\*\*\.$", markdown, re.M)
    assert re.search(rf"{same} the same [0-9,]+ silver rows", markdown)
    assert spark.range(3).count() == 3


@pytest.mark.timeout(1200)
def test_benchmark_store_part_runs_one_pipeline_on_disk_and_one_on_the_object_store(
    bootstrap: str, airflow_home: Path, tmp_path: Path
) -> None:
    output = tmp_path / "store.md"
    code = benchmark.main([
        "--bootstrap-servers", bootstrap, "--parts", "store", "--small-records", "60", "--run-repetitions", "1",
        "--airflow-home", str(airflow_home), "--output", str(output), "--work-dir", str(tmp_path / "work"),
    ])  # fmt: skip
    assert code == 0
    markdown = output.read_text()
    (row,) = _section_rows(markdown, "## The lakehouse on this disk and on an object store")
    assert row[0] == "60" and float(row[1]) > 0 and float(row[2]) > 0, row
    assert re.search(r"on a local S3-compatible server / on this disk, first task to last \| [0-9.]+ s / [0-9.]+ s: "
                     r"\*\*[0-9.]+x\*\*", markdown)  # fmt: skip
    # Each pipeline's tables are where its label says: one lakehouse folder here, one bucket on the server.
    lakes = sorted(p.relative_to(tmp_path / "work" / "store") for p in (tmp_path / "work" / "store").glob("*/lake/*"))
    assert [str(p).split("/")[0] for p in lakes] == ["pipeline0"], lakes
    buckets = list((tmp_path / "work" / "store" / "s3" / "data").glob("bench-*/lake/*/bronze/_delta_log"))
    assert len(buckets) == 1, buckets
