"""Tests of include/readers/kafka_refusals.py: a broker's refusal said as the connection's setting to fix,
and client certificates refused before any client connects.

Pure: the refusal texts are librdkafka's and the broker's own words (the real broker's come back in
tests/integration/test_kafka_tls.py); the certificates are made here with ``cryptography``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from include.readers import connections
from include.readers.kafka_refusals import (
    ClientCertificateError,
    KafkaSettings,
    advice,
    check_client_certificate,
)
from tests import tls_kafka

VERIFY_FAILED = ("SSL handshake failed: error:0A000086:SSL routines::certificate verify failed: broker certificate "
                 "could not be verified, verify that ssl.ca.location is correctly configured")  # fmt: skip
ALERT = "SSL handshake failed: ssl/record/rec_layer_s3.c:1605: error:0A000415:SSL routines::sslv3 alert certificate expired"


@pytest.fixture(scope="module")
def certs(tmp_path_factory):
    return tls_kafka.make_certificates(tmp_path_factory.mktemp("tls"), "abc123")


def test_a_refused_login_names_username_password_and_mechanism():
    text = advice("kafka_prod", {"security.protocol": "SASL_SSL", "sasl.mechanism": "scram-sha-512"},
                  "SASL_AUTHENTICATION_FAILED", "SASL authentication error: Authentication failed")  # fmt: skip
    assert text.startswith("Check sasl.username and sasl.password of Airflow connection 'kafka_prod'")
    assert "SCRAM-SHA-512" in text


@pytest.mark.parametrize(("ca", "named"), [({"ssl.ca.pem": "x"}, "ssl.ca.pem"), ({"ssl.ca.location": "/c"}, "ssl.ca.location"),
                                           ({}, "ssl.ca.location (not set)")])  # fmt: skip
def test_an_untrusted_broker_certificate_names_the_ca_setting_in_use(ca, named):
    text = advice("k", {"security.protocol": "SSL", **ca}, "_SSL", VERIFY_FAILED)
    assert text.startswith(f"Check {named} of Airflow connection 'k': the broker's certificate is not signed")


def test_a_refused_client_certificate_names_the_certificate_setting():
    given = advice("k", {"security.protocol": "SSL", "ssl.keystore.location": "/k.p12"}, "_SSL", ALERT)
    assert given.startswith("Check ssl.keystore.location of Airflow connection 'k': the broker refused the client")
    missing = advice("k", {"security.protocol": "SSL"}, "_SSL", ALERT)
    assert "a listener that wants a client certificate" in missing


def test_without_a_connection_id_it_says_which_connection_and_otherwise_points_at_the_security_settings():
    text = advice(None, {}, "_AUTHENTICATION", "Local: Authentication failure")
    assert text == "Check the security settings (security.protocol, SASL, TLS) of the Airflow connection the pipeline names"


def test_a_tls_alert_after_the_handshake_is_a_refusal_and_other_disconnects_are_not():
    from confluent_kafka import KafkaError

    from include.readers.kafka_calls import _is_refusal

    alert = KafkaError(KafkaError._TRANSPORT, "Receive failed: error:0A000416:SSL routines::ssl/tls alert certificate "
                       "unknown: SSL alert number 46 (after 1ms in state APIVERSION_QUERY)")  # fmt: skip
    closed = KafkaError(KafkaError._TRANSPORT, "Disconnected: connection closed by peer: receive 0 after POLLIN")
    assert _is_refusal(alert) and not _is_refusal(closed)
    assert _is_refusal(KafkaError(KafkaError.SASL_AUTHENTICATION_FAILED, "SASL authentication error"))


def test_settings_carry_their_connection_and_stay_a_plain_mapping():
    settings = KafkaSettings({"bootstrap.servers": "b:9092"}, "kafka_x")
    assert settings == {"bootstrap.servers": "b:9092"} and settings.connection_id == "kafka_x"


def config_of(**settings: str) -> dict[str, str]:
    return {"bootstrap.servers": "b:9093", "security.protocol": "SSL", **settings}


def test_an_expired_client_certificate_is_refused_with_its_date(certs):
    with pytest.raises(ClientCertificateError) as err:
        check_client_certificate("kafka_tls", config_of(**{"ssl.certificate.location": certs.path("expired.crt")}))
    assert str(err.value).startswith("Airflow connection 'kafka_tls': extra setting 'ssl.certificate.location': "
                                     "the client certificate (CN=kde-etl) expired at ")  # fmt: skip


def test_a_valid_certificate_passes_until_it_expires(certs):
    valid = config_of(**{"ssl.certificate.pem": certs.text("client.crt")})
    check_client_certificate("k", valid)
    later = lambda: datetime.now(UTC) + timedelta(days=60)  # noqa: E731 - a clock
    with pytest.raises(ClientCertificateError, match="'ssl.certificate.pem': the client certificate .* expired"):
        check_client_certificate("k", valid, now=later)
    earlier = lambda: datetime.now(UTC) - timedelta(days=5)  # noqa: E731
    with pytest.raises(ClientCertificateError, match="is valid only from"):
        check_client_certificate("k", valid, now=earlier)


def test_a_pkcs12_keystore_is_opened_with_its_password(certs):
    right = config_of(**{"ssl.keystore.location": certs.path("client.p12"),
                                "ssl.keystore.password": certs.keystore_password})  # fmt: skip
    check_client_certificate("k", right)
    with pytest.raises(ClientCertificateError) as err:
        check_client_certificate("k", {**right, "ssl.keystore.password": "wrong-pw-77"})
    assert "'ssl.keystore.password': expected the password that opens the PKCS#12 keystore" in str(err.value)
    assert "wrong-pw-77" not in str(err.value)


def test_unreadable_or_unparsable_certificates_name_the_setting(certs, tmp_path):
    with pytest.raises(ClientCertificateError, match="'ssl.certificate.location': expected a readable file"):
        check_client_certificate("k", config_of(**{"ssl.certificate.location": str(tmp_path / "none.crt")}))
    with pytest.raises(ClientCertificateError, match="'ssl.certificate.pem': expected a PEM certificate"):
        check_client_certificate("k", config_of(**{"ssl.certificate.pem": "-----BEGIN CERTIFICATE-----\nno"}))


def test_certificates_are_not_read_where_the_protocol_does_not_use_them(certs):
    check_client_certificate("k", {"security.protocol": "SASL_PLAINTEXT", "ssl.certificate.location": "/nowhere"})


def test_the_connection_lookup_refuses_an_expired_certificate(certs, monkeypatch):
    from types import SimpleNamespace

    conn = SimpleNamespace(extra_dejson=config_of(**{"ssl.certificate.location": certs.path("expired.crt")}),
                           host=None, port=None)  # fmt: skip
    with pytest.raises(connections.ConnectionConfigError, match="'kafka_tls'.*expired at"):
        connections.kafka_client_config("kafka_tls", get_connection=lambda _: conn)
    conn.extra_dejson = config_of(**{"ssl.certificate.location": certs.path("client.crt")})
    got = connections.kafka_client_config("kafka_tls", get_connection=lambda _: conn)
    assert isinstance(got, KafkaSettings) and got.connection_id == "kafka_tls"
