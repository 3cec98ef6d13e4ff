"""A private certificate authority for the agents' mutual TLS (RFC 5280 certificates, RFC 8446 TLS).

This module owns the small PKI of a lab or a small deployment: :func:`init_ca`
makes a CA (``ca.crt``, ``ca.key``), :func:`issue` signs a server certificate
for an agent (its names and addresses as subject alternative names) or a
client certificate for the controller, and :class:`ServerTls` /
:class:`ClientTls` turn those files into gRPC credentials. Agents on TCP
require a client certificate from the same CA; nothing else is trusted.
Keys are ECDSA P-256, written with mode 0600.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

__all__ = ["ClientTls", "ServerTls", "init_ca", "issue"]


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey) -> None:
    data = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                             serialization.NoEncryption())
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as fh:
        fh.write(data)


def _name(common_name: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Loom"),
                      x509.NameAttribute(NameOID.COMMON_NAME, common_name)])


def init_ca(directory: Path, *, name: str = "Loom private CA", days: int = 3650, force: bool = False) -> Path:
    """Create ``ca.crt`` and ``ca.key`` in ``directory``; refuses to overwrite unless ``force``."""
    directory.mkdir(parents=True, exist_ok=True)
    crt = directory / "ca.crt"
    if crt.exists() and not force:
        raise FileExistsError(f"{crt} exists (use force to replace the CA and invalidate its certificates)")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(_name(name))
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(x509.KeyUsage(digital_signature=True, key_cert_sign=True, crl_sign=True,
                                         content_commitment=False, key_encipherment=False, data_encipherment=False,
                                         key_agreement=False, encipher_only=False, decipher_only=False),
                           critical=True)
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
            .sign(key, hashes.SHA256()))
    _write_key(directory / "ca.key", key)
    crt.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt


def issue(directory: Path, name: str, *, kind: str = "server", sans: tuple[str, ...] = (), days: int = 825,
          out: Path | None = None) -> tuple[Path, Path]:
    """Sign a ``server`` (an agent) or ``client`` (the controller) certificate with the CA in ``directory``.

    ``sans`` are DNS names or IP addresses (a server gets ``name``, ``localhost`` and 127.0.0.1 as well).
    Returns the certificate and key paths (``NAME.crt``, ``NAME.key`` in ``out`` or ``directory``).
    """
    if kind not in ("server", "client"):
        raise ValueError(f"kind must be 'server' or 'client', not {kind!r}")
    ca_cert = x509.load_pem_x509_certificate((directory / "ca.crt").read_bytes())
    ca_key = serialization.load_pem_private_key((directory / "ca.key").read_bytes(), password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise ValueError("the CA key is not an ECDSA key made by `loom pki init`")
    key = ec.generate_private_key(ec.SECP256R1())
    now = dt.datetime.now(dt.UTC)
    names = list(dict.fromkeys((name, "localhost", "127.0.0.1", *sans) if kind == "server" else (name, *sans)))
    alt: list[x509.GeneralName] = []
    for n in names:
        try:
            alt.append(x509.IPAddress(ipaddress.ip_address(n)))
        except ValueError:
            alt.append(x509.DNSName(n))
    usage = ExtendedKeyUsageOID.SERVER_AUTH if kind == "server" else ExtendedKeyUsageOID.CLIENT_AUTH
    cert = (x509.CertificateBuilder().subject_name(_name(name)).issuer_name(ca_cert.subject)
            .public_key(key.public_key()).serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5)).not_valid_after(now + dt.timedelta(days=days))
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
            .add_extension(x509.SubjectAlternativeName(alt), critical=False)
            .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
            .sign(ca_key, hashes.SHA256()))
    dest = out or directory
    dest.mkdir(parents=True, exist_ok=True)
    crt_path, key_path = dest / f"{name}.crt", dest / f"{name}.key"
    _write_key(key_path, key)
    crt_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return crt_path, key_path


@dataclass(frozen=True)
class ServerTls:
    """An agent's TLS: its certificate and key, and the CA whose client certificates it accepts."""

    cert: Path
    key: Path
    ca: Path

    def server_credentials(self) -> grpc.ServerCredentials:
        return grpc.ssl_server_credentials([(self.key.read_bytes(), self.cert.read_bytes())],
                                           root_certificates=self.ca.read_bytes(), require_client_auth=True)


@dataclass(frozen=True)
class ClientTls:
    """The controller's TLS: its client certificate and key, and the CA that signed the agents'.
    ``server_name`` overrides the name checked in an agent's certificate (e.g. when dialing an address)."""

    cert: Path | None
    key: Path | None
    ca: Path
    server_name: str = ""

    def channel_credentials(self) -> grpc.ChannelCredentials:
        return grpc.ssl_channel_credentials(
            root_certificates=self.ca.read_bytes(),
            private_key=self.key.read_bytes() if self.key else None,
            certificate_chain=self.cert.read_bytes() if self.cert else None)

    def channel_options(self) -> list[tuple[str, Any]]:
        return [("grpc.ssl_target_name_override", self.server_name)] if self.server_name else []
