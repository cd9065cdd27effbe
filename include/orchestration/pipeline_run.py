"""The reads and checks behind each task of a pipeline's DAG run, apart from Airflow itself.

The task functions (:mod:`include.orchestration.tasks`) call these; every function takes
the pipeline's configuration and the Kafka client settings from its Airflow
connection, does its reads without a JVM (confluent-kafka and delta-rs) and
returns plain data that fits in an XCom.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypedDict

from include import settings
from include.config import PipelineConfig
from include.contract import continuity, manual_ops, table_stand
from include.contract.continuity import ContinuityReport, TransformCheck, check_run
from include.contract.errors import PipelineError
from include.contract.locations import local_path, scheme_of
from include.contract.manual_ops import RunRequest
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
from include.contract.silver_stand import SilverStand
from include.contract.table_stand import PositionUnknownError
from include.orchestration import run_lock
from include.private_files import write_private
from include.readers import delta_progress, kafka_state, run_ledger, spark_checkpoint
from include.readers.delta_progress import TableProgress
from include.readers.object_store import TableOptions

#: Bound on every Kafka call a task makes, so a dead broker fails a task instead of hanging it.
KAFKA_TIMEOUT_S = 20.0


def run_folder_name(run_id: str) -> str:
    """The folder name of a run: its id made safe for a path, and a short hash of the id as Airflow wrote it.

    The readable part alone is not one to one: ``a:b`` and ``a_b`` would share
    a folder (and one run's cleanup would take the other's files), and the run
    id ``.``, which Airflow accepts, would name the pipeline's whole runs folder.
    """
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    return f"{re.sub(r'[^A-Za-z0-9_.-]+', '_', run_id)[:120]}-{digest}"


def run_dir(cfg: PipelineConfig, run_id: str) -> Path:
    """A folder for one run's files (job summary, cluster state, logs) on the Airflow worker."""
    return settings.VAR_DIR / "runs" / cfg.name / run_folder_name(run_id)


#: The folder of a run's folder that holds the credentials its jobs read (owner-only files).
SECRETS_DIR = "secrets"


def secrets_dir(folder: Path) -> Path:
    """Where a job's credentials files go in the run folder ``folder``: created owner-only, removed by
    :func:`remove_secrets` once the submit ends, and again by the run's teardown."""
    path = folder / SECRETS_DIR
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    path.chmod(0o700)  # an existing folder keeps its mode otherwise
    return path


def write_secret(folder: Path, name: str, text: str) -> Path:
    """Write ``text`` to the credentials file ``name`` of the run folder ``folder``, readable by its owner only
    (:func:`include.private_files.write_private`)."""
    return write_private(secrets_dir(folder) / name, text)


def remove_secrets(folder: Path) -> bool:
    """Remove every credentials file of the run folder ``folder``; whether there were any."""
    import shutil

    path = folder / SECRETS_DIR
    if not path.exists() and not path.is_symlink():
        return False
    if path.is_symlink():
        path.unlink()
    else:
        shutil.rmtree(path)
    return True


#: A run folder written to within this many seconds is kept whatever the retention says: its run may
#: still be going (a run waiting for the lock, a task between retries).
RECENT_WRITE_S = 3600


def _last_write(folder: Path) -> float:
    """The newest modification time of ``folder`` and its direct entries (a run writes its files there)."""
    newest = folder.stat().st_mtime
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                newest = max(newest, entry.stat(follow_symlinks=False).st_mtime)
            except FileNotFoundError:
                continue
    return newest


def prune_run_folders(cfg: PipelineConfig, *, keep: Iterable[str] = (), now: float | None = None,
                      options: TableOptions | None = None) -> list[str]:  # fmt: skip
    """Remove the pipeline's run folders past its retention; returns the folder names removed, oldest first.

    A folder goes once it is older than ``maintenance.run_folders_keep_days``
    or not among the newest ``maintenance.run_folders_keep``. Never removed:
    the folders of the runs in ``keep`` (the calling run), of the run holding
    the pipeline's lock, and any written to in the last :data:`RECENT_WRITE_S`.
    """
    import shutil
    import time

    runs = settings.VAR_DIR / "runs" / cfg.name
    if not runs.is_dir():
        return []
    protected = {run_folder_name(run_id) for run_id in keep}
    holder = run_lock.holder(lock_folder(cfg, options)) or {}
    if holder.get("run_id"):
        protected.add(run_folder_name(str(holder["run_id"])))
    now = time.time() if now is None else now
    cutoff = now - cfg.maintenance.run_folders_keep_days * 86400
    folders = sorted(((_last_write(f), f) for f in runs.iterdir() if f.is_dir() and not f.is_symlink()),
                     key=lambda item: item[0], reverse=True)  # fmt: skip
    removed = []
    for rank, (written, folder) in enumerate(folders):
        if folder.name in protected or now - written < RECENT_WRITE_S:
            continue
        if rank < cfg.maintenance.run_folders_keep and written >= cutoff:
            continue
        shutil.rmtree(folder)
        removed.append(folder.name)
    return removed[::-1]


def lock_folder(cfg: PipelineConfig, options: TableOptions | None = None) -> Path | run_lock.ObjectStoreFolder:
    """Where the pipeline's run lock is kept (``tables.lock_path``): a folder, or a prefix of an S3 store
    reached with the connection ``tables.storage_connection_id``. Another URI is refused, naming the fix.

    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    from include.readers import object_store

    location = cfg.tables.lock_path
    folder = local_path(location)
    if folder is not None:
        return folder
    if scheme_of(location) not in object_store.S3_SCHEMES:
        raise PipelineError(
            f"pipeline {cfg.name!r}: tables.lock_path {location!r} is on a store where the run lock cannot be "
            f"kept yet (only S3 and S3-compatible stores, {' or '.join(s + '://' for s in object_store.S3_SCHEMES)}, "
            "and filesystems); set tables.lock_path to an s3a:// prefix or to a folder every Airflow worker "
            "that runs the pipeline mounts"
        )  # fmt: skip
    s3 = (options or TableOptions(cfg)).settings("lock_path")
    assert s3 is not None  # an s3a:// or s3:// location, checked above
    return run_lock.ObjectStoreFolder(location, *s3.obstore_args())


@dataclass(frozen=True)
class LockClaim:
    """What :func:`take_lock` found: the epoch this run holds, or the live run it waits for."""

    #: The lock's epoch this run holds, which its Spark jobs carry (``--lock-epoch``); ``None`` while waiting.
    epoch: int | None
    #: The live holder's record while this run waits, else ``None``.
    holder: dict[str, Any] | None = None
    #: A line for the task log: what to do about the holder, or what a takeover stopped and fenced.
    message: str | None = None


def take_lock(cfg: PipelineConfig, *, dag_id: str, run_id: str,
              run_state: Callable[[str, str], str | None]) -> LockClaim:  # fmt: skip
    """Take the pipeline's run lock for ``run_id`` (see :mod:`include.orchestration.run_lock`).

    While another run holds the lock: its holder record and a line that says
    what to do if it is dead. Once taken over from a run that never gave it
    back: first what that run left running here is stopped, then each of the
    pipeline's tables is fenced (:func:`fence_tables`), so that none of that
    run's jobs can commit any more wherever it runs.
    """
    options = TableOptions(cfg)  # one connection lookup for the lock and the tables it may fence
    lock = lock_folder(cfg, options)
    record = run_lock.acquire(lock, dag_id=dag_id, run_id=run_id, run_state=run_state)
    if record.get("run_id") != run_id:
        return LockClaim(None, record, (
            f"waiting: run {record.get('run_id')} of pipeline {cfg.name} holds the lock in {lock} (epoch "
            f"{record.get('epoch')}, host {record.get('host')}) since {record.get('since')}, and Airflow says "
            "that run is still queued or running. If no process runs it any more (a lost "
            "worker, a killed `airflow dags test`), mark it failed (the run's page in the UI: Mark Run as "
            "Failed): this run then takes the lock over and first stops what the dead run left running here"
        ))  # fmt: skip
    epoch = int(record["epoch"])
    dead = record.get("took_over_from") or {}
    if not dead.get("run_id"):
        return LockClaim(epoch)
    stopped = stop_leftovers(cfg, dead["run_id"])
    tables = pipeline_tables(cfg)
    # pipeline_tables names each table after its TablesConfig field (bronze: bronze_path).
    fenced = fence_tables(cfg.name, tables, epoch, storage_options={name: options(f"{name}_path") for name in tables})
    return LockClaim(epoch, None, (
        f"took the lock over from run {dead['run_id']} (epoch {dead.get('epoch')}, host {dead.get('host')}): "
        f"{stopped or 'it left no process running here'}; "
        + (f"fenced {', '.join(fenced)} at epoch {epoch}: no job of that run can commit there any more"
           if fenced else f"no table to fence at epoch {epoch}")
    ))  # fmt: skip


#: Tries of one table's fence commit, each after reading the table again.
FENCE_ATTEMPTS = 3


def pipeline_tables(cfg: PipelineConfig) -> dict[str, str]:
    """The pipeline's tables (name -> location): bronze, and silver and quarantine with a transform."""
    t = cfg.tables
    return {"bronze": t.bronze_path, **({"silver": t.silver_path, "quarantine": t.quarantine_path}
                                       if cfg.transform is not None else {})}  # fmt: skip


def fence_tables(pipeline: str, tables: Mapping[str, str], epoch: int, *,
                 storage_options: Mapping[str, dict[str, str] | None] | None = None) -> list[str]:  # fmt: skip
    """Mark each existing table of ``tables`` (name -> location) with lock epoch ``epoch``; returns those marked.

    One commit per table holding only a txn action (app id
    :func:`include.contract.jobs.lock_app_id`, version ``epoch``) and no
    data: from then on a job of an earlier epoch refuses to commit there, and
    one whose commit races this one loses it (Delta's conflict check on that
    app id). A table already at ``epoch`` or later is left as it is.
    ``storage_options``: the delta-rs options of the tables on an object store, by name (:class:`TableOptions`);
    a table it leaves out is local.
    """
    from deltalake import CommitProperties, DeltaTable, Transaction
    from deltalake.exceptions import CommitFailedError

    from include.contract.jobs import lock_app_id

    app = lock_app_id(pipeline)
    fenced = []
    for name, path in tables.items():
        options = (storage_options or {}).get(name)
        if not DeltaTable.is_deltatable(path, storage_options=options):
            continue
        for attempt in range(1, FENCE_ATTEMPTS + 1):
            table = DeltaTable(path, storage_options=options)
            if (table.transaction_version(app) or 0) >= epoch:
                break
            try:
                table.create_write_transaction(
                    [], "append", table.schema(), partition_by=table.metadata().partition_columns or None,
                    commit_properties=CommitProperties(app_transactions=[Transaction(app, epoch)]),
                )  # fmt: skip
            except CommitFailedError:
                # The stale run's commit carrying its epoch won the race: read the table again and fence after it.
                if attempt == FENCE_ATTEMPTS:
                    raise
                continue
            fenced.append(name)
            break
    return fenced


def stop_leftovers(cfg: PipelineConfig, run_id: str, *, timeout_s: float = 30) -> str | None:
    """Stop what a run that died without its teardown left running here: its job processes and its cluster.

    Called by the run that takes the lock over from ``run_id``, before it
    starts anything, so that no driver of the dead run can still write to the
    checkpoint beside its own. Returns a line for the task log, or ``None``
    when nothing was left. A job process on another machine is not seen here:
    it dies with its own task process (:func:`include.spark.spark_submit.dies_with_parent`).
    """
    import signal
    import time

    from include.spark import spark_cluster

    folder = run_dir(cfg, run_id)
    if not folder.exists():
        return None
    jobs = spark_cluster.recorded_jobs(folder)
    refused = []
    for pid in jobs:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:  # recorded, so ours, yet not ours to kill: say so instead of failing here
            refused.append(pid)
    deadline = time.monotonic() + timeout_s
    while set(spark_cluster.recorded_jobs(folder)) - set(refused) and time.monotonic() < deadline:
        time.sleep(0.1)
    cluster = spark_cluster.stop_standalone(folder / "cluster", timeout_s=timeout_s)
    left = spark_cluster.recorded_jobs(folder) + spark_cluster.running_processes(folder / "cluster")
    if left:
        raise spark_cluster.ClusterError(f"processes {left} of run {run_id} (folder {folder}) survived SIGKILL"
                           f"{f' (not allowed to signal {refused})' if refused else ''}; "
                           "stop them by hand before this pipeline runs again")  # fmt: skip
    if not jobs and not cluster:
        return None
    return (f"run {run_id} died without its teardown; stopped its job processes {jobs} "
            f"and {len(cluster)} processes of its cluster {cluster}")


def run_backlog(plan: dict[str, Any] | None, preflight: dict[str, Any] | None) -> int | None:
    """How many records this run will read: a backfill's offsets, else the preflight's lag; ``None`` if unknown."""
    from include.contract.manual_ops import BACKFILL_ACTIONS

    plan = plan or {}
    if plan.get("action") in BACKFILL_ACTIONS:
        offsets = plan.get("offsets")
        return int(offsets) if isinstance(offsets, int) else None
    lag = ((preflight or {}).get("lag") or {}).get("total_lag")
    return int(lag) if isinstance(lag, int) else None


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
        stamps = kafka_state.record_timestamps(client, pending, timeout_s=KAFKA_TIMEOUT_S)
        seen = [t for t in stamps.values() if t is not None]
        if seen:
            report = replace(report, oldest_pending=min(seen))
    return report


def silver_lag(cfg: PipelineConfig, *, options: TableOptions | None = None) -> int:
    """Records bronze holds that silver has not applied: from silver's stand and bronze's commits after it."""
    options = options or TableOptions(cfg)
    return delta_progress.silver_lag(cfg.tables.bronze_path, cfg.tables.silver_path, cfg.name,
                                     bronze_options=options("bronze_path"), silver_options=options("silver_path"))  # fmt: skip


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
    recorded = recorded_topic_ids(progress, topics)
    action = request.action if request else manual_ops.NORMAL
    acknowledging = action == manual_ops.ACKNOWLEDGE_GAP
    reset, refusal = position_choice(cfg, report, progress, request, options=options)
    table_next = progress.next_offsets if progress else None
    if reset is not None:
        table_next = positions_from_json(reset["positions"])
    verdict = preflight(
        table_next=table_next,
        recorded_topic_ids=recorded,
        kafka=topics,
        configured_topics=cfg.kafka.topics,
        policy="record_and_continue" if acknowledging else cfg.data_loss_policy,
        dag_id=cfg.name,
    )
    if reset is None and refusal is None and (report.position_problem is None):
        refusal = ledger_witness(cfg, table_next, ledger_rows, options=options)
    if refusal is not None:
        verdict = replace(verdict, findings=(*verdict.findings, refusal), blocking=(*verdict.blocking, refusal))
    if reset is not None:
        verdict = replace(verdict, position_reset=reset)
    if acknowledging and request is not None:
        if not verdict.accepted_gaps:
            missing = Finding("nothing_to_acknowledge", BLOCKING, "", None, (
                "acknowledge_gap: the preflight finds no data loss to acknowledge now: every partition "
                "continues where the table stands (or Kafka still holds what it has not read)"
            ))  # fmt: skip
            verdict = replace(verdict, findings=(*verdict.findings, missing), blocking=(*verdict.blocking, missing))
        else:
            who = f" by {request.requested_by}" if request.requested_by else ""
            gaps = tuple(replace(g, reason=f"{g.reason}; acknowledged{who}: {request.reason}")
                         for g in verdict.accepted_gaps)  # fmt: skip
            verdict = replace(verdict, accepted_gaps=gaps, policy=f"{cfg.data_loss_policy} (acknowledged)")
    elif request is not None and request.action == manual_ops.SKIP_OFFSETS:
        verdict = _with_skipped(verdict, request, table_next, topics, dag_id=cfg.name)
    elif request is not None and request.is_backfill:
        verdict = replace(verdict, accepted_gaps=(),
                          blocking=tuple(f for f in verdict.findings if f.severity == BLOCKING))  # fmt: skip
    return verdict, report, progress


def _with_skipped(verdict: PreflightReport, request: RunRequest, table_next: PositionMap | None,
                  topics: Mapping[str, TopicState], *, dag_id: str) -> PreflightReport:  # fmt: skip
    """``skip_offsets``: the verdict with the request's ranges to skip, or a blocking finding saying why not (a
    range that does not start where ingest stands, or one on a partition where the preflight finds data loss
    too, which ``acknowledge_gap`` decides first)."""
    try:
        skipped = manual_ops.plan_skip(request, table_next=table_next, kafka=topics)
        # A finding's partition may be None (a whole topic's); no skipped range matches it.
        lost: set[tuple[str, int | None]] = {(g.topic, g.partition) for g in verdict.accepted_gaps}
        lost |= {(f.topic, f.partition) for f in verdict.findings if f.kind == DATA_LOSS}
        both = sorted(f"{g.topic}-{g.partition}" for g in skipped if (g.topic, g.partition) in lost)
        if both:
            raise manual_ops.RequestError(
                f"skip_offsets: Kafka deleted records of {', '.join(both)} that the table has not read; "
                f"acknowledge that first ({manual_ops.action_hint(dag_id, manual_ops.ACKNOWLEDGE_GAP)}), "
                "then skip from where ingest stands after it"
            )
    except manual_ops.RequestError as exc:
        refused = Finding("skip_refused", BLOCKING, "", None, str(exc))
        return replace(verdict, findings=(*verdict.findings, refused), blocking=(*verdict.blocking, refused))
    return replace(verdict, skipped=skipped)


#: What the ledger's witness reads of a run's row: not the commits a long run names.
WITNESS_COLUMNS = ("run_id", "finished_at", "outcome", "partitions_json")
#: How many of the ledger's newest files the witness reads.
WITNESS_FILES = 20


def preflight_ledger(cfg: PipelineConfig, *, options: TableOptions | None = None) -> list[dict[str, Any]]:
    """The ledger rows the preflight needs, read once: for the witness and for whether maintenance is due.

    Newest first; the columns of both, from as many of the newest files as
    the larger of the two reads (more rows than ``every_runs`` never change
    whether maintenance is due: see :func:`include.contract.maintenance.due`).
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    from include.contract import maintenance

    files = max(WITNESS_FILES, cfg.maintenance.every_runs or 0)
    columns = tuple(dict.fromkeys(WITNESS_COLUMNS + maintenance.LEDGER_COLUMNS))
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
                              fix=manual_ops.action_hint(cfg.name, manual_ops.REESTABLISH_POSITION))  # fmt: skip
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
    action = request.action if request else manual_ops.NORMAL
    restore = progress.restore if progress is not None else None
    unknown = report.position_problem is not None and progress is None
    if action not in manual_ops.POSITION_ACTIONS:
        if unknown:
            return None, Finding("position_unknown", BLOCKING, "", None, (
                f"{report.position_problem}. Nothing was read. To continue from the rows bronze holds "
                f"(max offset + 1 per partition, in a new checkpoint epoch), trigger "
                f"{manual_ops.action_hint(cfg.name, manual_ops.REESTABLISH_POSITION)}"
            ))  # fmt: skip
        if restore is not None:
            return None, Finding("table_restored", BLOCKING, "", None, report.position_problem or "")
        return None, None
    assert request is not None
    who = f" by {request.requested_by}" if request.requested_by else ""
    why = f"{action}{who}: {request.reason}"
    if action == manual_ops.REESTABLISH_POSITION and (unknown or restore is not None):
        positions = delta_progress.positions_from_rows(
            cfg.tables.bronze_path, storage_options=(options or TableOptions(cfg))("bronze_path"))
        return {"action": action, "reason": why, "positions": positions_to_json(positions)}, None
    if action == manual_ops.REREAD_AFTER_RESTORE and restore is not None and restore.restored_commit is not None:
        version, commit = restore.restored_commit
        return {"action": action, "reason": f"{why}; reading again from Delta version {version}'s position",
                "positions": positions_to_json(commit.next_offsets)}, None  # fmt: skip
    if action == manual_ops.KEEP_POSITION_AFTER_RESTORE and restore is not None and progress is not None:
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
    hint = manual_ops.action_hint(cfg.name, manual_ops.REESTABLISH_POSITION)
    return None, Finding("position_action_refused", BLOCKING, "", None, (
        f"{action}: not applied to bronze table {cfg.tables.bronze_path}: {state}"
        + (f"; {hint} takes the position from the table's rows instead" if restore is not None else "")
    ))  # fmt: skip


def plan_replay(cfg: PipelineConfig, request: RunRequest, *, options: TableOptions | None = None) -> dict[str, Any]:
    """A ``replay_quarantine`` request's selection and how many quarantined records it takes; refused
    (:class:`manual_ops.RequestError`) without a transform, or when it takes none."""
    assert request.replay is not None
    selection = request.replay
    if cfg.transform is None:
        raise manual_ops.RequestError(
            f"pipeline {cfg.name!r} has no transform section, so it has no quarantine to replay"
        )
    path = cfg.tables.quarantine_path
    options = options or TableOptions(cfg)
    selected, total = delta_progress.quarantine_selected(path, selection, storage_options=options("quarantine_path"))
    if not selected:
        raise manual_ops.RequestError(
            f"quarantine {path} holds {total} records and none is among the {selection.describe()}; "
            "widen the selection (or leave its filters empty for every record not replayed yet)"
        )
    return {**selection.to_json(), "rows": selected}


class _TimeBackfillArgs(TypedDict):
    """The arguments of :func:`manual_ops.plan_time_backfill` that :func:`plan_request` gives both its calls."""

    pipeline: str
    kafka: Mapping[str, TopicState]
    table_next: PositionMap | None
    start_offsets: Mapping[tuple[str, int], int | None]
    end_offsets: Mapping[tuple[str, int], int | None]


def plan_request(cfg: PipelineConfig, client: dict[str, str], request: RunRequest, *,
                 options: TableOptions | None = None) -> dict[str, Any]:  # fmt: skip
    """What the run will do (XCom of ``check_request``): for a backfill, its offset ranges, checked
    against the pipeline, Kafka and the table; raises :class:`manual_ops.RequestError`.

    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here, if bronze is read).
    """
    plan: dict[str, Any] = {
        "action": request.action, "reason": request.reason, "requested_by": request.requested_by,
        "describe": request.describe(), "ranges": [], "time_range": None, "notes": [],
    }  # fmt: skip
    if request.replay is not None:
        plan["replay"] = plan_replay(cfg, request, options=options)
        return plan
    if request.action == manual_ops.SKIP_OFFSETS:
        # Checked against Kafka and the table by the preflight, which reads both anyway.
        plan["skip"] = [r.to_json() for r in request.offset_ranges]
        return plan
    if not request.is_backfill:
        return plan
    topics = kafka_state.read_topics(client, topics=cfg.kafka.topics, pattern=cfg.kafka.topic_pattern,
                                     timeout_s=KAFKA_TIMEOUT_S)  # fmt: skip
    progress = read_progress(cfg, topics, options=options)
    table_next = progress.next_offsets if progress else None
    names = sorted(set(table_next or {}) - set(topics))
    if names:  # topics the table read that no longer match: asked for by name, so their absence shows
        topics = {**topics, **kafka_state.read_topics(client, topics=names, pattern=None, timeout_s=KAFKA_TIMEOUT_S)}
    if request.action == manual_ops.BACKFILL_OFFSETS:
        planned = manual_ops.plan_offsets_backfill(request, pipeline=cfg.name, kafka=topics, table_next=table_next)
    else:
        parts = [(t, p) for t in sorted(table_next or {}) if t in topics for p in topics[t].partitions]
        assert request.from_time is not None and request.to_time is not None
        start = kafka_state.offsets_for_times(client, parts, request.from_time, timeout_s=KAFKA_TIMEOUT_S)
        end = kafka_state.offsets_for_times(client, parts, request.to_time, timeout_s=KAFKA_TIMEOUT_S)
        args = _TimeBackfillArgs(pipeline=cfg.name, kafka=topics, table_next=table_next, start_offsets=start,
                                 end_offsets=end)  # fmt: skip
        try:
            planned = manual_ops.plan_time_backfill(request, **args)
        except manual_ops.RequestError:
            # Say what Kafka holds: the time of each partition's first record.
            first = kafka_state.record_timestamps(
                client, {tp: topics[tp[0]].partitions[tp[1]].earliest for tp in parts}, timeout_s=KAFKA_TIMEOUT_S
            )
            planned = manual_ops.plan_time_backfill(request, **args, earliest_times=first)
        plan["time_range"] = {"from": request.from_time.isoformat(), "to": request.to_time.isoformat()}
    recorded = recorded_topic_ids(progress, topics)
    for topic in sorted({r.topic for r in planned.ranges}):
        now = topics[topic].topic_id
        if recorded.get(topic) and now and recorded[topic] != now:
            raise manual_ops.RequestError(
                f"topic {topic!r} was deleted and recreated since the table read it (topic id {recorded[topic]}, "
                f"now {now}): its offsets now name other records, so they cannot be backfilled"
            )
    plan["ranges"] = [r.to_json() for r in planned.ranges]
    plan["notes"] = list(planned.notes)
    plan["offsets"] = planned.offsets
    return plan


def checkpoint_position(cfg: PipelineConfig) -> PositionMap | None:
    """Committed offsets of the newest checkpoint epoch, or ``None`` when it is not a local folder."""
    root = local_path(cfg.tables.checkpoint_root)
    if root is None:
        return None
    epochs = spark_checkpoint.epoch_dirs(root)
    if not epochs:
        return None
    state = spark_checkpoint.read_state(epochs[max(epochs)])
    return state.position if state else None


def check_continuity(cfg: PipelineConfig, client: dict[str, str], *, run_id: str, version_before: int | None,
                     start: PositionMap | None, job_summary: dict[str, Any] | None,
                     transform_before: dict[str, Any] | None = None, transform_summary: dict[str, Any] | None = None,
                     options: TableOptions | None = None) -> ContinuityReport:  # fmt: skip
    """Check the commits this run wrote (the Delta log after ``version_before``).

    ``start`` is where the table stood at ``version_before`` (from the preflight).
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    bronze_options = options("bronze_path")
    # Opened once: every read below sees one version.
    bronze = delta_progress.opened(cfg.tables.bronze_path, storage_options=bronze_options)
    _, commits = delta_progress.commits_since(bronze, version_before, storage_options=bronze_options)

    def count(topic: str, partition: int, frm: int, until: int) -> int:
        return kafka_state.count_records(client, topic, partition, frm, until, timeout_s=KAFKA_TIMEOUT_S)

    backfill = job_summary is not None and job_summary.get("kind") == "backfill"
    report = check_run(
        run_id=run_id,
        start=start,
        commits=commits,
        checkpoint_position=checkpoint_position(cfg),
        expected_rows=None if job_summary is None or backfill else int(job_summary["rows"]),
        count_records=count,
        dag_id=cfg.name,
        job_versions=None if job_summary is None or backfill else reported_versions(job_summary),
    )
    if backfill:
        report.backfill = continuity.check_backfill(
            run_id=run_id, commits=delta_progress.backfill_commits_since(bronze, version_before,
                                                                         storage_options=bronze_options),
            expected=job_summary, count_records=count,
        )  # fmt: skip
    if cfg.transform is not None:
        report.transform = check_transform(cfg, before=transform_before or {}, job_summary=transform_summary,
                                           bronze=bronze, options=options)  # fmt: skip
    return report


def reported_versions(job_summary: Mapping[str, Any]) -> set[int] | None:
    """The Delta versions the reporting try of ingest committed (its summary's batches); ``None`` when the
    summary does not list them, and every commit of the run is taken as that try's."""
    batches = job_summary.get("batches")
    if not isinstance(batches, list) or any("delta_version" not in b for b in batches):
        return None
    return {int(b["delta_version"]) for b in batches if b.get("delta_version") is not None}


def transform_versions(cfg: PipelineConfig, *, options: TableOptions | None = None) -> dict[str, Any]:
    """Silver's and quarantine's versions now, and where the transform stands: where the run's transform check starts.

    The stand comes from silver's state, so the check can chain the run's first
    batch to it even when log cleanup has removed the batch commit before it.
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    silver_options = options("silver_path")
    silver = delta_progress.opened(cfg.tables.silver_path, storage_options=silver_options)
    stand = delta_progress.silver_stand(silver, cfg.name, storage_options=silver_options)
    return {
        "silver_version": delta_progress.table_version(silver, storage_options=silver_options),
        "quarantine_version": delta_progress.table_version(cfg.tables.quarantine_path,
                                                           storage_options=options("quarantine_path")),
        "silver_stand": stand.to_json() if stand is not None else None,
    }


def check_transform(cfg: PipelineConfig, *, before: dict[str, Any], job_summary: dict[str, Any] | None,
                    bronze: delta_progress.TableRef | None = None,
                    options: TableOptions | None = None) -> TransformCheck:  # fmt: skip
    """Check the silver batches written since ``before`` (:func:`transform_versions` of the preflight).

    ``bronze`` is bronze :func:`include.readers.delta_progress.opened` by the caller (``None``: opened here).
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    options = options or TableOptions(cfg)
    bronze = cfg.tables.bronze_path if bronze is None else bronze
    bronze_options = options("bronze_path")
    previous, commits = delta_progress.silver_commits_since(cfg.tables.silver_path, before.get("silver_version"),
                                                            storage_options=options("silver_path"))  # fmt: skip
    if commits:  # only the bronze versions the batches read: cost follows the run, not the history
        since = min(c.bronze_start.version for c in commits)
        bronze_version, rows = delta_progress.bronze_rows_by_version(bronze, since, storage_options=bronze_options)
    else:
        bronze_version, rows = delta_progress.bronze_data_version(bronze, storage_options=bronze_options), {}
    quarantined = delta_progress.quarantine_rows_since(cfg.tables.quarantine_path, before.get("quarantine_version"),
                                                       storage_options=options("quarantine_path"))  # fmt: skip
    stand = before.get("silver_stand")
    return continuity.check_transform(
        previous=previous, commits=commits, bronze_rows=rows, bronze_version=bronze_version,
        quarantine_rows=quarantined, expected=job_summary,
        stand_before=SilverStand.from_json(stand) if stand else None,
    )  # fmt: skip


def mirror_offsets(cfg: PipelineConfig, client: dict[str, str], *,
                   options: TableOptions | None = None) -> tuple[dict[str, dict[str, int]], LagReport]:  # fmt: skip
    """Commit the table's next offsets as the pipeline's consumer-group offsets; returns them and the lag after.

    The lag comes from the same read of Kafka and of the table, so
    ``record_run`` need not open bronze and ask Kafka once more.
    ``options``: the caller's :class:`TableOptions` of the pipeline (``None``: made here).
    """
    topics = kafka_state.read_topics(client, topics=cfg.kafka.topics, pattern=cfg.kafka.topic_pattern,
                                     timeout_s=KAFKA_TIMEOUT_S)  # fmt: skip
    progress = read_progress(cfg, topics, options=options)
    lag = lag_report(cfg, client, topics, progress)
    if progress is None:
        return {}, lag
    positions = {(t, p): o for t, parts in progress.next_offsets.items() for p, o in parts.items()}
    kafka_state.commit_group_offsets(client, cfg.consumer_group, positions, timeout_s=KAFKA_TIMEOUT_S)
    committed = {t: {str(p): o for p, o in sorted(parts.items())} for t, parts in sorted(progress.next_offsets.items())}
    return committed, lag


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
        f"{manual_ops.action_hint(cfg.name, manual_ops.REREAD_AFTER_RESTORE)} to read again what the restore "
        f"undid, or {manual_ops.action_hint(cfg.name, manual_ops.KEEP_POSITION_AFTER_RESTORE)} to keep the "
        "position and record what the restore undid"
    )


def _positions_text(positions: PositionMap) -> str:
    return ", ".join(f"{t}-{p} {o}" for t, parts in sorted(positions.items()) for p, o in sorted(parts.items())) or "nothing"


def utcnow() -> datetime:
    return datetime.now(UTC)


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
