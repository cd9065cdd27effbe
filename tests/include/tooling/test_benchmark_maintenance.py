"""The maintenance part's report (pure): the run path is :mod:`include.tooling.benchmark_maintenance` on real
Kafka, Spark and Delta, whose pieces the maintenance integration tests cover."""

from __future__ import annotations

from include.tooling import benchmark
from include.tooling.benchmark_maintenance import (
    MaintenanceParams,
    MaintenanceReport,
    render_maintenance_markdown,
)


def test_report_gives_files_side_by_side_and_read_ratios():
    report = MaintenanceReport(MaintenanceParams(runs=20, every_runs=10, no_data_every=5))
    report.files = {"maintained": {10: dict(bronze=3, silver=1, quarantine=1, ledger=1),
                                   20: dict(bronze=4, silver=2, quarantine=2, ledger=1)},
                    "never": {10: dict(bronze=48, silver=16, quarantine=8, ledger=10),
                              20: dict(bronze=96, silver=32, quarantine=16, ledger=20)}}  # fmt: skip
    report.peak_files = {"maintained": dict(bronze=40, silver=2, quarantine=9, ledger=10),
                          "never": dict(bronze=96, silver=32, quarantine=16, ledger=20)}
    report.reads_ms = {"maintained": {"bronze position (read_progress)": 4.0},
                       "never": {"bronze position (read_progress)": 10.0}}  # fmt: skip
    report.ledger_read_ms = {"maintained": {10: 2.0, 20: 2.1}, "never": {10: 5.0, 20: 9.5}}
    report.maintenance_s, report.run_s = [12.0, 14.0], {"maintained": [5.0, 6.0, 7.0], "never": [5.0, 5.0, 5.0]}
    report.checks_ok = 32
    text = render_maintenance_markdown(report)
    assert "for 20 runs (16 with 500 new records" in text and "(32 runs checked, every check passed)" in text
    assert "| 20 | 4 / 96 | 2 / 32 | 2 / 16 | 1 / 20 |" in text
    assert "| most after any run | 40 / 96 | 2 / 32 | 9 / 16 | 10 / 20 |" in text
    assert "| bronze position (read_progress) | 4.0 | 10.0 | 2.50 |" in text
    assert "| 20 | 2.1 | 9.5 |" in text
    assert "Maintenance steps: 2, 13.0 s each" in text and "maintained 6.0, never 5.0" in text


def test_maintenance_is_a_part_but_not_a_default_one():
    assert "maintenance" in benchmark.PARTS and "maintenance" not in benchmark.DEFAULT_PARTS
    args = benchmark.build_arg_parser().parse_args(["--parts", "maintenance", "--maintenance-runs", "20",
                                                    "--maintenance-every", "5"])  # fmt: skip
    assert args.parts == ("maintenance",) and (args.maintenance_runs, args.maintenance_every) == (20, 5)
