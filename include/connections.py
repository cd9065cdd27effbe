"""Airflow connections → client settings, resolved only when a task runs.

Kafka: a connection of type ``kafka`` (the Kafka provider's form) whose extra
JSON holds confluent-kafka settings, ``bootstrap.servers`` required, e.g.::

    AIRFLOW_CONN_KAFKA_DEFAULT='{"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:9092"}}'

Spark (profile ``existing_master``): a connection of type ``spark`` whose host
is the master URL (``spark://host:7077``, ``yarn``, ``k8s://https://...``).

Nothing here runs at DAG-parse time: DAG files only name connection ids.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: librdkafka settings that the Java client (the Spark job) takes under the same name.
_SHARED_WITH_JAVA = ("security.protocol", "client.id", "client.dns.lookup")


class ConnectionConfigError(ValueError):
    """A connection is missing or lacks a setting; the message names the connection and the setting."""


def _get_connection(conn_id: str):
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ConnectionConfigError(
            f"Airflow connection {conn_id!r} does not exist; create it (UI: Admin > Connections, or an "
            f"AIRFLOW_CONN_{conn_id.upper()} environment variable)"
        ) from None


def server_connection(conn_id: str):
    """The connection ``conn_id`` as Airflow's server processes see it (no task context needed).

    The API server (where the monitoring plugin runs) is not a task: the Task
    SDK's lookup is for workers, so this asks Airflow core's secrets search
    (environment, secrets backends, metadata database) directly.
    """
    from airflow.exceptions import AirflowNotFoundException
    from airflow.models.connection import Connection

    try:
        return Connection.get_connection_from_secrets(conn_id)
    except AirflowNotFoundException:
        raise ConnectionConfigError(f"Airflow connection {conn_id!r} does not exist") from None


def kafka_client_config(conn_id: str, *, get_connection: Callable[[str], Any] = _get_connection) -> dict[str, str]:
    """confluent-kafka settings of the Kafka connection ``conn_id`` (bootstrap servers and security).

    ``get_connection`` looks the connection up; the default is the Task SDK's
    (tasks), :func:`server_connection` is for Airflow's server processes.
    """
    conn = get_connection(conn_id)
    extra = conn.extra_dejson or {}
    config = {str(k): str(v) for k, v in extra.items()}
    if not config.get("bootstrap.servers"):
        if conn.host:
            config["bootstrap.servers"] = f"{conn.host}:{conn.port}" if conn.port else conn.host
        else:
            raise ConnectionConfigError(
                f"Airflow connection {conn_id!r}: expected 'bootstrap.servers' in its extra JSON "
                '(e.g. {"bootstrap.servers": "broker:9092"}), got none'
            )
    return config


def spark_kafka_options(client_config: dict[str, str]) -> dict[str, str]:
    """The Kafka client settings the Spark job gets (without ``kafka.`` prefix, bootstrap excluded).

    Only settings the Java client names the same way are carried over; SASL
    and SSL translation from librdkafka names is not implemented yet (the
    job then fails to authenticate with a clear Kafka error rather than
    receiving a setting it would misread).
    """
    return {k: v for k, v in client_config.items() if k in _SHARED_WITH_JAVA}


def spark_master(conn_id: str) -> str:
    """The master URL of the Spark connection ``conn_id``, the way the Spark provider reads it."""
    conn = _get_connection(conn_id)
    host = conn.host or ""
    if conn.conn_type == "spark" and host and ("://" in host or not conn.port):
        master = host
    elif host:
        master = f"{conn.conn_type}://{host}"
    else:
        raise ConnectionConfigError(
            f"Airflow connection {conn_id!r}: expected the Spark master URL as its host "
            "(spark://host:7077, yarn, k8s://https://host:443), got none"
        )
    return f"{master}:{conn.port}" if conn.port else master
