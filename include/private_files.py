"""Files only their owner may read: a run's credentials and its cluster's secret.

Below every layer of ``include/``: the transient Spark cluster writes its secret
and the orchestration writes a job's credentials the same way, so neither
reaches into the other for it.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_private(path: Path, text: str) -> Path:
    """Write ``text`` to ``path``, readable by its owner only; returns ``path``.

    Created exclusively and without following a link: a file or link left in
    its place (a killed run's, a failed earlier start's) is removed first, never
    written through, since it could point elsewhere or keep a mode others can read.
    """
    path.unlink(missing_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path
