"""What the tests check about processes: that nothing of a test's runs is left running."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from include.spark import cluster_state


def wait_for_failpoint(proc, log: Path, failpoint: str, timeout_s: float = 300) -> None:
    """Return once the job's ``log`` says its failpoint ``failpoint`` (e.g. ``stop-before-bronze-commit:1``)
    fired; asserts meanwhile that ``proc`` (a ``Popen`` or a forked command) still runs, within ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while f"failpoint {failpoint}" not in log.read_text(errors="replace"):
        assert proc.poll() is None and time.monotonic() < deadline, log.read_text(errors="replace")[-4000:]
        time.sleep(0.2)


def processes_naming(folder: str | Path) -> list[int]:
    """Pids of live processes (zombies aside) whose command line names ``folder`` or a path inside it.

    A job's driver is started with its run folder's files on its command line,
    so a test asserts with this that none of its runs' processes outlived it.
    """
    # The folder itself or a path inside it; not a sibling whose name it begins (run-1 vs run-10).
    needle = re.compile(re.escape(str(Path(folder).resolve()).encode()) + rb"(?:/|\0|$)")
    found = []
    for stat in cluster_state.process_stats():
        if stat.state == "Z" or stat.pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{stat.pid}/cmdline").read_bytes()
        except OSError:
            continue
        if needle.search(cmdline):
            found.append(stat.pid)
    return sorted(found)


def java_processes_in(folder: str | Path, main_class: bytes) -> list[int]:
    """Pids of the ``java`` processes running ``main_class`` whose working directory is inside ``folder``: a
    cluster's executors, each run in its worker's (or container's) own folder. The shell a launcher wraps
    the JVM in, which names the class too, is left out."""
    found = []
    for pid in (int(p) for p in os.listdir("/proc") if p.isdigit()):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:
            continue
        java = cmdline.split(b"\0", 1)[0].endswith(b"java")
        if java and main_class in cmdline and cwd.startswith(str(folder)):
            found.append(pid)
    return sorted(found)
