"""The job code shipped with ``--py-files`` is the code of this checkout, never an older zip."""

from __future__ import annotations

import os
import shutil
import zipfile
from pathlib import Path

from include import settings
from include.spark import spark_submit


def _copy_project(tmp_path: Path) -> Path:
    root = tmp_path / "project"
    for entry in spark_submit._SHIPPED:
        source = settings.PROJECT_ROOT / entry
        target = root / entry
        target.parent.mkdir(parents=True, exist_ok=True)
        if source.is_dir():
            shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    return root


def test_zip_is_rebuilt_when_a_source_differs_even_if_it_looks_older(tmp_path, monkeypatch):
    root = _copy_project(tmp_path)
    monkeypatch.setattr(settings, "PROJECT_ROOT", root)
    first = spark_submit.package_py_files(tmp_path / "build")
    assert "spark_jobs/ingest_plan.py" in zipfile.ZipFile(first).namelist()
    built_at = first.stat().st_mtime

    # Another checkout's file: different bytes, a modification time older than the zip.
    source = root / "spark_jobs" / "ingest_plan.py"
    source.write_text(source.read_text() + "\nMARKER = 1\n")
    os.utime(source, (built_at - 3600, built_at - 3600))
    second = spark_submit.package_py_files(tmp_path / "build")
    assert zipfile.ZipFile(second).read("spark_jobs/ingest_plan.py").decode().endswith("MARKER = 1\n")


def test_zip_is_reused_when_nothing_changed(tmp_path, monkeypatch):
    root = _copy_project(tmp_path)
    monkeypatch.setattr(settings, "PROJECT_ROOT", root)
    first = spark_submit.package_py_files(tmp_path / "build")
    inode = first.stat().st_ino
    assert spark_submit.package_py_files(tmp_path / "build").stat().st_ino == inode


def test_another_checkouts_archive_is_left_in_place_for_its_running_job(tmp_path, monkeypatch):
    root = _copy_project(tmp_path)
    monkeypatch.setattr(settings, "PROJECT_ROOT", root)
    first = spark_submit.package_py_files(tmp_path / "build")
    with zipfile.ZipFile(first) as running:  # a job of this checkout, still importing from its archive
        source = root / "spark_jobs" / "ingest_plan.py"
        source.write_text(source.read_text() + "\nMARKER = 2\n")  # another checkout's code
        second = spark_submit.package_py_files(tmp_path / "build")
        assert second != first and first.exists()
        assert running.read("spark_jobs/ingest_plan.py") == zipfile.ZipFile(first).read("spark_jobs/ingest_plan.py")
    assert (second.name, first.name) == ("kde_jobs.zip", "kde_jobs.zip")  # the name --py-files ships under


def test_archives_no_build_used_for_a_week_are_removed_by_the_next_build(tmp_path, monkeypatch):
    root = _copy_project(tmp_path)
    monkeypatch.setattr(settings, "PROJECT_ROOT", root)
    build = tmp_path / "build"
    old, recent = build / "0000000000000000", build / "1111111111111111"
    for folder, age_s in ((old, spark_submit.STALE_ARCHIVE_S + 60), (recent, spark_submit.STALE_ARCHIVE_S - 3600)):
        folder.mkdir(parents=True)
        (folder / "kde_jobs.zip").write_bytes(b"PK")
        stamp = (folder / "kde_jobs.zip").stat().st_mtime - age_s
        os.utime(folder / "kde_jobs.zip", (stamp, stamp))
    built = spark_submit.package_py_files(build)
    assert sorted(p.name for p in build.iterdir()) == sorted([recent.name, built.parent.name])
