"""Pipeline DAG runs against a broker that speaks only TLS to its clients, in every shape a user has.

The broker (the ``tls_broker`` fixture, ``tests/tls_kafka.py``) has a server-authenticated SSL listener,
a mutual-TLS listener and a SASL_SSL listener with SCRAM-SHA-256 and SCRAM-SHA-512; certificates and
keystores are made at test time. One pipeline runs once through each connection shape below, on one
topic: each run takes exactly the records produced since the last one, and the run before it left the
consumer group at the end, whichever listener it used. The Spark job runs on a standalone cluster so
that its executors, separate JVMs, read the translated settings too (inline PEM, files, PKCS#12).

Refusals (a broker certificate from another CA, an expired client certificate, a wrong SCRAM
password) stop the run at its first Kafka task, before any cluster starts, naming the connection and
the setting. Secrets (passwords and the private keys' bodies) are looked for afterwards in the logs,
the run folders, the tables and the metadata database.

The pipeline keeps the test helper's ``retries: 0``: a refused run would otherwise wait out its
retries, and no run here is expected to fail for a passing reason.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable

import pytest

from include.config import load_pipeline
from include.monitoring import monitor
from include.readers import kafka_calls, kafka_state
from include.readers.connections import kafka_client_config, server_connection
from include.readers.kafka_refusals import KafkaSettings
from include.tooling import airflow_local
from tests.integration.dag_helpers import STANDALONE, assert_no_cluster_left, files_holding
from tests.kafka_helpers import produce_numbered
from tests.tls_kafka import SCRAM_USER, TlsBroker, connection

pytestmark = [pytest.mark.integration, pytest.mark.full, pytest.mark.timeout(1500)]

PARTITIONS = 2
PER_RUN = 40


def shapes(b: TlsBroker) -> list[tuple[str, dict[str, str], str]]:
    """(what, the connection's settings, a line the executors' Java client logs) for each shape."""
    c = b.certs
    scram = {"sasl.username": SCRAM_USER, "sasl.password": b.scram_password}
    return [
        ("SSL, server authentication, CA file", b.settings("SSL", **{"ssl.ca.location": c.path("ca.pem")}),
         "ssl.truststore.location = " + c.path("ca.pem")),
        ("mutual TLS, inline PEM, encrypted key",
         b.settings("MTLS", **{"ssl.ca.pem": c.text("ca.pem"), "ssl.certificate.pem": c.text("client.crt"),
                               "ssl.key.pem": c.text("client-encrypted.key"), "ssl.key.password": c.key_password}),
         "ssl.keystore.key = [hidden]"),
        ("mutual TLS, PEM files",
         b.settings("MTLS", **{"ssl.ca.location": c.path("ca.pem"), "ssl.certificate.location": c.path("client.crt"),
                               "ssl.key.location": c.path("client.key")}),
         "ssl.keystore.type = PEM"),
        ("mutual TLS, PKCS#12 keystore",
         b.settings("MTLS", **{"ssl.ca.location": c.path("ca.pem"), "ssl.keystore.location": c.path("client.p12"),
                               "ssl.keystore.password": c.keystore_password}),
         "ssl.keystore.type = PKCS12"),
        ("SASL_SSL, SCRAM-SHA-256, inline CA",
         b.settings("SASL_SSL", **{"ssl.ca.pem": c.text("ca.pem"), "sasl.mechanism": "SCRAM-SHA-256", **scram}),
         "sasl.mechanism = SCRAM-SHA-256"),
        ("SASL_SSL, SCRAM-SHA-512, CA file",
         b.settings("SASL_SSL", **{"ssl.ca.location": c.path("ca.pem"), "sasl.mechanism": "SCRAM-SHA-512", **scram}),
         "sasl.mechanism = SCRAM-SHA-512"),
    ]  # fmt: skip


def key_body(pem: str) -> str:
    """A slice of a private key's base64 body: found in any log that printed the key."""
    lines = [line for line in pem.splitlines() if line and not line.startswith("-----")]
    return lines[1][8:40]


def page_through(conn: str, p, monkeypatch) -> dict:
    """What the monitoring page shows of ``p`` when its connection is ``conn``, looked up as the API server does."""
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_DEFAULT", conn)
    monkeypatch.setenv("KDE_LAKEHOUSE_ROOT", str(p.lake))
    cfg = load_pipeline(p.dir / f"{p.name}.yaml")
    client = kafka_client_config(cfg.kafka.connection_id, get_connection=server_connection)
    return monitor.pipeline_snapshot(cfg, client, timeout_s=30)


def refused(p, conn: str) -> tuple[str, list[str]]:
    """A run with ``conn`` that must stop at its first Kafka task; (its log, the lines naming the failure)."""
    proc, log = p.run(AIRFLOW_CONN_KAFKA_DEFAULT=conn)
    assert proc.returncode != 0, log[-5000:]
    assert "SUMMARY start_cluster" not in log, "a refused connection started a cluster"
    failures = [line for line in log.splitlines() if line.startswith("include.") and "Error: " in line]
    assert failures, log[-5000:]
    return log, failures


def test_every_tls_shape_runs_exactly_once_and_refusals_name_the_setting(tls_broker, make_dag_pipeline, airflow_home,
                                                                         monkeypatch):  # fmt: skip
    b = tls_broker
    p = make_dag_pipeline(security="tls", partitions=PARTITIONS, warm=False)
    p.write(cluster=STANDALONE)
    produced = 0
    logs: list[str] = []
    for what, settings, java_line in shapes(b):
        produced += produce_numbered(b.internal, p.topic, PARTITIONS, PER_RUN, start=produced)
        # The driver logs at INFO (the documented switch), so the Java clients print their configuration.
        proc, log = p.run(AIRFLOW_CONN_KAFKA_DEFAULT=connection(settings), KDE_SPARK_LOG_LEVEL="INFO")
        logs.append(log)
        assert proc.returncode == 0, f"{what}:\n{log[-6000:]}"
        last = p.ledger()[0]
        assert (last["outcome"], last["rows"], last["continuity"]) == ("success", PER_RUN, "CONTINUOUS"), (what, last)
        keys = p.bronze_keys()
        assert len(keys) == len(set(keys)) == produced, what
        assert any(line.startswith(f"ingest: {PER_RUN} rows") for line in airflow_local.summary_lines(log)), what
        # The executors (their own JVMs) built their Kafka clients from the translated settings.
        executor_logs = [f.read_text(errors="replace") for f in p.run_dirs()[-1].rglob("stderr") if f.is_file()]
        assert any(java_line in text for text in executor_logs), (what, java_line)
        snap = page_through(connection(settings), p, monkeypatch)
        assert snap["kafka"]["ok"] and snap["kafka"]["error"] is None, (what, snap["kafka"])
        assert snap["lag"]["records"] == 0, (what, snap["lag"])
        assert_no_cluster_left(p)

    c = b.certs
    # A broker certificate the connection's CA did not sign.
    log, failures = refused(p, connection(b.settings("SSL", **{"ssl.ca.location": c.path("other-ca.pem")})))
    assert any("'kafka_default'" in f and "ssl.ca.location" in f and "not signed by that CA" in f for f in failures), failures
    # An expired client certificate: refused before any client connects, with its date.
    expired = b.settings("MTLS", **{"ssl.ca.location": c.path("ca.pem"), "ssl.certificate.location": c.path("expired.crt"),
                                    "ssl.key.location": c.path("expired.key")})  # fmt: skip
    log, failures = refused(p, connection(expired))
    assert any("'kafka_default'" in f and "'ssl.certificate.location'" in f and "expired at" in f for f in failures), failures
    # A wrong SCRAM password.
    wrong = {**shapes(b)[4][1], "sasl.password": f"wrong-{b.token}"}
    log, failures = refused(p, connection(wrong))
    assert any("'kafka_default'" in f and "sasl.password" in f and "SCRAM-SHA-256" in f for f in failures), failures
    assert len(p.bronze_keys()) == produced, "a refused run wrote nothing"

    # The secrets: nowhere in the output, the logs, the run folders, the tables or the metadata DB.
    needles = (b.token, key_body(c.text("client.key")), key_body(c.text("client-encrypted.key")))
    assert [n for n in needles for text in logs if n in text] == []
    assert list(p.var.rglob("kafka-options.json")) == [], "the private options file outlived its job"
    # The scan reads what it must: the same walk finds the executors' hidden-key line.
    assert files_holding(p.var / "runs", ("ssl.keystore.key = [hidden]",)), "the scan reads no executor log"
    leaks = files_holding(airflow_home / "logs", needles) + files_holding(p.var, needles) + files_holding(p.lake, needles)
    leaks += [f"{f} holds a secret" for f in airflow_home.glob("airflow.db*")
              if any(n.encode() in f.read_bytes() for n in needles)]  # fmt: skip
    assert leaks == []
    with sqlite3.connect(airflow_home / "airflow.db") as db:
        rendered = db.execute("SELECT rendered_fields FROM rendered_task_instance_fields WHERE dag_id = ?",
                              (p.name,)).fetchall()  # fmt: skip
    assert rendered and [r for (r,) in rendered if any(n in str(r) for n in needles)] == []


@pytest.mark.parametrize("case", ["expired certificate", "no certificate"])
def test_the_brokers_own_refusals_end_the_call_at_once_and_name_the_setting(tls_broker, case: str) -> None:
    """The broker's refusals as librdkafka reports them, when nothing refused the settings before connecting.

    Under TLS 1.3 the broker refuses a client certificate with an alert after the handshake, which
    librdkafka reports as a failed receive, not as a TLS error: still a refusal, not a broker to wait for.
    """
    b, c = tls_broker, tls_broker.certs
    configs: dict[str, Callable[[], dict[str, str]]] = {
        "expired certificate": lambda: b.settings("MTLS", **{"ssl.ca.location": c.path("ca.pem"),
                                                             "ssl.certificate.location": c.path("expired.crt"),
                                                             "ssl.key.location": c.path("expired.key")}),
        "no certificate": lambda: b.settings("MTLS", **{"ssl.ca.location": c.path("ca.pem")}),
    }  # fmt: skip
    advice = {"expired certificate": "Check ssl.certificate.location of Airflow connection 'kafka_tls'",
              "no certificate": "Check ssl.certificate.location / ssl.certificate.pem (or ssl.keystore.location)"}
    started = time.monotonic()
    with pytest.raises(kafka_calls.KafkaAuthenticationError) as err:
        kafka_state.read_topics(KafkaSettings(configs[case](), "kafka_tls"), topics=["any"], timeout_s=20)
    message = str(err.value)
    assert "alert" in message and advice[case] in message and "\n" not in message, message
    assert time.monotonic() - started < 10, "the refusal waited for the call's bound"
