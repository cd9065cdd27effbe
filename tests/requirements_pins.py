"""The versions requirements.txt and constraints.txt pin, read from their ``name==X`` lines.

A test module is not a library: tests/test_compose.py and the compose stack's test
(tests/compose_stack/test_compose_stack.py) both import :func:`requirement_pin` from here.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def requirement_pin(name: str, path: Path = ROOT / "requirements.txt") -> str:
    """The exact version ``name==X`` pinned in a requirements/constraints file."""
    wanted = re.sub(r"[-_.]+", "-", name).lower()
    for line in path.read_text().splitlines():
        match = re.match(r"^([A-Za-z0-9_.\-]+)==([^\s;#]+)", line.strip())
        if match and re.sub(r"[-_.]+", "-", match.group(1)).lower() == wanted:
            return match.group(2)
    raise AssertionError(f"{path.name} pins no {name}")
