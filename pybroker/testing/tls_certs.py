"""Throwaway PEM certificates for TLS tests: a CA, a server certificate for 127.0.0.1 and
localhost, and a client certificate (made with the cryptography package)."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID


@dataclass
class Certs:
    ca: Path  # the CA certificate (a PEM trust store)
    server: Path  # server key + certificate chain in one PEM file (ssl.keystore.location)
    server_key: str  # the same, as PEM text (ssl.keystore.key / ssl.keystore.certificate.chain)
    server_chain: str
    client_cert: Path
    client_key: Path
    other_ca: Path  # a CA that signed nothing here


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject, issuer, key, issuer_key, *, ca=False, san=None) -> x509.Certificate:  # noqa: ANN001
    now = dt.datetime.now(dt.UTC)
    b = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if san:
        b = b.add_extension(x509.SubjectAlternativeName(san), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _pem_key(key) -> bytes:  # noqa: ANN001
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _pem_cert(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


def make_certs(directory: Path) -> Certs:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = _cert(_name("pybroker test CA"), _name("pybroker test CA"), ca_key, ca_key, ca=True)
    server_key = ec.generate_private_key(ec.SECP256R1())
    server = _cert(
        _name("localhost"),
        ca.subject,
        server_key,
        ca_key,
        san=[x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))],
    )
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert(_name("client-1"), ca.subject, client_key, ca_key)
    other_key = ec.generate_private_key(ec.SECP256R1())
    other = _cert(_name("other CA"), _name("other CA"), other_key, other_key, ca=True)

    (directory / "ca.pem").write_bytes(_pem_cert(ca))
    (directory / "other-ca.pem").write_bytes(_pem_cert(other))
    chain = _pem_cert(server) + _pem_cert(ca)
    (directory / "server.pem").write_bytes(_pem_key(server_key) + chain)
    (directory / "client.pem").write_bytes(_pem_cert(client))
    (directory / "client.key").write_bytes(_pem_key(client_key))
    return Certs(
        ca=directory / "ca.pem",
        server=directory / "server.pem",
        server_key=_pem_key(server_key).decode(),
        server_chain=chain.decode(),
        client_cert=directory / "client.pem",
        client_key=directory / "client.key",
        other_ca=directory / "other-ca.pem",
    )
