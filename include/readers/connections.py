"""Airflow connections → client settings, resolved only when a task runs.

Kafka: a connection of type ``kafka`` (the Kafka provider's form) whose extra
JSON holds confluent-kafka (librdkafka) settings, ``bootstrap.servers``
required, e.g.::

    AIRFLOW_CONN_KAFKA_DEFAULT='{"conn_type": "kafka", "extra": {"bootstrap.servers": "127.0.0.1:9092"}}'

The Airflow-side clients (lag sensor, preflight, continuity, offset mirror) take
that extra as it is (:func:`kafka_client_config`). The Spark job's Java client
names its security settings differently; :func:`spark_kafka_options`
translates them (SASL PLAIN/SCRAM with a username and password, TLS with PEM
or PKCS#12 files) and refuses, naming the connection and the key, any security
setting it cannot carry, so the job never runs with less security than the
Airflow side asked for.

Schema registry (``transform.value_schema.registry``): a connection of type
``http`` with the registry's host and port (or ``url`` in its extra) and, when
the registry wants it, a login and password.

Spark (profile ``existing_master``): a connection of type ``spark`` whose host
is the master URL (``spark://host:7077``, ``yarn``, ``k8s://https://...``).

Nothing here runs at DAG-parse time: DAG files only name connection ids.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from include.contract.errors import PipelineError
from include.readers.kafka_refusals import ClientCertificateError, KafkaSettings, check_client_certificate

if TYPE_CHECKING:
    import airflow.models.connection
    import airflow.sdk

#: librdkafka settings the Java client (the Spark job) takes under the same name and with the same values.
_SHARED_WITH_JAVA = ("client.id", "client.dns.lookup")

_PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL")

#: SASL mechanisms carried to the Java client, with the JAAS login module each needs.
_LOGIN_MODULES = {
    "PLAIN": "org.apache.kafka.common.security.plain.PlainLoginModule",
    "SCRAM-SHA-256": "org.apache.kafka.common.security.scram.ScramLoginModule",
    "SCRAM-SHA-512": "org.apache.kafka.common.security.scram.ScramLoginModule",
}

#: Security settings :func:`spark_kafka_options` reads (any other SASL/SSL setting is refused).
_SASL_KEYS = frozenset({"sasl.mechanism", "sasl.mechanisms", "sasl.username", "sasl.password"})
_SSL_KEYS = frozenset({
    "ssl.ca.location", "ssl.ca.pem",
    "ssl.certificate.location", "ssl.certificate.pem", "ssl.key.location", "ssl.key.pem", "ssl.key.password",
    "ssl.keystore.location", "ssl.keystore.password",
    "ssl.endpoint.identification.algorithm", "enable.ssl.certificate.verification",
})  # fmt: skip

#: What the refusal messages offer instead.
SUPPORTED_SECURITY = (
    "supported: security.protocol PLAINTEXT/SSL/SASL_PLAINTEXT/SASL_SSL; sasl.mechanism PLAIN, SCRAM-SHA-256 or "
    "SCRAM-SHA-512 with sasl.username and sasl.password; ssl.ca.location or ssl.ca.pem; "
    "ssl.certificate.location/.pem with ssl.key.location/.pem and ssl.key.password if it is encrypted, or "
    "ssl.keystore.location (PKCS#12) with ssl.keystore.password; ssl.endpoint.identification.algorithm"
)


class ConnectionConfigError(PipelineError, ValueError):
    """A connection is missing or lacks a setting; the message names the connection and the setting."""


def _get_connection(conn_id: str) -> airflow.sdk.Connection:
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        return BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        raise ConnectionConfigError(
            f"Airflow connection {conn_id!r} does not exist; create it (UI: Admin > Connections, or an "
            f"AIRFLOW_CONN_{conn_id.upper()} environment variable)"
        ) from None


def server_connection(conn_id: str) -> airflow.models.connection.Connection:
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


def kafka_client_config(conn_id: str, *, get_connection: Callable[[str], Any] = _get_connection) -> KafkaSettings:
    """confluent-kafka settings of the Kafka connection ``conn_id`` (bootstrap servers and security).

    The extra JSON is returned as it is, for the Airflow-side clients; the
    Spark job gets :func:`spark_kafka_options` of it. ``get_connection`` looks
    the connection up; the default is the Task SDK's (tasks),
    :func:`server_connection` is for Airflow's server processes. The result
    carries ``conn_id``, so that a broker's refusal names the connection, and
    a client certificate that has expired (or a PKCS#12 keystore its password
    does not open) is refused here, before any client connects.
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
    try:
        check_client_certificate(conn_id, config)
    except ClientCertificateError as exc:
        raise ConnectionConfigError(str(exc)) from None
    return KafkaSettings(config, conn_id)


def registry_settings(
    conn_id: str, *, get_connection: Callable[[str], Any] = _get_connection
) -> dict[str, str]:
    """URL and credentials of the schema registry connection ``conn_id`` (type ``http``).

    The URL is the extra's ``url`` when given (it may carry a path, e.g. Apicurio's
    ``/apis/ccompat/v7``), else ``schema://host:port`` from the connection's
    fields (``schema`` defaults to http). Login and password, when set, are sent
    as HTTP basic auth.
    """
    conn = get_connection(conn_id)
    extra = conn.extra_dejson or {}
    url = str(extra.get("url") or "")
    if not url:
        if not conn.host:
            raise ConnectionConfigError(
                f"Airflow connection {conn_id!r}: expected the schema registry's address, as its host and port "
                '(type http) or as "url" in its extra JSON (e.g. {"url": "http://registry:8081"}), got neither'
            )
        host = str(conn.host)
        if "://" not in host:
            host = f"{conn.schema or 'http'}://{host}"
        url = f"{host}:{conn.port}" if conn.port else host
    settings = {"url": url}
    if conn.login:
        settings["username"] = str(conn.login)
        settings["password"] = str(conn.password or "")
    return settings


def jaas_quote(value: str) -> str:
    """``value`` as a double-quoted JAAS option value that Kafka's JAAS parser reads back unchanged.

    The parser (a ``java.io.StreamTokenizer``) ends a quoted value at a bare
    quote or line break and reads backslash escapes, so those four are escaped.
    """
    escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r")
    return f'"{escaped}"'


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The Java client's ``sasl.jaas.config`` for a username/password ``mechanism`` (PLAIN or SCRAM-SHA-*)."""
    module = _LOGIN_MODULES[mechanism]
    return f"{module} required username={jaas_quote(username)} password={jaas_quote(password)};"


def mask(value: str) -> None:
    """Have Airflow hide ``value`` in task logs: derived secrets are not connection fields it knows of."""
    from airflow.sdk.log import mask_secret

    mask_secret(value)


def _read_pem(path: str) -> str:
    return Path(path).read_text()


class _Translation:
    """One connection's librdkafka settings on their way to the Java client; errors name the connection."""

    def __init__(self, conn_id: str, config: Mapping[str, str], read_pem: Callable[[str], str]) -> None:
        self.conn_id = conn_id
        self.config = {k: str(v) for k, v in config.items()}
        self.read_pem = read_pem
        self.options: dict[str, str] = {}

    def error(self, key: str, expected: str, got: str | None = None) -> ConnectionConfigError:
        found = f", got {got!r}" if got is not None else ""
        return ConnectionConfigError(
            f"Airflow connection {self.conn_id!r}: extra setting {key!r}: expected {expected}{found}"
        )

    def refuse(self, key: str, why: str) -> ConnectionConfigError:
        return ConnectionConfigError(
            f"Airflow connection {self.conn_id!r}: extra setting {key!r} cannot be given to the Spark job's "
            f"Kafka client: {why} ({SUPPORTED_SECURITY})"
        )

    def flag(self, key: str) -> bool | None:
        value = self.config.get(key)
        if value is None:
            return None
        if value.strip().lower() in ("true", "1"):
            return True
        if value.strip().lower() in ("false", "0"):
            return False
        raise self.error(key, "true or false", value)

    def translate(self) -> dict[str, str]:
        raw = self.config.get("security.protocol")
        protocol = (raw or "PLAINTEXT").strip().upper()
        if protocol not in _PROTOCOLS:
            raise self.error("security.protocol", " or ".join(_PROTOCOLS), raw)
        if raw is not None:
            # librdkafka takes any case, the Java client only upper case.
            self.options["security.protocol"] = protocol
        for key in _SHARED_WITH_JAVA:
            if key in self.config:
                self.options[key] = self.config[key]
        # librdkafka reads SASL settings only under a SASL protocol and SSL
        # settings only under an SSL one; the Java client does the same, so
        # settings neither client uses are left out rather than refused.
        sasl = protocol.startswith("SASL_")
        tls = protocol.endswith("SSL")
        for key in sorted(self.config):
            if _is_sasl_key(key) and sasl and key not in _SASL_KEYS:
                raise self.refuse(key, _unsupported_why(key))
            if _is_ssl_key(key) and tls and key not in _SSL_KEYS:
                raise self.refuse(key, _unsupported_why(key))
        if sasl:
            self.sasl(protocol)
        if tls:
            self.ssl()
        return self.options

    def sasl(self, protocol: str) -> None:
        one, many = self.config.get("sasl.mechanism"), self.config.get("sasl.mechanisms")
        if one is not None and many is not None and one.strip().upper() != many.strip().upper():
            raise self.error("sasl.mechanisms", f"the same mechanism as sasl.mechanism ({one!r}) or no value", many)
        key = "sasl.mechanism" if one is not None else "sasl.mechanisms"
        mechanism = (one if one is not None else many or "").strip().upper()
        if not mechanism:
            raise self.error(
                "sasl.mechanism", f"PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with security.protocol {protocol} "
                "(librdkafka's default, GSSAPI/Kerberos, is not supported for the Spark job)",
            )  # fmt: skip
        if mechanism not in _LOGIN_MODULES:
            raise self.refuse(key, f"mechanism {mechanism!r} is not supported")
        username, password = self.config.get("sasl.username"), self.config.get("sasl.password")
        for name, value in (("sasl.username", username), ("sasl.password", password)):
            if not value:
                raise self.error(name, f"a non-empty value with sasl.mechanism {mechanism}", value)
        jaas = jaas_config(mechanism, username or "", password or "")
        mask(jaas)
        self.options["sasl.mechanism"] = mechanism
        self.options["sasl.jaas.config"] = jaas

    def ssl(self) -> None:
        self.truststore()
        self.keystore()
        key = "ssl.endpoint.identification.algorithm"
        if key in self.config:
            algorithm = self.config[key].strip().lower()
            if algorithm not in ("none", "https"):
                raise self.error(key, "'https' or 'none'", self.config[key])
            # The Java client turns host name checking off with an empty value.
            self.options[key] = "" if algorithm == "none" else "https"
        if self.flag("enable.ssl.certificate.verification") is False:
            raise self.refuse(
                "enable.ssl.certificate.verification",
                "the Java client cannot turn certificate verification off; give the broker's CA in ssl.ca.location",
            )

    def truststore(self) -> None:
        location, pem = self.config.get("ssl.ca.location"), self.config.get("ssl.ca.pem")
        if location is not None and pem is not None:
            raise self.error("ssl.ca.pem", "either ssl.ca.location or ssl.ca.pem, not both", "<set>")
        if location is not None:
            if location.strip().lower() == "probe":
                raise self.refuse("ssl.ca.location", "'probe' (the system's CA stores) has no Java equivalent")
            if os.path.isdir(location):
                raise self.refuse("ssl.ca.location", f"{location} is a directory; the Java client needs one PEM file")
            self.options["ssl.truststore.type"] = "PEM"
            self.options["ssl.truststore.location"] = location
        elif pem is not None:
            self.options["ssl.truststore.type"] = "PEM"
            self.options["ssl.truststore.certificates"] = pem

    def pem(self, location_key: str, pem_key: str) -> tuple[str, str] | None:
        """(the setting it came from, PEM text) of a file or inline PEM setting pair, or None."""
        location, pem = self.config.get(location_key), self.config.get(pem_key)
        if location is not None and pem is not None:
            raise self.error(pem_key, f"either {location_key} or {pem_key}, not both", "<set>")
        if pem is not None:
            return pem_key, pem
        if location is None:
            return None
        try:
            return location_key, self.read_pem(location)
        except OSError as exc:
            raise self.error(location_key, "a readable PEM file", f"{location} ({exc.strerror or exc})") from None

    def keystore(self) -> None:
        cert = self.pem("ssl.certificate.location", "ssl.certificate.pem")
        key = self.pem("ssl.key.location", "ssl.key.pem")
        pkcs12 = self.config.get("ssl.keystore.location")
        key_password = self.config.get("ssl.key.password")
        if pkcs12 is not None:
            if cert or key:
                raise self.error("ssl.keystore.location", "either a PKCS#12 keystore or a PEM certificate and key, "
                                 "not both", pkcs12)  # fmt: skip
            if key_password is not None:
                raise self.error("ssl.key.password", "no value with ssl.keystore.location (PKCS#12 keys are "
                                 "protected by ssl.keystore.password)", "<set>")  # fmt: skip
            self.options["ssl.keystore.type"] = "PKCS12"
            self.options["ssl.keystore.location"] = pkcs12
            if self.config.get("ssl.keystore.password"):
                self.options["ssl.keystore.password"] = self.config["ssl.keystore.password"]
            return
        if "ssl.keystore.password" in self.config:
            raise self.error("ssl.keystore.password", "ssl.keystore.location with it", "<set>")
        if cert is None:
            if key is None:
                if key_password is not None:
                    raise self.error("ssl.key.password", "ssl.key.location or ssl.key.pem with it", "<set>")
                return
            raise self.error("ssl.certificate.location", f"a value (or ssl.certificate.pem): {key[0]} is set and "
                             "a client certificate needs both")  # fmt: skip
        if key is None:
            raise self.error("ssl.key.location", f"a value (or ssl.key.pem): {cert[0]} is set and a client "
                             "certificate needs both")  # fmt: skip
        cert_key, cert_pem = cert
        key_key, key_pem = key
        chain = self.certificates(cert_key, cert_pem)
        # Inline, not a file path: the key never lands in another file, and the
        # executors need no copy of the files the Airflow worker reads.
        self.options["ssl.keystore.type"] = "PEM"
        self.options["ssl.keystore.certificate.chain"] = cert_pem
        self.options["ssl.keystore.key"] = self.plain_key(key_key, key_pem, cert_key, chain[0])

    def certificates(self, setting: str, pem: str) -> list[Any]:
        """The certificates of a PEM chain setting, the client's own first."""
        from cryptography import x509

        try:
            chain = x509.load_pem_x509_certificates(pem.encode())
        except ValueError:
            chain = []
        if not chain:
            raise self.error(setting, "PEM certificates (-----BEGIN CERTIFICATE-----)", "<no certificate that parses>")
        return chain

    def plain_key(self, setting: str, pem: str, cert_setting: str, certificate: Any) -> str:
        """The private key of ``setting`` as unencrypted PKCS#8 PEM, after checking it belongs to ``certificate``.

        The Java client reads PKCS#8 only, and not keys encrypted with PBES2, which is what
        OpenSSL and most tools write; librdkafka reads those and PKCS#1/SEC1 keys too. So the key
        is decrypted here with ``ssl.key.password`` and handed over in the one form both read; it
        reaches the job the way the encrypted key and its password would have (an owner-only file
        removed after the job) and is masked in the task's logs.
        """
        from cryptography.exceptions import UnsupportedAlgorithm
        from cryptography.hazmat.primitives import serialization

        mask(pem)
        password = self.config.get("ssl.key.password")
        # PKCS#8's encrypted form, or PKCS#1/SEC1 with OpenSSL's legacy encryption header.
        encrypted = "-----BEGIN ENCRYPTED PRIVATE KEY-----" in pem or "Proc-Type: 4,ENCRYPTED" in pem
        if encrypted and not password:
            raise self.error("ssl.key.password", f"the password of the encrypted key in {setting}", None)
        try:
            # A password for a key that is not encrypted is ignored, as librdkafka ignores it.
            key = serialization.load_pem_private_key(pem.encode(), password.encode() if encrypted and password else None)
        except ValueError:
            if encrypted:
                raise self.error("ssl.key.password", f"the password that decrypts the key in {setting}",
                                 "<a password that does not>") from None  # fmt: skip
            raise self.error(setting, "a PEM private key (PKCS#8, PKCS#1 or SEC1, encrypted or not)",
                             "<no key that parses>") from None  # fmt: skip
        except UnsupportedAlgorithm as exc:
            raise self.refuse(setting, f"its key type or encryption is not supported ({exc})") from None
        public = serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
        if key.public_key().public_bytes(*public) != certificate.public_key().public_bytes(*public):
            raise self.error(setting, f"the private key of the certificate in {cert_setting}",
                             "<the key of another certificate>")  # fmt: skip
        plain = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                  serialization.NoEncryption()).decode()  # fmt: skip
        mask(plain)
        return plain


def _is_sasl_key(key: str) -> bool:
    return key.startswith("sasl.") or key == "enable.sasl.oauthbearer.unsecure.jwt"


def _is_ssl_key(key: str) -> bool:
    return key.startswith(("ssl.", "ssl_", "https.")) or key == "enable.ssl.certificate.verification"


def _unsupported_why(key: str) -> str:
    if key in ("sasl.jaas.config",) or key.startswith(("ssl.truststore.", "ssl.keystore.")):
        return "it is a Java client setting; the extra holds librdkafka settings, which are translated"
    if "oauthbearer" in key:
        return "OAUTHBEARER is not supported"
    if "kerberos" in key:
        return "GSSAPI (Kerberos) is not supported"
    return "its meaning differs or it has no Java equivalent"


def spark_kafka_options(client_config: Mapping[str, str], conn_id: str, *,
                        read_pem: Callable[[str], str] = _read_pem) -> dict[str, str]:  # fmt: skip
    """The Java Kafka client settings the Spark job gets (without ``kafka.`` prefix, bootstrap excluded).

    ``client_config`` holds the librdkafka settings of connection ``conn_id``
    (:func:`kafka_client_config`); errors name that connection.
    Carried over:

    - ``security.protocol`` (upper-cased), ``client.id``, ``client.dns.lookup``;
    - SASL (under ``SASL_*`` protocols): ``sasl.mechanism`` (alias
      ``sasl.mechanisms``) PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 with
      ``sasl.username`` and ``sasl.password`` -> ``sasl.mechanism`` and
      ``sasl.jaas.config`` (Plain/ScramLoginModule, values quoted);
    - TLS (under ``SSL``/``SASL_SSL``): ``ssl.ca.location`` -> a PEM
      truststore file (``ssl.truststore.type=PEM``, ``ssl.truststore.location``;
      the file must exist on the Spark nodes too), ``ssl.ca.pem`` -> inline
      ``ssl.truststore.certificates``; ``ssl.certificate.location|pem`` with
      ``ssl.key.location|pem`` (PKCS#8, PKCS#1 or SEC1) and ``ssl.key.password``
      -> an inline PEM keystore (``ssl.keystore.certificate.chain``, and
      ``ssl.keystore.key`` decrypted to PKCS#8, which is all the Java client
      reads; read here, when the task runs); ``ssl.keystore.location`` (PKCS#12) and
      ``ssl.keystore.password`` -> ``ssl.keystore.type=PKCS12``;
      ``ssl.endpoint.identification.algorithm`` (``none`` -> empty).

    Any other SASL or SSL setting in force under the protocol (OAUTHBEARER,
    GSSAPI/Kerberos, cipher lists, CRLs, disabled certificate verification,
    Java-named settings, ...) raises :class:`ConnectionConfigError` naming the
    connection and the setting. Other librdkafka settings are client tuning
    with librdkafka meanings and are left out. Derived secrets (the JAAS
    config, a private key) are registered with Airflow's log masker.
    """
    return _Translation(conn_id, client_config, read_pem).translate()


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
