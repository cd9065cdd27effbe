"""The suite's CPU report (tests/cpu_report.py): what a test's process tree used, and the summary."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from tests import cpu_report

# Burns about ``seconds`` of CPU, then (for a live child) says so and sleeps.
_BURN = "import sys, time\nend = time.process_time() + float(sys.argv[1])\nwhile time.process_time() < end: pass\n"


def _burn(seconds: float, then_sleep: float = 0.0) -> subprocess.Popen:
    code = _BURN + ("print('burnt', flush=True)\ntime.sleep(float(sys.argv[2]))\n" if then_sleep else "")
    return subprocess.Popen([sys.executable, "-c", code, str(seconds), str(then_sleep)], stdout=subprocess.PIPE,
                            text=True)  # fmt: skip


# The tree under test, a process of its own: a child it ran to the end (reaped: in its cutime), then a shell
# whose child burns and stays alive (a live grandchild), then "ready". Measured from the test process instead,
# the delta also held whatever the test worker's other children (a JVM, a broker) did or took away meanwhile.
_TREE = (
    "import subprocess, sys, time\n"
    "subprocess.run([sys.executable, '-c', sys.argv[1], '0.6'], check=True)\n"
    "live = sys.argv[1] + \"print('burnt', flush=True)\\nimport time; time.sleep(30)\\n\"\n"
    "shell = subprocess.Popen(['/bin/sh', '-c', '\"$0\" -c \"$1\" 0.6', sys.executable, live],"
    " stdout=subprocess.PIPE, text=True)\n"
    "assert shell.stdout.readline().strip() == 'burnt'\n"
    "print('ready', flush=True)\n"
    "time.sleep(30)\n"
)


def test_a_reaped_child_and_a_live_grandchild_count_and_an_unrelated_process_does_not():
    tree = subprocess.Popen([sys.executable, "-c", _TREE, _BURN], stdout=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    unrelated = _burn(0.6, then_sleep=30)  # the test's child, not the tree's
    try:
        assert tree.stdout.readline().strip() == "ready"
        assert unrelated.stdout.readline().strip() == "burnt"
        # 0.6 s reaped + 0.6 s live (1.1: clock ticks round down), plus the interpreters' start; without either part
        # it is under 0.7 s, with the unrelated 0.6 s over 1.8 s
        assert 1.1 <= cpu_report.tree_cpu_s(tree.pid) < 1.75
    finally:
        os.killpg(tree.pid, 9)
        unrelated.kill()
        for p in (tree, unrelated):
            p.wait()


def _stat(pid: int, name: str, ppid: int, ticks: tuple[int, int, int, int]) -> str:
    """A /proc/<pid>/stat line: fields 14-17 are utime, stime, cutime, cstime in clock ticks."""
    return f"{pid} ({name}) S {ppid} " + " ".join(["0"] * 9) + " " + " ".join(map(str, ticks)) + " 20 0 1 0\n"


def test_the_tree_is_read_from_proc_whatever_the_command_names_hold(tmp_path: Path):
    tick = os.sysconf("SC_CLK_TCK")
    tree = {10: ("java", 1, (tick, tick, 0, 0)),  # the root: 2 s
            11: ("a (b) ) c", 10, (tick, 0, tick, tick)),  # its child, with a name that looks like fields: 3 s
            12: ("x", 11, (tick // 2, 0, 0, 0)),  # a grandchild: 0.5 s
            13: ("other", 1, (5 * tick, 0, 0, 0))}  # fmt: skip
    for pid, (name, ppid, ticks) in tree.items():
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(_stat(pid, name, ppid, ticks))
    (tmp_path / "self").mkdir()  # not a process folder
    (tmp_path / "14").mkdir()  # a process that ended while /proc was read: no stat file
    assert cpu_report.tree_cpu_s(10, proc=tmp_path) == 5.5
    assert cpu_report.tree_cpu_s(11, proc=tmp_path) == 3.5
    assert cpu_report.tree_cpu_s(4242, proc=tmp_path) == 0.0


def test_the_summary_sums_by_file_and_lists_the_costliest_tests_first(tmp_path: Path):
    lines = {"gw0": [("tests/a.py::t1", 10.0, 20.0), ("tests/b.py::t1", 1.5, 2.0)],
             "gw1": [("tests/a.py::t2", 30.0, 31.0), ("tests/c.py::t1", 0.5, 9.0)]}  # fmt: skip
    for worker, rows in lines.items():
        (tmp_path / f"{worker}.jsonl").write_text(
            "".join(json.dumps({"test": t, "cpu_s": c, "wall_s": w}) + "\n" for t, c, w in rows))
    (tmp_path / "report.md").write_text("an older report, not a record")

    records = cpu_report.read_records(tmp_path)
    assert len(records) == 4
    report = cpu_report.summarize(records, top=2)
    assert "Tests: 4; CPU seen in the workers' process trees: 42 s." in report
    files = [line for line in report.splitlines() if line.startswith("| `tests/") and line.count("|") == 6]
    assert files == ["| `tests/a.py` | 2 | 40 | 95% | 51 |", "| `tests/b.py` | 1 | 2 | 4% | 2 |"]
    tests = [line for line in report.splitlines() if line.startswith("| `tests/") and line.count("|") == 4]
    assert tests == ["| `tests/a.py::t2` | 30.0 | 31.0 |", "| `tests/a.py::t1` | 10.0 | 20.0 |"]


def test_a_new_report_drops_an_earlier_runs_lines_and_a_worker_appends_one_line_per_test(tmp_path: Path):
    (tmp_path / "gw0.jsonl").write_text(json.dumps({"test": "old", "cpu_s": 1, "wall_s": 1}) + "\n")
    cpu_report.CpuReport(tmp_path, controller=True)
    assert cpu_report.read_records(tmp_path) == []

    class Item:
        nodeid = "tests/x.py::t"

    plugin = cpu_report.CpuReport(tmp_path, controller=False)
    wrapper = plugin.pytest_runtest_protocol(Item(), None)
    next(wrapper)
    started = time.process_time()
    while time.process_time() - started < 0.3:
        pass
    try:
        next(wrapper)
    except StopIteration:
        pass
    (record,) = cpu_report.read_records(tmp_path)
    assert record["test"] == "tests/x.py::t" and record["cpu_s"] >= 0.25 and record["wall_s"] >= 0.25


def test_the_machines_busy_time_counts_every_state_but_idle_and_io_wait(tmp_path: Path):
    stat = tmp_path / "stat"
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal guest guest_nice
    stat.write_text(f"cpu  {tick} {tick} {tick} {50 * tick} {9 * tick} {tick} {tick} {tick} 0 0\ncpu0 1 2 3\n")
    assert cpu_report.machine_cpu_s(stat) == 6.0
    assert cpu_report.machine_cpu_s() > 0  # this machine's own
