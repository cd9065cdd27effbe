"""A broker of one test that speaks TLS, and the certificates it and its clients use, made at test time.

Listeners (all on 127.0.0.1, free ports):

- ``SSL``: TLS with server authentication only;
- ``MTLS``: TLS that requires a client certificate signed by the test's CA (mutual TLS);
- ``SASL_SSL``: TLS plus SASL with SCRAM-SHA-256 and SCRAM-SHA-512 (one user, created for both
  mechanisms through the admin API);
- ``INTERNAL``: PLAINTEXT, for the broker itself and for the test's own setup (topics, users, producing).

The certificates are made with ``cryptography`` (an Airflow dependency): a CA, the broker's certificate
naming 127.0.0.1 and localhost, a client certificate with its key as PEM (plain and encrypted) and in a
PKCS#12 keystore, an expired client certificate, and a second CA that signed none of them. Nothing is
committed; every secret (SCRAM password, key password, keystore password) holds :attr:`TlsBroker.token`,
which the leak checks look for.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from ipaddress import IPv4Address
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.serialization import pkcs12
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from include.ports import free_port
from include.tooling import local_kafka

#: The client listeners a test connects through (INTERNAL is the test's own).
LISTENERS = ("SSL", "MTLS", "SASL_SSL")
SCRAM_USER = "kde-etl"


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def _certificate(subject: str, key: ec.EllipticCurvePrivateKey, issuer: tuple[str, ec.EllipticCurvePrivateKey] | None,
                 *, ca: bool = False, server: bool = False, valid_days: tuple[int, int] = (-1, 30)) -> x509.Certificate:  # fmt: skip
    """A certificate of ``subject`` for ``key``, signed by ``issuer`` (name, key) or by itself."""
    issuer_name, issuer_key = issuer if issuer is not None else (subject, key)
    now = datetime.now(UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now + timedelta(days=valid_days[0]))
        .not_valid_after(now + timedelta(days=valid_days[1]))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True, content_commitment=False,
                          key_encipherment=False, data_encipherment=False, key_agreement=False,
                          encipher_only=False, decipher_only=False), critical=True)  # fmt: skip
    elif server:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(IPv4Address("127.0.0.1"))]),
            critical=False,
        ).add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
    else:
        builder = builder.add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def _key_pem(key: ec.EllipticCurvePrivateKey, password: str | None = None) -> str:
    encryption = (serialization.BestAvailableEncryption(password.encode()) if password
                  else serialization.NoEncryption())  # fmt: skip
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption).decode()


def _new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


@dataclass(frozen=True)
class Certificates:
    """The files of one test's TLS material (owner-only, in one folder) and the secrets that open them."""

    folder: Path
    key_password: str = field(repr=False)
    keystore_password: str = field(repr=False)

    def path(self, name: str) -> str:
        return str(self.folder / name)

    def text(self, name: str) -> str:
        return (self.folder / name).read_text()


def _write(folder: Path, name: str, data: str | bytes) -> None:
    path = folder / name
    path.write_bytes(data.encode() if isinstance(data, str) else data)
    path.chmod(0o600)


def make_certificates(folder: Path, token: str) -> Certificates:
    """The CA, the broker's and the clients' certificates and keys, written to ``folder``.

    Files: ``ca.pem``; ``broker.pem`` (the broker's PKCS#8 key and certificate); ``client.crt``,
    ``client.key`` (PKCS#8, plain), ``client-encrypted.key`` (PKCS#8, encrypted with
    :attr:`Certificates.key_password`), ``client.p12`` (PKCS#12, :attr:`Certificates.keystore_password`);
    ``expired.crt``/``expired.key`` (signed by the CA, expired yesterday); ``other-ca.pem`` (a CA that
    signed nothing here).
    """
    folder.mkdir(parents=True, exist_ok=True)
    certs = Certificates(folder, key_password=f"kp-{token}", keystore_password=f"ks-{token}")
    ca_key, other_key = _new_key(), _new_key()
    ca = _certificate("kde-test-ca", ca_key, None, ca=True)
    issuer = ("kde-test-ca", ca_key)
    _write(folder, "ca.pem", _pem(ca))
    _write(folder, "other-ca.pem", _pem(_certificate("kde-other-ca", other_key, None, ca=True)))
    broker_key = _new_key()
    _write(folder, "broker.pem", _key_pem(broker_key) + _pem(_certificate("localhost", broker_key, issuer, server=True)))
    client_key = _new_key()
    client = _certificate(SCRAM_USER, client_key, issuer)
    _write(folder, "client.crt", _pem(client))
    _write(folder, "client.key", _key_pem(client_key))
    _write(folder, "client-encrypted.key", _key_pem(client_key, certs.key_password))
    _write(folder, "client.p12", pkcs12.serialize_key_and_certificates(
        SCRAM_USER.encode(), client_key, client, [ca],
        serialization.BestAvailableEncryption(certs.keystore_password.encode())))  # fmt: skip
    expired_key = _new_key()
    _write(folder, "expired.crt", _pem(_certificate(SCRAM_USER, expired_key, issuer, valid_days=(-30, -1))))
    _write(folder, "expired.key", _key_pem(expired_key))
    return certs


@dataclass(frozen=True)
class TlsBroker:
    """A started TLS broker: its listeners' ports, its certificates and its SCRAM user's password."""

    broker: local_kafka.LocalBroker
    ports: dict[str, int]
    certs: Certificates
    scram_password: str = field(repr=False)
    #: Random hex inside every secret: found in any encoding of them.
    token: str

    @property
    def internal(self) -> str:
        """The PLAINTEXT listener, for the test's own setup (never the pipeline's connection)."""
        return self.broker.bootstrap_servers

    def address(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def settings(self, listener: str, **extra: str) -> dict[str, str]:
        """librdkafka settings of a client of ``listener`` (``SSL``, ``MTLS``, ``SASL_SSL``), ``extra`` added."""
        protocol = "SASL_SSL" if listener == "SASL_SSL" else "SSL"
        return {"bootstrap.servers": self.address(listener), "security.protocol": protocol, **extra}

    def stop(self) -> None:
        self.broker.stop()


def connection(settings: dict[str, str]) -> str:
    """``AIRFLOW_CONN_KAFKA_DEFAULT`` of ``settings``: the Kafka provider's connection in its JSON form."""
    return json.dumps({"conn_type": "kafka", "extra": settings})


def _listener_properties(internal: int, ports: dict[str, int], controller: int,
                         certs: Certificates) -> dict[str, str]:  # fmt: skip
    listeners = {"INTERNAL": internal, **ports}
    protocols = {"INTERNAL": "PLAINTEXT", "SSL": "SSL", "MTLS": "SSL", "SASL_SSL": "SASL_SSL"}
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    return {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in listeners.items())
        + f",CONTROLLER://127.0.0.1:{controller}",
        "advertised.listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in listeners.items()),
        "listener.security.protocol.map": ",".join(f"{n}:{protocols[n]}" for n in listeners) + ",CONTROLLER:PLAINTEXT",
        "inter.broker.listener.name": "INTERNAL",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": certs.path("broker.pem"),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": certs.path("ca.pem"),
        "listener.name.mtls.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config": scram,
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram,
    }


def start(data_dir: Path) -> TlsBroker:
    """Start a broker with the listeners of this module's docstring, its certificates in ``data_dir/tls``."""
    from confluent_kafka.admin import (
        AdminClient,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )

    token = secrets.token_hex(12)
    certs = make_certificates(data_dir / "tls", token)
    internal, controller = free_port(), free_port()
    ports = {name: free_port() for name in LISTENERS}
    properties = _listener_properties(internal, ports, controller, certs)
    broker = local_kafka.start(data_dir / "kafka", heap="512m", port=internal, properties=properties,
                               controller_port=controller)  # fmt: skip
    password = f'scram-{token}-"q\\ü'
    try:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        # One request per mechanism: the broker refuses two changes to one user's credentials in one request.
        for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            upsert = UserScramCredentialUpsertion(SCRAM_USER, ScramCredentialInfo(mechanism, 8192), password.encode())
            for future in admin.alter_user_scram_credentials([upsert]).values():
                future.result(timeout=30)
    except BaseException:
        broker.stop()
        raise
    return TlsBroker(broker, ports, certs, password, token)
