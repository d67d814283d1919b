"""Self-signed TLS material for MoQT endpoints: a CA, and leaf certificates signed by it.

Used by the tests, by ``kvmoq pub/sub --self-signed`` (which needs a certificate for a local
server) and by the relay, whose nodes share one cluster CA and verify each other against it.

Design: pure functions over ``cryptography``; nothing is written to disk unless
:func:`write_pem_files` is asked to. Keys are ECDSA P-256 (fast to generate, accepted by aioquic,
rustls and qh3). Leaf certificates carry DNS and IP subject alternative names, because QUIC
clients here connect by address (``moqt://127.0.0.1:PORT``) and verify the IP SAN.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

DEFAULT_HOSTS: tuple[str, ...] = ("localhost", "127.0.0.1", "127.0.0.2", "127.0.0.3", "::1")
"""Names a test certificate answers for: loopback plus the extra Ray test-node addresses."""


@dataclass(frozen=True, kw_only=True)
class CertificateAuthority:
    """A CA certificate and its private key, both PEM-encoded."""

    cert_pem: bytes
    """The CA certificate (what peers put in their trust store)."""
    key_pem: bytes
    """The CA private key (unencrypted PKCS#8)."""


@dataclass(frozen=True, kw_only=True)
class LeafCertificate:
    """A server/client certificate signed by a :class:`CertificateAuthority`."""

    cert_pem: bytes
    """The leaf certificate followed by nothing else (the CA is distributed separately)."""
    key_pem: bytes
    """The leaf private key (unencrypted PKCS#8)."""
    ca_pem: bytes
    """The signing CA's certificate."""


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _validity(days: int) -> tuple[datetime.datetime, datetime.datetime]:
    now = datetime.datetime.now(datetime.UTC)
    return now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=days)


def generate_ca(
    common_name: str = "ray_kvmoq test CA",
    *,
    days: int = 30,
    key: ec.EllipticCurvePrivateKey | None = None,
    serial: int | None = None,
    validity: tuple[datetime.datetime, datetime.datetime] | None = None,
) -> CertificateAuthority:
    """Create a self-signed CA: a fresh key, serial and ``days`` of validity by default.

    ``key``, ``serial`` and ``validity`` (not before, not after) pin them instead, so every node
    that derives them from one cluster secret makes the same CA (relay ``ClusterSecurity``).
    """
    key = key or ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
    not_before, not_after = validity or _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(serial if serial is not None else x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .sign(key, hashes.SHA256())
    )
    return CertificateAuthority(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM), key_pem=_key_pem(key)
    )


def _san(hosts: tuple[str, ...] | list[str]) -> x509.SubjectAlternativeName:
    names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            names.append(x509.DNSName(host))
    return x509.SubjectAlternativeName(names)


def issue_certificate(
    ca: CertificateAuthority,
    hosts: tuple[str, ...] | list[str] = DEFAULT_HOSTS,
    *,
    days: int = 30,
) -> LeafCertificate:
    """Issue a leaf certificate for ``hosts`` (DNS names or IP addresses), signed by ``ca``.

    The certificate is valid for both TLS server and client authentication.
    """
    if not hosts:
        raise ValueError("issue_certificate needs at least one host name or address")
    ca_cert = x509.load_pem_x509_certificate(ca.cert_pem)
    ca_key = serialization.load_pem_private_key(ca.key_pem, password=None)
    if not isinstance(ca_key, ec.EllipticCurvePrivateKey):
        raise TypeError("the CA key must be an EC key (made by generate_ca)")
    key = ec.generate_private_key(ec.SECP256R1())
    not_before, not_after = _validity(days)
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_cert.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(not_before)
        .not_valid_after(not_after)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_san(hosts), critical=False)
        .add_extension(
            x509.ExtendedKeyUsage(
                [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]
            ),
            critical=False,
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return LeafCertificate(
        cert_pem=cert.public_bytes(serialization.Encoding.PEM),
        key_pem=_key_pem(key),
        ca_pem=ca.cert_pem,
    )


def self_signed(hosts: tuple[str, ...] | list[str] = DEFAULT_HOSTS) -> LeafCertificate:
    """A fresh CA and one leaf certificate for ``hosts`` in one call (tests, CLI)."""
    return issue_certificate(generate_ca(), hosts)


@dataclass(frozen=True, kw_only=True)
class PemPaths:
    """Where :func:`write_pem_files` put the files."""

    cafile: Path
    """The CA certificate."""
    certfile: Path
    """The leaf certificate."""
    keyfile: Path
    """The leaf private key (mode 0600)."""


def write_pem_files(leaf: LeafCertificate, directory: Path | str) -> PemPaths:
    """Write ``ca.pem``, ``cert.pem`` and ``key.pem`` into ``directory`` (created if missing)."""
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    paths = PemPaths(cafile=out / "ca.pem", certfile=out / "cert.pem", keyfile=out / "key.pem")
    paths.cafile.write_bytes(leaf.ca_pem)
    paths.certfile.write_bytes(leaf.cert_pem)
    paths.keyfile.touch(mode=0o600)
    paths.keyfile.write_bytes(leaf.key_pem)
    return paths
