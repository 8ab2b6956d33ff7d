"""Throwaway TLS material for the security tests: a CA, a broker certificate and client
certificates, made fresh in the test's temporary directory (no key is ever committed).

The broker certificate names 127.0.0.1 and localhost, so clients that verify host names
(the Java client does by default) accept it.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass(frozen=True)
class Pem:
    cert: Path
    key: Path

    @property
    def cert_text(self) -> str:
        return self.cert.read_text()

    @property
    def key_text(self) -> str:
        return self.key.read_text()


@dataclass(frozen=True)
class TlsMaterial:
    ca: Pem
    broker: Pem
    broker_keystore: Path  # key and chain in one PEM file (ssl.keystore.location)
    client: Pem  # subject CN=alice,OU=eng,O=kbroker-test
    stranger: Pem  # signed by a CA the broker does not trust


def _name(**parts: str) -> x509.Name:
    oids = {
        "CN": NameOID.COMMON_NAME,
        "OU": NameOID.ORGANIZATIONAL_UNIT_NAME,
        "O": NameOID.ORGANIZATION_NAME,
    }
    # In the order given, least specific first (O, OU, CN), as certificates list them.
    return x509.Name([x509.NameAttribute(oids[k], v) for k, v in parts.items()])


def _issue(
    subject: x509.Name,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Name,
    issuer_key: ec.EllipticCurvePrivateKey,
    *,
    ca: bool = False,
    san: x509.SubjectAlternativeName | None = None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
    if san is not None:
        builder = builder.add_extension(san, critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(
    directory: Path, stem: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Pem:
    cert_path, key_path = directory / f"{stem}.crt", directory / f"{stem}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    key_path.chmod(0o600)
    return Pem(cert_path, key_path)


def make_tls_material(directory: Path, ca_cn: str = "kbroker test CA") -> TlsMaterial:
    """`ca_cn` names the CA: two CAs trusted side by side (a rotation) need distinct
    names, since the certificates carry no key identifiers to tell them apart."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name(CN=ca_cn)
    ca_cert = _issue(ca_name, ca_key, ca_name, ca_key, ca=True)
    ca = _write(directory, "ca", ca_cert, ca_key)

    broker_key = ec.generate_private_key(ec.SECP256R1())
    san = x509.SubjectAlternativeName(
        [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    )
    broker_cert = _issue(_name(CN="localhost"), broker_key, ca_name, ca_key, san=san)
    broker = _write(directory, "broker", broker_cert, broker_key)
    keystore = directory / "broker-keystore.pem"
    keystore.write_text(broker.key_text + broker.cert_text + ca.cert_text)
    keystore.chmod(0o600)

    client_key = ec.generate_private_key(ec.SECP256R1())
    client_cert = _issue(_name(O="kbroker-test", OU="eng", CN="alice"), client_key, ca_name, ca_key)
    client = _write(directory, "client", client_cert, client_key)

    rogue_key = ec.generate_private_key(ec.SECP256R1())
    rogue_name = _name(CN="rogue CA")
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger_cert = _issue(_name(CN="mallory"), stranger_key, rogue_name, rogue_key)
    stranger = _write(directory, "stranger", stranger_cert, stranger_key)
    return TlsMaterial(ca, broker, keystore, client, stranger)
