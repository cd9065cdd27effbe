"""How long before Kafka's retention may delete records the table has not read: a lower bound per partition.

Kafka deletes a partition's oldest *segments*, never single records, and only
from the start of the log:

- by time (``retention.ms``): a segment goes once its newest record's
  timestamp is older than the retention. The segment holding the oldest
  unread record has a newest timestamp at least that record's, so the record
  lives at least ``retention.ms`` after its own timestamp;
- by size (``retention.bytes``, per partition): a segment goes once the
  segments after it hold at least ``retention.bytes``. The oldest unread
  record survives until the bytes written after it reach that size; they are
  the unread records' bytes now, growing at the partition's rate.

Both give a moment before which the oldest unread record cannot be deleted,
so the earlier of the two is a lower bound on the time left. The size bound
is an estimate: the unread records' bytes are counted as their number times
the size of the first of them plus the most framing Kafka adds to a record
(:data:`RECORD_OVERHEAD_BYTES`), and the rate is the one at which they
arrived (the unread records over the age of the oldest). Compressed batches
make the true size smaller, so the bound only errs towards warning early;
records much larger than the first unread one make it late.

A topic whose ``cleanup.policy`` has no ``delete`` (compaction only) has no
retention bound: compaction removes values superseded by a newer one of the
same key, which the time left does not cover.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from include.contract.errors import ContractError

#: The most bytes Kafka adds to a record on disk: a record batch's 61-byte header (a batch of one record,
#: the worst case) and the record's own framing (length, attributes, deltas and lengths, as varints).
RECORD_OVERHEAD_BYTES = 61 + 21


@dataclass(frozen=True)
class TopicRetention:
    """A topic's effective retention: whether it deletes, and after how long or how many bytes a partition."""

    topic: str
    #: ``cleanup.policy`` includes ``delete``.
    deletes: bool
    #: ``retention.ms``; ``None``: unlimited (-1).
    retention_ms: int | None
    #: ``retention.bytes`` per partition; ``None``: unlimited (-1).
    retention_bytes: int | None

    @classmethod
    def from_configs(cls, topic: str, configs: Mapping[str, str | None]) -> TopicRetention:
        """From the broker's effective settings (``include.readers.kafka_state.topic_retention``)."""
        policy = configs.get("cleanup.policy") or "delete"
        return cls(topic, "delete" in {p.strip() for p in policy.split(",")},
                   _limit(topic, "retention.ms", configs.get("retention.ms")),
                   _limit(topic, "retention.bytes", configs.get("retention.bytes")))  # fmt: skip

    def describe(self) -> str:
        """The settings as a short text: ``retention.ms 604800000, retention.bytes unlimited``."""
        if not self.deletes:
            return "cleanup.policy without delete (compaction only)"
        return ", ".join(f"{name} {'unlimited' if value is None else value}"
                         for name, value in (("retention.ms", self.retention_ms),
                                             ("retention.bytes", self.retention_bytes)))  # fmt: skip


def _limit(topic: str, name: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ContractError(f"topic {topic!r}: the broker gave {name} = {value!r}; expected an integer "
                            "(-1 for unlimited)") from None  # fmt: skip
    return None if number < 0 else number


@dataclass(frozen=True)
class PartitionForecast:
    """One partition's time left before retention may delete its oldest unread record."""

    topic: str
    partition: int
    #: Records Kafka holds that the table has not read.
    unread: int
    #: The Kafka timestamp of the oldest of them.
    oldest_unread_at: datetime
    #: Seconds left at least; ``None``: no retention setting bounds it.
    left_s: float | None
    #: The setting that gives ``left_s``: ``retention.ms`` or ``retention.bytes``.
    bound: str | None
    #: The partition's arrival rate the size bound assumed, records per second.
    rate_per_s: float

    def to_json(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "unread": self.unread,
                "oldest_unread_at": self.oldest_unread_at.isoformat(), "left_s": self.left_s,
                "bound": self.bound, "rate_per_s": self.rate_per_s}  # fmt: skip

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PartitionForecast:
        """What :meth:`to_json` wrote."""
        left = data.get("left_s")
        return cls(str(data["topic"]), int(data["partition"]), int(data["unread"]),
                   datetime.fromisoformat(str(data["oldest_unread_at"])), None if left is None else float(left),
                   None if data.get("bound") is None else str(data["bound"]), float(data.get("rate_per_s") or 0))  # fmt: skip


def forecast(retention: TopicRetention, partition: int, *, unread: int, oldest_unread_at: datetime,
             record_size: int | None, now: datetime) -> PartitionForecast:  # fmt: skip
    """The time left for one partition with ``unread`` records, the oldest written at ``oldest_unread_at``.

    ``record_size`` is the oldest unread record's key, value and header bytes (``None``: unknown, so
    no size bound). See the module docstring for why each bound holds.
    """
    age = max(0.0, (now - oldest_unread_at).total_seconds())
    rate = unread / max(age, 1.0)
    bounds: list[tuple[float, str]] = []
    if retention.deletes and retention.retention_ms is not None:
        bounds.append((max(0.0, retention.retention_ms / 1000 - age), "retention.ms"))
    if retention.deletes and retention.retention_bytes is not None and record_size is not None:
        per_record = record_size + RECORD_OVERHEAD_BYTES
        room = retention.retention_bytes - unread * per_record
        bounds.append((max(0.0, room / (rate * per_record)), "retention.bytes"))
    left, bound = min(bounds) if bounds else (None, None)
    return PartitionForecast(retention.topic, partition, unread, oldest_unread_at, left, bound, rate)


def soonest(forecasts: tuple[PartitionForecast, ...]) -> PartitionForecast | None:
    """The partition whose unread records retention may delete first; ``None`` when none is bounded."""
    bounded = [f for f in forecasts if f.left_s is not None]
    return min(bounded, key=lambda f: (f.left_s, f.topic, f.partition)) if bounded else None


def duration_text(seconds: float) -> str:
    """A time left as people read it in a task log: ``45 s``, ``12 min``, ``3.4 h``, ``2.1 days``."""
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 2 * 86400:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.1f} days"
