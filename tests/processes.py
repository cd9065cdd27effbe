"""What the tests check about processes: that nothing of a test's runs is left running."""

from __future__ import annotations

import os
import re
from pathlib import Path


def processes_naming(folder: str | Path) -> list[int]:
    """Pids of live processes (zombies aside) whose command line names ``folder`` or a path inside it.

    A job's driver is started with its run folder's files on its command line,
    so a test asserts with this that none of its runs' processes outlived it.
    """
    # The folder itself or a path inside it; not a sibling whose name it begins (run-1 vs run-10).
    needle = re.compile(re.escape(str(Path(folder).resolve()).encode()) + rb"(?:/|\0|$)")
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            if Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z":
                continue
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if needle.search(cmdline):
            found.append(int(entry))
    return sorted(found)
