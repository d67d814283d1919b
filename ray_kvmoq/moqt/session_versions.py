"""What a session does differently per negotiated MoQT version: the ALPN -> version map and the
translation between draft-14's per-request answers and draft-16's REQUEST_OK / REQUEST_ERROR.

The roles of the session (:mod:`.session_subscribe`, :mod:`.session_requests`,
:mod:`.session_namespaces`) are written against draft-14's message classes: they answer a
SUBSCRIBE with SUBSCRIBE_ERROR, a PUBLISH_NAMESPACE with PUBLISH_NAMESPACE_OK, and so on. On a
draft-16 session :func:`to_wire` turns those answers into the one draft-16 message that
replaces them (d16 §9.7, §9.8) just before they are encoded, and :func:`from_request_error` /
:func:`from_request_ok` turn a received REQUEST_ERROR / REQUEST_OK back into the answer class of
the request it names; the router asks each role (``answers(request_id)``) which of its records
owns the id. So the lifecycles in :mod:`.state` stay one table per request kind for both
versions, and this module names no message family (it works from the answers' fields).

Version negotiation (d16 §3.1): from draft-15 on the ALPN *is* the version, and CLIENT_SETUP /
SERVER_SETUP carry no version; ``moq-00`` means draft-14, whose version is chosen in SETUP.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any, TypeVar

from .codec import (
    MESSAGE_CLASSES_BY_VERSION,
    Location,
    Message,
    RequestErrorMessage,
    RequestOk,
)
from .codec.errors import ProtocolViolation, VersionNegotiationFailed
from .codec.fields import decode_location, encode_location
from .codec.types import ALPN_BY_VERSION, DRAFT_14, DRAFT_16, MessageParameterD16

__all__ = [
    "SESSION_VERSIONS",
    "from_request_error",
    "from_request_ok",
    "to_wire",
    "version_for_alpn",
]

SESSION_VERSIONS: tuple[int, ...] = (DRAFT_16, DRAFT_14)
"""Versions a session speaks, newest first (the order endpoints offer their ALPNs in)."""

_VERSION_BY_ALPN = {ALPN_BY_VERSION[v]: v for v in SESSION_VERSIONS}
_D16_CLASSES = frozenset(MESSAGE_CLASSES_BY_VERSION[DRAFT_16].values())
_ERROR_FIELDS = {"request_id", "error_code", "reason"}
_LARGEST = MessageParameterD16.LARGEST_OBJECT
_EXPIRES = MessageParameterD16.EXPIRES
_A = TypeVar("_A")


def _field_names(cls: type) -> set[str]:
    return {f.name for f in fields(cls)}


def version_for_alpn(alpn: str | None) -> int:
    """The MoQT version an ALPN names (None: no ALPN negotiated, i.e. draft-14's ``moq-00``).

    Raises:
        VersionNegotiationFailed: an ALPN that names no version a session speaks.
    """
    if alpn is None:
        return DRAFT_14
    version = _VERSION_BY_ALPN.get(alpn)
    if version is None:
        raise VersionNegotiationFailed(f"ALPN {alpn!r} names no MoQT version spoken here")
    return version


def to_wire(msg: Message, version: int) -> Message:
    """``msg`` as the message ``version`` sends for it (draft-14: unchanged).

    On draft-16 a draft-14 answer that the version no longer has becomes REQUEST_ERROR (any
    ``*_ERROR``: request id, code, reason) or REQUEST_OK (any ``*_OK`` of a request that
    draft-16 answers with it; TRACK_STATUS_OK's Largest Location and Expires become its
    LARGEST_OBJECT / EXPIRES parameters, d16 §9.7).
    """
    if version == DRAFT_14 or type(msg) in _D16_CLASSES:
        return msg
    m: Any = msg
    if _field_names(type(msg)) >= _ERROR_FIELDS:
        return RequestErrorMessage(
            request_id=m.request_id, error_code=m.error_code, reason=m.reason
        )
    params = getattr(msg, "parameters", None)
    if params is None:
        return RequestOk(request_id=m.request_id)
    largest: Location | None = getattr(msg, "largest", None)
    expires: int = getattr(msg, "expires", 0)
    if largest is not None:
        params = params.with_param(_LARGEST, encode_location(largest))
    if expires:
        params = params.with_param(_EXPIRES, expires)
    return RequestOk(request_id=m.request_id, parameters=params)


def from_request_error(msg: RequestErrorMessage, kind: type[_A]) -> _A:
    """A REQUEST_ERROR as the draft-14 error answer ``kind`` of the request it names."""
    return kind(request_id=msg.request_id, error_code=msg.error_code, reason=msg.reason)  # type: ignore[call-arg]


def from_request_ok(msg: RequestOk, kind: type[_A]) -> _A:
    """A REQUEST_OK as the draft-14 OK answer ``kind`` of the request it names.

    Raises:
        ProtocolViolation: a malformed LARGEST_OBJECT / EXPIRES parameter (TRACK_STATUS).
    """
    if "largest" not in _field_names(kind):
        return kind(request_id=msg.request_id)  # type: ignore[call-arg]
    raw = msg.parameters.get(_LARGEST)
    expires = msg.parameters.get(_EXPIRES)
    if raw is not None and not isinstance(raw, bytes):
        raise ProtocolViolation("LARGEST_OBJECT parameter must be length-prefixed")
    if expires is not None and not isinstance(expires, int):
        raise ProtocolViolation("EXPIRES parameter must be a varint")
    largest = None if raw is None else decode_location(raw, "LARGEST_OBJECT")
    return kind(  # type: ignore[call-arg]
        request_id=msg.request_id,
        expires=expires or 0,
        largest=largest,
        parameters=msg.parameters,
    )
