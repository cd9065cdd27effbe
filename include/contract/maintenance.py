"""When a pipeline's tables are due for maintenance, from the run ledger (pure).

Maintenance (compaction, VACUUM, a log checkpoint) has two parts, each due on
its own:

- ``tables``: bronze, silver and quarantine, done by Spark as the last step of
  a run's application (``spark_jobs/maintain_tables.py``). Only runs that start
  Spark change these tables, so a run with no new records never starts a JVM
  for them: their maintenance waits for the next run that reads something.
- ``ledger``: the run ledger, done with delta-rs by ``record_run`` before it
  appends the run's row. Every run adds a row, so every run may do it.

A part is due when ``every_runs`` runs have passed since the last run that
maintained it (this run being the last of them), or when the run starts
inside the daily window and no run since the window opened maintained it.
What a run did is its ledger row's ``maintenance_json``.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, time, timedelta
from typing import Any

from include.contract.errors import MaintenanceConfigError

#: The parts of maintenance and the ledger-row keys that record each was done.
PARTS: dict[str, tuple[str, ...]] = {"tables": ("bronze", "silver", "quarantine"), "ledger": ("ledger",)}
WINDOW = re.compile(r"([01]\d|2[0-3]):([0-5]\d)-([01]\d|2[0-3]):([0-5]\d)")


@dataclass(frozen=True)
class Window:
    """A daily UTC window ``HH:MM-HH:MM``; it may run past midnight (``22:00-02:00``)."""

    start: time
    end: time

    @classmethod
    def parse(cls, text: str) -> Window:
        """The window ``text`` names; ``ValueError`` when it is not ``HH:MM-HH:MM`` with two different times."""
        m = WINDOW.fullmatch(text.strip())
        if not m:
            raise MaintenanceConfigError(f"expected HH:MM-HH:MM (UTC, 24-hour), got {text!r}")
        start, end = time(int(m[1]), int(m[2])), time(int(m[3]), int(m[4]))
        if start == end:
            raise MaintenanceConfigError(f"expected a window whose start and end differ, got {text!r}")
        return cls(start, end)

    def opened(self, now: datetime) -> datetime | None:
        """When the window holding ``now`` opened (aware, like ``now``); ``None`` when ``now`` is outside it."""
        today = now.replace(hour=self.start.hour, minute=self.start.minute, second=0, microsecond=0)
        for opened in (today, today - timedelta(days=1)):
            length = datetime.combine(opened.date(), self.end) - datetime.combine(opened.date(), self.start)
            if length <= timedelta(0):
                length += timedelta(days=1)
            if opened <= now < opened + length:
                return opened
        return None

    def __str__(self) -> str:
        return f"{self.start:%H:%M}-{self.end:%H:%M}"


#: The run ledger's columns :func:`due` reads.
LEDGER_COLUMNS = ("run_id", "finished_at", "maintenance_json")


def maintained(row: Mapping[str, Any], part: str) -> bool:
    """Whether the ledger ``row`` says its run maintained ``part`` (every table of it it found)."""
    done = (row.get("maintenance_json") or {}).get("tables") or {}
    return any(name in done and "error" not in done[name] for name in PARTS[part])


def due(
    part: str,
    rows: Iterable[Mapping[str, Any]],
    *,
    every_runs: int | None,
    window: Window | None,
    now: datetime,
) -> str | None:
    """Why ``part`` is due in the run starting ``now``, or ``None`` when it is not.

    ``rows`` are the ledger's rows, newest first; at least ``every_runs - 1``
    of them, or all since the window opened, whichever reaches further back.
    """
    if part not in PARTS:
        raise MaintenanceConfigError(f"unknown maintenance part {part!r}; expected one of {', '.join(PARTS)}")
    since = 0
    last: Mapping[str, Any] | None = None
    newest = list(rows)
    for row in newest:
        if maintained(row, part):
            last = row
            break
        since += 1
    if every_runs is not None and since + 1 >= every_runs:
        where = f"since run {last['run_id']!r}" if last else "and it was never done"
        return f"every_runs {every_runs}: this is run {since + 1} {where}"
    opened = window.opened(now) if window is not None else None
    if opened is not None:
        done_after = last is not None and (finished := _finished(last)) is not None and finished >= opened
        if not done_after:
            return f"daily_window {window} (UTC) opened at {opened:%Y-%m-%d %H:%M} and this part was not done since"
    return None


def _finished(row: Mapping[str, Any]) -> datetime | None:
    value = row.get("finished_at")
    return value if isinstance(value, datetime) else None
