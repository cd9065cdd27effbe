"""Tests of include/readers/connections.py: librdkafka security settings -> the Spark job's Java Kafka client.

Pure: no Airflow metadata, no broker. The JAAS quoting was checked against
kafka-clients' own parser; the SASL path runs for real in
tests/integration/test_kafka_security.py.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from include.readers import connections
from include.readers.connections import ConnectionConfigError, spark_kafka_options
from tests import tls_kafka

PLAIN = "org.apache.kafka.common.security.plain.PlainLoginModule"
SCRAM = "org.apache.kafka.common.security.scram.ScramLoginModule"
CERT = "-----BEGIN CERTIFICATE-----\nMIIBcert\n-----END CERTIFICATE-----\n"
KEY = "-----BEGIN PRIVATE KEY-----\nMIIEkey\n-----END PRIVATE KEY-----\n"


def sasl(mechanism: str = "PLAIN", protocol: str = "SASL_PLAINTEXT", **extra: str) -> dict[str, str]:
    return {"bootstrap.servers": "b:9092", "security.protocol": protocol, "sasl.mechanism": mechanism,
            "sasl.username": "etl", "sasl.password": "pw-1234", **extra}  # fmt: skip


def translate(config: dict[str, str], **files: str) -> dict[str, str]:
    """``spark_kafka_options`` with PEM files served from ``files`` instead of the disk."""

    def read_pem(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return files[path]

    return spark_kafka_options(config, "kafka_sec", read_pem=read_pem)


@pytest.fixture(autouse=True)
def masked(monkeypatch) -> list[str]:
    """What was handed to Airflow's log masker (recorded, so no global masker state leaks between tests)."""
    seen: list[str] = []
    monkeypatch.setattr("airflow.sdk.log.mask_secret", lambda value, name=None: seen.append(value))
    return seen


# --------------------------------------------------------------------------- SASL


def test_sasl_plain_becomes_mechanism_and_jaas_config_and_drops_librdkafka_tuning(masked):
    config = sasl(**{"client.id": "kde", "socket.timeout.ms": "5000", "linger.ms": "5"})
    jaas = f'{PLAIN} required username="etl" password="pw-1234";'
    assert translate(config) == {
        "security.protocol": "SASL_PLAINTEXT", "client.id": "kde",
        "sasl.mechanism": "PLAIN", "sasl.jaas.config": jaas,
    }  # fmt: skip
    assert masked == [jaas]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512", "scram-sha-512"])
def test_scram_uses_the_scram_login_module(mechanism):
    options = translate(sasl(mechanism, protocol="sasl_ssl"))
    assert options["security.protocol"] == "SASL_SSL"
    assert options["sasl.mechanism"] == mechanism.upper()
    assert options["sasl.jaas.config"] == f'{SCRAM} required username="etl" password="pw-1234";'


def test_sasl_mechanisms_is_librdkafkas_alias():
    config = sasl()
    del config["sasl.mechanism"]
    config["sasl.mechanisms"] = "SCRAM-SHA-256"
    assert translate(config)["sasl.mechanism"] == "SCRAM-SHA-256"


def test_mechanism_and_mechanisms_disagreeing_is_refused():
    with pytest.raises(ConnectionConfigError, match=r"'kafka_sec'.*'sasl.mechanisms'.*'SCRAM-SHA-256'"):
        translate(sasl("PLAIN", **{"sasl.mechanisms": "SCRAM-SHA-256"}))


@pytest.mark.parametrize("password,quoted", [
    ('a"b', r'"a\"b"'),
    ("a\\b", r'"a\\b"'),
    ('end\\"', r'"end\\\""'),
    ("two\nlines\r", r'"two\nlines\r"'),
    ("semi;colon = x }", '"semi;colon = x }"'),
])  # fmt: skip
def test_jaas_values_are_quoted_so_kafkas_parser_reads_them_back(password, quoted):
    options = translate(sasl(**{"sasl.password": password, "sasl.username": 'we"ird'}))
    assert options["sasl.jaas.config"] == f'{PLAIN} required username="we\\"ird" password={quoted};'


def test_sasl_without_mechanism_names_the_default_it_cannot_carry():
    config = sasl()
    del config["sasl.mechanism"]
    with pytest.raises(ConnectionConfigError, match=r"'kafka_sec': extra setting 'sasl.mechanism'.*GSSAPI"):
        translate(config)


@pytest.mark.parametrize("mechanism", ["GSSAPI", "OAUTHBEARER"])
def test_mechanisms_without_translation_are_refused_with_what_is_supported(mechanism):
    with pytest.raises(ConnectionConfigError) as err:
        translate(sasl(mechanism))
    message = str(err.value)
    assert "'kafka_sec'" in message and "'sasl.mechanism'" in message and repr(mechanism) in message
    assert "supported: " in message and "SCRAM-SHA-512" in message


@pytest.mark.parametrize("key", [
    "sasl.oauthbearer.client.id", "sasl.oauthbearer.config", "sasl.kerberos.service.name",
    "enable.sasl.oauthbearer.unsecure.jwt", "sasl.jaas.config",
])  # fmt: skip
def test_other_sasl_settings_are_refused_never_dropped(key):
    with pytest.raises(ConnectionConfigError, match=rf"'kafka_sec': extra setting '{key}' cannot be given"):
        translate(sasl(**{key: "x"}))


@pytest.mark.parametrize("missing", ["sasl.username", "sasl.password"])
def test_username_and_password_are_both_required(missing):
    config = sasl()
    config[missing] = ""
    with pytest.raises(ConnectionConfigError, match=rf"'kafka_sec': extra setting '{missing}': expected a non-empty"):
        translate(config)


def test_sasl_settings_under_a_non_sasl_protocol_are_unused_by_both_clients():
    # librdkafka reads sasl.* only under SASL_*; carrying them would make the Java client differ.
    config = sasl(protocol="SSL", **{"sasl.oauthbearer.config": "x"})
    assert translate(config) == {"security.protocol": "SSL"}


def test_unknown_protocol_is_refused():
    with pytest.raises(ConnectionConfigError, match=r"'kafka_sec'.*'security.protocol': expected PLAINTEXT"):
        translate({"security.protocol": "TLS"})


def test_plaintext_connection_gives_the_job_nothing_but_what_it_shares():
    assert translate({"bootstrap.servers": "b:9092", "client.dns.lookup": "use_all_dns_ips"}) == {
        "client.dns.lookup": "use_all_dns_ips"
    }


def test_errors_name_the_connection():
    conn = SimpleNamespace(extra_dejson={"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL",
                                         "sasl.mechanism": "GSSAPI"}, host=None, port=None)  # fmt: skip
    client = connections.kafka_client_config("kafka_prod", get_connection=lambda _: conn)
    assert client == {"bootstrap.servers": "b:9092", "security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}
    with pytest.raises(ConnectionConfigError, match=r"^Airflow connection 'kafka_prod': extra setting 'sasl.mechanism'"):
        spark_kafka_options(client, "kafka_prod")


def test_secrets_never_appear_in_error_messages():
    with pytest.raises(ConnectionConfigError) as err:
        translate(sasl(**{"sasl.password": "pw-SECRET-1", "sasl.oauthbearer.config": "x"}))
    assert "pw-SECRET-1" not in str(err.value)


# --------------------------------------------------------------------------- SSL


def test_ca_location_becomes_a_pem_truststore_and_hostname_check_none_becomes_empty():
    config = {"security.protocol": "SSL", "ssl.ca.location": "/etc/kafka/ca.pem",
              "ssl.endpoint.identification.algorithm": "none"}  # fmt: skip
    assert translate(config) == {
        "security.protocol": "SSL", "ssl.truststore.type": "PEM", "ssl.truststore.location": "/etc/kafka/ca.pem",
        "ssl.endpoint.identification.algorithm": "",
    }  # fmt: skip


def test_inline_ca_becomes_inline_truststore_certificates():
    options = translate({"security.protocol": "SASL_SSL", **sasl(protocol="SASL_SSL"), "ssl.ca.pem": CERT})
    assert (options["ssl.truststore.type"], options["ssl.truststore.certificates"]) == ("PEM", CERT)
    assert options["sasl.mechanism"] == "PLAIN"


@pytest.mark.parametrize("value,expected", [("https", "https"), ("HTTPS", "https")])
def test_hostname_check_https_is_kept(value, expected):
    options = translate({"security.protocol": "SSL", "ssl.endpoint.identification.algorithm": value})
    assert options["ssl.endpoint.identification.algorithm"] == expected


def test_ca_probe_and_ca_directories_are_refused(tmp_path):
    with pytest.raises(ConnectionConfigError, match=r"'ssl.ca.location'.*'probe'"):
        translate({"security.protocol": "SSL", "ssl.ca.location": "probe"})
    with pytest.raises(ConnectionConfigError, match=r"'ssl.ca.location'.*is a directory"):
        translate({"security.protocol": "SSL", "ssl.ca.location": str(tmp_path)})


@pytest.fixture(scope="module")
def tls(tmp_path_factory) -> tls_kafka.Certificates:
    """Real certificates and keys (made with ``cryptography``): the key checks parse them."""
    return tls_kafka.make_certificates(tmp_path_factory.mktemp("tls"), "t0k3n")


def test_client_certificate_and_key_files_become_an_inline_pem_keystore(masked, tls):
    config = {"security.protocol": "SSL", "ssl.certificate.location": "/c.pem", "ssl.key.location": "/k.pem"}
    options = translate(config, **{"/c.pem": tls.text("client.crt"), "/k.pem": tls.text("client.key")})
    assert options == {"security.protocol": "SSL", "ssl.keystore.type": "PEM",
                       "ssl.keystore.certificate.chain": tls.text("client.crt"),
                       "ssl.keystore.key": tls.text("client.key")}  # fmt: skip
    assert tls.text("client.key") in masked


def private_numbers(pem: str, password: str | None = None) -> int:
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(pem.encode(), password.encode() if password else None)
    return key.private_numbers().private_value  # type: ignore[union-attr]


def test_an_encrypted_key_reaches_the_java_client_decrypted_as_pkcs8(masked, tls):
    # OpenSSL and cryptography encrypt PKCS#8 with PBES2, which the Java client cannot read
    # ("PBES2 SecretKeyFactory not available"): the job gets the key decrypted, never the password.
    config = {"security.protocol": "SSL", "ssl.certificate.pem": tls.text("client.crt"),
              "ssl.key.pem": tls.text("client-encrypted.key"), "ssl.key.password": tls.key_password}  # fmt: skip
    options = translate(config)
    key = options["ssl.keystore.key"]
    assert key.startswith("-----BEGIN PRIVATE KEY-----") and "ssl.key.password" not in options
    assert private_numbers(key) == private_numbers(tls.text("client-encrypted.key"), tls.key_password)
    assert key in masked and tls.text("client-encrypted.key") in masked


def test_key_files_are_really_read_from_disk(tls):
    config = {"security.protocol": "SSL", "ssl.certificate.location": tls.path("client.crt"),
              "ssl.key.location": tls.path("client-encrypted.key"), "ssl.key.password": tls.key_password}  # fmt: skip
    options = spark_kafka_options(config, "kafka_sec")
    assert private_numbers(options["ssl.keystore.key"]) == private_numbers(tls.text("client.key"))


def test_pkcs1_and_sec1_keys_are_converted_to_pkcs8(tls):
    from cryptography.hazmat.primitives import serialization

    key = serialization.load_pem_private_key(tls.text("client.key").encode(), None)
    sec1 = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                             serialization.NoEncryption()).decode()  # fmt: skip
    assert sec1.startswith("-----BEGIN EC PRIVATE KEY-----")
    config = {"security.protocol": "SSL", "ssl.certificate.pem": tls.text("client.crt"), "ssl.key.location": "/k.pem"}
    options = translate(config, **{"/k.pem": sec1})
    assert options["ssl.keystore.key"] == tls.text("client.key")


def test_key_password_must_open_an_encrypted_key_and_is_ignored_for_a_plain_one(tls):
    base = {"security.protocol": "SSL", "ssl.certificate.pem": tls.text("client.crt")}
    encrypted = {**base, "ssl.key.pem": tls.text("client-encrypted.key")}
    with pytest.raises(ConnectionConfigError, match=r"'ssl.key.password': expected the password of the encrypted"):
        translate(encrypted)
    with pytest.raises(ConnectionConfigError, match=r"'ssl.key.password': expected the password that decrypts") as err:
        translate({**encrypted, "ssl.key.password": "wrong-kp-99"})
    assert "wrong-kp-99" not in str(err.value)
    plain = translate({**base, "ssl.key.pem": tls.text("client.key"), "ssl.key.password": "unused"})
    assert plain["ssl.keystore.key"] == tls.text("client.key") and "ssl.key.password" not in plain


def test_a_key_of_another_certificate_or_no_key_at_all_is_refused(tls):
    base = {"security.protocol": "SSL", "ssl.certificate.pem": tls.text("client.crt")}
    with pytest.raises(ConnectionConfigError, match=r"'ssl.key.pem': expected the private key of the certificate "
                                                     r"in ssl.certificate.pem"):  # fmt: skip
        translate({**base, "ssl.key.pem": tls.text("expired.key")})
    with pytest.raises(ConnectionConfigError, match=r"'ssl.key.pem': expected a PEM private key"):
        translate({**base, "ssl.key.pem": "-----BEGIN PRIVATE KEY-----\nMIIEkey\n-----END PRIVATE KEY-----\n"})
    with pytest.raises(ConnectionConfigError, match=r"'ssl.certificate.pem': expected PEM certificates"):
        translate({**base, "ssl.certificate.pem": CERT, "ssl.key.pem": tls.text("client.key")})


def test_certificate_without_key_and_unreadable_files_are_refused(tls):
    with pytest.raises(ConnectionConfigError, match=r"'kafka_sec': extra setting 'ssl.key.location'"):
        translate({"security.protocol": "SSL", "ssl.certificate.pem": tls.text("client.crt")})
    with pytest.raises(ConnectionConfigError, match=r"'ssl.certificate.location': expected a readable PEM file.*/gone"):
        translate({"security.protocol": "SSL", "ssl.certificate.location": "/gone", "ssl.key.pem": tls.text("client.key")})


def test_pkcs12_keystore_is_carried_with_its_type_and_password():
    config = {"security.protocol": "SSL", "ssl.keystore.location": "/client.p12", "ssl.keystore.password": "sp-123"}
    assert translate(config) == {"security.protocol": "SSL", "ssl.keystore.type": "PKCS12",
                                 "ssl.keystore.location": "/client.p12", "ssl.keystore.password": "sp-123"}  # fmt: skip


def test_pkcs12_and_pem_client_certificates_together_are_refused():
    config = {"security.protocol": "SSL", "ssl.keystore.location": "/client.p12", "ssl.certificate.pem": CERT,
              "ssl.key.pem": KEY}  # fmt: skip
    with pytest.raises(ConnectionConfigError, match=r"'ssl.keystore.location': expected either a PKCS#12"):
        translate(config)


@pytest.mark.parametrize("key,value", [
    ("ssl.cipher.suites", "ECDHE-RSA-AES256-GCM-SHA384"), ("ssl.crl.location", "/crl.pem"),
    ("ssl.curves.list", "P-256"), ("ssl.truststore.location", "/ts.jks"), ("ssl.engine.id", "pkcs11"),
    ("enable.ssl.certificate.verification", "false"),
])  # fmt: skip
def test_ssl_settings_without_translation_are_refused(key, value):
    with pytest.raises(ConnectionConfigError, match=rf"'kafka_sec': extra setting '{key}' cannot be given"):
        translate({"security.protocol": "SASL_SSL", **sasl(protocol="SASL_SSL"), key: value})


def test_certificate_verification_left_on_is_fine():
    options = translate({"security.protocol": "SSL", "enable.ssl.certificate.verification": "true"})
    assert options == {"security.protocol": "SSL"}


def test_ssl_settings_under_sasl_plaintext_are_unused_by_both_clients():
    assert "ssl.truststore.location" not in translate(sasl(**{"ssl.ca.location": "/ca.pem"}))


# --------------------------------------------------------------------------- Airflow connections from the environment


def test_kafka_connection_from_environment(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps(
        {"conn_type": "kafka", "extra": {"bootstrap.servers": "b1:9092", "security.protocol": "SSL",
                                         "sasl.password": "s3cret"}}))  # fmt: skip
    config = connections.kafka_client_config("kafka_test")
    assert config["bootstrap.servers"] == "b1:9092"
    # Only settings the Java client names the same way go to Spark; secrets never do by accident.
    assert connections.spark_kafka_options(config, "kafka_test") == {"security.protocol": "SSL"}


def test_kafka_connection_without_bootstrap_names_the_connection(monkeypatch):
    monkeypatch.setenv("AIRFLOW_CONN_KAFKA_TEST", json.dumps({"conn_type": "kafka", "extra": {}}))
    with pytest.raises(connections.ConnectionConfigError, match="'kafka_test': expected 'bootstrap.servers'"):
        connections.kafka_client_config("kafka_test")


def test_missing_connection_is_an_error_not_a_yarn_fallback():
    with pytest.raises(connections.ConnectionConfigError, match="'no_such_spark' does not exist"):
        connections.spark_master("no_such_spark")


@pytest.mark.parametrize("conn,master", [
    ({"conn_type": "spark", "host": "spark://10.0.0.5", "port": 7077}, "spark://10.0.0.5:7077"),
    ({"conn_type": "spark", "host": "yarn"}, "yarn"),
    ({"conn_type": "spark", "host": "k8s://https://api.example:443"}, "k8s://https://api.example:443"),
])  # fmt: skip
def test_spark_master_reads_the_connection_like_the_provider(monkeypatch, conn, master):
    monkeypatch.setenv("AIRFLOW_CONN_SPARK_TEST", json.dumps(conn))
    assert connections.spark_master("spark_test") == master
