"""Tests of include/spark/spark_submit.py: the driver's log options (the submit commands are tested through the
operators in tests/dags/test_cluster_profiles.py)."""

from __future__ import annotations

import pytest

from include import settings
from include.spark import spark_submit


def test_driver_log_options_name_the_project_file_and_a_switchable_level(monkeypatch):
    monkeypatch.delenv(settings.SPARK_LOG_LEVEL_ENV, raising=False)  # the default, whatever this shell says
    opts = spark_submit.driver_java_options()
    assert f"-Dlog4j.configurationFile={settings.PROJECT_ROOT}/spark_jobs/log4j2.properties" in opts
    assert "-Dkde.spark.log.level=WARN" in opts and "-Dkde.spark.log.quiet=ERROR" in opts
    assert (settings.PROJECT_ROOT / spark_submit.LOG_CONFIG).is_file()
    monkeypatch.setenv(settings.SPARK_LOG_LEVEL_ENV, "info")
    assert "-Dkde.spark.log.level=INFO -Dkde.spark.log.quiet=INFO" in spark_submit.driver_java_options("/opt/app/")
    assert "-Dlog4j.configurationFile=/opt/app/spark_jobs/log4j2.properties" in spark_submit.driver_java_options("/opt/app/")
    monkeypatch.setenv(settings.SPARK_LOG_LEVEL_ENV, "chatty")
    with pytest.raises(ValueError, match="KDE_SPARK_LOG_LEVEL='chatty': expected one of TRACE, DEBUG, INFO, WARN"):
        spark_submit.driver_java_options()
