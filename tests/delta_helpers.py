"""What the tests do to a Delta table's files that no writer would: age its log, as a quiet month would."""

from __future__ import annotations

import os
import time
from pathlib import Path

DAY = 86400


def age_log(table: Path, days: int) -> None:
    """Make every log file of the table in the folder ``table`` ``days`` older, oldest version first, each a
    second after the one before (Delta's cleanup adjusts equal times and would then keep everything)."""
    log = table / "_delta_log"
    files = sorted((f for f in log.iterdir() if f.name[:20].isdigit()), key=lambda f: (int(f.name[:20]), f.name))
    base = time.time() - days * DAY
    for i, f in enumerate(files):
        os.utime(f, (base + i, base + i))
