"""A run's folder on the Airflow worker: where its job files, cluster state and credentials go, and pruning.

Every task of a run finds its files by the run id (:func:`run_dir`); the credentials its jobs read go in
the folder's owner-only ``secrets/`` and are removed once a submit ends and again by the run's teardown.
``record_run`` prunes the pipeline's folders past their retention (:func:`prune_run_folders`).
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from pathlib import Path

from include import settings
from include.config import PipelineConfig
from include.orchestration import run_lock
from include.private_files import write_private
from include.readers.object_store import TableOptions


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
    holder = run_lock.holder(run_lock.lock_folder(cfg, options)) or {}
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
