"""Fixtures of the DAG-level integration tests: one SQLite Airflow home, one pipeline per test."""

from __future__ import annotations

import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from include.readers.kafka_admin import create_topic
from include.tooling import airflow_local, local_kafka
from include.tooling.warm_airflow import WarmAirflow
from tests import tls_kafka
from tests.integration.dag_helpers import HdfsPipeline, Pipeline, StorePipeline
from tests.kafka_helpers import SaslBroker, create_topic_as


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
def sasl_broker(tmp_path) -> Iterator[SaslBroker]:
    """A broker of this test only that demands SASL/PLAIN (the session broker speaks PLAINTEXT). The password
    holds a quote, a backslash and a non-ASCII letter, around a random hex token the leak checks look for."""
    token = secrets.token_hex(12)
    user = local_kafka.SaslPlainUser("kde-etl", f'kde-{token}-"q\\ü')
    broker = local_kafka.start(tmp_path / "kafka", heap="512m", sasl_user=user)
    try:
        yield SaslBroker(broker, user, token)
    finally:
        broker.stop()


@pytest.fixture
def tls_broker(tmp_path) -> Iterator[tls_kafka.TlsBroker]:
    """A broker of this test only whose client listeners speak TLS: SSL, mutual TLS and SASL_SSL with SCRAM
    (tests/tls_kafka.py); its certificates are made for it. The session broker speaks PLAINTEXT."""
    broker = tls_kafka.start(tmp_path / "kafka-tls")
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def make_dag_pipeline(request, tmp_path, unique_name, airflow_home, warm_airflow) -> Callable[..., Pipeline]:
    """Builds a test pipeline on the session's Airflow home (``pipeline`` is its defaults): ``make(...)``.

    - ``partitions``: of the topic it creates (``new_topic=False``: ``topic`` exists already);
    - ``store``: ``"local"`` (tables under ``<root>/lake``), ``"s3"`` (a bucket of the session's S3
      server, a :class:`~tests.integration.dag_helpers.StorePipeline`) or ``"hdfs"`` (a folder of the
      session's HDFS, a :class:`~tests.integration.dag_helpers.HdfsPipeline`);
    - ``security``: ``"plaintext"`` (the session broker, or ``bootstrap``), ``"sasl"`` (the test's
      ``sasl_broker``, the topic created as its user) or ``"tls"`` (the test's ``tls_broker``, the topic
      created on its PLAINTEXT setup listener); with either of the last two the runs pass their
      connection themselves;
    - ``warm``: DAG runs forked from the warm interpreter, or each a fresh ``airflow`` process;
    - ``name``, ``topic``, ``root``: the pipeline's name (from the test's), topic and folder (``tmp_path``).

    The broker, the S3 server and the SASL broker are asked for only when a pipeline needs them.
    """

    def make(*, partitions: int = 3, store: str = "local", security: str = "plaintext", warm: bool = True,
             bootstrap: str | None = None, name: str | None = None, topic: str | None = None,
             new_topic: bool = True, root: Path | None = None) -> Pipeline:  # fmt: skip
        assert store in ("local", "s3", "hdfs") and security in ("plaintext", "sasl", "tls"), (store, security)
        name = name or unique_name.replace("-", "_")
        topic = topic or f"{unique_name}.events"
        if security == "sasl":
            sasl: SaslBroker = request.getfixturevalue("sasl_broker")
            bootstrap = sasl.broker.bootstrap_servers
            if new_topic:
                create_topic_as(sasl.client_config(), topic, partitions)
        elif security == "tls":
            tls: tls_kafka.TlsBroker = request.getfixturevalue("tls_broker")
            bootstrap = tls.internal
            if new_topic:
                create_topic(bootstrap, topic, partitions)
        else:
            bootstrap = bootstrap or request.getfixturevalue("bootstrap")
            if new_topic:
                create_topic(bootstrap, topic, partitions)
        root, server = root or tmp_path, warm_airflow if warm else None
        if store == "s3":
            return StorePipeline(root, name, topic, bootstrap, airflow_home, server, request.getfixturevalue("s3_server"))
        if store == "hdfs":
            return HdfsPipeline(root, name, topic, bootstrap, airflow_home, server, request.getfixturevalue("hdfs_server"))
        return Pipeline(root, name, topic, bootstrap, airflow_home, warm=server)

    return make


@pytest.fixture
def pipeline(make_dag_pipeline, bootstrap) -> Pipeline:
    """A pipeline on the session broker (a topic of 3 partitions) with its tables under ``tmp_path``."""
    return make_dag_pipeline()


@pytest.fixture
def store_pipeline(make_dag_pipeline, bootstrap) -> StorePipeline:
    """A pipeline on the session broker (a topic of 3 partitions) with its lakehouse on the S3 server."""
    made = make_dag_pipeline(store="s3")
    assert isinstance(made, StorePipeline)
    return made


@pytest.fixture(params=["s3", "hdfs"])
def lakehouse_pipeline(request, make_dag_pipeline, bootstrap) -> StorePipeline | HdfsPipeline:
    """A pipeline on the session broker (a topic of 3 partitions) with its whole lakehouse on a store: the S3
    server, or the HDFS."""
    made = make_dag_pipeline(store=request.param)
    assert isinstance(made, (StorePipeline, HdfsPipeline))
    return made
