"""The driver's class-data-sharing flags: named only for an archive that matches, never required.

Building the archive is dev tooling: tests/include/tooling/test_jvm_cds_build.py.
"""

from __future__ import annotations

from pathlib import Path

from include import settings
from include.spark import jvm_cds, jvm_deps


def test_without_an_archive_no_archive_is_named_and_only_a_short_job_gets_c1_and_the_serial_collector(cds_cache):
    assert jvm_cds.driver_options(short_job=False) == ""
    assert jvm_cds.driver_options(short_job=True) == (
        "-XX:TieredStopAtLevel=1 -XX:ReservedCodeCacheSize=240m -XX:+UseSerialGC")


def test_a_matching_archive_is_named_and_java_may_still_refuse_it_quietly(cds_cache):
    path = jvm_cds.archive_path()
    assert path is not None and path.parent == cds_cache / "cds"
    path.parent.mkdir()
    path.write_bytes(b"x")
    opts = jvm_cds.driver_options(short_job=False)
    assert f"-XX:SharedArchiveFile={path}" in opts and "-Xshare:auto" in opts and "-Xlog:cds=off" in opts
    assert "TieredStopAtLevel" not in opts


def test_an_empty_or_foreign_archive_is_not_named(cds_cache, monkeypatch):
    path = jvm_cds.archive_path()
    path.parent.mkdir()
    path.write_bytes(b"")
    assert "SharedArchiveFile" not in jvm_cds.driver_options(short_job=False)
    path.write_bytes(b"x")
    # Other jars: another fingerprint, so the archive built for the old ones is not used.
    monkeypatch.setattr(jvm_deps, "spark_jars", lambda: [Path("/jars/delta-spark_2.13-4.5.0.jar")])
    assert jvm_cds.archive_path() != path
    assert "SharedArchiveFile" not in jvm_cds.driver_options(short_job=False)


def test_the_switch_turns_every_flag_off(cds_cache, monkeypatch):
    path = jvm_cds.archive_path()
    path.parent.mkdir()
    path.write_bytes(b"x")
    monkeypatch.setenv(settings.CDS_ENV, "off")
    assert jvm_cds.driver_options(short_job=True) == ""
