"""The reads behind ``wait_for_lag`` and ``preflight``: Kafka and the table now, and the verdict on them.

Every function takes the pipeline's configuration and the Kafka client settings from its Airflow
connection and reads without a JVM (confluent-kafka and delta-rs). What the request asks of the
preflight is its action's spec (:attr:`include.contract.actions.ActionSpec.preflight`): ``acknowledge``
turns the data loss found now into gaps, ``skip`` records the ranges to skip, ``backfill`` leaves the
position alone, ``position`` sets where the table stands (:func:`position_choice`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from include.config import PipelineConfig
from include.contract import actions, backfill_plan, table_stand
from include.contract.actions import RequestError, RunRequest
from include.contract.offsets import PositionMap, TopicState, positions_from_json, positions_to_json
from include.contract.preflight import (
    BLOCKING,
    DATA_LOSS,
    Finding,
    LagReport,
    PreflightReport,
    ledger_overlap,
    measure_lag,
    preflight,
)
from include.contract.table_stand import PositionUnknownError
from include.readers import delta_progress, kafka_state, run_ledger
from include.readers.delta_progress import TableProgress
from include.readers.object_store import TableOptions

#: Bound on every Kafka call a task makes, so a dead broker fails a task instead of hanging it.
KAFKA_TIMEOUT_S = 20.0


def utcnow() -> datetime:
    return datetime.now(UTC)


def read_progress(cfg: PipelineConfig, topics: Mapping[str, TopicState], *,
                  options: TableOptions | None = None) -> TableProgress | None:  # fmt: skip
    """Where bronze stands for ``cfg``'s pipeline, looking at the partitions Kafka has now (``topics``).

    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    return delta_progress.read_progress(
        cfg.tables.bronze_path, cfg.name, {t: list(s.partitions) for t, s in topics.items()},
        storage_options=options("bronze_path"),
    )


def snapshot(
    cfg: PipelineConfig, client: dict[str, str], *, options: TableOptions | None = None
) -> tuple[LagReport, TableProgress | None, dict[str, TopicState]]:
    """Lag of the table against Kafka, with the age of the oldest pending record.

    A table whose position cannot be read, or was restored, is reported on
    the lag report (:attr:`LagReport.position_problem`), for the preflight
    to refuse with the action that fixes it; the lag is then not measured.
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    topics = kafka_state.read_topics(
        client, topics=cfg.kafka.topics, pattern=cfg.kafka.topic_pattern, timeout_s=KAFKA_TIMEOUT_S
    )
    try:
        progress = read_progress(cfg, topics, options=options)
    except PositionUnknownError as exc:
        version = delta_progress.table_version(cfg.tables.bronze_path, storage_options=options("bronze_path"))
        return LagReport((), version, position_problem=str(exc)), None, topics
    return lag_report(cfg, client, topics, progress), progress, topics


def lag_report(cfg: PipelineConfig, client: dict[str, str], topics: Mapping[str, TopicState],
               progress: TableProgress | None) -> LagReport:  # fmt: skip
    """The lag of the table standing at ``progress`` against Kafka's ``topics``, oldest pending record included."""
    report = measure_lag(
        progress.next_offsets if progress else None,
        topics,
        table_version=progress.table_version if progress else None,
        starting_offsets=cfg.kafka.starting_offsets,
    )
    if progress is not None and progress.restore is not None:
        report = replace(report, position_problem=restore_problem(cfg, progress))
    pending = {(p.topic, p.partition): p.start for p in report.partitions if p.lag}
    if pending:
        first = kafka_state.first_records(client, pending, timeout_s=KAFKA_TIMEOUT_S)
        seen = [r.at for r in first.values() if r is not None and r.at is not None]
        if seen:
            report = replace(report, oldest_pending=min(seen))
        report = with_retention(report, client, first)
    return report


def with_retention(report: LagReport, client: dict[str, str],
                   first: Mapping[tuple[str, int], kafka_state.FirstRecord | None]) -> LagReport:  # fmt: skip
    """``report`` with each unread partition's time left before Kafka's retention may delete its records
    (:func:`include.readers.kafka_state.retention_forecasts`), from ``first``, the oldest unread record of each."""
    forecasts, note = kafka_state.retention_forecasts(client, report.partitions, first, now=utcnow(),
                                                      timeout_s=KAFKA_TIMEOUT_S)  # fmt: skip
    return replace(report, retention=forecasts, retention_note=note)


def silver_lags(cfg: PipelineConfig, *, options: TableOptions | None = None) -> dict[str | None, int]:
    """Records bronze holds that each silver table has not applied (by route; ``None``: the one silver table),
    from its stand and bronze's commits after the stand furthest behind, read once."""
    options = options or TableOptions(cfg)
    return delta_progress.silver_lags(cfg.tables.bronze_path, {t.route: t.silver_path for t in cfg.silver_targets()},
                                      cfg.name, bronze_options=options("bronze_path"),
                                      silver_options=options("silver_path"))  # fmt: skip


def run_preflight(cfg: PipelineConfig, client: dict[str, str], request: RunRequest | None = None, *,
                  ledger_rows: list[dict[str, Any]] | None = None,
                  options: TableOptions | None = None) -> tuple[PreflightReport, LagReport, TableProgress | None]:  # fmt: skip
    """The preflight verdict for the table and Kafka as they are now, for what the run was asked to do.

    ``acknowledge_gap`` turns the data loss found now into gaps recorded with
    the request's reason (and fails when there is none to acknowledge). A
    backfill leaves the table's position alone, so only findings that make
    its offsets meaningless (a recreated or missing topic) stop it.
    ``ledger_rows``: :func:`preflight_ledger`'s rows, read by the caller.
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    report, progress, topics = snapshot(cfg, client, options=options)
    kind = request.spec.preflight if request is not None else None
    reset, refusal = position_choice(cfg, report, progress, request, options=options)
    table_next = progress.next_offsets if progress else None
    if reset is not None:
        table_next = positions_from_json(reset["positions"])
    verdict = preflight(
        table_next=table_next,
        recorded_topic_ids=recorded_topic_ids(progress, topics),
        kafka=topics,
        configured_topics=cfg.kafka.topics,
        policy="record_and_continue" if kind == "acknowledge" else cfg.data_loss_policy,
        dag_id=cfg.name,
    )
    if reset is None and refusal is None and (report.position_problem is None):
        refusal = ledger_witness(cfg, table_next, ledger_rows, options=options)
    if refusal is not None:
        verdict = _blocked(verdict, refusal)
    if reset is not None:
        verdict = replace(verdict, position_reset=reset)
    if request is not None and kind in _FOR_REQUEST:
        verdict = _FOR_REQUEST[kind](cfg, verdict, request, table_next, topics)
    return verdict, report, progress


def _blocked(verdict: PreflightReport, finding: Finding) -> PreflightReport:
    """``verdict`` with ``finding`` among its findings and blocking the run."""
    return replace(verdict, findings=(*verdict.findings, finding), blocking=(*verdict.blocking, finding))


def _acknowledged(cfg: PipelineConfig, verdict: PreflightReport, request: RunRequest, table_next: PositionMap | None,
                  topics: Mapping[str, TopicState]) -> PreflightReport:  # fmt: skip
    """``acknowledge_gap``: the data loss found now as gaps recorded with the request's reason; a blocking
    finding when there is none to acknowledge."""
    if not verdict.accepted_gaps:
        return _blocked(verdict, Finding("nothing_to_acknowledge", BLOCKING, "", None, (
            "acknowledge_gap: the preflight finds no data loss to acknowledge now: every partition "
            "continues where the table stands (or Kafka still holds what it has not read)"
        )))  # fmt: skip
    who = f" by {request.requested_by}" if request.requested_by else ""
    gaps = tuple(replace(g, reason=f"{g.reason}; acknowledged{who}: {request.reason}")
                 for g in verdict.accepted_gaps)  # fmt: skip
    return replace(verdict, accepted_gaps=gaps, policy=f"{cfg.data_loss_policy} (acknowledged)")


def _for_backfill(cfg: PipelineConfig, verdict: PreflightReport, request: RunRequest, table_next: PositionMap | None,
                  topics: Mapping[str, TopicState]) -> PreflightReport:  # fmt: skip
    """A backfill leaves the table's position alone: only findings that make its offsets meaningless (a
    recreated or missing topic) stop it, and no gap is accepted."""
    return replace(verdict, accepted_gaps=(), blocking=tuple(f for f in verdict.findings if f.severity == BLOCKING))


def _with_skipped(cfg: PipelineConfig, verdict: PreflightReport, request: RunRequest, table_next: PositionMap | None,
                  topics: Mapping[str, TopicState]) -> PreflightReport:  # fmt: skip
    """``skip_offsets``: the verdict with the request's ranges to skip, or a blocking finding saying why not (a
    range that does not start where ingest stands, or one on a partition where the preflight finds data loss
    too, which ``acknowledge_gap`` decides first)."""
    try:
        skipped = backfill_plan.plan_skip(request, table_next=table_next, kafka=topics)
        # A finding's partition may be None (a whole topic's); no skipped range matches it.
        lost: set[tuple[str, int | None]] = {(g.topic, g.partition) for g in verdict.accepted_gaps}
        lost |= {(f.topic, f.partition) for f in verdict.findings if f.kind == DATA_LOSS}
        both = sorted(f"{g.topic}-{g.partition}" for g in skipped if (g.topic, g.partition) in lost)
        if both:
            raise RequestError(
                f"skip_offsets: Kafka deleted records of {', '.join(both)} that the table has not read; "
                f"acknowledge that first ({actions.action_hint(cfg.name, actions.ACKNOWLEDGE_GAP)}), "
                "then skip from where ingest stands after it"
            )
    except RequestError as exc:
        return _blocked(verdict, Finding("skip_refused", BLOCKING, "", None, str(exc)))
    return replace(verdict, skipped=skipped)


#: What the preflight does with a request, by its spec's ``preflight`` kind (``position`` is
#: :func:`position_choice`, before the verdict).
_FOR_REQUEST = {"acknowledge": _acknowledged, "skip": _with_skipped, "backfill": _for_backfill}


#: What the ledger's witness reads of a run's row: not the commits a long run names.
WITNESS_COLUMNS = ("run_id", "finished_at", "outcome", "partitions_json")


#: How many of the ledger's newest files the witness reads.
WITNESS_FILES = 20


def preflight_ledger(cfg: PipelineConfig, *, options: TableOptions | None = None,
                     extra_columns: tuple[str, ...] = ()) -> list[dict[str, Any]]:  # fmt: skip
    """The ledger rows the preflight needs, read once: for the witness and for whether maintenance is due.

    Newest first; the columns of both, from as many of the newest files as
    the larger of the two reads (more rows than ``every_runs`` never change
    whether maintenance is due: see :func:`include.contract.maintenance.due`).
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    ``extra_columns``: more of each row, for a caller that reads the same runs for something else.
    """
    from include.contract import maintenance

    files = max(WITNESS_FILES, cfg.maintenance.every_runs or 0)
    columns = tuple(dict.fromkeys(WITNESS_COLUMNS + maintenance.LEDGER_COLUMNS + extra_columns))
    return run_ledger.newest_runs(cfg.tables.ledger_path, files=files, columns=columns,
                                  storage_options=(options or TableOptions(cfg))("ledger_path"))  # fmt: skip


def ledger_witness(cfg: PipelineConfig, table_next: PositionMap | None, rows: list[dict[str, Any]] | None = None, *,
                   options: TableOptions | None = None) -> Finding | None:  # fmt: skip
    """The run ledger's last successful run against where the table stands now (see :func:`ledger_overlap`).

    ``rows``: the ledger's newest rows with :data:`WITNESS_COLUMNS`, already read (``None``: read here).
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here, if the ledger is read).
    """
    if rows is None:
        rows = run_ledger.newest_runs(cfg.tables.ledger_path, files=WITNESS_FILES, columns=WITNESS_COLUMNS,
                                      storage_options=(options or TableOptions(cfg))("ledger_path"))  # fmt: skip
    for row in rows:  # newest first
        if row["outcome"] != "success":
            continue
        end: PositionMap = {}
        for part in row.get("partitions_json") or ():
            if part.get("next_offset") is not None:
                end.setdefault(part["topic"], {})[int(part["partition"])] = int(part["next_offset"])
        where = f"{row['run_id']!r} (finished {row['finished_at']})"
        return ledger_overlap(table_next, end, run=where,
                              fix=actions.action_hint(cfg.name, actions.REESTABLISH_POSITION))  # fmt: skip
    return None


def position_choice(
    cfg: PipelineConfig, report: LagReport, progress: TableProgress | None, request: RunRequest | None, *,
    options: TableOptions | None = None,
) -> tuple[dict[str, Any] | None, Finding | None]:  # fmt: skip
    """Where a position action asks the table to stand (the job's ``position_reset``), or the refusal.

    With no such action, a table whose position is unusable is refused,
    naming the action that fixes it; an action the table's state does not
    call for is refused too (it would move a good position).
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here, if bronze is read).
    """
    restore = progress.restore if progress is not None else None
    unknown = report.position_problem is not None and progress is None
    if request is None or request.spec.preflight != "position":
        if unknown:
            return None, Finding("position_unknown", BLOCKING, "", None, (
                f"{report.position_problem}. Nothing was read. To continue from the rows bronze holds "
                f"(max offset + 1 per partition, in a new checkpoint epoch), trigger "
                f"{actions.action_hint(cfg.name, actions.REESTABLISH_POSITION)}"
            ))  # fmt: skip
        if restore is not None:
            return None, Finding("table_restored", BLOCKING, "", None, report.position_problem or "")
        return None, None
    action = request.action
    who = f" by {request.requested_by}" if request.requested_by else ""
    why = f"{action}{who}: {request.reason}"
    if action == actions.REESTABLISH_POSITION and (unknown or restore is not None):
        positions = delta_progress.positions_from_rows(
            cfg.tables.bronze_path, storage_options=(options or TableOptions(cfg))("bronze_path"))
        return {"action": action, "reason": why, "positions": positions_to_json(positions)}, None
    if action == actions.REREAD_AFTER_RESTORE and restore is not None and restore.restored_commit is not None:
        version, commit = restore.restored_commit
        return {"action": action, "reason": f"{why}; reading again from Delta version {version}'s position",
                "positions": positions_to_json(commit.next_offsets)}, None  # fmt: skip
    if action == actions.KEEP_POSITION_AFTER_RESTORE and restore is not None and progress is not None:
        undone = []
        if restore.restored_commit is not None:
            back = restore.restored_commit[1].next_offsets
            undone = [{"topic": t, "partition": p, "from": back.get(t, {}).get(p, 0), "until": o}
                      for t, parts in sorted(progress.next_offsets.items()) for p, o in sorted(parts.items())
                      if back.get(t, {}).get(p, 0) < o]  # fmt: skip
        return {"action": action, "reason": why, "positions": positions_to_json(progress.next_offsets),
                "undone": undone, "restore": {"version": restore.version, "restored_to": restore.restored_to}}, None  # fmt: skip
    state = ("its position is readable and no RESTORE undid it" if not unknown and restore is None
             else "the restored version's position is no longer in the table's history")  # fmt: skip
    hint = actions.action_hint(cfg.name, actions.REESTABLISH_POSITION)
    return None, Finding("position_action_refused", BLOCKING, "", None, (
        f"{action}: not applied to bronze table {cfg.tables.bronze_path}: {state}"
        + (f"; {hint} takes the position from the table's rows instead" if restore is not None else "")
    ))  # fmt: skip


def recorded_topic_ids(progress: TableProgress | None, topics: Mapping[str, TopicState]) -> dict[str, str]:
    """The topic ids the table's last progress read, comparable with Kafka's now."""
    if progress is None:
        return {}
    return table_stand.recorded_topic_ids(progress.commit, {t: s.topic_id for t, s in topics.items() if s.topic_id})


def restore_problem(cfg: PipelineConfig, progress: TableProgress) -> str:
    """What a RESTORE after the last progress commit means for the pipeline, and the two ways on."""
    restore = progress.restore
    assert restore is not None
    if restore.restored_commit is not None:
        version, commit = restore.restored_commit
        back = (f"the restored table stands where Delta version {version} left it "
                f"({_positions_text(commit.next_offsets)})")  # fmt: skip
    else:
        back = "the commit it went back to is no longer in the table's history, so its position is unknown"
    return (
        f"bronze table {cfg.tables.bronze_path} was restored to {restore.restored_to} (Delta version "
        f"{restore.version}) after the pipeline's last progress commit, which stood at "
        f"{_positions_text(progress.next_offsets)}; {back}. Nothing was read. Choose: "
        f"{actions.action_hint(cfg.name, actions.REREAD_AFTER_RESTORE)} to read again what the restore "
        f"undid, or {actions.action_hint(cfg.name, actions.KEEP_POSITION_AFTER_RESTORE)} to keep the "
        "position and record what the restore undid"
    )


def _positions_text(positions: PositionMap) -> str:
    return ", ".join(f"{t}-{p} {o}" for t, parts in sorted(positions.items()) for p, o in sorted(parts.items())) or "nothing"


def maintenance_due(cfg: PipelineConfig, part: str, now: datetime, newest: list[dict[str, Any]] | None = None, *,
                    options: TableOptions | None = None) -> str | None:  # fmt: skip
    """Why ``part`` (:data:`include.contract.maintenance.PARTS`) of the pipeline's maintenance is due in the
    run starting ``now``, from the run ledger; ``None`` when it is not (or the pipeline is never maintained).

    ``newest``: the ledger's newest rows already read (:func:`preflight_ledger`), at least ``every_runs`` files'.
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here, if the ledger is read).
    """
    from include.contract import maintenance

    m = cfg.maintenance
    if not m.enabled:
        return None
    path = cfg.tables.ledger_path
    options = options or TableOptions(cfg)
    if newest is not None:
        rows = list(newest)
    elif m.every_runs:
        rows = run_ledger.newest_runs(path, files=m.every_runs, columns=maintenance.LEDGER_COLUMNS,
                                      storage_options=options("ledger_path"))  # fmt: skip
    else:
        rows = []
    window = m.window
    opened = window.opened(now) if window is not None else None
    if opened is not None:  # and every run since the window opened
        seen = {r["run_id"] for r in rows}
        since = run_ledger.runs_since(path, opened, columns=maintenance.LEDGER_COLUMNS,
                                      storage_options=options("ledger_path"))  # fmt: skip
        rows += [r for r in since if r["run_id"] not in seen]
        rows.sort(key=lambda r: r["finished_at"] or datetime.min.replace(tzinfo=UTC), reverse=True)
    return maintenance.due(part, rows, every_runs=m.every_runs, window=window, now=now)
