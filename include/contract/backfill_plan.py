"""Backfill and skip plans: a request's ranges checked against what Kafka holds and where the table stands.

:func:`include.contract.manual_ops.parse_request` checks a request on its own; the functions here take
what the caller (:mod:`include.orchestration.request_plan`, and the preflight for a skip) read of Kafka and
the table, so every rule has a unit test without a broker. Every problem is named at once, with what a
backfill may re-read instead.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime

from include.contract.actions import RequestError, RunRequest
from include.contract.offsets import BackfillRange, Gap, PositionMap, TopicState


@dataclass(frozen=True)
class BackfillPlan:
    """The offset ranges a backfill re-reads, and what the user should know about them."""

    ranges: tuple[BackfillRange, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def offsets(self) -> int:
        return sum(r.until_offset - r.from_offset for r in self.ranges)


def _held(state_earliest: int, state_latest: int) -> str:
    if state_earliest >= state_latest:
        return "holds no records now"
    return f"holds offsets [{state_earliest}, {state_latest})"


def _table_partitions(table_next: PositionMap | None, pipeline: str) -> PositionMap:
    if not table_next:
        raise RequestError(
            f"pipeline {pipeline!r} has not ingested anything yet; a backfill re-reads what the table has "
            "passed. Run it normally first"
        )
    return table_next


def plan_offsets_backfill(
    request: RunRequest, *, pipeline: str, kafka: Mapping[str, TopicState], table_next: PositionMap | None
) -> BackfillPlan:
    """Check each requested range against Kafka and the table; every problem is named at once."""
    positions = _table_partitions(table_next, pipeline)
    problems: list[str] = []
    notes: list[str] = []
    ranges: list[BackfillRange] = []
    for i, r in enumerate(request.offset_ranges):
        where = f"offset_ranges[{i}]"
        if r.topic not in positions:
            known = ", ".join(sorted(positions)) or "none"
            problems.append(
                f"{where}: topic {r.topic!r} is not one pipeline {pipeline!r} has ingested "
                f"(its topics: {known})"
            )
            continue
        state = kafka.get(r.topic)
        if state is None:
            problems.append(f"{where}: topic {r.topic!r} does not exist in Kafka now")
            continue
        if r.partition is not None and r.partition not in state.partitions:
            problems.append(
                f"{where}: topic {r.topic!r} has no partition {r.partition} (it has partitions "
                f"{', '.join(str(p) for p in sorted(state.partitions))})"
            )
            continue
        for p in [r.partition] if r.partition is not None else sorted(state.partitions):
            tp = f"{r.topic}-{p}"
            kp = state.partitions[p]
            nxt = positions[r.topic].get(p)
            if nxt is None:
                if r.partition is None:  # "all partitions": the ones the table has read
                    notes.append(f"{tp} has not been ingested yet and is left to the next normal run")
                else:
                    problems.append(
                        f"{where}: partition {tp} has not been ingested yet; the next normal run reads it"
                    )
                continue
            if r.from_offset < kp.earliest:
                problems.append(
                    f"{where}: partition {tp} from {r.from_offset} is below Kafka's earliest offset {kp.earliest} "
                    f"(older records were deleted by retention); Kafka {_held(kp.earliest, kp.latest)}"
                )
                continue
            if r.until_offset > kp.latest:
                problems.append(
                    f"{where}: partition {tp} until {r.until_offset} is past Kafka's end {kp.latest}; "
                    f"Kafka {_held(kp.earliest, kp.latest)}"
                )
                continue
            if r.until_offset > nxt:
                allowed = (
                    f"so a backfill may re-read [{kp.earliest}, {nxt}) at most"
                    if kp.earliest < nxt
                    else f"and Kafka no longer holds any offset below {nxt}, so nothing there can be re-read"
                )
                problems.append(
                    f"{where}: partition {tp} until {r.until_offset} is past the table's next offset {nxt}; "
                    f"offsets from {nxt} on are read by the next normal run, {allowed}"
                )
                continue
            ranges.append(BackfillRange(r.topic, p, r.from_offset, r.until_offset))
    if problems:
        raise RequestError("backfill by offsets refused:\n  - " + "\n  - ".join(problems))
    if not ranges:
        raise RequestError(
            "backfill by offsets refused: no requested partition has been ingested yet:\n  - "
            + "\n  - ".join(notes)
        )
    return BackfillPlan(tuple(sorted(ranges)), tuple(notes))


def plan_time_backfill(
    request: RunRequest,
    *,
    pipeline: str,
    kafka: Mapping[str, TopicState],
    table_next: PositionMap | None,
    start_offsets: Mapping[tuple[str, int], int | None],
    end_offsets: Mapping[tuple[str, int], int | None],
    earliest_times: Mapping[tuple[str, int], datetime | None] | None = None,
) -> BackfillPlan:
    """The offset ranges holding the records of ``[from_time, to_time)``, capped at the table's position.

    ``start_offsets``/``end_offsets`` are Kafka's offsets for the two times
    (:func:`include.readers.kafka_state.offsets_for_times`; ``None``: no record that
    new, i.e. the partition's end). The range is ``[start, end)``; the job keeps
    only the records whose timestamps fall in the window. A record whose
    timestamp is before ``to_time`` but that sits after a later-stamped record
    past ``end`` (producer clocks out of order) is not re-read.
    """
    positions = _table_partitions(table_next, pipeline)
    assert request.from_time is not None and request.to_time is not None
    ranges: list[BackfillRange] = []
    notes: list[str] = []
    for topic in sorted(positions):
        state = kafka.get(topic)
        if state is None:
            notes.append(f"topic {topic!r} no longer exists in Kafka; nothing of it can be re-read")
            continue
        for p, kp in sorted(state.partitions.items()):
            nxt = positions[topic].get(p)
            if nxt is None:
                continue
            start = start_offsets.get((topic, p))
            if start is None:
                continue
            end = end_offsets.get((topic, p))
            end = kp.latest if end is None else end
            if end > nxt:
                notes.append(
                    f"{topic}-{p}: records from offset {nxt} on are not ingested yet; the next normal "
                    "run reads them"
                )
                end = nxt
            if start < end:
                ranges.append(BackfillRange(topic, p, start, end))
    window = f"[{request.from_time.isoformat()}, {request.to_time.isoformat()})"
    if not ranges and request.spec.refuses_empty_plan:
        held = []
        for topic in sorted(positions):
            for p, kp in sorted(kafka[topic].partitions.items()) if topic in kafka else ():
                first = (earliest_times or {}).get((topic, p))
                since = f", first record at {first.isoformat()}" if first else ""
                held.append(
                    f"{topic}-{p}: Kafka {_held(kp.earliest, kp.latest)}{since}, table at "
                    f"{positions[topic].get(p)}"
                )
        raise RequestError(
            f"backfill by time refused: no record the table has passed has a Kafka timestamp in {window}.\n  - "
            + "\n  - ".join(held + notes or ["no partition the table has read is in Kafka now"])
        )
    return BackfillPlan(tuple(ranges), tuple(notes))


def plan_skip(request: RunRequest, *, table_next: PositionMap | None,
              kafka: Mapping[str, TopicState]) -> tuple[Gap, ...]:  # fmt: skip
    """The gaps a ``skip_offsets`` request records: each range must start where the table stands on its
    partition (where ingest is stuck, a record it cannot read) and end within what Kafka holds; raises
    :class:`RequestError` naming the range and what is allowed."""
    who = f" by {request.requested_by}" if request.requested_by else ""
    gaps = []
    for i, r in enumerate(request.offset_ranges):
        where = f"offset_ranges[{i}] {r.topic}-{r.partition}"
        state = kafka.get(r.topic)
        if state is None or r.partition not in state.partitions:
            raise RequestError(f"{where}: Kafka has no such partition")
        stands = (table_next or {}).get(r.topic, {}).get(r.partition)
        if stands is None:
            raise RequestError(f"{where}: the table has read nothing of this partition yet; skip_offsets passes "
                               "records where ingest stands, so run the pipeline first")  # fmt: skip
        if r.from_offset != stands:
            raise RequestError(
                f"{where}: from is {r.from_offset}, but ingest stands at offset {stands} on this partition; skip "
                f"from {stands} (skipping elsewhere would drop records the table still has to read, or has read)"
            )
        latest = state.partitions[r.partition].latest
        if r.until_offset > latest:
            raise RequestError(f"{where}: until is {r.until_offset}, past what Kafka holds (offsets up to {latest}, "
                               "exclusive)")  # fmt: skip
        gaps.append(Gap(r.topic, r.partition, r.from_offset, r.until_offset,
                        reason=f"skipped at ingest{who}: {request.reason}"))  # fmt: skip
    return tuple(gaps)
