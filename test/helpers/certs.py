"""Self-signed test PKI made with `cryptography`: a CA, a server certificate for 127.0.0.1 /
localhost, a client certificate it signed, and a client certificate from an unrelated CA."""

from __future__ import annotations

import datetime as dt
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass
class TestPki:
    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path  # a client certificate from another CA
    stranger_key: Path
    key_password: Optional[str] = None  # the server key is encrypted with it when set


def _name(cn: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])


def _cert(subject: str, key, issuer: str, issuer_key, ca: bool = False, usages=(), sans=()) -> x509.Certificate:
    now = dt.datetime.now(dt.timezone.utc)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(subject))
        .issuer_name(_name(issuer))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
    )
    if ca:
        builder = builder.add_extension(
            x509.KeyUsage(True, False, False, False, False, True, True, False, False), critical=True
        )
    if usages:
        builder = builder.add_extension(x509.ExtendedKeyUsage(list(usages)), critical=False)
    if sans:
        builder = builder.add_extension(x509.SubjectAlternativeName(list(sans)), critical=False)
    return builder.sign(issuer_key, hashes.SHA256())


def _write(directory: Path, name: str, cert: x509.Certificate, key, password: Optional[str] = None) -> tuple:
    cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    encryption = serialization.BestAvailableEncryption(password.encode()) if password else serialization.NoEncryption()
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, encryption))
    return cert_path, key_path


def make_pki(directory: Path, key_password: Optional[str] = None) -> TestPki:
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, other_key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca = _cert("sglang-test-ca", ca_key, "sglang-test-ca", ca_key, ca=True)
    other_ca = _cert("stranger-ca", other_key, "stranger-ca", other_key, ca=True)
    _write(directory, "stranger-ca", other_ca, other_key)
    ca_path, _ = _write(directory, "ca", ca, ca_key)
    server_key = ec.generate_private_key(ec.SECP256R1())
    sans = [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
    # serverAuth and clientAuth: `sglang health` presents the server's own certificate under mutual TLS.
    server = _cert(
        "localhost",
        server_key,
        "sglang-test-ca",
        ca_key,
        usages=(ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH),
        sans=sans,
    )
    server_cert, server_key_path = _write(directory, "server", server, server_key, key_password)
    client_key = ec.generate_private_key(ec.SECP256R1())
    client = _cert("client", client_key, "sglang-test-ca", ca_key, usages=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    client_cert, client_key_path = _write(directory, "client", client, client_key)
    stranger_key = ec.generate_private_key(ec.SECP256R1())
    stranger = _cert("stranger", stranger_key, "stranger-ca", other_key, usages=(ExtendedKeyUsageOID.CLIENT_AUTH,))
    stranger_cert, stranger_key_path = _write(directory, "stranger", stranger, stranger_key)
    return TestPki(
        ca_path,
        server_cert,
        server_key_path,
        client_cert,
        client_key_path,
        stranger_cert,
        stranger_key_path,
        key_password,
    )
