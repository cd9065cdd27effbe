"""Shared fixtures: one real Kafka broker and one SparkSession per test session (per xdist worker).

Integration tests get a unique topic and unique table/checkpoint folders each,
so sharing the broker and the session is safe.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from include import settings


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> Iterator:
    """A real single-node KRaft broker from the Apache Kafka jars, on a free port."""
    from include.tooling import local_kafka

    broker = local_kafka.start(tmp_path_factory.mktemp("kafka"))
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def schema_registry(tmp_path_factory) -> Iterator:
    """A real schema registry (Apicurio, Confluent-compatible API), started once per session when asked for."""
    from include.tooling import local_registry

    registry = local_registry.start(tmp_path_factory.mktemp("registry"))
    yield registry
    registry.stop()


@pytest.fixture(scope="session")
def bootstrap(kafka_broker) -> str:
    """The broker's bootstrap address, e.g. ``127.0.0.1:40123``."""
    return kafka_broker.bootstrap_servers


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """One local SparkSession with the Kafka connector and Delta, shared by all tests.

    Small settings keep a 2-core machine responsive: two shuffle partitions,
    two snapshot partitions for Delta's log replay, no UI.
    """
    from include.spark.spark_submit import local_session

    session = local_session("kde-tests", warehouse=tmp_path_factory.mktemp("warehouse"))
    yield session
    session.stop()


@pytest.fixture
def unique_name(request) -> str:
    """A name no other test uses: topic, pipeline and folder names derive from it."""
    base = request.node.name.split("[")[0].replace("test_", "")[:30].replace("_", "-")
    return f"{base}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def make_topic(bootstrap) -> Callable[..., str]:
    """Create a fresh topic on the session broker; returns its name."""
    from include.readers.kafka_admin import create_topic

    def make(name: str, partitions: int = 3, **config: str) -> str:
        create_topic(bootstrap, name, partitions, **config)
        return name

    return make


@pytest.fixture
def lake(tmp_path) -> Path:
    """Per-test lakehouse root: bronze table and checkpoints live under it."""
    return tmp_path / "lake"


def pytest_configure(config) -> None:
    os.environ.setdefault("KDE_CACHE_DIR", str(settings.CACHE_DIR))


def _weight(item) -> int:
    """0 for the fault soak's slice, 1 for the integration tests (DAG runs, Spark jobs), 2 for the rest."""
    if item.nodeid.startswith("tests/soak/test_soak.py::"):
        return 0
    return 1 if item.nodeid.startswith("tests/integration/") else 2


def pytest_collection_modifyitems(config, items) -> None:
    # Longest first (``make test`` hands the tests out one at a time, ``--dist load --maxschedchunk 1``):
    # the slice starts at once on one worker while the others take the integration tests, and the
    # short tests come last, where they fill whichever worker ends first instead of leaving one
    # worker running a DAG-run test alone at the end.
    items.sort(key=_weight)


def pytest_terminal_summary(terminalreporter) -> None:
    # The fault soak's table and seed belong in the log of every run, passed or failed.
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "soak_report" and getattr(report, "when", "call") == "call":
                    terminalreporter.write_sep("=", "fault soak")
                    terminalreporter.write_line(str(value))
