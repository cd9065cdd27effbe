"""Fixtures of the DAG-level integration tests: one SQLite Airflow home, one pipeline per test."""

from __future__ import annotations

from pathlib import Path

import pytest

from include.readers.kafka_admin import create_topic
from include.tooling import airflow_local
from tests.integration.dag_helpers import Pipeline


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("airflow")
    airflow_local.migrate(airflow_local.environment(home))
    return home


@pytest.fixture
def pipeline(tmp_path, unique_name, bootstrap, airflow_home) -> Pipeline:
    name = unique_name.replace("-", "_")
    topic = f"{unique_name}.events"
    create_topic(bootstrap, topic, 3)
    return Pipeline(tmp_path, name, topic, bootstrap, airflow_home)
