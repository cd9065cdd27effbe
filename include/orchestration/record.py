"""The last task of every run: one run-ledger row, the Asset event, and the run's verdict.

It runs whatever happened before it (trigger rule ``all_done``), so failed and
skipped runs are recorded too, and then ends the way the run went: failed when
any task failed (so the DAG run is failed), skipped when there was nothing to
do, successful otherwise, and only then with an Asset event for the bronze table.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from include.config import PipelineConfig
from include.contract.actions import DRY_RUN, NORMAL, known
from include.contract.continuity import earlier_tries
from include.contract.errors import ERROR_XCOM_KEY, PipelineError
from include.contract.handoffs import (
    FAILED_REPORT_KEY,
    LAG_KEY,
    REFUSED_KEY,
    ClusterStart,
    ContinuityResult,
    LagSeen,
    PreflightResult,
    Refusal,
    RequestPlan,
    mirror_result,
    pull,
)
from include.contract.jobs import (
    CHECK_CONTINUITY_TASK,
    CHECK_REQUEST_TASK,
    INGEST_TASK,
    MAINTAIN_TASK,
    MIRROR_OFFSETS_TASK,
    PREFLIGHT_TASK,
    RECORD_RUN_TASK,
    START_CLUSTER_TASK,
    TRANSFORM_TASK,
    TRY_NUMBER_KEY,
    WAIT_FOR_LAG_TASK,
)
from include.contract.summaries import RoutedTransformSummary, TransformSummary, ingest_step_summary

if TYPE_CHECKING:
    from include.readers.object_store import TableOptions

#: Task states that make a run a failure (the record task itself excluded).
_FAILED = ("failed", "upstream_failed")


def build_record(cfg: PipelineConfig, *, run_id: str, run_type: str, dag_id: str, states: dict[str, str],
                 xcoms: dict[str, Any], lag_after: object, started_at: Any, finished_at: Any,
                 params: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """The ledger row of one run, from the task states and the tasks' XComs as pulled (pure)."""
    # Only a preflight that let the run go on returns a value; one that blocked it left its failed report.
    passed = PreflightResult.from_xcom(xcoms.get("preflight"))
    checked = passed if xcoms.get("preflight") else PreflightResult.from_xcom(xcoms.get("preflight_failed"))
    lag = LagSeen(checked.lag) if checked.lag else LagSeen.from_xcom(xcoms.get("wait_for_lag") or
                                                                     xcoms.get("wait_for_lag_skip"))  # fmt: skip
    after = LagSeen.from_xcom(lag_after)
    # The record is written whatever a task left, so a partial summary is read leniently.
    summary = ingest_step_summary(xcoms.get("ingest") or {}, strict=False)
    transform = xcoms.get("transform")
    continuity = (ContinuityResult.from_xcom(xcoms.get("check_continuity"))
                  or ContinuityResult.from_xcom(xcoms.get("continuity_failed")))  # fmt: skip
    cluster = ClusterStart.from_xcom(xcoms.get("start_cluster"))
    request = RequestPlan.from_xcom(xcoms.get("check_request"))
    outcome, reason, error = _outcome(states, xcoms, request, checked, continuity)
    partitions = _partitions(summary.partitions, lag, after, continuity)
    earlier_rows, earlier_commits = earlier_tries(continuity.report if continuity else None)
    gaps = passed.gaps()  # offsets skip_offsets passed are not in bronze either: counted as lost
    version_before = passed.table_version
    return {
        "pipeline": cfg.name,
        "run_id": run_id,
        "run_type": run_type,
        "dag_id": dag_id,
        "action": (request.action if xcoms.get("check_request") else None) or params.get("action") or NORMAL,
        "requested_by": request.requested_by,
        "request_reason": request.reason or params.get("reason") or None,
        "outcome": outcome,
        "reason": reason,
        "started_at": started_at,
        "finished_at": finished_at,
        "duration_s": (finished_at - started_at).total_seconds() if started_at and finished_at else None,
        "cluster_profile": cfg.cluster.profile,
        "master_url": cluster.master_url,
        "cluster_choice": cluster.choice,
        "epoch": summary.epoch,
        "bronze_version_before": version_before,
        "bronze_version_after": summary.bronze_version if summary.bronze_version is not None else version_before,
        "rows": summary.rows + earlier_rows,
        "commits": summary.commits + earlier_commits,
        **_tries(xcoms, transform, continuity.report if continuity else None),
        "lag_before": lag.total_lag,
        "lag_after": after.total_lag,
        "lost": sum(int(str(g["until"])) - int(str(g["from"])) for g in gaps) if gaps else lag.report.get("total_lost", 0),
        "retention_left_s": lag.report.get("retention_left_s"),
        "continuity": "not checked" if continuity is None else ("CONTINUOUS" if continuity.ok else "BROKEN"),
        **_transform_columns(transform, _dict_or_none(continuity.report.get("transform")) if continuity else None),
        "partitions_json": partitions,
        "gaps_json": gaps,
        "findings_json": checked.findings,
        "continuity_json": continuity.report if continuity else None,
        "topic_ids_json": passed.topic_ids,
        "position_set_json": summary.position_set,
        "maintenance_json": _maintenance(passed, xcoms.get("maintain"), xcoms.get("maintain_ledger"), states),
        "tasks_json": states,
        "params_json": params,
        "request_json": xcoms.get("check_request") or None,
        "error_json": error.to_dict() if error is not None else None,
    }


def _dict_or_none(value: object) -> dict[str, Any] | None:
    return dict(value) if isinstance(value, dict) else None


def _outcome(states: dict[str, str], xcoms: dict[str, Any], request: RequestPlan, checked: PreflightResult,
             continuity: ContinuityResult | None) -> tuple[str, str, PipelineError | None]:  # fmt: skip
    """The run's outcome, the reason the ledger gives for it, and the job's error that failed it."""
    failed = sorted(t for t, s in states.items() if s in _FAILED and t != RECORD_RUN_TASK)
    if request.dry_run is not None and not failed:
        return DRY_RUN, str(request.dry_run.get("summary") or "dry run"), None
    if not failed:
        if states.get(WAIT_FOR_LAG_TASK) == "skipped":
            spec = known(request.action)
            return "skipped", spec.skipped_reason if spec else "nothing to backfill in the window", None
        return "success", "", None
    first = [t for t in failed if states[t] == "failed"] or failed
    reason = f"failed at {', '.join(first)}"
    refused = Refusal.from_xcom(xcoms.get("request_refused"))
    if CHECK_REQUEST_TASK in first and refused:
        reason += ": " + refused.message
    if PREFLIGHT_TASK in first and checked.blocking:
        reason += ": " + " | ".join(checked.blocking)
    if CHECK_CONTINUITY_TASK in first and continuity:
        reason += ": " + " | ".join(continuity.violations)
    error = _job_error(first, xcoms)
    if error is not None:
        reason += f": {type(error).__name__}: {error}"
    return "failed", reason, error


def _partitions(written_by_job: Mapping[str, Mapping[str, Any]], lag: LagSeen, after: LagSeen,
                continuity: ContinuityResult | None) -> list[dict[str, Any]]:  # fmt: skip
    """The ledger's ``partitions_json``: each partition's range written and its lag before and after."""
    lag_by_tp, after_by_tp, left_by_tp = lag.partitions(), after.partitions(), lag.retention_left_s()
    written: Mapping[tuple[str, int], Mapping[str, Any]]
    written = {(t, int(p)): v for t, parts in written_by_job.items() for p, v in parts.items()}
    # Every try counts: rows an earlier, retried try of ingest committed are the run's too (the continuity
    # check read them from the run's commits), and so are the partitions' ranges then.
    if continuity and continuity.report.get("earlier_tries_rows"):
        written = {(str(p["topic"]), int(str(p["partition"]))): p
                   for p in continuity.partitions()}  # fmt: skip
    partitions = []
    for tp in sorted(set(lag_by_tp) | set(after_by_tp) | set(written)):
        before, later, w = lag_by_tp.get(tp, {}), after_by_tp.get(tp, {}), written.get(tp, {})
        partitions.append({
            "topic": tp[0], "partition": tp[1],
            "from": w.get("from"), "until": w.get("until"), "rows": w.get("rows", 0),
            "lag_before": before.get("lag"), "lag_after": later.get("lag"),
            "earliest": later.get("earliest", before.get("earliest")),
            "latest": later.get("latest", before.get("latest")),
            "next_offset": later.get("next_offset", before.get("next_offset")),
            "retention_left_s": left_by_tp.get(tp),
        })  # fmt: skip
    return partitions


#: The job tasks whose failure leaves the job's error in XCom (include/orchestration/job_operator.py).
JOB_TASKS = (INGEST_TASK, TRANSFORM_TASK, MAINTAIN_TASK)


def _tries(xcoms: dict[str, Any], transform: Any, continuity: Any) -> dict[str, Any]:
    """Ledger columns ``tries`` (the most tries a step took) and ``tries_json`` (per step), from the try number
    each step's XCom carries; empty when no step reported one."""
    reported = {INGEST_TASK: xcoms.get("ingest"), TRANSFORM_TASK: transform, MAINTAIN_TASK: xcoms.get("maintain"),
                CHECK_CONTINUITY_TASK: continuity}  # fmt: skip
    tries = {task: int(x[TRY_NUMBER_KEY]) for task, x in reported.items()
             if isinstance(x, dict) and x.get(TRY_NUMBER_KEY)}  # fmt: skip
    return {"tries": max(tries.values()), "tries_json": tries} if tries else {}


def _job_error(failed: list[str], xcoms: dict[str, Any]) -> PipelineError | None:
    """The error of the first failed job task, rebuilt from its fields (XCom ``<task>_error``), or ``None``."""
    for task in failed:
        data = xcoms.get(f"{task}_error") if task in JOB_TASKS else None
        if isinstance(data, dict):
            return PipelineError.from_dict(data)
    return None


def _maintenance(preflight: PreflightResult, tables: dict[str, Any] | None, ledger: dict[str, Any] | None,
                 states: dict[str, str]) -> dict[str, Any] | None:  # fmt: skip
    """What the run's maintenance did: the maintain task's tables and the ledger's; ``None`` when none was due."""
    due = preflight.maintenance_due
    if not due and not ledger:
        return None
    out: dict[str, Any] = {"tables": {}}
    if due:
        out["due"] = due
        out["tables"].update((tables or {}).get("tables") or {})
        if not tables:
            out["tables_state"] = states.get(MAINTAIN_TASK, "not run")
    if ledger:
        out["ledger_due"] = ledger["due"]
        out["tables"]["ledger"] = ledger["result"]
    return out


def maintain_ledger(cfg: PipelineConfig, *, options: TableOptions | None = None) -> dict[str, Any] | None:
    """The ledger's maintenance when due (:mod:`include.contract.maintenance`), before the run's row is written.

    A failure is recorded (``{"error": ...}``) and never stops the row: the
    ledger stays correct without maintenance, and it stays due.
    ``options``: the task's :class:`~include.readers.object_store.TableOptions` (``None``: made here).
    """
    from include.orchestration import preflight_run
    from include.readers import object_store, run_ledger

    options = options or object_store.TableOptions(cfg)
    try:
        due = preflight_run.maintenance_due(cfg, "ledger", preflight_run.utcnow(), options=options)
    except Exception as exc:  # noqa: BLE001 - the row must be written whatever the ledger's state
        print(f"ledger maintenance not checked: {exc}")
        return None
    if not due:
        return None
    try:
        result = run_ledger.maintain(cfg.tables.ledger_path, storage_options=options("ledger_path"))
    except Exception as exc:  # noqa: BLE001 - see above
        result = {"path": cfg.tables.ledger_path, "error": f"{type(exc).__name__}: {exc}"}
        print(f"ledger maintenance failed ({result['error']}); it stays due for the next run")
        return {"due": due, "result": result}
    if "files_before" in result:
        print(f"ledger maintained ({due}): files {result['files_before']} -> {result['files_after']}, "
              f"{result['seconds']:.1f}s")  # fmt: skip
    return {"due": due, "result": result}


def _transform_columns(summary: dict[str, Any] | None, checked: dict[str, Any] | None) -> dict[str, Any]:
    """Ledger columns of the transform: its counts (from the continuity check's reading of
    the silver commits when there is one, else the job's own summary)."""
    if summary is None and checked is None:
        return {}
    counts = ("read", "upserted", "deleted", "quarantined", "superseded")
    silver_version = None
    if checked:  # the continuity check's counts are the same keys, read back from silver's commits
        source = {k: checked.get(k) for k in counts}
    elif summary is not None and "routes" in summary:
        # A routed transform: the bronze records it read, and what the routes did with theirs, summed (the
        # routes' own counts and silver versions stay in transform_json).
        routed = RoutedTransformSummary.from_json(summary, strict=False)
        source = {"read": routed.bronze_read,
                  **{k: sum(getattr(r, k) or 0 for r in routed.routes.values()) for k in counts[1:]}}  # fmt: skip
    else:
        job = TransformSummary.from_json(summary, strict=False) if summary is not None else None
        source = {k: getattr(job, k) if job is not None else None for k in counts}
    if summary is not None and "routes" not in summary:
        silver_version = TransformSummary.from_json(summary, strict=False).silver_version
    return {
        "silver_read": source["read"],
        "silver_upserted": source["upserted"],
        "silver_deleted": source["deleted"],
        "quarantined": source["quarantined"],
        "superseded": source["superseded"],
        "silver_version_after": silver_version,
        "transform_json": {"job": summary, "check": checked},
    }


def record_run(cfg: PipelineConfig, outlets: list[Any], context: Any) -> dict[str, Any]:
    """Task body of ``record_run``: write the ledger row, then end as the run went."""
    from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

    from include.orchestration import preflight_run, run_folder, run_lock
    from include.orchestration.run_context import job_run_type
    from include.readers import connections, object_store, run_ledger

    ti = context["ti"]
    run_id = context["run_id"]
    # One connection lookup for every table this task reads and writes and for the lock (none when all local).
    options = object_store.TableOptions(cfg)
    states = ti.get_task_states(dag_id=ti.dag_id, run_ids=[run_id]).get(run_id, {})
    # The values as pulled: build_record reads each with its hand-off's from_xcom (include/contract/handoffs.py).
    xcoms = {
        "check_request": pull(context, CHECK_REQUEST_TASK),
        "request_refused": pull(context, CHECK_REQUEST_TASK, REFUSED_KEY),
        "wait_for_lag": pull(context, WAIT_FOR_LAG_TASK),
        "wait_for_lag_skip": pull(context, WAIT_FOR_LAG_TASK, LAG_KEY),
        "preflight": pull(context, PREFLIGHT_TASK),
        "preflight_failed": pull(context, PREFLIGHT_TASK, FAILED_REPORT_KEY),
        "start_cluster": pull(context, START_CLUSTER_TASK),
        "ingest": pull(context, INGEST_TASK),
        "transform": pull(context, TRANSFORM_TASK) if cfg.has_transform else None,
        "check_continuity": pull(context, CHECK_CONTINUITY_TASK),
        "continuity_failed": pull(context, CHECK_CONTINUITY_TASK, FAILED_REPORT_KEY),
        "maintain": pull(context, MAINTAIN_TASK),
        # Only a job task that failed left an error: one XCom read each, not one per job task.
        **{f"{task}_error": pull(context, task, ERROR_XCOM_KEY) for task in JOB_TASKS if states.get(task) == "failed"},
    }
    xcoms["maintain_ledger"] = maintained = maintain_ledger(cfg, options=options)
    lag_after: object = None
    ran = states.get(WAIT_FOR_LAG_TASK) == "success"
    mirrored = mirror_result(context) if states.get(MIRROR_OFFSETS_TASK) == "success" else None
    if not ran:
        lag_after = xcoms["wait_for_lag_skip"]
    elif mirrored is not None and mirrored.lag_after is not None:
        # Read by mirror_offsets from the same table state it committed: one bronze open and one Kafka read fewer.
        lag_after = mirrored.lag_after
    else:
        try:
            client = connections.kafka_client_config(cfg.kafka.connection_id)
            lag_after = preflight_run.snapshot(cfg, client, options=options)[0].to_json(preflight_run.utcnow())
        except Exception as exc:  # noqa: BLE001 - the record must be written even when Kafka is down
            print(f"lag after the run not measured: {exc}")
    dag_run = context["dag_run"]
    row = build_record(
        cfg, run_id=run_id, run_type=job_run_type(context), dag_id=ti.dag_id, states=states, xcoms=xcoms,
        lag_after=lag_after, started_at=getattr(dag_run, "start_date", None), finished_at=preflight_run.utcnow(),
        params={k: v for k, v in (context.get("params") or {}).items()},
    )  # fmt: skip
    try:
        version = run_ledger.append_run(cfg.tables.ledger_path, row, properties=cfg.tables.retention_properties(),
                                        storage_options=options("ledger_path"))  # fmt: skip
    finally:
        # A job task killed during its submit could not remove its credentials; no later step needs them.
        if run_folder.remove_secrets(run_folder.run_dir(cfg, run_id)):
            print("record_run: removed the credentials files a killed submit left")
        # Whatever happened, the next run of this pipeline may go (include/orchestration/run_lock.py).
        released = run_lock.release(run_lock.lock_folder(cfg, options), run_id=run_id)
        print(f"pipeline lock {'released' if released else 'was not held by this run'}")
    try:
        pruned = run_folder.prune_run_folders(cfg, keep=[run_id], options=options)
        if pruned:
            print(f"record_run: removed {len(pruned)} run folder(s) past maintenance.run_folders_keep_days "
                  f"{cfg.maintenance.run_folders_keep_days} / run_folders_keep {cfg.maintenance.run_folders_keep}")
    except OSError as exc:  # the row is written: a folder that cannot go now goes on a later run
        print(f"record_run: pruning run folders failed: {exc}")
    line = (
        f"SUMMARY record_run: {row['outcome']}{': ' + row['reason'] if row['reason'] else ''}; "
        f"{row['rows']} rows in {row['commits']} commits, lag {row['lag_before']} -> {row['lag_after']}, "
        f"continuity {row['continuity']}, bronze version {row['bronze_version_after']}, "
        f"ledger version {version}"
    )
    if cfg.has_transform and row.get("silver_read") is not None:
        line += (
            f"; transform read {row['silver_read']}: {row['silver_upserted']} upserted, {row['silver_deleted']} "
            f"deleted, {row['quarantined']} quarantined, {row['superseded']} superseded"
        )
    ledger = (maintained or {}).get("result") or {}
    if "files_before" in ledger:
        line += f"; ledger maintained: files {ledger['files_before']} -> {ledger['files_after']}"
    print(line)
    if row["outcome"] == "failed":
        raise AirflowFailException(f"run of pipeline {cfg.name!r} {row['reason']} (recorded in {cfg.tables.ledger_path})")
    if row["outcome"] == "skipped":
        raise AirflowSkipException("no new records; recorded in the run ledger")
    extra = {k: row[k] for k in ("run_id", "run_type", "rows", "commits", "lag_before", "lag_after",
                                 "bronze_version_before", "bronze_version_after", "continuity", "epoch")}  # fmt: skip
    extra["partitions"] = json.loads(json.dumps(row["partitions_json"]))
    if cfg.has_transform:
        extra.update({k: row.get(k) for k in ("silver_read", "silver_upserted", "silver_deleted", "quarantined",
                                              "superseded", "silver_version_after")})  # fmt: skip
    for asset in outlets:
        context["outlet_events"][asset].extra = extra
    return extra
