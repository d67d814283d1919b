"""Payload digests carried in a MoQT object extension header (DESIGN.md "Integrity").

Extension header ``KV_DIGEST_EXTENSION = 0x4B57`` ("KV" + 1): odd, so per MoQT draft-14 its
value is length-prefixed bytes. The value is ``u8 algorithm`` followed by a 16-byte BLAKE2b
digest of the object payload (about 1 GB/s here):

* algorithm 2, **keyed** (a MAC): the key derives from the cluster secret
  (:func:`digest_key`), so only a holder of the secret can make an object that verifies — a
  relay, a cache or anyone on the path that forges or swaps an object is caught even if it
  recomputes the digest. What every cluster with a secret uses (``cluster.yaml`` and the app
  builder make one by default).
* algorithm 1, unkeyed: catches damage only; for deployments without a cluster secret.

A verifier with a key accepts only keyed digests made with that key; one without a key accepts
only unkeyed ones. Relays forward the header untouched (they never look at payloads); a
receiver calls :func:`verify` before decoding, and any failure is a cache miss, never wrong
tokens.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping

from .errors import DigestMismatchError, IntegrityError, MissingDigestError

KV_DIGEST_EXTENSION = 0x4B57
"""MoQT object extension header type of the payload digest (odd: bytes value)."""

DIGEST_BLAKE2B_128 = 1
"""Algorithm byte: BLAKE2b, 16-byte digest."""
DIGEST_BLAKE2B_128_KEYED = 2
"""Algorithm byte: BLAKE2b keyed with the cluster's digest key, 16-byte MAC."""

_DIGEST_SIZE = 16


def digest_key(cluster_secret: bytes) -> bytes:
    """The 32-byte payload-digest key of a cluster (separate from its other derived keys)."""
    return hmac.new(cluster_secret, b"kvmoq payload digest v1", hashlib.sha256).digest()


def payload_digest(payload: bytes | memoryview, key: bytes | None = None) -> bytes:
    """The extension value for ``payload``: algorithm byte + 16-byte BLAKE2b digest (keyed with
    ``key`` when given)."""
    if key is None:
        h = hashlib.blake2b(payload, digest_size=_DIGEST_SIZE)
        return bytes([DIGEST_BLAKE2B_128]) + h.digest()
    h = hashlib.blake2b(payload, digest_size=_DIGEST_SIZE, key=key)
    return bytes([DIGEST_BLAKE2B_128_KEYED]) + h.digest()


def attach_digest(payload: bytes | memoryview, key: bytes | None = None) -> tuple[int, bytes]:
    """The ``(type, value)`` extension header pair to send with ``payload``."""
    return (KV_DIGEST_EXTENSION, payload_digest(payload, key))


def verify(
    payload: bytes | memoryview,
    extensions: Mapping[int, bytes] | Iterable[tuple[int, bytes | int]],
    key: bytes | None = None,
) -> None:
    """Check ``payload`` against its digest extension; raise if missing or wrong.

    ``extensions`` is the object's extension headers, as a mapping or (type, value) pairs;
    ``key``: the cluster's digest key (then only a keyed digest made with it is accepted).
    Raises :class:`MissingDigestError`, :class:`DigestMismatchError`, or
    :class:`IntegrityError` for a digest of an unknown or unexpected algorithm or odd length.
    """
    pairs = extensions.items() if isinstance(extensions, Mapping) else extensions
    values = [v for t, v in pairs if t == KV_DIGEST_EXTENSION]
    if not values:
        raise MissingDigestError("object has no KV digest extension header (0x4B57)")
    if len(values) > 1:
        raise IntegrityError("object has more than one KV digest extension header")
    value = values[0]
    if not isinstance(value, bytes | bytearray | memoryview):
        raise IntegrityError("KV digest extension value must be bytes")
    value = bytes(value)
    want = DIGEST_BLAKE2B_128 if key is None else DIGEST_BLAKE2B_128_KEYED
    if len(value) != 1 + _DIGEST_SIZE or value[0] not in (
        DIGEST_BLAKE2B_128,
        DIGEST_BLAKE2B_128_KEYED,
    ):
        raise IntegrityError(f"unknown KV digest algorithm or size ({len(value)} bytes)")
    if value[0] != want:
        raise IntegrityError(
            "KV object is not signed with the cluster's digest key"
            if key is not None
            else "KV object carries a keyed digest but this receiver has no cluster key"
        )
    if not hmac.compare_digest(value, payload_digest(payload, key)):
        raise DigestMismatchError("KV object payload does not match its digest (damaged or forged)")
