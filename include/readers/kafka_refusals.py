"""Why a broker refused a client, said in terms of the Airflow connection's settings.

A refused TLS handshake or SASL login reaches the Airflow side as a librdkafka
error whose words are OpenSSL's or the broker's ("certificate verify failed",
"alert certificate unknown", "Authentication failed"). :func:`advice` turns
one into the connection and setting to fix; :func:`check_client_certificate`
refuses, before any client connects, a client certificate that has expired
or a PKCS#12 keystore its password does not open, so that the refusal names
the setting and the date rather than a handshake alert.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path

from include.contract.errors import PipelineError


class KafkaSettings(dict[str, str]):
    """A Kafka connection's librdkafka settings, with the id of the Airflow connection they came from.

    A plain ``dict`` to every client; the id lets a refusal name the connection.
    """

    def __init__(self, settings: Mapping[str, str], connection_id: str) -> None:
        super().__init__(settings)
        self.connection_id = connection_id


class ClientCertificateError(PipelineError, ValueError):
    """A client certificate or keystore of a Kafka connection cannot be used; the message names the setting."""


def _protocol(config: Mapping[str, str]) -> str:
    return str(config.get("security.protocol") or "PLAINTEXT").strip().upper()


def _set(config: Mapping[str, str], *keys: str) -> list[str]:
    return [k for k in keys if config.get(k)]


def advice(connection_id: str | None, config: Mapping[str, str], code_name: str, text: str) -> str:
    """What to check after the broker refused a client of ``config``: the connection and the setting.

    ``code_name`` is librdkafka's error name (``_SSL``, ``SASL_AUTHENTICATION_FAILED``,
    ``_AUTHENTICATION``), ``text`` its message.
    """
    conn = f"Airflow connection {connection_id!r}" if connection_id else "the Airflow connection the pipeline names"
    lowered = text.lower()
    mechanism = str(config.get("sasl.mechanism") or config.get("sasl.mechanisms") or "").upper()
    if code_name == "SASL_AUTHENTICATION_FAILED" or "sasl authentication" in lowered:
        return (f"Check sasl.username and sasl.password of {conn}: the broker did not accept them for "
                f"{mechanism or 'the SASL mechanism'} (for SCRAM, the user must exist for that very mechanism)")  # fmt: skip
    if "certificate verify failed" in lowered or "unable to get local issuer" in lowered:
        where = " or ".join(_set(config, "ssl.ca.location", "ssl.ca.pem")) or "ssl.ca.location (not set)"
        return (f"Check {where} of {conn}: the broker's certificate is not signed by that CA (or has expired, "
                "or does not name the host in bootstrap.servers); give the CA that signed the broker's certificate")
    if "alert" in lowered or "peer" in lowered or "certificate required" in lowered:
        given = _set(config, "ssl.certificate.location", "ssl.certificate.pem", "ssl.keystore.location")
        if given:
            return (f"Check {' / '.join(given)} of {conn}: the broker refused the client certificate (expired, "
                    "or not signed by a CA the broker trusts)")  # fmt: skip
        if _protocol(config).endswith("SSL"):
            return (f"Check ssl.certificate.location / ssl.certificate.pem (or ssl.keystore.location) of {conn}: "
                    "the broker refused the handshake, and a listener that wants a client certificate (mutual "
                    "TLS) refuses a client without one")  # fmt: skip
    return f"Check the security settings (security.protocol, SASL, TLS) of {conn}"


def _load_pem_certificate(text: str, key: str) -> object:
    from cryptography import x509

    try:
        return x509.load_pem_x509_certificate(text.encode())
    except ValueError as exc:
        raise ClientCertificateError(f"{key!r}: expected a PEM certificate, got one that does not parse ({exc})") from None


def check_client_certificate(connection_id: str, config: Mapping[str, str], *,
                             now: Callable[[], datetime] = lambda: datetime.now(UTC),
                             read: Callable[[str], bytes] = lambda p: Path(p).read_bytes()) -> None:  # fmt: skip
    """Refuse a client certificate of ``config`` that has expired or is not yet valid, and a PKCS#12
    keystore its password does not open, naming the connection and the setting.

    Only under an SSL protocol, where the client presents it. A certificate that is valid here may
    still be refused by the broker; :func:`advice` says what to check then.
    """
    if not _protocol(config).endswith("SSL"):
        return
    prefix = f"Airflow connection {connection_id!r}: extra setting"
    certificate, key = None, ""
    try:
        if config.get("ssl.certificate.pem"):
            key = "ssl.certificate.pem"
            certificate = _load_pem_certificate(config[key], key)
        elif config.get("ssl.certificate.location"):
            key = "ssl.certificate.location"
            certificate = _load_pem_certificate(read(config[key]).decode(errors="replace"), key)
        elif config.get("ssl.keystore.location"):
            key = "ssl.keystore.location"
            certificate = _pkcs12_certificate(config, read)
    except ClientCertificateError as exc:
        raise ClientCertificateError(f"{prefix} {exc}") from None
    except OSError as exc:
        raise ClientCertificateError(f"{prefix} {key!r}: expected a readable file, got {config[key]} "
                                     f"({exc.strerror or exc})") from None  # fmt: skip
    if certificate is None:
        return
    from cryptography import x509

    assert isinstance(certificate, x509.Certificate)
    at = now()
    start, end = certificate.not_valid_before_utc, certificate.not_valid_after_utc
    subject = certificate.subject.rfc4514_string()
    if end < at:
        raise ClientCertificateError(
            f"{prefix} {key!r}: the client certificate ({subject}) expired at {end.isoformat()}; "
            "give a renewed certificate (and its key) before the broker refuses the handshake"
        )
    if start > at:
        raise ClientCertificateError(
            f"{prefix} {key!r}: the client certificate ({subject}) is valid only from {start.isoformat()}; "
            "check the clock of this machine or the certificate's dates"
        )


def _pkcs12_certificate(config: Mapping[str, str], read: Callable[[str], bytes]) -> object:
    from cryptography.hazmat.primitives.serialization import pkcs12

    password = config.get("ssl.keystore.password")
    try:
        _key, certificate, _chain = pkcs12.load_key_and_certificates(
            read(config["ssl.keystore.location"]), password.encode() if password else None
        )
    except ValueError:
        raise ClientCertificateError(
            "'ssl.keystore.password': expected the password that opens the PKCS#12 keystore in "
            f"ssl.keystore.location ({config['ssl.keystore.location']}), got one that does not (or the file is "
            "not PKCS#12)"
        ) from None
    if certificate is None:
        raise ClientCertificateError("'ssl.keystore.location': expected a PKCS#12 keystore holding a client "
                                     "certificate, got one without")  # fmt: skip
    return certificate
