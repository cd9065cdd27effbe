"""Pure parts of :mod:`include.orchestration.pipeline_run`: where a run's files go."""

from __future__ import annotations

import pytest
import yaml

from include import settings
from include.config import load_pipeline
from include.orchestration import pipeline_run


@pytest.fixture
def cfg(tmp_path, monkeypatch):
    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "var")
    monkeypatch.setenv("KDE_LAKEHOUSE_ROOT", str(tmp_path / "lake"))
    path = tmp_path / "orders.yaml"
    path.write_text(yaml.safe_dump({"kafka": {"connection_id": "kafka_test", "topics": ["t"]}, "schedule": None}))
    return load_pipeline(path)


@pytest.mark.parametrize(("one", "other"), [("a:b", "a_b"), ("a b", "a_b"), ("x/y", "x_y"), ("é", "_")])
def test_run_ids_that_read_alike_get_folders_of_their_own(cfg, one, other):
    assert pipeline_run.run_dir(cfg, one) != pipeline_run.run_dir(cfg, other)


@pytest.mark.parametrize("run_id", [".", "..", "/", "../../etc", ""])
def test_every_run_id_names_a_folder_inside_the_pipelines_runs_folder(cfg, run_id):
    runs = settings.VAR_DIR / "runs" / cfg.name
    folder = pipeline_run.run_dir(cfg, run_id)
    assert folder.parent == runs
    assert folder.name not in {".", ".."} and "/" not in folder.name


def test_a_run_keeps_its_folder_and_the_folder_still_reads_as_the_run(cfg):
    run_id = "scheduled__2026-11-01T12:00:00+00:00"
    assert pipeline_run.run_dir(cfg, run_id) == pipeline_run.run_dir(cfg, run_id)
    assert pipeline_run.run_folder_name(run_id).startswith("scheduled__2026-11-01T12_00_00_00_00-")


def test_a_very_long_run_id_still_makes_a_valid_folder_name(cfg):
    assert len(pipeline_run.run_folder_name("r" * 1000).encode()) < 255
