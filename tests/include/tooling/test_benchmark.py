"""The benchmark report's header (no timing here: speed lives in ``make bench``)."""

from __future__ import annotations

import itertools
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
