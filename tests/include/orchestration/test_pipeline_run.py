"""Pure parts of :mod:`include.orchestration.run_folder` and :mod:`include.orchestration.run_lock`: where a run's files go."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from include import settings
from include.orchestration import pipeline_lock, run_folder, run_lock


@pytest.fixture
def cfg(make_pipeline):
    return make_pipeline()


@pytest.mark.parametrize(("one", "other"), [("a:b", "a_b"), ("a b", "a_b"), ("x/y", "x_y"), ("é", "_")])
def test_run_ids_that_read_alike_get_folders_of_their_own(cfg, one, other):
    assert run_folder.run_dir(cfg, one) != run_folder.run_dir(cfg, other)


@pytest.mark.parametrize("run_id", [".", "..", "/", "../../etc", ""])
def test_every_run_id_names_a_folder_inside_the_pipelines_runs_folder(cfg, run_id):
    runs = settings.VAR_DIR / "runs" / cfg.name
    folder = run_folder.run_dir(cfg, run_id)
    assert folder.parent == runs
    assert folder.name not in {".", ".."} and "/" not in folder.name


def test_a_run_keeps_its_folder_and_the_folder_still_reads_as_the_run(cfg):
    import hashlib

    run_id = "scheduled__2026-11-01T12:00:00+00:00"
    # The folder is the id made safe plus the first 10 hex digits of its sha256: what a later try, or another
    # worker, computes for the same run (not a value a process drew, which a comparison with itself misses).
    digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
    assert run_folder.run_dir(cfg, run_id) == settings.VAR_DIR / "runs" / cfg.name / (
        f"scheduled__2026-11-01T12_00_00_00_00-{digest}")


def test_a_very_long_run_id_still_makes_a_valid_folder_name(cfg):
    assert len(run_folder.run_folder_name("r" * 1000).encode()) < 255


DAY = 86400.0
NOW = 1_800_000_000.0


def _folder(cfg, run_id: str, age_s: float):
    """A run's folder with a summary file, both last written ``age_s`` before NOW."""
    folder = run_folder.run_dir(cfg, run_id)
    folder.mkdir(parents=True)
    (folder / "ingest-summary.json").write_text("{}")
    for path in (folder / "ingest-summary.json", folder):
        os.utime(path, (NOW - age_s, NOW - age_s))
    return folder


def _with_retention(cfg, days: int, runs: int):
    from dataclasses import replace

    return replace(cfg, maintenance=replace(cfg.maintenance, run_folders_keep_days=days, run_folders_keep=runs))


def test_folders_older_than_the_retention_go_and_younger_ones_stay(cfg):
    cfg = _with_retention(cfg, days=14, runs=200)
    old = _folder(cfg, "scheduled__old", 20 * DAY)
    young = _folder(cfg, "scheduled__young", 3 * DAY)
    assert run_folder.prune_run_folders(cfg, now=NOW) == [old.name]
    assert not old.exists() and young.exists()


def test_only_the_newest_runs_are_kept_whatever_their_age(cfg):
    cfg = _with_retention(cfg, days=365, runs=2)
    folders = [_folder(cfg, f"manual__{i}", (10 - i) * DAY) for i in range(5)]
    assert run_folder.prune_run_folders(cfg, now=NOW) == [f.name for f in folders[:3]]
    assert [f.exists() for f in folders] == [False, False, False, True, True]


def test_the_calling_run_the_lock_holder_and_a_folder_just_written_are_never_removed(cfg):
    from include.orchestration import run_lock

    cfg = _with_retention(cfg, days=1, runs=1)
    mine = _folder(cfg, "manual__mine", 30 * DAY)
    holder = _folder(cfg, "manual__holder", 30 * DAY)
    busy = _folder(cfg, "manual__busy", 40 * DAY)
    (busy / "ingest.log").write_text("still writing")  # a minute ago: its run may still be going
    os.utime(busy / "ingest.log", (NOW - 60, NOW - 60))
    gone = _folder(cfg, "manual__gone", 30 * DAY)
    lock = run_lock.lock_folder(cfg)
    assert run_lock.acquire(lock, dag_id=cfg.name, run_id="manual__holder", run_state=lambda d, r: None)["epoch"] == 1
    assert run_folder.prune_run_folders(cfg, keep=["manual__mine"], now=NOW) == [gone.name]
    assert mine.exists() and holder.exists() and busy.exists() and not gone.exists()


def test_no_runs_folder_yet_removes_nothing(cfg):
    assert run_folder.prune_run_folders(cfg, now=NOW) == []


# --------------------------------------------------------------------------- the run lock's place


def test_a_run_on_another_worker_finds_the_lock_taken(make_pipeline, tmp_path, monkeypatch):
    """Two workers: each its own KDE_VAR_DIR (its local disk), one lakehouse. The second must wait."""
    cfg = make_pipeline()
    running = {"scheduled__1"}

    def run_state(_dag: str, run: str) -> str | None:
        return "running" if run in running else None

    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "worker-1")
    assert pipeline_lock.take_lock(cfg, dag_id="orders", run_id="scheduled__1", run_state=run_state) == \
        pipeline_lock.LockClaim(1)
    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "worker-2")
    claim = pipeline_lock.take_lock(cfg, dag_id="orders_backfill", run_id="backfill__2", run_state=run_state)
    assert claim.epoch is None and claim.holder["run_id"] == "scheduled__1" and claim.holder["epoch"] == 1
    assert claim.message.startswith(f"waiting: run scheduled__1 of pipeline {cfg.name} holds the lock in "
                              f"{cfg.tables.lock_path} (epoch 1, host ")  # fmt: skip
    assert run_lock.lock_folder(cfg) == Path(cfg.tables.lock_path)
    assert not (tmp_path / "worker-1" / "locks").exists() and not (tmp_path / "worker-2" / "locks").exists()


def test_a_lock_path_on_a_store_without_conditional_creates_here_is_refused_naming_the_fix(make_pipeline):
    from include.contract.errors import PipelineError

    cfg = make_pipeline(tables={"lakehouse_root": "abfss://lake@account.dfs.core.windows.net/lake"})
    with pytest.raises(PipelineError) as refused:
        pipeline_lock.take_lock(cfg, dag_id="orders", run_id="r1", run_state=lambda _d, _r: None)
    assert str(refused.value) == (
        f"pipeline {cfg.name!r}: tables.lock_path 'abfss://lake@account.dfs.core.windows.net/lake/{cfg.name}"
        "/_lock' is on a store where the run lock cannot be kept yet (only S3 and S3-compatible stores, s3:// "
        "or s3a://, HDFS and filesystems); set tables.lock_path to an s3a:// or hdfs:// location or to a folder "
        "every Airflow worker that runs the pipeline mounts"
    )
