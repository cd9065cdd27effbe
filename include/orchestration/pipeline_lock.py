"""Taking a pipeline's run lock in ``check_request``, and what a takeover from a dead run does first.

The lock itself is :mod:`include.orchestration.run_lock`. Taking it over from a run that never gave it
back first stops what that run left running here (:func:`stop_leftovers`), then fences every table of the
pipeline with the new epoch (:func:`fence_tables`), so a frozen writer of the old epoch can commit nothing.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from include.config import PipelineConfig
from include.orchestration import run_lock
from include.orchestration.run_folder import run_dir
from include.readers.object_store import TableOptions


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
    lock = run_lock.lock_folder(cfg, options)
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
    tables = cfg.table_locations()
    # Each table is named after the TablesConfig field whose store holds it (bronze: bronze_path; a route's
    # silver.<route>: silver_path, under which it lies).
    fenced = fence_tables(cfg.name, tables, epoch,
                          storage_options={name: options(f"{name.partition('.')[0]}_path") for name in tables})
    return LockClaim(epoch, None, (
        f"took the lock over from run {dead['run_id']} (epoch {dead.get('epoch')}, host {dead.get('host')}): "
        f"{stopped or 'it left no process running here'}; "
        + (f"fenced {', '.join(fenced)} at epoch {epoch}: no job of that run can commit there any more"
           if fenced else f"no table to fence at epoch {epoch}")
    ))  # fmt: skip


#: Tries of one table's fence commit, each after reading the table again.
FENCE_ATTEMPTS = 3


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

    from include.spark import cluster_state, cluster_stop, leftovers

    folder = run_dir(cfg, run_id)
    if not folder.exists():
        return None
    jobs = leftovers.recorded_jobs(folder)
    refused = []
    for pid in jobs:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        except PermissionError:  # recorded, so ours, yet not ours to kill: say so instead of failing here
            refused.append(pid)
    deadline = time.monotonic() + timeout_s
    while set(leftovers.recorded_jobs(folder)) - set(refused) and time.monotonic() < deadline:
        time.sleep(0.1)
    cluster = cluster_stop.stop_standalone(folder / "cluster", timeout_s=timeout_s)
    left = leftovers.recorded_jobs(folder) + cluster_state.running_processes(folder / "cluster")
    if left:
        raise cluster_state.ClusterError(f"processes {left} of run {run_id} (folder {folder}) survived SIGKILL"
                           f"{f' (not allowed to signal {refused})' if refused else ''}; "
                           "stop them by hand before this pipeline runs again")  # fmt: skip
    if not jobs and not cluster:
        return None
    return (f"run {run_id} died without its teardown; stopped its job processes {jobs} "
            f"and {len(cluster)} processes of its cluster {cluster}")
