"""Fixtures of the DAG-level integration tests: one SQLite Airflow home, one pipeline per test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from include.readers.kafka_admin import create_topic
from include.tooling import airflow_local
from include.tooling.warm_airflow import WarmAirflow
from tests.integration.dag_helpers import Pipeline


@pytest.fixture(scope="session")
def airflow_home(tmp_path_factory) -> Path:
    home = tmp_path_factory.mktemp("airflow")
    airflow_local.migrate(airflow_local.environment(home))
    return home


@pytest.fixture(scope="session")
def warm_airflow(airflow_home: Path) -> Iterator[WarmAirflow]:
    """One warm ``airflow`` command line on the session's Airflow home: each DAG run forks from it
    instead of importing Airflow again (about 3 s of CPU per run; include/tooling/warm_airflow.py)."""
    server = WarmAirflow(airflow_local.environment(airflow_home))
    yield server
    server.stop()


@pytest.fixture
def pipeline(tmp_path, unique_name, bootstrap, airflow_home, warm_airflow) -> Pipeline:
    name = unique_name.replace("-", "_")
    topic = f"{unique_name}.events"
    create_topic(bootstrap, topic, 3)
    return Pipeline(tmp_path, name, topic, bootstrap, airflow_home, warm=warm_airflow)
