"""``check_request``'s plan: what the run will do, checked against the pipeline, Kafka and the table.

How a request is planned is its action's spec (:attr:`include.contract.actions.ActionSpec.plan`):
``offsets`` and ``time`` read Kafka and the table and check the ranges
(:mod:`include.contract.backfill_plan`), ``skip`` leaves its ranges to the preflight, which reads both
anyway, and ``replay`` counts the quarantined records it takes. The plan is the XCom of ``check_request``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any, TypedDict

from include.config import PipelineConfig
from include.contract import backfill_plan
from include.contract.actions import RequestError, RunRequest
from include.contract.handoffs import PreflightResult, RequestPlan
from include.contract.offsets import PositionMap, TopicState
from include.contract.replay import ReplaySelection
from include.contract.routes import UNROUTED
from include.orchestration.preflight_run import KAFKA_TIMEOUT_S, read_progress, recorded_topic_ids
from include.readers import delta_progress, kafka_state
from include.readers.object_store import TableOptions


def run_backlog(plan: RequestPlan, preflight: PreflightResult | None) -> int | None:
    """How many records this run will read: a backfill's offsets, else the preflight's lag; ``None`` if unknown."""
    if plan.is_backfill:
        return plan.offsets
    lag = (preflight.lag if preflight is not None else {}).get("total_lag")
    return lag if isinstance(lag, int) else None


def plan_request(cfg: PipelineConfig, client: dict[str, str], request: RunRequest, *,
                 options: TableOptions | None = None, reasons: dict[str, int] | None = None) -> RequestPlan:  # fmt: skip
    """What the run will do (XCom of ``check_request``), planned as its action's spec says: a backfill's
    offset ranges, checked against the pipeline, Kafka and the table; raises :class:`RequestError`.

    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here, if bronze is read);
    ``reasons``, when given, gets a replay's selected rows per reason, from the same pass that counts them.
    """
    plan = RequestPlan(request.action, request.reason, request.requested_by, request.describe())
    kind = request.spec.plan
    if kind == "replay":
        return replace(plan, replay=plan_replay(cfg, request, options=options, reasons=reasons))
    if kind == "skip":
        # Checked against Kafka and the table by the preflight, which reads both anyway.
        return replace(plan, skip=request.offset_ranges)
    if kind is None:
        return plan
    topics = kafka_state.read_topics(client, topics=cfg.kafka.topics, pattern=cfg.kafka.topic_pattern,
                                     timeout_s=KAFKA_TIMEOUT_S)  # fmt: skip
    progress = read_progress(cfg, topics, options=options)
    table_next = progress.next_offsets if progress else None
    names = sorted(set(table_next or {}) - set(topics))
    if names:  # topics the table read that no longer match: asked for by name, so their absence shows
        topics = {**topics, **kafka_state.read_topics(client, topics=names, pattern=None, timeout_s=KAFKA_TIMEOUT_S)}
    if kind == "offsets":
        planned = backfill_plan.plan_offsets_backfill(request, pipeline=cfg.name, kafka=topics, table_next=table_next)
    else:
        planned = _plan_time(cfg, client, request, topics, table_next)
        assert request.from_time is not None and request.to_time is not None
        plan = replace(plan, time_range={"from": request.from_time.isoformat(), "to": request.to_time.isoformat()})
    _refuse_recreated(planned, recorded_topic_ids(progress, topics), topics)
    return replace(plan, ranges=tuple(r.to_json() for r in planned.ranges), notes=planned.notes,
                   offsets=planned.offsets)  # fmt: skip


def _plan_time(cfg: PipelineConfig, client: dict[str, str], request: RunRequest, topics: Mapping[str, TopicState],
               table_next: PositionMap | None) -> backfill_plan.BackfillPlan:  # fmt: skip
    """A backfill by time: Kafka's offsets of the window's two ends, capped at the table's position."""
    parts = [(t, p) for t in sorted(table_next or {}) if t in topics for p in topics[t].partitions]
    assert request.from_time is not None and request.to_time is not None
    start = kafka_state.offsets_for_times(client, parts, request.from_time, timeout_s=KAFKA_TIMEOUT_S)
    end = kafka_state.offsets_for_times(client, parts, request.to_time, timeout_s=KAFKA_TIMEOUT_S)
    args = _TimeBackfillArgs(pipeline=cfg.name, kafka=topics, table_next=table_next, start_offsets=start,
                             end_offsets=end)  # fmt: skip
    try:
        return backfill_plan.plan_time_backfill(request, **args)
    except RequestError:
        # Say what Kafka holds: the time of each partition's first record.
        first = kafka_state.record_timestamps(
            client, {tp: topics[tp[0]].partitions[tp[1]].earliest for tp in parts}, timeout_s=KAFKA_TIMEOUT_S
        )
        return backfill_plan.plan_time_backfill(request, **args, earliest_times=first)


def _refuse_recreated(planned: backfill_plan.BackfillPlan, recorded: Mapping[str, str],
                      topics: Mapping[str, TopicState]) -> None:  # fmt: skip
    """A topic deleted and recreated since the table read it: its offsets name other records now."""
    for topic in sorted({r.topic for r in planned.ranges}):
        now = topics[topic].topic_id
        if recorded.get(topic) and now and recorded[topic] != now:
            raise RequestError(
                f"topic {topic!r} was deleted and recreated since the table read it (topic id {recorded[topic]}, "
                f"now {now}): its offsets now name other records, so they cannot be backfilled"
            )


def replay_quarantine_path(cfg: PipelineConfig, selection: ReplaySelection) -> str:
    """The quarantine table a ``replay_quarantine`` request reads: the pipeline's, or on a routed pipeline
    the named route's; refused (:class:`RequestError`) without a transform or without the route it needs."""
    if not cfg.has_transform:
        raise RequestError(
            f"pipeline {cfg.name!r} has no transform section, so it has no quarantine to replay"
        )
    if cfg.routing is None:
        if selection.route:
            raise RequestError(
                f"quarantine_route: pipeline {cfg.name!r} does not route its records (no transform.routes), so "
                f"it has one quarantine, {cfg.tables.quarantine_path}; clear quarantine_route"
            )
        return cfg.tables.quarantine_path
    names = ", ".join(cfg.routing.names)
    if selection.route == UNROUTED:
        raise RequestError(
            f"quarantine_route: records no route took ({cfg.routing.unrouted_path}) are not replayed; add a "
            f"route that matches them to transform.routes: a new route reads all of bronze from its start"
        )
    route = next((r for r in cfg.routing.routes if r.name == selection.route), None)
    if route is None:
        got = f"got {selection.route!r}" if selection.route else "got none"
        raise RequestError(
            f"quarantine_route: pipeline {cfg.name!r} routes its records, and each route has its own quarantine; "
            f"name one of its routes ({names}), {got}"
        )
    return route.quarantine_path


def plan_replay(cfg: PipelineConfig, request: RunRequest, *, options: TableOptions | None = None,
                reasons: dict[str, int] | None = None) -> dict[str, Any]:  # fmt: skip
    """A ``replay_quarantine`` request's selection and how many quarantined records it takes (``reasons``, when
    given, gets them per reason); refused (:class:`RequestError`) without a transform, or when it takes none."""
    assert request.replay is not None
    selection = request.replay
    path = replay_quarantine_path(cfg, selection)
    options = options or TableOptions(cfg)
    selected, total = delta_progress.quarantine_selected(path, selection, storage_options=options("quarantine_path"),
                                                         reasons=reasons)  # fmt: skip
    if not selected:
        raise RequestError(
            f"quarantine {path} holds {total} records and none is among the {selection.describe()}; "
            "widen the selection (or leave its filters empty for every record not replayed yet)"
        )
    return {**selection.to_json(), "rows": selected}


class _TimeBackfillArgs(TypedDict):
    """The arguments of :func:`backfill_plan.plan_time_backfill` that :func:`plan_request` gives both its calls."""

    pipeline: str
    kafka: Mapping[str, TopicState]
    table_next: PositionMap | None
    start_offsets: Mapping[tuple[str, int], int | None]
    end_offsets: Mapping[tuple[str, int], int | None]
