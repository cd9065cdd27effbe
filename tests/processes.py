"""What the tests check about processes: that nothing of a test's runs is left running."""

from __future__ import annotations

import os
import re
from pathlib import Path

from include.spark import spark_cluster


def processes_naming(folder: str | Path) -> list[int]:
    """Pids of live processes (zombies aside) whose command line names ``folder`` or a path inside it.

    A job's driver is started with its run folder's files on its command line,
    so a test asserts with this that none of its runs' processes outlived it.
    """
    # The folder itself or a path inside it; not a sibling whose name it begins (run-1 vs run-10).
    needle = re.compile(re.escape(str(Path(folder).resolve()).encode()) + rb"(?:/|\0|$)")
    found = []
    for stat in spark_cluster.process_stats():
        if stat.state == "Z" or stat.pid == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{stat.pid}/cmdline").read_bytes()
        except OSError:
            continue
        if needle.search(cmdline):
            found.append(stat.pid)
    return sorted(found)
