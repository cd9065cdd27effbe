"""The benchmark report's header (no timing here: speed lives in ``make bench``)."""

from __future__ import annotations

import itertools
import os
import re
from pathlib import Path

from include.tooling import benchmark


def _report(**kwargs) -> benchmark.BenchmarkReport:
    params = benchmark.BenchmarkParams(output=Path("bench.md"))
    return benchmark.BenchmarkReport(params, "host: nproc 2", "t", "given, b:9092", 0.0, **kwargs)


def test_the_header_carries_the_speed_reference_measured_at_the_start_and_the_end():
    text = benchmark.render_markdown(_report(speed_reference_s=(0.3367, 0.291)))
    line = next(line for line in text.splitlines() if line.startswith("- speed reference:"))
    assert line.startswith("- speed reference: 0.34s at the start, 0.29s at the end, for a fixed single-core Python")


def test_a_report_without_a_reference_says_nothing_of_one():
    assert "speed reference" not in benchmark.render_markdown(_report())


def test_the_reference_is_the_median_of_the_timed_loops_after_an_untimed_one(monkeypatch):
    # A clock read before and after each timed call: loops of 4, 1 and 2 ms take a median of 2 ms.
    ticks = itertools.chain.from_iterable((0.0, s) for s in (0.004, 0.001, 0.002))
    monkeypatch.setattr(benchmark.time, "perf_counter", lambda: next(ticks))
    assert benchmark.speed_reference(loops=10, repeats=3) == 0.002


def test_the_header_names_the_commit_and_how_the_report_was_written_and_no_date():
    text = benchmark.render_markdown(_report(commit="abc1234-dirty", command="make bench"))
    assert "- commit: abc1234-dirty; written by `make bench`" in text.splitlines()
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b", text), "a dated report"


def test_the_commit_is_the_checkouts_and_says_when_tracked_files_differ(tmp_path: Path):
    import subprocess

    def git(*args: str) -> str:
        return subprocess.run(["git", "-C", str(tmp_path), *args], capture_output=True, text=True,
                              check=True).stdout.strip()  # fmt: skip

    git("init", "-q")
    (tmp_path / "f").write_text("1")
    git("add", "f")
    git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "one")
    head = git("rev-parse", "--short", "HEAD")
    assert benchmark.checkout_commit(tmp_path) == head
    (tmp_path / "f").write_text("2")
    assert benchmark.checkout_commit(tmp_path) == f"{head}-dirty"
    assert benchmark.checkout_commit(tmp_path / "not-a-repo") == "unknown"


def test_the_summary_is_copied_between_the_markers_and_nothing_else_of_the_page_changes():
    page = "# Performance\n\ntext before\n<!-- bench:begin -->\nold table\n<!-- bench:end -->\ntext after\n"
    updated = benchmark.with_summary(page, ["| figure | value |", "|---|---|", "| x | 1 |"], "benchmarks/report.md")
    assert updated == ("# Performance\n\ntext before\n<!-- bench:begin -->\n| figure | value |\n|---|---|\n| x | 1 |\n"
                       "\nThe whole report: [benchmarks/report.md](benchmarks/report.md).\n<!-- bench:end -->\n"
                       "text after\n")  # fmt: skip
    assert benchmark.with_summary(updated, ["| y | 2 |"], "r.md").count("<!-- bench:begin -->") == 1
    import pytest

    with pytest.raises(benchmark.BenchmarkError, match="expected the lines"):
        benchmark.with_summary("no markers", ["x"], "r.md")


def test_the_summary_gives_the_side_by_side_figures_and_the_crossover_without_a_date():
    from dataclasses import replace

    from tests.include.tooling.benchmark_timings import dag_run_timing

    cold = {"batch_id": 0, "skipped_replay": False, "duration_s": 6.25,
            "phases": {"read": 0.5, "decode": 2.0, "silver_write": 1.5}}  # fmt: skip
    silver = [replace(dag_run_timing("pipeline defaults 1000", 1, {"ingest": 20.0}, None), transform_batches=(cold,)),
              dag_run_timing("cluster forced (local_max_records: 0) 1000", 1, {"ingest": 31.0}, None)]
    crossover = [dag_run_timing("local[1] 1000", 1, {"ingest": 20.0}, None),
                 dag_run_timing("cluster, 1 worker 1000", 1, {"ingest": 30.0}, None)]
    lines = benchmark.summary_lines(_report(silver=silver, crossover=crossover, commit="abc1234",
                                            speed_reference_s=(0.12, 0.13)))  # fmt: skip
    assert lines[0] == "Commit abc1234; host: nproc 2; speed reference 0.12–0.13 s."
    text = "\n".join(lines)
    assert "| a bronze + silver DAG run of 1,000 events, pipeline defaults, first task to last | 20.0 s |" in text
    assert "cluster forced (local_max_records: 0), first task to last | 31.0 s |" in text
    assert ("| its transform's micro-batch of 1,000 events, cold (the first of the run's Spark application), reading "
            "and writing included | 6.2 s |") in text
    assert "| the same cold batch beyond reading its rows and writing silver's files | 4.2 s |" in text
    assert "local mode is faster at every backlog measured, up to 1,000 records" in text
    assert benchmark.summary_lines(_report()) == []


def test_the_demo_part_reports_its_wall_and_set_up_and_runs_without_this_checkouts_environment(monkeypatch):
    from include.tooling import benchmark_demo

    demo = benchmark_demo.DemoTiming("abc1234", wall_s=301.4, setup_s=62.2)
    assert benchmark_demo.summary_line(demo) == ("| `make demo` on a fresh clone (set-up included, as on CI's "
                                                 "clones) | 301 s, of which set-up 62 s |")  # fmt: skip
    rows = [line for line in benchmark_demo.render_demo_markdown(demo).splitlines() if line.startswith("| ")]
    assert [r.rsplit("|", 2)[1].strip() for r in rows[1:]] == ["62", "239", "301"]
    assert "abc1234" in benchmark_demo.render_demo_markdown(demo)
    report = _report(demo=demo, commit="abc1234")
    assert benchmark_demo.summary_line(demo) in benchmark.summary_lines(report)
    assert "## The demo from a fresh clone" in benchmark.render_markdown(report)
    monkeypatch.setenv("VIRTUAL_ENV", "/elsewhere/.venv")
    monkeypatch.setenv("KDE_LAKEHOUSE_ROOT", "/elsewhere/lake")
    monkeypatch.setenv("AIRFLOW_HOME", "/elsewhere/airflow")
    env = benchmark_demo.clean_environment()
    assert not {"VIRTUAL_ENV", "KDE_LAKEHOUSE_ROOT", "AIRFLOW_HOME"} & env.keys() and env["PATH"] == os.environ["PATH"]


def test_a_demo_that_hangs_without_a_word_is_killed_at_its_limit_with_what_it_started(tmp_path):
    import pytest

    from include.tooling import benchmark_demo

    pid_file = tmp_path / "child.pid"
    with pytest.raises(benchmark_demo.DemoBenchError, match=r"exited with -9 .*limit 1 s.*demo\.log"):
        # a silent demo whose child keeps the output open, as the demo's broker would
        benchmark_demo.measure_demo(tmp_path / "work", tmp_path / "demo.log", log=lambda _: None, timeout_s=1,
                                    command=("sh", "-c", f"sleep 600 & echo $! > {pid_file}; wait"))  # fmt: skip
    child = Path(f"/proc/{pid_file.read_text().strip()}/status")
    assert not child.exists() or "State:\tZ" in child.read_text(), "the demo's child outlived the timeout"
    assert not (tmp_path / "work" / "demo-clone").exists()
