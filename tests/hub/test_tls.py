"""``frachub up --ssl-cert/--ssl-key``: the hub is served over HTTPS by its own proxy, with the
certificate given, and the banner says https."""

from __future__ import annotations

import datetime
import ssl
from pathlib import Path

import httpx
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from hub.upharness import Up


def self_signed(directory: Path) -> tuple[Path, Path]:
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.DNSName("localhost")]), critical=False)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return cert_path, key_path


def test_the_hub_is_served_over_https_with_the_given_certificate(tmp_path: Path) -> None:
    cert, key = self_signed(tmp_path)
    flags = ("--demo", "--declared", "--ssl-cert", str(cert), "--ssl-key", str(key))
    with Up(tmp_path, flags=flags) as up:
        assert f"open:     https://localhost:{up.port}/" in up.log_text()
        trusted = ssl.create_default_context(cafile=str(cert))
        with httpx.Client(verify=trusted, timeout=30) as client:
            response = client.get(f"https://localhost:{up.port}/hub/api/")
            assert response.status_code == 200 and "version" in response.json()
            panel = client.get(f"https://localhost:{up.port}/services/frachub/api/v1/")
            assert panel.status_code == 403  # served, and asks for a token
        with httpx.Client(timeout=10) as plain:
            try:
                answered = plain.get(f"http://127.0.0.1:{up.port}/hub/api/").status_code
            except httpx.HTTPError:
                answered = None
            assert answered != 200, "plain HTTP must not be served"
