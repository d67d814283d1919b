"""Payload digests carried in a MoQT object extension header (DESIGN.md "Integrity").

Extension header ``KV_DIGEST_EXTENSION = 0x4B57`` ("KV" + 1): odd, so per MoQT draft-14 its
value is length-prefixed bytes. The value is ``u8 algorithm`` followed by the digest; algorithm
1 is BLAKE2b with a 16-byte digest over the object payload (about 1 GB/s here, and keyed hashes
are not needed: the digest catches damage in caches and on the wire, authenticity is the
transport's job). Relays forward the header untouched (they never look at payloads); a receiver
calls :func:`verify` before decoding, and any failure is a cache miss, never wrong tokens.
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

_DIGEST_SIZE = 16


def payload_digest(payload: bytes | memoryview) -> bytes:
    """The extension value for ``payload``: algorithm byte + 16-byte BLAKE2b digest."""
    return bytes([DIGEST_BLAKE2B_128]) + hashlib.blake2b(payload, digest_size=_DIGEST_SIZE).digest()


def attach_digest(payload: bytes | memoryview) -> tuple[int, bytes]:
    """The ``(type, value)`` extension header pair to send with ``payload``."""
    return (KV_DIGEST_EXTENSION, payload_digest(payload))


def verify(
    payload: bytes | memoryview,
    extensions: Mapping[int, bytes] | Iterable[tuple[int, bytes | int]],
) -> None:
    """Check ``payload`` against its digest extension; raise if missing or wrong.

    ``extensions`` is the object's extension headers, as a mapping or (type, value) pairs.
    Raises :class:`MissingDigestError`, :class:`DigestMismatchError`, or
    :class:`IntegrityError` for a digest of an unknown algorithm or odd length.
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
    if len(value) != 1 + _DIGEST_SIZE or value[0] != DIGEST_BLAKE2B_128:
        raise IntegrityError(f"unknown KV digest algorithm or size ({len(value)} bytes)")
    if not hmac.compare_digest(value, payload_digest(payload)):
        raise DigestMismatchError("KV object payload does not match its digest (damaged)")
