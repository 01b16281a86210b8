"""Who may talk to the agent: a shared token, the page's origin, and TLS.

A microphone and a camera stream are sensitive: by default only same-origin
pages and pages on this machine may open the WebSocket (cross-site
WebSocket hijacking is refused), and a token, when configured, must be in
the offer. Secrets are compared in constant time and never logged.
"""

from __future__ import annotations

import datetime as dt
import hmac
import ipaddress
import logging
import os
import socket
import ssl
from pathlib import Path
from urllib.parse import urlsplit

log = logging.getLogger(__name__)

LOCAL_HOSTS = {"localhost", "127.0.0.1", "::1", "[::1]"}


def token_ok(expected: str, given: object) -> bool:
    if not expected:
        return True
    if not isinstance(given, str):
        return False
    return hmac.compare_digest(expected.encode(), given.encode())


def origin_ok(origin: str | None, host_header: str | None, allowed: list[str]) -> bool:
    """No Origin (not a browser), the same origin, this machine, or a listed one."""
    if origin is None:
        return True
    if origin in allowed or "*" in allowed:
        return True
    parts = urlsplit(origin)
    if parts.hostname is None:
        return False
    if parts.hostname in LOCAL_HOSTS:
        return True
    return host_header is not None and parts.netloc.lower() == host_header.lower()


def ssl_context(cert: str, key: str) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ValueError(f"cannot use the TLS certificate {cert} with key {key}: {exc}") from None
    return ctx


def _local_addresses() -> list[str]:
    found = {"127.0.0.1"}
    try:
        for info in socket.getaddrinfo(socket.gethostname(), None, socket.AF_INET):
            found.add(str(info[4][0]))
    except OSError:
        pass
    return sorted(found)


def self_signed(directory: Path, days: int = 365) -> tuple[str, str]:
    """A certificate for this machine (localhost and its addresses), made once and kept,
    so a phone on the same network gets a secure origin for its microphone."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    directory.mkdir(parents=True, exist_ok=True)
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    if cert_path.is_file() and key_path.is_file():
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        if cert.not_valid_after_utc > dt.datetime.now(dt.UTC) + dt.timedelta(days=1):
            return str(cert_path), str(key_path)
    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "omni-agent (self-signed)")])
    sans: list[x509.GeneralName] = [x509.DNSName("localhost"), x509.DNSName(socket.gethostname())]
    sans += [x509.IPAddress(ipaddress.ip_address(a)) for a in _local_addresses()]
    now = dt.datetime.now(dt.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    os.chmod(key_path, 0o600)
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    log.info("made a self-signed certificate in %s", directory)
    return str(cert_path), str(key_path)
