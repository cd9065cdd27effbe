"""The benchmark report's header (no timing here: speed lives in ``make bench``)."""

from __future__ import annotations

from pathlib import Path

from include.tooling import benchmark


def _report(**kwargs) -> benchmark.BenchmarkReport:
    params = benchmark.BenchmarkParams(output=Path("bench.md"))
    return benchmark.BenchmarkReport(params, "host: nproc 2", "t", "given, b:9092", 0.0, **kwargs)


def test_the_header_carries_the_speed_reference_measured_at_the_start_and_the_end():
    text = benchmark.render_markdown(_report(speed_reference_s=0.3367, speed_reference_after_s=0.291))
    line = next(line for line in text.splitlines() if line.startswith("- speed reference:"))
    assert line.startswith("- speed reference: 0.34s at the start, 0.29s at the end, for a fixed single-core Python")


def test_a_report_that_ended_early_gives_the_start_only():
    text = benchmark.render_markdown(_report(speed_reference_s=0.3367))
    assert "- speed reference: 0.34s at the start, for a fixed" in text


def test_a_report_without_a_reference_says_nothing_of_one():
    assert "speed reference" not in benchmark.render_markdown(_report())


def test_the_reference_is_a_positive_number_of_seconds():
    seconds = benchmark.speed_reference(loops=20_000, repeats=3)
    assert isinstance(seconds, float) and seconds > 0
