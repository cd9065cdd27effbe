"""Offset ranges, position maps and the bronze commit record: the offset contract.

Pure Python, no I/O: the Spark job writes these records, the Airflow side reads
them, and both import this one module (it ships to the cluster with
``--py-files``).

Terms, as Kafka uses them:

- ``next_offset``: the offset of the next record to read from a partition
  (Kafka's "position"; a consumer group's committed offset means the same).
- ``OffsetRange(from_offset, until_offset)``: the half-open interval
  ``[from, until)`` one batch consumed from one partition. ``rows`` may be
  smaller than ``until - from``: transaction markers, aborted records and
  compaction leave holes, and a range may hold only holes (``rows == 0``).
- a *position map* ``{topic: {partition: next_offset}}`` is where the table
  stands after a commit.

Every bronze commit carries a :class:`BronzeCommit` as Delta ``userMetadata``,
written in the same atomic commit as its rows.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from include.contract.errors import PipelineError

#: Marks our commit metadata, and its version, among other writers' commits.
COMMIT_FORMAT = "kafka-delta-elt/bronze-commit"
COMMIT_FORMAT_VERSION = 1

TopicPartition = tuple[str, int]
PositionMap = dict[str, dict[int, int]]


@dataclass(frozen=True)
class PartitionState:
    """One partition's readable range: ``[earliest, latest)``."""

    #: Log start offset, after retention and delete-records.
    earliest: int
    #: Last stable offset: the end a read_committed consumer can reach. Below
    #: the high watermark while a transaction is open on the partition.
    latest: int


@dataclass(frozen=True)
class TopicState:
    """A topic's identity and its partitions' readable ranges."""

    name: str
    #: Kafka's topic id as Kafka's own tools print it (URL-safe base64 of the
    #: UUID). A deleted and recreated topic of the same name gets a new one.
    topic_id: str
    partitions: dict[int, PartitionState]


class OffsetError(PipelineError, ValueError):
    """An offset invariant does not hold; ``topic``, ``partition`` and ``offsets`` say where (``str()`` starts with them)."""


class CommitMetadataError(OffsetError):
    """A commit's userMetadata claims to be ours but cannot be read."""


@dataclass(frozen=True, order=True)
class OffsetRange:
    """Records ``[from_offset, until_offset)`` of one topic-partition; ``rows`` were present."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    rows: int

    def __post_init__(self) -> None:
        where: dict[str, Any] = {
            "topic": self.topic,
            "partition": self.partition,
            "offsets": (self.from_offset, self.until_offset),
        }
        if self.from_offset < 0 or self.until_offset < self.from_offset:
            raise OffsetError(
                f"range [{self.from_offset}, {self.until_offset}) is not a valid "
                "offset range (expected 0 <= from <= until)",
                **where,
            )
        if not 0 <= self.rows <= self.until_offset - self.from_offset:
            raise OffsetError(
                f"{self.rows} rows cannot come from range "
                f"[{self.from_offset}, {self.until_offset}) of "
                f"{self.until_offset - self.from_offset} offsets",
                **where,
            )

    @property
    def topic_partition(self) -> TopicPartition:
        return (self.topic, self.partition)

    @property
    def holes(self) -> int:
        """Offsets in the range with no record (markers, aborted, compacted)."""
        return self.until_offset - self.from_offset - self.rows

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from": self.from_offset,
            "until": self.until_offset,
            "rows": self.rows,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OffsetRange:
        return cls(
            data["topic"], int(data["partition"]), int(data["from"]), int(data["until"]), int(data["rows"])
        )


def positions_from_json(data: Mapping[str, Mapping[str, int]]) -> PositionMap:
    """``{"t": {"0": 5}}`` (JSON keys are strings) -> ``{"t": {0: 5}}``."""
    return {topic: {int(p): int(o) for p, o in parts.items()} for topic, parts in data.items()}


def positions_to_json(positions: Mapping[str, Mapping[int, int]]) -> dict[str, dict[str, int]]:
    """The inverse of :func:`positions_from_json`, in the shape Spark's Kafka source takes."""
    return {
        topic: {str(p): int(o) for p, o in sorted(parts.items())}
        for topic, parts in sorted(positions.items())
    }


def flatten(positions: Mapping[str, Mapping[int, int]]) -> dict[TopicPartition, int]:
    """Position map -> ``{(topic, partition): next_offset}``."""
    return {(t, p): o for t, parts in positions.items() for p, o in parts.items()}


def advance(positions: Mapping[str, Mapping[int, int]], ranges: Iterable[OffsetRange]) -> PositionMap:
    """The position map after ``ranges``, checking that each range starts where the map stands.

    A partition absent from ``positions`` is new to the table and may start
    anywhere; a present one must continue exactly at its next offset.
    """
    result: PositionMap = {t: dict(parts) for t, parts in positions.items()}
    for r in sorted(ranges):
        current = result.get(r.topic, {}).get(r.partition)
        if current is not None and r.from_offset != current:
            kind = "gap" if r.from_offset > current else "overlap"
            raise OffsetError(
                f"range [{r.from_offset}, {r.until_offset}) does not "
                f"continue at the table's next offset {current} ({kind} of "
                f"{abs(r.from_offset - current)} offsets)",
                topic=r.topic,
                partition=r.partition,
                offsets=(r.from_offset, r.until_offset),
            )
        result.setdefault(r.topic, {})[r.partition] = r.until_offset
    return result


@dataclass(frozen=True, order=True)
class Gap:
    """Offsets ``[from_offset, until_offset)`` of a partition that will never be read, and why.

    Recorded when Kafka deleted records (retention, delete-records) before the
    pipeline read them and the pipeline's data-loss policy says to continue.
    The continuity check accepts a break in the chain only where a gap is
    recorded.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    reason: str = ""

    def __post_init__(self) -> None:
        if not 0 <= self.from_offset < self.until_offset:
            raise OffsetError(
                f"gap [{self.from_offset}, {self.until_offset}) is not a "
                "valid offset range (expected 0 <= from < until)",
                topic=self.topic,
                partition=self.partition,
                offsets=(self.from_offset, self.until_offset),
            )

    @property
    def offsets(self) -> int:
        return self.until_offset - self.from_offset

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from": self.from_offset,
            "until": self.until_offset,
            "reason": self.reason,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Gap:
        return cls(
            data["topic"],
            int(data["partition"]),
            int(data["from"]),
            int(data["until"]),
            str(data.get("reason", "")),
        )


def skip_gaps(positions: Mapping[str, Mapping[int, int]], gaps: Iterable[Gap]) -> PositionMap:
    """The position map moved past ``gaps``; each gap must start where the map stands."""
    result: PositionMap = {t: dict(parts) for t, parts in positions.items()}
    for g in sorted(gaps):
        current = result.get(g.topic, {}).get(g.partition)
        if current is not None and current != g.from_offset:
            raise OffsetError(
                f"gap [{g.from_offset}, {g.until_offset}) does not start at "
                f"the table's next offset {current}",
                topic=g.topic,
                partition=g.partition,
                offsets=(g.from_offset, g.until_offset),
            )
        result.setdefault(g.topic, {})[g.partition] = g.until_offset
    return result


def _seal(fmt: str, fmt_version: int, body: dict[str, Any]) -> str:
    """``body`` marked as ours (format and its version), compact with a stable key order."""
    return json.dumps({"format": fmt, "version": fmt_version, **body}, separators=(",", ":"), sort_keys=True)


def _envelope(
    text: str | None, version: int | None, fmt: str, fmt_version: int, kind: str
) -> tuple[dict[str, Any] | None, str]:
    """A commit's ``userMetadata`` as a dict if it is ours of format ``fmt`` (else ``None``), and where it is."""
    where = f"Delta commit version {version}" if version is not None else "commit metadata"
    if not text:
        return None, where
    try:
        data = json.loads(text)
    except ValueError:
        return None, where
    if not isinstance(data, dict) or data.get("format") != fmt:
        return None, where
    if data.get("version") != fmt_version:
        raise CommitMetadataError(
            f"{where}: {kind} format version {data.get('version')!r} is not supported (expected {fmt_version})"
        )
    return data, where


@dataclass(frozen=True)
class BronzeCommit:
    """What one bronze commit wrote: its ranges and the table's position after it."""

    pipeline: str
    run_id: str
    run_type: str
    epoch: int
    batch_id: int
    ranges: tuple[OffsetRange, ...]
    next_offsets: PositionMap
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(r.rows for r in self.ranges)

    def to_user_metadata(self) -> str:
        """Serialise for Delta's ``userMetadata`` commit option (compact, stable key order)."""
        return _seal(
            COMMIT_FORMAT,
            COMMIT_FORMAT_VERSION,
            {
                "pipeline": self.pipeline,
                "run_id": self.run_id,
                "run_type": self.run_type,
                "epoch": self.epoch,
                "batch_id": self.batch_id,
                "ranges": [r.to_json() for r in sorted(self.ranges)],
                "next_offsets": positions_to_json(self.next_offsets),
                "extra": self.extra,
            },
        )

    @classmethod
    def from_user_metadata(cls, text: str | None, *, version: int | None = None) -> BronzeCommit | None:
        """Parse a commit's ``userMetadata``; ``None`` when the commit is not one of ours.

        Other writers' commits (OPTIMIZE, VACUUM, a manual MERGE) carry no
        metadata or someone else's: they are skipped, not mistaken for progress.
        A commit that claims our format but is malformed raises
        :class:`CommitMetadataError` naming the Delta ``version``.
        """
        data, where = _envelope(text, version, COMMIT_FORMAT, COMMIT_FORMAT_VERSION, "bronze commit")
        if data is None:
            return None
        try:
            return cls(
                pipeline=str(data["pipeline"]),
                run_id=str(data["run_id"]),
                run_type=str(data["run_type"]),
                epoch=int(data["epoch"]),
                batch_id=int(data["batch_id"]),
                ranges=tuple(OffsetRange.from_json(r) for r in data["ranges"]),
                next_offsets=positions_from_json(data["next_offsets"]),
                extra=dict(data.get("extra") or {}),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CommitMetadataError(f"{where}: malformed bronze commit metadata: {exc!r}") from exc


#: Marks the metadata of a backfill's commit; such a commit is not progress of the chain.
BACKFILL_FORMAT = "kafka-delta-elt/bronze-backfill"
BACKFILL_FORMAT_VERSION = 1


@dataclass(frozen=True, order=True)
class BackfillRange:
    """Offsets ``[from_offset, until_offset)`` of one partition a backfill re-read.

    ``read`` records came back from Kafka (those inside the time window, for a
    backfill by time); ``inserted`` of them were missing from bronze and were
    added; the rest were there already.
    """

    topic: str
    partition: int
    from_offset: int
    until_offset: int
    read: int = 0
    inserted: int = 0

    def __post_init__(self) -> None:
        where: dict[str, Any] = {
            "topic": self.topic,
            "partition": self.partition,
            "offsets": (self.from_offset, self.until_offset),
        }
        if not 0 <= self.from_offset < self.until_offset:
            raise OffsetError(
                f"backfill range [{self.from_offset}, {self.until_offset}) is not a valid "
                "offset range (expected 0 <= from < until)",
                **where,
            )
        if not 0 <= self.inserted <= self.read <= self.until_offset - self.from_offset:
            raise OffsetError(
                f"backfill range [{self.from_offset}, {self.until_offset}) cannot have read "
                f"{self.read} records and inserted {self.inserted}",
                **where,
            )

    @property
    def present(self) -> int:
        """Records of the range bronze held already (not inserted again)."""
        return self.read - self.inserted

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from": self.from_offset,
            "until": self.until_offset,
            "read": self.read,
            "inserted": self.inserted,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> BackfillRange:
        return cls(
            data["topic"],
            int(data["partition"]),
            int(data["from"]),
            int(data["until"]),
            int(data.get("read", 0)),
            int(data.get("inserted", 0)),
        )


@dataclass(frozen=True)
class BackfillCommit:
    """What a backfill's bronze commit re-read and inserted, and who asked for it and why.

    A backfill inserts only the ``(topic, partition, offset)`` rows bronze lacks
    and never moves the table's position, so :func:`BronzeCommit.from_user_metadata`
    does not take it for progress (it has its own format).
    """

    pipeline: str
    run_id: str
    run_type: str
    action: str
    reason: str
    requested_by: str | None
    ranges: tuple[BackfillRange, ...]
    time_range: dict[str, Any] | None = None

    @property
    def read(self) -> int:
        return sum(r.read for r in self.ranges)

    @property
    def inserted(self) -> int:
        return sum(r.inserted for r in self.ranges)

    def to_user_metadata(self) -> str:
        """Serialise for the backfill MERGE's ``userMetadata``."""
        return _seal(
            BACKFILL_FORMAT,
            BACKFILL_FORMAT_VERSION,
            {
                "pipeline": self.pipeline,
                "run_id": self.run_id,
                "run_type": self.run_type,
                "action": self.action,
                "reason": self.reason,
                "requested_by": self.requested_by,
                "ranges": [r.to_json() for r in sorted(self.ranges)],
                "time_range": self.time_range,
            },
        )

    @classmethod
    def from_user_metadata(cls, text: str | None, *, version: int | None = None) -> BackfillCommit | None:
        """Parse a commit's ``userMetadata``; ``None`` when it is not a backfill's."""
        data, where = _envelope(text, version, BACKFILL_FORMAT, BACKFILL_FORMAT_VERSION, "backfill commit")
        if data is None:
            return None
        try:
            return cls(
                pipeline=str(data["pipeline"]),
                run_id=str(data["run_id"]),
                run_type=str(data["run_type"]),
                action=str(data["action"]),
                reason=str(data.get("reason") or ""),
                requested_by=data.get("requested_by"),
                ranges=tuple(BackfillRange.from_json(r) for r in data["ranges"]),
                time_range=data.get("time_range"),
            )
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise CommitMetadataError(f"{where}: malformed backfill commit metadata: {exc!r}") from exc
