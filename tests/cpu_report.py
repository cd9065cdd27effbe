"""Where the test suite's CPU goes: each test's CPU seconds over its worker's whole process tree.

``make test-cpu`` runs the suite as ``make test`` does with
``KDE_TEST_CPU_REPORT=<folder>`` set; each xdist worker then appends one JSON
line per test to ``<folder>/<worker>.jsonl`` and the controller prints the
files and tests that cost most, and writes them to ``<folder>/report.md``.

Why CPU and not ``--durations``: on a 2-core machine the suite is CPU-bound,
so its length is about its CPU divided by two, while a test's wall time mostly
says how busy the other workers were (and the workers beside the fault soak's
slice run at a lower priority). A test's CPU here is that of its worker and
every live descendant (a broker, a Spark driver, a forked ``dags test``, the
worker's shared SparkSession), each with the CPU of the children it has
reaped, before and after the test (set-up and teardown included: a session
fixture's start is charged to the first test that asks for it). What a
process that has left the tree used (a daemon started with a double fork) is
not seen, nor the broker the controller shares with the workers. Each figure
includes the measurement's own walk of ``/proc`` (about 10 ms a test on the
2-core machine), which only a unit test's figure notices.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

import pytest

#: The folder of the report; unset, nothing is measured.
REPORT_ENV = "KDE_TEST_CPU_REPORT"
_TICK = os.sysconf("SC_CLK_TCK")


def machine_cpu_s(stat: Path = Path("/proc/stat")) -> float:
    """CPU seconds the whole machine has been busy since boot (every state but idle and I/O wait)."""
    fields = stat.read_text().split("\n", 1)[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(f) for f in fields[:8])
    return (user + nice + system + irq + softirq + steal) / _TICK


def tree_cpu_s(root_pid: int, proc: Path = Path("/proc")) -> float:
    """CPU seconds (user + system) of ``root_pid`` and its live descendants, each with its reaped children's."""
    children: dict[int, list[int]] = defaultdict(list)
    cpu: dict[int, float] = {}
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:  # the process ended while the folder was read
            continue
        # After the command name (which may hold spaces and parentheses): state, ppid, ..., then
        # utime, stime, cutime, cstime as fields 14-17 of proc(5).
        fields = stat[stat.rfind(")") + 2 :].split()
        children[int(fields[1])].append(int(entry.name))
        cpu[int(entry.name)] = sum(int(x) for x in fields[11:15]) / _TICK
    total, stack = 0.0, [root_pid]
    while stack:
        pid = stack.pop()
        total += cpu.get(pid, 0.0)
        stack.extend(children.get(pid, ()))
    return total


def read_records(folder: Path) -> list[dict]:
    """Every test's line from every worker's file in ``folder``."""
    return [json.loads(line) for path in sorted(folder.glob("*.jsonl")) for line in path.read_text().splitlines()
            if line.strip()]  # fmt: skip


def summarize(records: Iterable[dict], top: int = 20) -> str:
    """Markdown: CPU and wall seconds by test file, then the ``top`` tests, most CPU first."""
    records = list(records)
    by_file: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0])
    for r in records:
        row = by_file[r["test"].split("::")[0]]
        row[0] += r["cpu_s"]
        row[1] += r["wall_s"]
        row[2] += 1
    total = sum(r["cpu_s"] for r in records)
    lines = [f"Tests: {len(records):,}; CPU seen in the workers' process trees: {total:,.0f} s.", "",
             "| file | tests | CPU s | share | wall s (sum) |", "| --- | --- | --- | --- | --- |"]  # fmt: skip
    for name, (cpu_s, wall_s, n) in sorted(by_file.items(), key=lambda kv: -kv[1][0])[:top]:
        share = cpu_s / total if total else 0.0
        lines.append(f"| `{name}` | {n:,} | {cpu_s:,.0f} | {share:.0%} | {wall_s:,.0f} |")
    lines += ["", "| test | CPU s | wall s |", "| --- | --- | --- |"]
    for r in sorted(records, key=lambda r: -r["cpu_s"])[:top]:
        lines.append(f"| `{r['test']}` | {r['cpu_s']:,.1f} | {r['wall_s']:,.1f} |")
    return "\n".join(lines)


class CpuReport:
    """The pytest plugin: registered by tests/conftest.py when :data:`REPORT_ENV` is set."""

    def __init__(self, folder: Path, *, controller: bool) -> None:
        self.folder, self.controller = folder, controller
        self.worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
        if controller:  # a new report: the lines of an earlier run would be counted again
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("*.jsonl"):
                old.unlink()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_protocol(self, item, nextitem):
        cpu0, wall0 = tree_cpu_s(os.getpid()), time.monotonic()
        yield
        cpu1, wall1 = tree_cpu_s(os.getpid()), time.monotonic()
        self.folder.mkdir(parents=True, exist_ok=True)
        with (self.folder / f"{self.worker}.jsonl").open("a") as out:
            out.write(json.dumps({"test": item.nodeid, "cpu_s": round(cpu1 - cpu0, 2),
                                  "wall_s": round(wall1 - wall0, 2)}) + "\n")  # fmt: skip

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if not self.controller:
            return
        report = summarize(read_records(self.folder))
        (self.folder / "report.md").write_text(report + "\n")
        terminalreporter.write_sep("=", f"CPU by test ({self.folder / 'report.md'})")
        terminalreporter.write_line(report)
