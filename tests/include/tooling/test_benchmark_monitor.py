"""``make bench``'s monitoring part on small ledgers: every read timed, the table rendered from the figures."""

from __future__ import annotations

from include.monitoring import monitor
from include.tooling.benchmark_monitor import READS, MonitorParams, render_monitor_markdown, run_monitor_bench


def test_each_ledger_is_built_to_its_size_and_each_read_timed(tmp_path, monkeypatch):
    monkeypatch.setattr(monitor, "HISTORY_RUNS", 4)
    report = run_monitor_bench(tmp_path, MonitorParams(sizes=(3, 9), repetitions=1, rows_per_append=2))
    assert sorted(report.read_ms) == [3, 9]
    assert all(set(reads) == set(READS) and all(ms > 0 for ms in reads.values()) for reads in report.read_ms.values())
    text = render_monitor_markdown(report)
    assert "| read | 3 runs | 9 runs | 9 / 3 runs |" in text
    whole = report.read_ms[9]["whole ledger"] / report.read_ms[3]["whole ledger"]
    assert f"| whole ledger | {report.read_ms[3]['whole ledger']:.1f} | " in text and f"{whole:.2f}x" in text
