"""The trigger form's actions, one :class:`ActionSpec` each, and the registry the rest of the code reads.

An action's spec says everything the code outside the action's own job needs to know about it: how
the form shows it, which of the form's params it takes and requires, the rules its request must meet
(checked at trigger time by :mod:`include.orchestration.trigger_guard` and again by ``check_request``,
both through :func:`include.contract.manual_ops.parse_request`), how ``check_request`` plans it and what
the preflight does with it, which job runs it, and how the ledger and the monitoring page show it.
Nothing else compares an action's name.

Adding an action: its spec below (its checks beside it), one line in :data:`REGISTRY`, and what its
run does in the job (``spark_jobs/``); a planner or preflight kind it names that does not exist yet
is one function in :mod:`include.orchestration.request_plan` or :mod:`include.orchestration.preflight_run`.

The request itself (:class:`RunRequest`) lives here too: its checks are the specs'.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any, Literal

from include.contract.errors import ContractError, PipelineError
from include.contract.replay import ReplaySelection

NORMAL = "normal"
#: The run ledger's outcome of a dry run (:mod:`include.contract.dry_run`): nothing done, its report recorded.
DRY_RUN = "dry_run"
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

#: How ``check_request`` plans a run (:mod:`include.orchestration.request_plan`): ``offsets`` and ``time``
#: against Kafka and the table, ``skip`` leaves the ranges to the preflight, ``replay`` counts quarantine.
PlanKind = Literal["offsets", "time", "skip", "replay"]
#: What the preflight does with the request (:mod:`include.orchestration.preflight_run`): ``acknowledge``
#: turns data loss into gaps, ``skip`` records the ranges as gaps, ``backfill`` keeps only what makes the
#: offsets meaningless, ``position`` sets where the table stands.
PreflightKind = Literal["acknowledge", "skip", "backfill", "position"]
#: The form's params beyond ``action`` and ``reason``, grouped as a refusal names them.
OFFSET_PARAMS = ("offset_ranges",)
TIME_PARAMS = ("from_time", "to_time")
QUARANTINE_PARAMS = ("quarantine_reason", "quarantine_field", "quarantine_route")
PARAM_GROUPS = (OFFSET_PARAMS, TIME_PARAMS, QUARANTINE_PARAMS)


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
        """The item as the form and the plan's XCom spell it (``from``, ``until``)."""
        return {
            "topic": self.topic,
            "partition": self.partition,
            "from": self.from_offset,
            "until": self.until_offset,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> OffsetRequest:
        """The item :meth:`to_json` wrote."""
        return cls(str(data["topic"]), data.get("partition"), int(data["from"]), int(data["until"]))


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
    #: Report what the run would do, and do nothing (:mod:`include.contract.dry_run`).
    dry_run: bool = False

    @property
    def spec(self) -> ActionSpec:
        """The spec of the request's action."""
        return spec(self.action)

    @property
    def is_backfill(self) -> bool:
        """Whether the run re-reads ranges with ``kafka_backfill`` instead of reading what is new."""
        return self.spec.backfill

    def describe(self) -> str:
        """The request in a few words, for task logs."""
        if self.action == NORMAL:
            return "normal run"
        text = f"dry run of {self.action}" if self.dry_run else self.action
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


def _as_given(request: RunRequest) -> RunRequest:
    return request


@dataclass(frozen=True)
class ActionSpec:
    """One action of the trigger form: what the form, the request's checks, the planning, the preflight,
    the jobs, the run ledger and the monitoring page need to know about it."""

    name: str
    #: How the form's action list shows it.
    label: str
    #: The form's params it takes beyond ``action`` and ``reason`` (:data:`PARAM_GROUPS`' names).
    takes: tuple[str, ...] = ()
    #: Params it cannot do without, and the refusal when one is missing.
    requires: tuple[str, ...] = ()
    missing: str = ""
    #: Its rules beyond ``takes`` and ``requires``; returns the request, completed (a replay's selection).
    check: Callable[[RunRequest], RunRequest] = _as_given
    #: Offered by the trigger form (``airflow_backfill`` is a run type, not a choice).
    in_form: bool = True
    #: Needs a reason, recorded in the run ledger with who asked.
    needs_reason: bool = True
    #: Re-reads ranges with ``kafka_backfill`` (the ledger's ``backfill`` rows); otherwise ingest runs.
    backfill: bool = False
    #: How ``check_request`` plans it; ``None``: nothing to plan.
    plan: PlanKind | None = None
    #: What the preflight does with it; ``None``: the pipeline's data-loss policy alone.
    preflight: PreflightKind | None = None
    #: A plan that finds nothing to re-read refuses the run (an Airflow backfill's interval may hold nothing).
    refuses_empty_plan: bool = True
    #: Ingest starts a new checkpoint epoch at the table's next offsets (``--run-type rebuild_checkpoint``).
    rebuilds_checkpoint: bool = False
    #: Listed among the page's manual actions (the ledger records who asked and why).
    manual: bool = True
    #: The ledger's reason when ``wait_for_lag`` skips the run.
    skipped_reason: str = "nothing to backfill in the window"
    #: Has a dry run (``dry_run: true``): what the run would do, reported without a cluster or the lock.
    dry_runs: bool = False


def _refuse_empty_window(request: RunRequest) -> None:
    if request.from_time and request.to_time and request.from_time >= request.to_time:
        raise RequestError(
            f"from_time {request.from_time.isoformat()} is not before to_time {request.to_time.isoformat()} "
            "(to_time is exclusive)"
        )


def _check_replay(request: RunRequest) -> RunRequest:
    _refuse_empty_window(request)
    selection = request.replay or ReplaySelection()
    return replace(request, offset_ranges=(), replay=replace(selection, from_time=request.from_time,
                                                              to_time=request.to_time))  # fmt: skip


def _check_skip(request: RunRequest) -> RunRequest:
    whole = next((r for r in request.offset_ranges if r.partition is None), None)
    if whole is not None:
        raise RequestError(
            f"offset_ranges: skip_offsets skips records of one partition at a time; give the partition of "
            f"topic {whole.topic!r} (ingest stands at a different offset on each)"
        )
    return request


def _check_time(request: RunRequest) -> RunRequest:
    _refuse_empty_window(request)
    return request


_POSITION_LABELS = {
    REESTABLISH_POSITION: "Re-establish the position from bronze's own rows (max offset + 1), new checkpoint",
    REREAD_AFTER_RESTORE: "After a RESTORE: read again from the restored table's position, new checkpoint",
    KEEP_POSITION_AFTER_RESTORE: "After a RESTORE: keep the position, record what the restore undid",
}

#: Every action, by name; the form offers those ``in_form``, in this order.
REGISTRY: dict[str, ActionSpec] = {s.name: s for s in (
    ActionSpec(NORMAL, "Normal run: read what is new", needs_reason=False, manual=False,
               skipped_reason="no new records"),
    ActionSpec(BACKFILL_OFFSETS, "Backfill by offsets: re-read offset ranges", takes=OFFSET_PARAMS,
               requires=OFFSET_PARAMS, missing='offset_ranges: required for backfill_offsets, e.g. [{"topic": '
               '"orders", "partition": 0, "from": 0, "until": 100}] (leave partition out for all partitions)',
               backfill=True, plan="offsets", preflight="backfill", dry_runs=True),
    ActionSpec(BACKFILL_TIME, "Backfill by time: re-read records by Kafka timestamp", takes=TIME_PARAMS,
               requires=TIME_PARAMS, missing="from_time and to_time: both required for backfill_time",
               check=_check_time, backfill=True, plan="time", preflight="backfill", dry_runs=True),
    ActionSpec(REBUILD_CHECKPOINT, "Rebuild checkpoint: new checkpoint at the table's next offsets",
               rebuilds_checkpoint=True),
    ActionSpec(ACKNOWLEDGE_GAP, "Acknowledge data loss: accept the gap the preflight finds, with a reason",
               preflight="acknowledge"),
    ActionSpec(SKIP_OFFSETS, "Skip offsets at ingest: pass records ingest cannot read (recorded as a gap), with a "
               "reason", takes=OFFSET_PARAMS, requires=OFFSET_PARAMS, missing='offset_ranges: required for '
               'skip_offsets, e.g. [{"topic": "orders", "partition": 0, "from": 41, "until": 42}]: from is where '
               "ingest stands on that partition", check=_check_skip, plan="skip", preflight="skip"),
    *(ActionSpec(name, label, preflight="position") for name, label in _POSITION_LABELS.items()),
    ActionSpec(REPLAY_QUARANTINE, "Replay quarantine: the transform's rules again over quarantined records, after "
               "a fix", takes=TIME_PARAMS + QUARANTINE_PARAMS, check=_check_replay, plan="replay", dry_runs=True),
    ActionSpec(AIRFLOW_BACKFILL, "Airflow backfill: re-read the run's data interval by Kafka timestamp",
               in_form=False, backfill=True, plan="time", preflight="backfill", refuses_empty_plan=False),
)}  # fmt: skip

#: The trigger form's actions and how the form shows them.
ACTIONS: dict[str, str] = {s.name: s.label for s in REGISTRY.values() if s.in_form}


def spec(action: str) -> ActionSpec:
    """The spec of ``action``; raises :class:`ContractError` for a name no spec has."""
    found = REGISTRY.get(action)
    if found is None:
        raise ContractError(f"action {action!r}: no such action; the actions are {', '.join(REGISTRY)}")
    return found


def known(action: object) -> ActionSpec | None:
    """The spec of ``action`` when it names one (a value read back from an XCom or the ledger), else ``None``."""
    return REGISTRY.get(action) if isinstance(action, str) else None


def takers(params: tuple[str, ...]) -> list[str]:
    """The form's actions that take the param group ``params``, in the form's order."""
    return [s.name for s in REGISTRY.values() if s.in_form and set(params) & set(s.takes)]


def action_hint(dag_id: str, action: str, reason: str = "<why>", **params: Any) -> str:
    """How to trigger ``action``: its name in the trigger form and the exact CLI command (with ``params``)."""
    if action not in ACTIONS:
        raise ContractError(f"unknown trigger-form action {action!r}")
    conf = json.dumps({"action": action, "reason": reason, **params})
    return f"the trigger form's action {action!r} (airflow dags trigger {dag_id} -c '{conf}')"
