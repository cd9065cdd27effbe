"""A pipeline DAG against a broker that demands SASL/PLAIN, with the secret kept out of every log.

The broker (the ``sasl_broker`` fixture, in ``tmp_path``) has one SASL_PLAINTEXT listener and
one user; the Airflow connection ``kafka_default`` carries the librdkafka
settings with a random password. The password holds a quote, a backslash and
a non-ASCII letter so every quoting layer (connection JSON, the broker's
properties file, the Java client's JAAS config) is exercised; a random hex
token inside it is what the leak checks look for, since escaped forms of the
whole password would slip past a plain search.
"""

from __future__ import annotations

import json
import secrets
import sqlite3
import uuid

import pytest

from include.tooling import airflow_local, local_kafka
from tests.integration.dag_helpers import STANDALONE, assert_no_cluster_left, files_holding

pytestmark = [pytest.mark.integration, pytest.mark.full, pytest.mark.timeout(900)]


def produce(config: dict[str, str], topic: str, count: int, partitions: int) -> set[tuple[int, int]]:
    """Produce ``count`` records as the SASL user; returns the ``(partition, offset)`` Kafka assigned."""
    from confluent_kafka import Producer

    delivered: set[tuple[int, int]] = set()

    def on_delivery(err, msg) -> None:
        assert err is None, err
        delivered.add((msg.partition(), msg.offset()))

    producer = Producer({**config, "linger.ms": 5})
    for i in range(count):
        producer.produce(topic, key=str(i).encode(), value=f"secure-{i}".encode(), partition=i % partitions,
                         on_delivery=on_delivery)  # fmt: skip
    assert producer.flush(30) == 0
    assert len(delivered) == count
    return delivered


def test_sasl_connection_reaches_admin_clients_and_spark_job_and_the_secret_never_shows(tmp_path, sasl_broker,
                                                                                        airflow_home, make_dag_pipeline):
    s = sasl_broker
    home = airflow_home
    name = f"sasl_{uuid.uuid4().hex[:8]}"
    p = make_dag_pipeline(security="sasl", partitions=2, name=name, topic=f"{name}.events", warm=False)
    topic = p.topic
    produced = produce(s.client_config(), topic, 150, 2)
    p.write(cluster=STANDALONE)  # the credentials must reach the cluster's executors too

    # Right password: the sensor, preflight, continuity and mirror (librdkafka) and the
    # Spark job (Java client) all authenticate: the broker has no other listener. The driver
    # logs at INFO here (the documented switch), so the Java client prints its configuration.
    proc, log = p.run(AIRFLOW_CONN_KAFKA_DEFAULT=s.connection(), KDE_SPARK_LOG_LEVEL="INFO")
    assert proc.returncode == 0, log[-5000:]
    (first,) = p.ledger()
    assert (first["outcome"], first["rows"], first["continuity"]) == ("success", 150, "CONTINUOUS")
    assert sorted(p.bronze_keys()) == sorted(produced)
    lines = airflow_local.summary_lines(log)
    assert any(line.startswith("ingest: 150 rows") for line in lines), lines
    # The Java client logged its configuration, with the JAAS config as Kafka's [hidden].
    assert "sasl.mechanism = PLAIN" in log and "sasl.jaas.config = [hidden]" in log, log[-5000:]
    # The offsets mirror committed through SASL; Kafka's own tools read it with a command config.
    tool_config = local_kafka.write_tool_config(tmp_path / "kafka" / "tool.properties", s.user)
    group = local_kafka.run_kafka_tool("consumer-groups", "--bootstrap-server", s.broker.bootstrap_servers,
                                       "--command-config", str(tool_config), "--describe", "--group",
                                       f"kafka-delta-elt.{p.name}")  # fmt: skip
    assert group.returncode == 0, group.stderr[-3000:]
    rows = [line.split() for line in group.stdout.splitlines()]
    lags = {int(f[2]): f[5] for f in rows if f and f[0] == f"kafka-delta-elt.{p.name}"}
    assert lags == {0: "0", 1: "0"}, group.stdout
    assert_no_cluster_left(p)

    # Wrong password: refused by the broker, and the run says so.
    produce(s.client_config(), topic, 10, 2)
    wrong_token = secrets.token_hex(12)
    proc, bad_log = p.run(AIRFLOW_CONN_KAFKA_DEFAULT=s.connection(f"wrong-{wrong_token}"))
    assert proc.returncode != 0, bad_log[-5000:]
    (failure,) = [line for line in bad_log.splitlines()
                  if line.startswith("include.readers.kafka_calls.KafkaAuthenticationError")]  # fmt: skip
    assert "SASL authentication error: Authentication failed: Invalid username or password" in failure, failure
    assert "refused the client while" in failure and "did not answer" not in failure, failure  # at once, not at the bound
    assert p.ledger()[0]["outcome"] != "success"
    assert sorted(p.bronze_keys()) == sorted(produced), "a refused run read nothing"
    assert_no_cluster_left(p)

    # A setting the Spark job's client cannot be given (Kerberos under PLAIN: librdkafka ignores it,
    # so the Airflow side authenticates) stops the run at preflight, before any cluster starts.
    extra = {**s.client_config(), "sasl.kerberos.service.name": "kafka"}
    proc, refused_log = p.run(AIRFLOW_CONN_KAFKA_DEFAULT=json.dumps({"conn_type": "kafka", "extra": extra}))
    assert proc.returncode != 0, refused_log[-5000:]
    assert "SUMMARY wait_for_lag:" in refused_log and "SUMMARY start_cluster" not in refused_log
    refusals = [line for line in refused_log.splitlines() if "sasl.kerberos.service.name" in line]
    assert refusals and all("'kafka_default'" in line and "Kerberos" in line for line in refusals), refusals
    assert sorted(p.bronze_keys()) == sorted(produced)
    assert_no_cluster_left(p)

    # The secrets: nowhere in the output, the logs, the run folders, the tables or the metadata DB.
    needles = (s.token, wrong_token)
    for text in (log, bad_log, refused_log):
        assert not [n for n in needles if n in text]
    assert list(p.var.rglob("kafka-options.json")) == [], "the private options file outlived its job"
    # `airflow dags test` runs tasks in its own process and prints their logs (checked above); the
    # logs folder is scanned all the same, for whatever Airflow writes there.
    logs = home / "logs"
    assert logs.is_dir()
    # Spark's master, worker and executor logs live in the run folders; the executors' Kafka
    # consumers printed their configuration too, the JAAS config hidden.
    executor_logs = [f for f in (p.var / "runs").rglob("stderr") if f.is_file()]
    assert any("sasl.jaas.config = [hidden]" in f.read_text(errors="replace") for f in executor_logs), executor_logs
    # The scan reads what it must: the same walk finds the executors' own hidden-JAAS line, so an empty
    # result below is about the secrets, not about files it never opened.
    assert files_holding(p.var / "runs", ("sasl.jaas.config = [hidden]",)), "the scan reads no executor log"
    leaks = files_holding(logs, needles) + files_holding(p.var, needles) + files_holding(p.lake, needles)
    leaks += [f"{f} holds a secret" for f in home.glob("airflow.db*") if any(n.encode() in f.read_bytes() for n in needles)]
    assert leaks == []
    with sqlite3.connect(home / "airflow.db") as db:
        rendered = db.execute("SELECT task_id, rendered_fields FROM rendered_task_instance_fields WHERE dag_id = ?",
                              (p.name,)).fetchall()
    assert {task for task, _ in rendered} >= {"ingest"}, rendered
    assert [task for task, fields in rendered if any(n in str(fields) for n in needles)] == []
