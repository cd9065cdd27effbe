"""Quarantine replay: which quarantined records a ``replay_quarantine`` run takes again, and what became of them.

After the cause of a quarantine is fixed (a pipeline file that now allows a value, a schema registered,
a decimal widened), the trigger form's ``replay_quarantine`` action runs the transform's rules again over
the quarantined records: all of them, or those whose reason contains a text, whose problems name a
field, or whose Kafka timestamps fall in a window. Those that now pass go to silver under the same
ordering rules as any record (an old event never overwrites newer state); those that still fail stay,
with their new reason. Quarantine keeps every row: a replay marks what it did in columns of its own
(:data:`REPLAY_COLUMNS`).

Pure data: the Airflow side counts the selected rows before a cluster starts (``plan_request``) and the
transform job replays them (``spark_jobs/quarantine_replay.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

#: Quarantine's columns a replay adds and fills: what became of the record, by which run, when.
REPLAY_COLUMNS = (("replay_outcome", "string"), ("replay_run_id", "string"), ("replayed_at", "timestamp"))
#: ``replay_outcome`` values. ``applied``: the record now passes and changed silver (or silver held it
#: already); ``superseded``: it passes, but silver holds newer state for its key; ``skipped``: it passes
#: and is no row change (a change event such as a tombstone after a delete); ``still_failing``: it fails
#: again, and ``reason`` says why now.
OUTCOMES = ("applied", "superseded", "skipped", "still_failing")
#: Outcomes that end a record's time in quarantine: a later replay does not take it again.
DONE_OUTCOMES = ("applied", "superseded", "skipped")
#: ``userMetadata`` marker of a replay's silver commit and of its quarantine commit.
REPLAY_KIND = "kde-replay"


@dataclass(frozen=True)
class ReplaySelection:
    """Which quarantined records to replay: those not replayed to an end yet (:data:`DONE_OUTCOMES`), and
    of them those matching every filter given (none given: all of them).

    Attributes:
        reason_contains: Text the record's ``reason`` contains (case-sensitive).
        field: A field named among the record's problems (``fields``; ``value`` for the value as a whole).
        from_time: First Kafka timestamp taken (inclusive).
        to_time: Kafka timestamps before this one are taken (exclusive).
        route: The route whose quarantine is replayed, on a pipeline that routes its records (each route
            has a quarantine of its own, replayed with that route's rules into its silver table).
    """

    reason_contains: str = ""
    field: str = ""
    from_time: datetime | None = None
    to_time: datetime | None = None
    route: str = ""

    def describe(self) -> str:
        """The selection in words, for task logs and refusals."""
        parts = []
        if self.reason_contains:
            parts.append(f"reason containing {self.reason_contains!r}")
        if self.field:
            parts.append(f"a problem in field {self.field!r}")
        if self.from_time or self.to_time:
            start = self.from_time.isoformat() if self.from_time else "the first"
            end = self.to_time.isoformat() if self.to_time else "the last"
            parts.append(f"Kafka timestamps in [{start}, {end})")
        where = f" of route {self.route!r}" if self.route else ""
        return f"quarantined records{where} not replayed yet" + (
            f" with {' and '.join(parts)}" if parts else ""
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "reason_contains": self.reason_contains,
            "field": self.field,
            "from_time": self.from_time.isoformat() if self.from_time else None,
            "to_time": self.to_time.isoformat() if self.to_time else None,
            "route": self.route,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ReplaySelection:
        def when(value: Any) -> datetime | None:
            return datetime.fromisoformat(value) if value else None

        return cls(str(data.get("reason_contains") or ""), str(data.get("field") or ""),
                   when(data.get("from_time")), when(data.get("to_time")), str(data.get("route") or ""))  # fmt: skip

    def sql(self) -> str:
        """The selection as a Spark SQL condition over the quarantine table."""

        def text(value: str) -> str:
            return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"

        done = ", ".join(f"'{o}'" for o in DONE_OUTCOMES)
        parts = [f"(replay_outcome IS NULL OR replay_outcome NOT IN ({done}))"]
        if self.reason_contains:
            parts.append(f"instr(reason, {text(self.reason_contains)}) > 0")
        if self.field:
            parts.append(f"array_contains(fields, {text(self.field)})")
        if self.from_time:
            parts.append(f"timestamp >= timestamp {text(self.from_time.isoformat())}")
        if self.to_time:
            parts.append(f"timestamp < timestamp {text(self.to_time.isoformat())}")
        return " AND ".join(parts)

    def matches(self, row: dict[str, Any]) -> bool:
        """Whether a quarantine row (``reason``, ``fields``, ``timestamp`` aware or UTC, ``replay_outcome``)
        is selected: the same rule as :meth:`sql`, for the count before a cluster starts."""
        from datetime import UTC

        if row.get("replay_outcome") in DONE_OUTCOMES:
            return False
        if self.reason_contains and self.reason_contains not in (row.get("reason") or ""):
            return False
        if self.field and self.field not in (row.get("fields") or ()):
            return False
        ts = row.get("timestamp")
        if ts is not None and ts.tzinfo is None:
            ts = ts.replace(tzinfo=UTC)
        if self.from_time and (ts is None or ts < self.from_time):
            return False
        return not (self.to_time and (ts is None or ts >= self.to_time))
