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


#: How much lower the CPU priority of an xdist worker is once it runs anything but the fault soak's slice.
OTHER_TESTS_NICENESS = 5


def _is_soak_slice(item) -> bool:
    return item.nodeid.startswith("tests/soak/test_soak.py::")


def pytest_collection_modifyitems(config, items) -> None:
    # The fault soak's slice is the longest test by far: first in the list, the first xdist worker
    # starts it at once while the other takes the rest, instead of it starting last and running alone.
    items.sort(key=lambda item: 0 if "tests/soak/" in item.nodeid else 1)
    config._kde_soak_in_session = any(_is_soak_slice(item) for item in items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem) -> None:
    # With the slice in the session, the slice sets how long the suite takes: its runs are timed faults,
    # and they slow down most when the other workers' DAG runs take the cores. A worker lowers its
    # priority (and that of every broker, Spark and Airflow process it starts) once it runs another
    # test, so the slice's processes come first and the other workers use what the slice leaves idle.
    # Niceness only ever goes up, so the slice's worker lowers its own after the slice.
    if (os.environ.get("PYTEST_XDIST_WORKER") and getattr(item.config, "_kde_soak_in_session", False)
            and not _is_soak_slice(item) and not getattr(item.config, "_kde_niced", False)):  # fmt: skip
        os.nice(OTHER_TESTS_NICENESS)
        item.config._kde_niced = True


def pytest_terminal_summary(terminalreporter) -> None:
    # The fault soak's table and seed belong in the log of every run, passed or failed.
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "soak_report" and getattr(report, "when", "call") == "call":
                    terminalreporter.write_sep("=", "fault soak")
                    terminalreporter.write_line(str(value))
