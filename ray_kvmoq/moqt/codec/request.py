"""REQUEST_OK, REQUEST_ERROR and REQUEST_UPDATE (d16 §9.7, §9.8, §9.11): draft-16's answers
and updates shared by every request —
dataclasses, payload codecs and ``CODECS_16``. Draft-14 has a *_ERROR / *_OK message per request
kind instead (:mod:`.subscribe`, :mod:`.fetch`, ...), so this family has no draft-14 entries.

REQUEST_ERROR answers any request and adds a Retry Interval (milliseconds plus one; 0 = do not
retry). REQUEST_OK answers REQUEST_UPDATE, TRACK_STATUS, SUBSCRIBE_NAMESPACE and
PUBLISH_NAMESPACE, with parameters.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .fields import Codecs, DecodeOptions, MessageParameters, read_params, write_params
from .types import DRAFT_16, MessageTypeD16
from .wire import Reader, Writer

__all__ = ["RequestErrorMessage", "RequestMessage", "RequestOk", "RequestUpdate"]

_NO_PARAMS = MessageParameters()


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestOk:
    """REQUEST_OK (0x07, d16 §9.7): a request other than SUBSCRIBE/FETCH/PUBLISH succeeded."""

    TYPE: ClassVar[MessageTypeD16] = MessageTypeD16.REQUEST_OK
    request_id: int
    """Request ID of the request answered."""
    parameters: MessageParameters = _NO_PARAMS
    """Message parameters (e.g. LARGEST_OBJECT for TRACK_STATUS)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestErrorMessage:
    """REQUEST_ERROR (0x05, d16 §9.8): any request failed."""

    TYPE: ClassVar[MessageTypeD16] = MessageTypeD16.REQUEST_ERROR
    request_id: int
    """Request ID of the request answered."""
    error_code: int
    """Error code (unknown codes are kept as int)."""
    retry_interval: int = 0
    """Milliseconds before retrying, plus one; 0 = do not retry."""
    reason: str = ""
    """Reason Phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestUpdate:
    """REQUEST_UPDATE (0x02, d16 §9.11): change an existing request (was SUBSCRIBE_UPDATE)."""

    TYPE: ClassVar[MessageTypeD16] = MessageTypeD16.REQUEST_UPDATE
    request_id: int
    """New request ID consumed by this update."""
    existing_request_id: int
    """Request ID of the request being updated."""
    parameters: MessageParameters = _NO_PARAMS
    """The new values (FORWARD, SUBSCRIPTION_FILTER, ...); absent ones stay unchanged."""


def enc_request_update(w: Writer, m: RequestUpdate) -> None:
    """REQUEST_UPDATE payload."""
    w.varint(m.request_id).varint(m.existing_request_id)
    write_params(w, m.parameters, version=DRAFT_16)


def dec_request_update(r: Reader, opts: DecodeOptions) -> RequestUpdate:
    """REQUEST_UPDATE payload."""
    request_id = r.varint()
    existing = r.varint()
    return RequestUpdate(
        request_id=request_id,
        existing_request_id=existing,
        parameters=read_params(r, MessageParameters, version=opts.version),
    )


def enc_request_ok(w: Writer, m: RequestOk) -> None:
    """REQUEST_OK payload."""
    w.varint(m.request_id)
    write_params(w, m.parameters, version=DRAFT_16)


def dec_request_ok(r: Reader, opts: DecodeOptions) -> RequestOk:
    """REQUEST_OK payload."""
    request_id = r.varint()
    return RequestOk(
        request_id=request_id,
        parameters=read_params(r, MessageParameters, version=opts.version),
    )


def enc_request_error(w: Writer, m: RequestErrorMessage) -> None:
    """REQUEST_ERROR payload."""
    w.varint(m.request_id).varint(m.error_code).varint(m.retry_interval).reason(m.reason)


def dec_request_error(r: Reader, opts: DecodeOptions) -> RequestErrorMessage:
    """REQUEST_ERROR payload."""
    request_id = r.varint()
    error_code = r.varint()
    retry_interval = r.varint()
    return RequestErrorMessage(
        request_id=request_id,
        error_code=error_code,
        retry_interval=retry_interval,
        reason=r.reason(),
    )


CODECS_16: Codecs = {
    MessageTypeD16.REQUEST_UPDATE: (RequestUpdate, enc_request_update, dec_request_update),
    MessageTypeD16.REQUEST_OK: (RequestOk, enc_request_ok, dec_request_ok),
    MessageTypeD16.REQUEST_ERROR: (RequestErrorMessage, enc_request_error, dec_request_error),
}
"""Draft-16 registry entries of the request family."""

RequestMessage = RequestOk | RequestErrorMessage | RequestUpdate
"""Any message of this family."""
