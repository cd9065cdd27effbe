"""Shared fixtures: one real Kafka broker for the whole run, one SparkSession per test session (per xdist worker).

Integration tests get a unique topic and unique table/checkpoint folders each,
so sharing the broker and the session is safe. Under xdist the controller
starts the broker and every worker uses it (:func:`pytest_configure`).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from include import settings
from tests import cpu_report
from tests.fakes import FakeTI

#: Set by the xdist controller for its workers: the folder of the broker they share.
SHARED_BROKER_ENV = "KDE_TEST_SHARED_BROKER"


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory) -> Iterator:
    """A real single-node KRaft broker from the Apache Kafka jars, on a free port.

    Under xdist, the one the controller started for all workers (it stops it);
    otherwise one of this session's own.
    """
    from include.tooling import local_kafka

    # Only a worker of the controller that set it trusts it (a stale value in a shell is not a broker).
    shared = os.environ.get(SHARED_BROKER_ENV) if os.environ.get("PYTEST_XDIST_WORKER") else None
    if shared:
        broker = local_kafka.status(Path(shared))
        if broker is None:
            raise RuntimeError(f"the test run's shared broker in {shared} is not running (see its broker.log)")
        yield broker
        return
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
def s3_server(tmp_path_factory) -> Iterator:
    """A real S3-compatible server (s3proxy on a folder), started once per session when asked for."""
    from include.tooling import local_s3

    server = local_s3.start(tmp_path_factory.mktemp("s3"))
    yield server
    server.stop()


@pytest.fixture(scope="session")
def hdfs_server(tmp_path_factory) -> Iterator:
    """A real HDFS (Hadoop's NameNode and DataNode, tests/hadoop_cluster.py), started once per session when
    asked for."""
    from tests import hadoop_cluster

    server = hadoop_cluster.start(tmp_path_factory.mktemp("hdfs"))
    yield server
    server.stop()


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


#: What a unit test's pipeline file holds unless it says otherwise: one topic, no schedule.
PIPELINE_BASE = {"kafka": {"connection_id": "kafka_test", "topics": ["t"]}, "schedule": None}

#: The ``kafka_test`` connection a unit test's pipeline names: a bootstrap address and nothing secret.
KAFKA_TEST_CONNECTION = {"conn_type": "kafka", "extra": {"bootstrap.servers": "b1:9092"}}


@pytest.fixture
def pipeline_file(tmp_path) -> Callable[..., Path]:
    """Writes ``<tmp_path>/<name>.yaml``: :data:`PIPELINE_BASE` with the top-level keys given replaced.

    Exists because "write a pipeline YAML" was written out in most unit test
    files; a test that checks how a file is refused uses this and loads it itself.
    """
    import yaml

    def write(name: str = "orders", **changes: Any) -> Path:
        path = tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump({**PIPELINE_BASE, **changes}))
        return path

    return write


@pytest.fixture
def make_pipeline(pipeline_file, tmp_path, monkeypatch) -> Callable[..., Any]:
    """``make_pipeline(name="orders", **changes) -> PipelineConfig``: a pipeline file written and loaded.

    Exists so unit tests share one way to get a :class:`include.config.PipelineConfig`
    whose run folders (``settings.VAR_DIR``) are ``<tmp_path>/var`` and whose
    tables (``KDE_LAKEHOUSE_ROOT``) are under ``<tmp_path>/lake`` (the :func:`lake`
    fixture's folder), never the project's ``var/``. ``changes`` replace
    top-level keys of :data:`PIPELINE_BASE` (``kafka=``, ``cluster=``, ...);
    the name is the file's, as the loader takes it.
    """
    from include.config import load_pipeline

    monkeypatch.setattr(settings, "VAR_DIR", tmp_path / "var")
    monkeypatch.setenv(settings.LAKEHOUSE_ROOT_ENV, str(tmp_path / "lake"))

    def make(name: str = "orders", **changes: Any):
        return load_pipeline(pipeline_file(name, **changes))

    return make


@pytest.fixture
def kafka_connection(monkeypatch) -> dict:
    """The Airflow connection ``kafka_test`` (:data:`KAFKA_TEST_CONNECTION`) as an ``AIRFLOW_CONN_*`` variable.

    Exists because a task reads its Kafka settings from the connection the
    pipeline names; unit tests give it in the environment, as Airflow reads it,
    with no metadata database. Returns the connection; a test that needs other
    settings (a SASL password to hunt for) sets its own variant.
    """
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps(KAFKA_TEST_CONNECTION))
    return KAFKA_TEST_CONNECTION


@pytest.fixture
def fake_ti() -> type[FakeTI]:
    """The :class:`tests.fakes.FakeTI` class, to build a task instance with ``fake_ti(try_number=1, **xcoms)``.

    Exists because operators and task functions are unit-tested with a
    context dict and no Airflow run, and each test file had written its own
    stand-in; a test that needs more of a TaskInstance (task states) keeps a
    variant of its own. Module-level helpers that build a context import the
    class from :mod:`tests.fakes`.
    """
    return FakeTI


@pytest.fixture
def cds_cache(tmp_path, monkeypatch) -> Path:
    """An empty cache folder and one fixed jar, with the archives on: what the class-data-sharing archive's
    path and flags are computed from, so its tests never see the project's own cache or jars."""
    from include.spark import jvm_deps

    monkeypatch.setattr(settings, "CACHE_DIR", tmp_path)
    monkeypatch.setattr(jvm_deps, "spark_jars", lambda: [Path("/jars/delta-spark_2.13-4.4.0.jar")])
    monkeypatch.delenv(settings.CDS_ENV, raising=False)
    return tmp_path


def pytest_configure(config) -> None:
    os.environ.setdefault("KDE_CACHE_DIR", str(settings.CACHE_DIR))
    controller = getattr(config, "workerinput", None) is None  # not an xdist worker
    if controller:
        config._kde_started = (time.monotonic(), cpu_report.machine_cpu_s())
    if os.environ.get(cpu_report.REPORT_ENV):  # make test-cpu: each test's CPU (tests/cpu_report.py)
        folder = Path(os.environ[cpu_report.REPORT_ENV]).resolve()
        config.pluginmanager.register(cpu_report.CpuReport(folder, controller=controller), "kde-cpu-report")
    workers = getattr(config.option, "numprocesses", None)
    if controller and isinstance(workers, int) and workers > 0:
        # The xdist controller, before it starts the workers (they inherit the environment): one broker
        # for all of them instead of one each, since a broker costs CPU to start and to keep idle; tests
        # use unique topics, so sharing it is as safe as within one worker. Tests that stop or bounce a
        # broker start their own.
        from include.tooling import local_kafka

        folder = Path(tempfile.mkdtemp(prefix="kde-test-kafka-"))
        config._kde_shared_broker = (local_kafka.start(folder / "kafka"), folder)
        os.environ[SHARED_BROKER_ENV] = str(folder / "kafka")


def pytest_unconfigure(config) -> None:
    shared = getattr(config, "_kde_shared_broker", None)
    if shared is not None:
        broker, folder = shared
        broker.stop()
        shutil.rmtree(folder, ignore_errors=True)


#: How much lower the CPU priority of an xdist worker is once it runs anything but the fault soak.
OTHER_TESTS_NICENESS = 5


def _is_soak(item) -> bool:
    return item.nodeid.startswith("tests/soak/test_soak.py::")


def _xdist_group(item) -> str | None:
    """The worker group of a test (``make test`` runs ``--dist loadgroup``): a group runs on one worker.

    A worker pays for what its tests ask for once: a SparkSession and the JIT's warm-up of Spark's
    and Delta's code for the in-process job tests, an Airflow home and a warm Airflow interpreter
    for the DAG runs. Each in one group, every test after the first finds them warm, and the other
    workers never pay for them; the fault soak's tests, which wait on their timed faults, take the
    third. Tests that need none of these fill the gaps on any worker.
    """
    if _is_soak(item):
        return f"soak-{item.originalname}"
    needs = set(item.fixturenames)
    if "spark" in needs:
        return "spark-session"
    if needs & {"airflow_home", "warm_airflow", "pipeline"}:
        return "airflow-home"
    return None


@pytest.hookimpl(tryfirst=True)  # before xdist's own, which reads the groups
def pytest_collection_modifyitems(config, items) -> None:
    # The fault soak is the longest test by far: first in the list, the first xdist worker starts
    # it at once while the others take the rest, instead of it starting last and running alone.
    items.sort(key=lambda item: 0 if "tests/soak/" in item.nodeid else 1)
    for item in items:
        group = _xdist_group(item)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))
    config._kde_soak_in_session = any(_is_soak(item) for item in items)


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_protocol(item, nextitem) -> None:
    # With the soak in the session, the soak sets how long the suite takes: its runs are timed faults,
    # and they slow down most when the other workers' DAG runs take the cores. A worker lowers its
    # priority (and that of every broker, Spark and Airflow process it starts) once it runs another
    # test, so the soak's processes come first and the other workers use what the soak leaves idle.
    # Niceness only ever goes up, so the soak's worker lowers its own after the soak.
    if (os.environ.get("PYTEST_XDIST_WORKER") and getattr(item.config, "_kde_soak_in_session", False)
            and not _is_soak(item) and not getattr(item.config, "_kde_niced", False)):  # fmt: skip
        os.nice(OTHER_TESTS_NICENESS)
        item.config._kde_niced = True


def pytest_terminal_summary(terminalreporter, config) -> None:
    # Every run's log says how long it took, how much CPU the machine spent, and how fast the machine was.
    started = getattr(config, "_kde_started", None)
    if started is not None and getattr(config, "workerinput", None) is None:
        from include.tooling.benchmark import speed_reference

        wall, cpu = time.monotonic() - started[0], cpu_report.machine_cpu_s() - started[1]
        terminalreporter.write_sep("=", "budget")
        terminalreporter.write_line(
            f"wall {wall:.0f} s, machine CPU {cpu:.0f} s ({cpu / max(wall, 1e-9):.2f} cores busy), "
            f"speed reference {speed_reference():.3f} s (a fixed Python loop; lower is a faster machine)"
        )
    # The fault soak's table and seed belong in the log of every run, passed or failed.
    for reports in terminalreporter.stats.values():
        for report in reports:
            for name, value in getattr(report, "user_properties", ()):
                if name == "soak_report" and getattr(report, "when", "call") == "call":
                    terminalreporter.write_sep("=", "fault soak")
                    terminalreporter.write_line(str(value))
