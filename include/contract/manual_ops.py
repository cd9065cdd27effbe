"""Manual operations: what a DAG run was asked to do, checked against the pipeline and Kafka
before any cluster starts.

The trigger form (the DAG's params) offers these actions:

- ``normal``: read what is new (the default; scheduled runs are normal runs);
- ``backfill_offsets``: re-read ``[from, until)`` of some partitions;
- ``backfill_time``: re-read the records whose Kafka timestamps fall in ``[from_time, to_time)``;
- ``rebuild_checkpoint``: start a new checkpoint epoch at the table's next offsets;
- ``acknowledge_gap``: accept the data loss the preflight finds now, with a reason;
- ``reestablish_position``: bronze holds rows but no readable position: take it from
  the rows (max offset + 1 per partition) and continue in a new checkpoint epoch;
- ``reread_after_restore`` / ``keep_position_after_restore``: after a RESTORE undid
  progress commits, read again from the restored position, or keep the position
  and record what the restore undid;
- ``replay_quarantine``: after the cause of a quarantine is fixed, run the transform's
  rules again over quarantined records (all, or by reason, field or Kafka time;
  :mod:`include.contract.replay`), then read what is new as a normal run does.

Runs of type backfill (``airflow backfill create``) are ``airflow_backfill``:
a backfill by time over the run's data interval.

A backfill inserts into bronze only the ``(topic, partition, offset)`` rows it
lacks and re-reads only what the table has passed: offsets from the table's
next offset on belong to the next normal run. Every action except ``normal``
needs a reason, recorded with who asked in the run ledger (and, for a
backfill or a gap, in the bronze commit itself).

Pure logic: the caller (:mod:`include.orchestration.pipeline_run`) reads Kafka and the table
and passes what it found, so every rule has a unit test without a broker.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from include.contract.errors import ContractError, PipelineError
from include.contract.offsets import BackfillRange, Gap, PositionMap, TopicState
from include.contract.replay import ReplaySelection

NORMAL = "normal"
BACKFILL_OFFSETS = "backfill_offsets"
BACKFILL_TIME = "backfill_time"
REBUILD_CHECKPOINT = "rebuild_checkpoint"
ACKNOWLEDGE_GAP = "acknowledge_gap"
SKIP_OFFSETS = "skip_offsets"
REESTABLISH_POSITION = "reestablish_position"
REREAD_AFTER_RESTORE = "reread_after_restore"
KEEP_POSITION_AFTER_RESTORE = "keep_position_after_restore"
REPLAY_QUARANTINE = "replay_quarantine"
AIRFLOW_BACKFILL = "airflow_backfill"

#: The trigger form's actions and how the form shows them.
ACTIONS: dict[str, str] = {
    NORMAL: "Normal run: read what is new",
    BACKFILL_OFFSETS: "Backfill by offsets: re-read offset ranges",
    BACKFILL_TIME: "Backfill by time: re-read records by Kafka timestamp",
    REBUILD_CHECKPOINT: "Rebuild checkpoint: new checkpoint at the table's next offsets",
    ACKNOWLEDGE_GAP: "Acknowledge data loss: accept the gap the preflight finds, with a reason",
    SKIP_OFFSETS: "Skip offsets at ingest: pass records ingest cannot read (recorded as a gap), with a reason",
    REESTABLISH_POSITION: "Re-establish the position from bronze's own rows (max offset + 1), new checkpoint",
    REREAD_AFTER_RESTORE: "After a RESTORE: read again from the restored table's position, new checkpoint",
    KEEP_POSITION_AFTER_RESTORE: "After a RESTORE: keep the position, record what the restore undid",
    REPLAY_QUARANTINE: "Replay quarantine: the transform's rules again over quarantined records, after a fix",
}
BACKFILL_ACTIONS = (BACKFILL_OFFSETS, BACKFILL_TIME, AIRFLOW_BACKFILL)
#: Actions that set where the table stands (a new checkpoint epoch starting there), chosen at preflight.
POSITION_ACTIONS = (REESTABLISH_POSITION, REREAD_AFTER_RESTORE, KEEP_POSITION_AFTER_RESTORE)
REASON_MAX = 500
#: The most ranges one ``backfill_offsets`` run takes: each is checked against Kafka and the table.
MAX_OFFSET_RANGES = 1000
#: The trigger form's params (:func:`form_params`): a run's conf may name these and nothing else.
FORM_KEYS = (
    "action",
    "reason",
    "offset_ranges",
    "from_time",
    "to_time",
    "quarantine_reason",
    "quarantine_field",
)


def action_hint(dag_id: str, action: str, reason: str = "<why>", **params: Any) -> str:
    """How to trigger ``action``: its name in the trigger form and the exact CLI command (with ``params``)."""
    if action not in ACTIONS:
        raise ContractError(f"unknown trigger-form action {action!r}")
    conf = json.dumps({"action": action, "reason": reason, **params})
    return f"the trigger form's action {action!r} (airflow dags trigger {dag_id} -c '{conf}')"


class RequestError(PipelineError, ValueError):
    """The run's params cannot be carried out; the message says which param, what was wrong and what is allowed."""


@dataclass(frozen=True)
class OffsetRequest:
    """One item of ``offset_ranges``: ``[from_offset, until_offset)`` of a partition, or of all
    partitions of the topic when ``partition`` is ``None``."""

    topic: str
    partition: int | None
    from_offset: int
    until_offset: int

    def to_json(self) -> dict[str, Any]:
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from": self.from_offset,
            "until": self.until_offset,
        }


@dataclass(frozen=True)
class RunRequest:
    """What one DAG run was asked to do, by whom and why."""

    action: str = NORMAL
    reason: str = ""
    requested_by: str | None = None
    offset_ranges: tuple[OffsetRequest, ...] = ()
    from_time: datetime | None = None
    to_time: datetime | None = None
    #: ``replay_quarantine``: which quarantined records (``from_time``/``to_time`` bound their Kafka time).
    replay: ReplaySelection | None = None

    @property
    def is_backfill(self) -> bool:
        return self.action in BACKFILL_ACTIONS

    def describe(self) -> str:
        """The request in a few words, for task logs."""
        if self.action == NORMAL:
            return "normal run"
        text = self.action
        if self.offset_ranges:
            text += " " + ", ".join(
                f"{r.topic}-{'*' if r.partition is None else r.partition} [{r.from_offset}, {r.until_offset})"
                for r in self.offset_ranges
            )
        if self.replay is not None:
            text += f" of {self.replay.describe()}"
        elif self.from_time is not None:
            text += f" [{self.from_time.isoformat()}, {self.to_time.isoformat() if self.to_time else '?'})"
        who = f" by {self.requested_by}" if self.requested_by else ""
        return f"{text}{who}: {self.reason}"


def form_params() -> dict[str, Any]:
    """The DAG's params: the trigger form, validated by Airflow with JSON Schema before a run is created."""
    from airflow.sdk import Param

    return {
        "action": Param(
            NORMAL,
            type="string",
            enum=list(ACTIONS),
            values_display=ACTIONS,
            title="Action",
            description_md=(
                "What this run does. Every action except a normal run needs a **reason** and is recorded in "
                "the run ledger with who triggered it. A backfill inserts into bronze only the records it "
                "lacks (running it twice adds nothing) and re-reads only what the table has passed; "
                "the transform then picks the new rows up."
            ),
        ),
        "reason": Param(
            "",
            type="string",
            maxLength=REASON_MAX,
            title="Reason",
            description="Why this run was triggered by hand; required for every action except a normal run, "
            "and recorded in the run ledger.",
        ),
        "offset_ranges": Param(
            [],
            type="array",
            title="Offset ranges",
            section="Backfill by offsets",
            description_md=(
                'For **backfill_offsets**: a list of `{"topic": ..., "partition": 0, "from": 100, '
                '"until": 200}`; `until` is exclusive (like Spark\'s `endingOffsets`). Leave `partition` '
                "out for all partitions of the topic. Every range must lie within what Kafka still holds "
                "and below the table's next offset."
            ),
            items={
                "type": "object",
                "properties": {
                    "topic": {"type": "string", "minLength": 1},
                    "partition": {"type": ["integer", "null"], "minimum": 0},
                    "from": {"type": "integer", "minimum": 0},
                    "until": {"type": "integer", "minimum": 1},
                },
                "required": ["topic", "from", "until"],
                "additionalProperties": False,
            },
            examples=[[{"topic": "orders", "partition": 0, "from": 0, "until": 100}]],
        ),
        "from_time": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="From (inclusive)",
            section="Backfill by time",
            description="For backfill_time: the first Kafka timestamp to re-read, with a time zone "
            "(e.g. 2026-11-20T00:00:00+00:00).",
        ),
        "to_time": Param(
            None,
            type=["null", "string"],
            format="date-time",
            title="To (exclusive)",
            section="Backfill by time",
            description="For backfill_time: re-read records with Kafka timestamps before this time.",
        ),
        "quarantine_reason": Param(
            "",
            type="string",
            maxLength=REASON_MAX,
            title="Reason contains",
            section="Replay quarantine",
            description_md=(
                "For **replay_quarantine**: replay only quarantined records whose reason contains this text "
                "(e.g. `currency: expected one of`). Leave empty, and the field below too, for all records not "
                "replayed yet; **From** and **To** above bound their Kafka timestamps."
            ),
        ),
        "quarantine_field": Param(
            "",
            type="string",
            maxLength=128,
            title="Field",
            section="Replay quarantine",
            description="For replay_quarantine: replay only quarantined records with a problem in this field "
            "(value for the value as a whole).",
        ),
    }


def _timestamp(value: Any, name: str) -> datetime | None:
    if value in (None, ""):
        return None
    if not isinstance(value, str):
        raise RequestError(f"{name}: expected an ISO 8601 date-time with a time zone, got {value!r}")
    try:
        parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise RequestError(
            f"{name}: expected an ISO 8601 date-time with a time zone (e.g. 2026-11-20T00:00:00+00:00), "
            f"got {value!r}"
        ) from None
    if parsed.tzinfo is None:
        raise RequestError(f"{name}: {value!r} has no time zone; add one (e.g. +00:00 or Z)")
    return parsed


def _offset_ranges(value: Any) -> tuple[OffsetRequest, ...]:
    if value in (None, ""):
        return ()
    if not isinstance(value, list):
        raise RequestError(
            f"offset_ranges: expected a list of {{topic, partition, from, until}}, got {value!r}"
        )
    if len(value) > MAX_OFFSET_RANGES:
        raise RequestError(
            f"offset_ranges: at most {MAX_OFFSET_RANGES} ranges, got {len(value)}; leave partition out to give "
            "one range for every partition of a topic, or split the backfill into several runs"
        )
    found: list[OffsetRequest] = []
    for i, item in enumerate(value):
        where = f"offset_ranges[{i}]"
        if not isinstance(item, Mapping):
            raise RequestError(f"{where}: expected an object {{topic, partition, from, until}}, got {item!r}")
        unknown = sorted(set(item) - {"topic", "partition", "from", "until"})
        if unknown:
            raise RequestError(f"{where}: unknown keys {unknown}; expected topic, partition, from, until")
        topic = item.get("topic")
        if not isinstance(topic, str) or not topic:
            raise RequestError(f"{where}.topic: expected a topic name, got {topic!r}")
        numbers: dict[str, int] = {}  # no "partition" when it is left out: all partitions
        for key in ("partition", "from", "until"):
            number = item.get(key)
            if key == "partition" and number is None:
                continue
            if isinstance(number, bool) or not isinstance(number, int) or number < 0:
                raise RequestError(f"{where}.{key}: expected a whole number >= 0, got {number!r}")
            numbers[key] = number
        if numbers["from"] >= numbers["until"]:
            raise RequestError(
                f"{where}: from {numbers['from']} is not below until {numbers['until']} (until is exclusive: "
                f"[{numbers['from']}, {numbers['until']}) holds no offset)"
            )
        found.append(OffsetRequest(topic, numbers.get("partition"), numbers["from"], numbers["until"]))
    # One pass: a topic's all-partitions range and any of its partitions' ranges overlap too.
    seen: dict[str, set[int | None]] = {}
    for r in found:
        given = seen.setdefault(r.topic, set())
        if r.partition in given or (given and (r.partition is None or None in given)):
            twice = (
                r.partition if r.partition is not None else next((p for p in given if p is not None), None)
            )
            which = "all partitions" if twice is None else f"partition {twice}"
            raise RequestError(
                f"offset_ranges: topic {r.topic!r} {which} is given twice; give each partition one range"
            )
        given.add(r.partition)
    return tuple(found)


def parse_request(
    params: Mapping[str, Any],
    *,
    run_type: str,
    data_interval: tuple[datetime | None, datetime | None] | None = None,
    requested_by: str | None = None,
) -> RunRequest:
    """Check the run's params on their own (no Kafka, no table) and return the request.

    ``run_type`` is the DAG run's type (``scheduled``, ``manual``, ``backfill``);
    a run of type backfill re-reads its ``data_interval`` by time.
    """
    unknown = sorted(set(params) - set(FORM_KEYS))
    if unknown:
        # A misspelt key would otherwise be dropped and the run go ahead as a normal run.
        near = difflib.get_close_matches(unknown[0], FORM_KEYS, n=1)
        raise RequestError(
            f"{unknown[0]!r}: not a param of this DAG's trigger form"
            + (f" (did you mean {near[0]!r}?)" if near else "")
            + f"; the form takes {', '.join(FORM_KEYS)}"
            + (f" (also unknown: {', '.join(map(repr, unknown[1:]))})" if len(unknown) > 1 else "")
        )
    action = params.get("action") or NORMAL
    reason = str(params.get("reason") or "").strip()
    if len(reason) > REASON_MAX:
        raise RequestError(f"reason: at most {REASON_MAX} characters, got {len(reason)}")
    for name, text in (("reason", reason), ("quarantine_reason", str(params.get("quarantine_reason") or ""))):
        control = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
        if control is not None:
            # A newline in a reason printed in a task log would start a line of its own: a forged log line.
            raise RequestError(f"{name}: expected one line of text, got a control character {control!r}; "
                               "write it on one line")  # fmt: skip
    ranges = _offset_ranges(params.get("offset_ranges"))
    from_time = _timestamp(params.get("from_time"), "from_time")
    to_time = _timestamp(params.get("to_time"), "to_time")
    replay_reason = str(params.get("quarantine_reason") or "").strip()
    replay_field = str(params.get("quarantine_field") or "").strip()

    if run_type == "backfill":
        if action != NORMAL or ranges or from_time or to_time:
            raise RequestError(
                "a run of `airflow backfill create` re-reads the records of its data interval by Kafka "
                f"timestamp; leave action at {NORMAL!r} and the backfill params empty (got action {action!r})"
            )
        start, end = data_interval or (None, None)
        if start is None or end is None or not start < end:
            raise RequestError(
                f"this backfill run has no data interval to re-read (got {start} to {end}); the DAG's "
                "timetable must give each run an interval (a cron schedule does)"
            )
        return RunRequest(AIRFLOW_BACKFILL, reason or "airflow backfill", requested_by, (), start, end)

    if action not in ACTIONS:
        raise RequestError(f"action: expected one of {', '.join(ACTIONS)}, got {action!r}")
    if action != NORMAL and not reason:
        raise RequestError(
            f"reason: required for action {action!r}; say why (it is recorded in the run ledger)"
        )
    if ranges and action not in (BACKFILL_OFFSETS, SKIP_OFFSETS):
        raise RequestError(
            f"offset_ranges is set but action is {action!r}; choose {BACKFILL_OFFSETS!r} (or {SKIP_OFFSETS!r}) "
            "or clear offset_ranges"
        )
    if (from_time or to_time) and action not in (BACKFILL_TIME, REPLAY_QUARANTINE):
        raise RequestError(
            f"from_time/to_time are set but action is {action!r}; choose {BACKFILL_TIME!r} (or "
            f"{REPLAY_QUARANTINE!r}) or clear them"
        )
    if (replay_reason or replay_field) and action != REPLAY_QUARANTINE:
        raise RequestError(
            f"quarantine_reason/quarantine_field are set but action is {action!r}; choose "
            f"{REPLAY_QUARANTINE!r} or clear them"
        )
    if action == REPLAY_QUARANTINE:
        if from_time and to_time and from_time >= to_time:
            raise RequestError(
                f"from_time {from_time.isoformat()} is not before to_time {to_time.isoformat()} "
                "(to_time is exclusive)"
            )
        selection = ReplaySelection(replay_reason, replay_field, from_time, to_time)
        return RunRequest(action, reason, requested_by, (), from_time, to_time, selection)
    if action == BACKFILL_OFFSETS and not ranges:
        raise RequestError(
            'offset_ranges: required for backfill_offsets, e.g. [{"topic": "orders", "partition": 0, '
            '"from": 0, "until": 100}] (leave partition out for all partitions)'
        )
    if action == SKIP_OFFSETS:
        if not ranges:
            raise RequestError(
                'offset_ranges: required for skip_offsets, e.g. [{"topic": "orders", "partition": 0, "from": 41, '
                '"until": 42}]: from is where ingest stands on that partition'
            )
        whole = next((r for r in ranges if r.partition is None), None)
        if whole is not None:
            raise RequestError(
                f"offset_ranges: skip_offsets skips records of one partition at a time; give the partition of "
                f"topic {whole.topic!r} (ingest stands at a different offset on each)"
            )
    if action == BACKFILL_TIME:
        if from_time is None or to_time is None:
            raise RequestError("from_time and to_time: both required for backfill_time")
        if from_time >= to_time:
            raise RequestError(
                f"from_time {from_time.isoformat()} is not before to_time {to_time.isoformat()} "
                "(to_time is exclusive)"
            )
    return RunRequest(action, reason, requested_by, ranges, from_time, to_time)


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
    if not ranges and request.action != AIRFLOW_BACKFILL:
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
