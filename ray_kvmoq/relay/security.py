"""Cluster trust between relays: a shared CA, per-relay leaf certificates and HMAC tokens.

Relays share a cluster CA (a leaf certificate per relay host via ``ray_kvmoq.moqt.api``;
clients verify peers against the CA, never ``verify_peer=False``) and HMAC token keys
(:mod:`.auth` signs and verifies them); a relay presents a short-lived cluster token in
CLIENT_SETUP and in every request, so a long-lived session never outlives its token's
authority. :meth:`ClusterSecurity.from_secret` derives the same material on every node from
one shared secret, so a restarted relay trusts and is trusted by the others at once.
"""

from __future__ import annotations

import datetime
import os
import secrets
from dataclasses import dataclass

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from ray_kvmoq.moqt.api import (
    CertificateAuthority,
    LeafCertificate,
    generate_ca,
    issue_certificate,
)
from ray_kvmoq.moqt.codec import AuthToken, TokenAliasType

from .auth import TokenSigner, TokenVerifier

__all__ = ["CLUSTER_TENANT", "ClusterSecurity", "token_value", "use_value"]

CLUSTER_TENANT = "kvmoq-cluster"
"""Tenant name of relay-to-relay tokens (subscribe to everything, publish nothing)."""


@dataclass(frozen=True, kw_only=True)
class ClusterSecurity:
    """One cluster's trust material, made by the driver and handed to every relay."""

    ca_cert_pem: bytes
    """The cluster CA certificate (every relay verifies peers against it)."""
    ca_key_pem: bytes
    """The CA key; relays issue their own leaf for their node's address."""
    keys: dict[str, bytes]
    """HMAC token keys by key id (all accepted)."""
    signing_key_id: str
    """Key id relays sign their peer tokens with."""
    token_ttl_s: float = 600.0
    """Lifetime of a relay's peer token."""

    @classmethod
    def generate(cls) -> ClusterSecurity:
        """Fresh CA and one random 32-byte token key."""
        ca = generate_ca("ray_kvmoq cluster CA")
        kid = secrets.token_hex(4)
        return cls(
            ca_cert_pem=ca.cert_pem,
            ca_key_pem=ca.key_pem,
            keys={kid: secrets.token_bytes(32)},
            signing_key_id=kid,
        )

    @classmethod
    def from_secret(cls, secret: bytes, *, token_ttl_s: float = 600.0) -> ClusterSecurity:
        """The same trust material on every node from one shared secret (no driver step).

        The CA key and the token key are derived with HKDF-SHA256; CA certificates made on two
        nodes differ only in their (randomised) ECDSA signature, so a leaf issued on one node
        verifies against the CA made on another.
        """
        if len(secret) < 16:
            raise ValueError("the cluster secret must have at least 16 bytes")
        scalar = int.from_bytes(_hkdf(secret, b"kvmoq ca key", 48), "big") % (_P256_ORDER - 1) + 1
        key = ec.derive_private_key(scalar, ec.SECP256R1())
        serial = int.from_bytes(_hkdf(secret, b"kvmoq ca serial", 16), "big") >> 1
        kid = _hkdf(secret, b"kvmoq token kid", 4).hex()
        ca = generate_ca("ray_kvmoq cluster CA", key=key, serial=serial, validity=_CA_VALIDITY)
        return cls(
            ca_cert_pem=ca.cert_pem,
            ca_key_pem=ca.key_pem,
            keys={kid: _hkdf(secret, b"kvmoq token key", 32)},
            signing_key_id=kid,
            token_ttl_s=token_ttl_s,
        )

    @classmethod
    def from_env(cls, var: str = "KVMOQ_CLUSTER_SECRET") -> ClusterSecurity | None:
        """:meth:`from_secret` of the hex secret in ``$var`` (None when unset)."""
        value = os.environ.get(var)
        return None if not value else cls.from_secret(bytes.fromhex(value))

    def leaf_for(self, host: str) -> LeafCertificate:
        """A certificate for a relay listening on ``host``."""
        ca = CertificateAuthority(cert_pem=self.ca_cert_pem, key_pem=self.ca_key_pem)
        return issue_certificate(ca, (host, "localhost"))

    def verifier(self) -> TokenVerifier:
        """Verifier accepting every cluster key."""
        return TokenVerifier(self.keys)

    def signer(self) -> TokenSigner:
        """Signer with the cluster's signing key (issue tenant tokens with it)."""
        return TokenSigner(self.signing_key_id, self.keys[self.signing_key_id])

    def peer_token(self, now: float) -> bytes:
        """A relay-to-relay token: may subscribe to any namespace."""
        return self.signer().issue(CLUSTER_TENANT, subscribe=[[]], now=now, ttl_s=self.token_ttl_s)


_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
# Fixed, so the CA derived from one secret is the same on every node and at every restart.
_CA_VALIDITY = (
    datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC),
)


def _hkdf(secret: bytes, label: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=label).derive(secret)


def use_value(token: bytes) -> AuthToken:
    """An AUTHORIZATION_TOKEN parameter carrying ``token`` by value (Token Type 0)."""
    return AuthToken(alias_type=TokenAliasType.USE_VALUE, token_type=0, value=token)


def token_value(tokens: tuple[AuthToken, ...]) -> bytes | None:
    """The first by-value token of a request or setup, if any."""
    for t in tokens:
        if t.alias_type == TokenAliasType.USE_VALUE:
            return t.value
    return None
