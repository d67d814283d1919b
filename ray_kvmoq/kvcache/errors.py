"""Errors raised by ``ray_kvmoq.kvcache``; each carries a wire-style ``error_code``.

Every failure to name, decode or verify a KV object raises a specific subclass, so callers can
treat any of them as a cache miss (recompute) and never feed a garbage tensor to the model::

    KVCacheError                      (error_code: KVErrorCode)
    ├── KVNameError                   namespace / track name is not a valid KV track
    ├── PayloadError                  an object payload cannot be decoded
    │   ├── TruncatedPayloadError     shorter (or longer) than its layout says
    │   ├── MalformedPayloadError     bytes present but garbled (bad stream, bad values)
    │   ├── UnsupportedVersionError   header version this decoder does not know
    │   ├── UnknownCodecError         codec id / track name not in the registry
    │   ├── GeometryMismatchError     header geometry differs from the model's
    │   ├── InvalidInputError         encoder input of the wrong shape or dtype
    │   └── CodebookError             AC codebook unreadable or for another geometry
    │       └── MissingCodebookError  AC object without its track's codebook
    └── IntegrityError                payload digest check failed
        ├── MissingDigestError        no digest extension header on the object
        └── DigestMismatchError       digest present but does not match the payload

All of these are *remote* errors in the h2 sense (bad input from a peer or a cache), except
``InvalidInputError``, which flags a local caller bug.
"""

from __future__ import annotations

from enum import IntEnum


class KVErrorCode(IntEnum):
    """Codes carried by ``KVCacheError.error_code`` (stable; used in logs and metrics)."""

    INTERNAL = 0x0
    INVALID_NAME = 0x1
    PAYLOAD = 0x10
    TRUNCATED = 0x11
    MALFORMED = 0x12
    UNSUPPORTED_VERSION = 0x13
    UNKNOWN_CODEC = 0x14
    GEOMETRY_MISMATCH = 0x15
    INVALID_INPUT = 0x16
    CODEBOOK = 0x17
    MISSING_CODEBOOK = 0x18
    INTEGRITY = 0x20
    MISSING_DIGEST = 0x21
    DIGEST_MISMATCH = 0x22


class KVCacheError(Exception):
    """Base class of every kvcache error."""

    error_code: KVErrorCode = KVErrorCode.INTERNAL


class KVNameError(KVCacheError, ValueError):
    """A namespace tuple or track name is not a valid draft-shi-moq-kvcache KV track."""

    error_code = KVErrorCode.INVALID_NAME


class PayloadError(KVCacheError, ValueError):
    """An object payload cannot be decoded."""

    error_code = KVErrorCode.PAYLOAD


class TruncatedPayloadError(PayloadError):
    """The payload is shorter or longer than its header and layout require."""

    error_code = KVErrorCode.TRUNCATED


class MalformedPayloadError(PayloadError):
    """The payload has the right size but garbled content (bad stream, non-finite scale...)."""

    error_code = KVErrorCode.MALFORMED


class UnsupportedVersionError(PayloadError):
    """The header's version byte is not one this decoder implements."""

    error_code = KVErrorCode.UNSUPPORTED_VERSION


class UnknownCodecError(PayloadError):
    """A codec id or track name that the registry does not know."""

    error_code = KVErrorCode.UNKNOWN_CODEC


class GeometryMismatchError(PayloadError):
    """The object's geometry (layers, KV heads, head dim, codec params) differs from the model's."""

    error_code = KVErrorCode.GEOMETRY_MISMATCH


class InvalidInputError(KVCacheError, ValueError):
    """The encoder was handed a tensor of the wrong rank, shape or dtype (a local bug)."""

    error_code = KVErrorCode.INVALID_INPUT


class CodebookError(PayloadError):
    """An AC codebook that cannot be parsed or does not fit the objects it should decode."""

    error_code = KVErrorCode.CODEBOOK


class MissingCodebookError(CodebookError):
    """An AC object was encoded or decoded without its track's codebook."""

    error_code = KVErrorCode.MISSING_CODEBOOK


class IntegrityError(KVCacheError):
    """The object's payload digest does not check out; treat as a cache miss."""

    error_code = KVErrorCode.INTEGRITY


class MissingDigestError(IntegrityError):
    """The object carries no payload digest extension header."""

    error_code = KVErrorCode.MISSING_DIGEST


class DigestMismatchError(IntegrityError):
    """The payload digest in the extension header does not match the payload."""

    error_code = KVErrorCode.DIGEST_MISMATCH
