"""Manual operations: the trigger form (the DAG's params) and a run's params checked on their own.

The form's actions are :mod:`include.contract.actions`' specs: an action's label, the params it takes and
requires and its rules are there, and :func:`parse_request` applies them, so the same rules refuse a bad
request at trigger time (:mod:`include.orchestration.trigger_guard`) and in ``check_request``. What needs
Kafka or the table (a backfill's ranges, a skip's start) is checked later, by
:mod:`include.contract.backfill_plan`.

A backfill inserts into bronze only the ``(topic, partition, offset)`` rows it
lacks and re-reads only what the table has passed: offsets from the table's
next offset on belong to the next normal run. Every action except ``normal``
needs a reason, recorded with who asked in the run ledger (and, for a
backfill or a gap, in the bronze commit itself). Runs of type backfill
(``airflow backfill create``) are ``airflow_backfill``: a backfill by time over
the run's data interval.

Pure logic: no Kafka, no table, so every rule has a unit test without a broker.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from dataclasses import replace
from datetime import datetime
from typing import Any

from include.contract.actions import (
    ACTIONS,
    AIRFLOW_BACKFILL,
    NORMAL,
    PARAM_GROUPS,
    OffsetRequest,
    RequestError,
    RunRequest,
    spec,
    takers,
)
from include.contract.replay import ReplaySelection
from include.contract.routes import ROUTE_NAME

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
    "quarantine_route",
    "dry_run",
)


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
        "quarantine_route": Param(
            "",
            type="string",
            pattern=f"^({ROUTE_NAME.pattern})?$",
            title="Route",
            section="Replay quarantine",
            description="For replay_quarantine on a pipeline that routes its records: the route whose quarantine "
            "to replay, with that route's rules into its silver table. Required there; empty elsewhere.",
        ),
        "dry_run": Param(
            False,
            type="boolean",
            title="Dry run",
            description_md=(
                f"For {', '.join(f'**{a}**' for a in dry_run_actions())}: report what the run would do (per "
                "partition, the records Kafka still holds and bronze already has, what it would insert or "
                "replay, the time and cluster it would take, and any refusal) and do nothing else: no cluster, "
                "no lock, one ledger row."
            ),
        ),
    }


def dry_run_actions() -> list[str]:
    """The form's actions that have a dry run, in the form's order."""
    return [name for name in ACTIONS if spec(name).dry_runs]


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


def _refuse_unknown_keys(params: Mapping[str, Any]) -> None:
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


def _dry_run(value: Any) -> bool:
    if value is None:
        return False
    if not isinstance(value, bool):
        raise RequestError(f"dry_run: expected true or false, got {value!r}")
    return value


def _route(value: Any) -> str:
    """``quarantine_route``: empty, or a name a route can have (which routes the pipeline has, the plan checks)."""
    route = str(value or "").strip()
    if route and not ROUTE_NAME.fullmatch(route):
        raise RequestError(f"quarantine_route: expected a route's name ({ROUTE_NAME.pattern}), got {route!r}; "
                           "name a route of the pipeline file's transform.routes")  # fmt: skip
    return route


def _texts(params: Mapping[str, Any]) -> tuple[str, str, str]:
    """The request's reason and the replay's two filters, each one line of text."""
    reason = str(params.get("reason") or "").strip()
    if len(reason) > REASON_MAX:
        raise RequestError(f"reason: at most {REASON_MAX} characters, got {len(reason)}")
    for name, text in (("reason", reason), ("quarantine_reason", str(params.get("quarantine_reason") or ""))):
        control = next((c for c in text if ord(c) < 32 or ord(c) == 127), None)
        if control is not None:
            # A newline in a reason printed in a task log would start a line of its own: a forged log line.
            raise RequestError(f"{name}: expected one line of text, got a control character {control!r}; "
                               "write it on one line")  # fmt: skip
    return (
        reason,
        str(params.get("quarantine_reason") or "").strip(),
        str(params.get("quarantine_field") or "").strip(),
    )


def _airflow_backfill(
    request: RunRequest, data_interval: tuple[datetime | None, datetime | None] | None
) -> RunRequest:
    """A run of ``airflow backfill create``: its data interval by time, and no param of the form's."""
    form_params_given = (request.offset_ranges, request.from_time, request.to_time, request.dry_run)
    if request.action != NORMAL or any(form_params_given):
        raise RequestError(
            "a run of `airflow backfill create` re-reads the records of its data interval by Kafka "
            f"timestamp; leave action at {NORMAL!r} and the backfill params empty (got action {request.action!r})"
        )
    start, end = data_interval or (None, None)
    if start is None or end is None or not start < end:
        raise RequestError(
            f"this backfill run has no data interval to re-read (got {start} to {end}); the DAG's "
            "timetable must give each run an interval (a cron schedule does)"
        )
    return RunRequest(
        AIRFLOW_BACKFILL, request.reason or "airflow backfill", request.requested_by, (), start, end
    )


def _check_action(request: RunRequest, given: set[str]) -> RunRequest:
    """The request against its action's spec: a reason, the params it takes and requires, its own rules."""
    action = request.action
    if action not in ACTIONS:
        raise RequestError(f"action: expected one of {', '.join(ACTIONS)}, got {action!r}")
    chosen = spec(action)
    if chosen.needs_reason and not request.reason:
        raise RequestError(
            f"reason: required for action {action!r}; say why (it is recorded in the run ledger)"
        )
    for group in PARAM_GROUPS:
        if given & set(group) and not set(group) & set(chosen.takes):
            names = takers(group)
            choose = f"{names[0]!r}" + (f" (or {names[1]!r})" if len(names) > 1 else "")
            what, clear = (
                ("offset_ranges is", "offset_ranges")
                if len(group) == 1
                else ("/".join(group) + " are", "them")
            )
            raise RequestError(f"{what} set but action is {action!r}; choose {choose} or clear {clear}")
    if chosen.requires and not set(chosen.requires) <= given:
        raise RequestError(chosen.missing)
    if request.dry_run and not chosen.dry_runs:
        raise RequestError(f"dry_run: {', '.join(dry_run_actions())} have a dry run, not {action!r}; clear "
                           "dry_run to run it")  # fmt: skip
    return chosen.check(request)


def parse_request(
    params: Mapping[str, Any],
    *,
    run_type: str,
    data_interval: tuple[datetime | None, datetime | None] | None = None,
    requested_by: str | None = None,
) -> RunRequest:
    """Check the run's params on their own (no Kafka, no table) and return the request.

    ``run_type`` is the DAG run's type (``scheduled``, ``manual``, ``backfill``);
    a run of type backfill re-reads its ``data_interval`` by time. The rules of
    the chosen action are its :class:`~include.contract.actions.ActionSpec`'s.
    """
    _refuse_unknown_keys(params)
    reason, replay_reason, replay_field = _texts(params)
    route = _route(params.get("quarantine_route"))
    ranges = _offset_ranges(params.get("offset_ranges"))
    from_time = _timestamp(params.get("from_time"), "from_time")
    to_time = _timestamp(params.get("to_time"), "to_time")
    request = RunRequest(params.get("action") or NORMAL, reason, requested_by, ranges, from_time, to_time,
                         dry_run=_dry_run(params.get("dry_run")))  # fmt: skip
    if run_type == "backfill":
        return _airflow_backfill(request, data_interval)
    given = {name for name, value in (("offset_ranges", ranges), ("from_time", from_time), ("to_time", to_time),
                                      ("quarantine_reason", replay_reason), ("quarantine_field", replay_field),
                                      ("quarantine_route", route)) if value}  # fmt: skip
    if replay_reason or replay_field or route:
        request = replace(request, replay=ReplaySelection(replay_reason, replay_field, route=route))
    return _check_action(request, given)
