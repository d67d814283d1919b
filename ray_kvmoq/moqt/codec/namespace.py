"""Namespace family (d14 §9.23-§9.31): PUBLISH_NAMESPACE* and SUBSCRIBE_NAMESPACE* /
UNSUBSCRIBE_NAMESPACE — dataclasses, payload codecs, ``CODECS``.

In draft-14 PUBLISH_NAMESPACE_DONE, PUBLISH_NAMESPACE_CANCEL and UNSUBSCRIBE_NAMESPACE name a
namespace, not a request ID. A 0-field SUBSCRIBE_NAMESPACE prefix is accepted only with
``DecodeOptions.allow_empty_namespace_prefix`` (moq-dev sends one).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from .errors import LocalProtocolError, ProtocolViolation
from .fields import (
    Codecs,
    DecodeOptions,
    MessageParameters,
    dec_error,
    dec_request_id,
    enc_error,
    enc_request_id,
    read_namespace,
    read_params,
    write_namespace,
    write_params,
)
from .types import DRAFT_16, MessageType, MessageTypeD16
from .wire import Reader, Writer

__all__ = [
    "Namespace",
    "NamespaceDone",
    "NamespaceMessage",
    "PublishNamespace",
    "PublishNamespaceCancel",
    "PublishNamespaceDone",
    "PublishNamespaceError",
    "PublishNamespaceOk",
    "SubscribeNamespace",
    "SubscribeNamespaceError",
    "SubscribeNamespaceOk",
    "UnsubscribeNamespace",
]

_NO_PARAMS = MessageParameters()


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespace:
    """PUBLISH_NAMESPACE (0x06, d14 §9.23, ex ANNOUNCE): offer tracks under a namespace."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_NAMESPACE
    request_id: int
    """New request ID."""
    track_namespace: tuple[bytes, ...]
    """The namespace published."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters (e.g. AUTHORIZATION_TOKEN)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceOk:
    """PUBLISH_NAMESPACE_OK (0x07, d14 §9.24)."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_NAMESPACE_OK
    request_id: int
    """Request ID of the PUBLISH_NAMESPACE."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceError:
    """PUBLISH_NAMESPACE_ERROR (0x08, d14 §9.25)."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_NAMESPACE_ERROR
    request_id: int
    """Request ID of the PUBLISH_NAMESPACE."""
    error_code: int
    """A PublishNamespaceErrorCode (unknown codes are kept as int)."""
    reason: str = ""
    """Reason Phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceDone:
    """PUBLISH_NAMESPACE_DONE (0x09, d14 §9.26, ex UNANNOUNCE): withdraw a namespace."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_NAMESPACE_DONE
    track_namespace: tuple[bytes, ...] = ()
    """The namespace withdrawn (d14 identifies it by name, not request ID)."""
    request_id: int | None = None
    """Draft-16: the PUBLISH_NAMESPACE withdrawn (d16 names it by request ID, §9.22)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceCancel:
    """PUBLISH_NAMESPACE_CANCEL (0x0C, d14 §9.27): the receiver stops accepting a namespace."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_NAMESPACE_CANCEL
    track_namespace: tuple[bytes, ...] = ()
    """The namespace cancelled (draft-14)."""
    request_id: int | None = None
    """Draft-16: the PUBLISH_NAMESPACE cancelled (d16 §9.24)."""
    error_code: int
    """A PublishNamespaceErrorCode (unknown codes are kept as int)."""
    reason: str = ""
    """Reason Phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeNamespace:
    """SUBSCRIBE_NAMESPACE (0x11, d14 §9.28): ask for namespaces/tracks under a prefix."""

    TYPE: ClassVar[MessageType] = MessageType.SUBSCRIBE_NAMESPACE
    request_id: int
    """New request ID."""
    track_namespace_prefix: tuple[bytes, ...]
    """Namespace prefix (moq-dev sends an empty one; see ``allow_empty_prefix``)."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""
    subscribe_options: int = 2
    """Draft-16: PUBLISH (0), NAMESPACE (1) or both (2) wanted (d16 §9.25)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeNamespaceOk:
    """SUBSCRIBE_NAMESPACE_OK (0x12, d14 §9.29)."""

    TYPE: ClassVar[MessageType] = MessageType.SUBSCRIBE_NAMESPACE_OK
    request_id: int
    """Request ID of the SUBSCRIBE_NAMESPACE."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeNamespaceError:
    """SUBSCRIBE_NAMESPACE_ERROR (0x13, d14 §9.30)."""

    TYPE: ClassVar[MessageType] = MessageType.SUBSCRIBE_NAMESPACE_ERROR
    request_id: int
    """Request ID of the SUBSCRIBE_NAMESPACE."""
    error_code: int
    """A SubscribeNamespaceErrorCode (unknown codes are kept as int)."""
    reason: str = ""
    """Reason Phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UnsubscribeNamespace:
    """UNSUBSCRIBE_NAMESPACE (0x14, d14 §9.31): drop a namespace subscription by prefix."""

    TYPE: ClassVar[MessageType] = MessageType.UNSUBSCRIBE_NAMESPACE
    track_namespace_prefix: tuple[bytes, ...]
    """The prefix of the SUBSCRIBE_NAMESPACE being ended."""


def enc_publish_namespace(w: Writer, m: PublishNamespace) -> None:
    """PUBLISH_NAMESPACE payload."""
    w.varint(m.request_id)
    write_namespace(w, m.track_namespace)
    write_params(w, m.parameters)


def dec_publish_namespace(r: Reader, opts: DecodeOptions) -> PublishNamespace:
    """PUBLISH_NAMESPACE payload."""
    request_id = r.varint()
    namespace = read_namespace(r)
    return PublishNamespace(
        request_id=request_id,
        track_namespace=namespace,
        parameters=read_params(r, MessageParameters),
    )


def enc_publish_namespace_done(w: Writer, m: PublishNamespaceDone) -> None:
    """PUBLISH_NAMESPACE_DONE payload."""
    write_namespace(w, m.track_namespace)


def dec_publish_namespace_done(r: Reader, opts: DecodeOptions) -> PublishNamespaceDone:
    """PUBLISH_NAMESPACE_DONE payload."""
    return PublishNamespaceDone(track_namespace=read_namespace(r))


def enc_publish_namespace_cancel(w: Writer, m: PublishNamespaceCancel) -> None:
    """PUBLISH_NAMESPACE_CANCEL payload."""
    write_namespace(w, m.track_namespace)
    w.varint(m.error_code).reason(m.reason)


def dec_publish_namespace_cancel(r: Reader, opts: DecodeOptions) -> PublishNamespaceCancel:
    """PUBLISH_NAMESPACE_CANCEL payload."""
    namespace = read_namespace(r)
    error_code = r.varint()
    return PublishNamespaceCancel(
        track_namespace=namespace, error_code=error_code, reason=r.reason()
    )


def enc_subscribe_namespace(w: Writer, m: SubscribeNamespace) -> None:
    """SUBSCRIBE_NAMESPACE payload (an empty prefix is written only if given)."""
    w.varint(m.request_id)
    write_namespace(w, m.track_namespace_prefix, allow_empty=True)
    write_params(w, m.parameters)


def dec_subscribe_namespace(r: Reader, opts: DecodeOptions) -> SubscribeNamespace:
    """SUBSCRIBE_NAMESPACE payload; 0 fields only with ``allow_empty_namespace_prefix``."""
    request_id = r.varint()
    prefix = read_namespace(r, allow_empty=opts.allow_empty_namespace_prefix)
    return SubscribeNamespace(
        request_id=request_id,
        track_namespace_prefix=prefix,
        parameters=read_params(r, MessageParameters),
    )


def enc_unsubscribe_namespace(w: Writer, m: UnsubscribeNamespace) -> None:
    """UNSUBSCRIBE_NAMESPACE payload."""
    write_namespace(w, m.track_namespace_prefix, allow_empty=True)


def dec_unsubscribe_namespace(r: Reader, opts: DecodeOptions) -> UnsubscribeNamespace:
    """UNSUBSCRIBE_NAMESPACE payload."""
    prefix = read_namespace(r, allow_empty=opts.allow_empty_namespace_prefix)
    return UnsubscribeNamespace(track_namespace_prefix=prefix)


CODECS: Codecs = {
    MessageType.PUBLISH_NAMESPACE: (PublishNamespace, enc_publish_namespace, dec_publish_namespace),
    MessageType.PUBLISH_NAMESPACE_OK: (
        PublishNamespaceOk,
        enc_request_id,
        partial(dec_request_id, PublishNamespaceOk),
    ),
    MessageType.PUBLISH_NAMESPACE_ERROR: (
        PublishNamespaceError,
        enc_error,
        partial(dec_error, PublishNamespaceError),
    ),
    MessageType.PUBLISH_NAMESPACE_DONE: (
        PublishNamespaceDone,
        enc_publish_namespace_done,
        dec_publish_namespace_done,
    ),
    MessageType.PUBLISH_NAMESPACE_CANCEL: (
        PublishNamespaceCancel,
        enc_publish_namespace_cancel,
        dec_publish_namespace_cancel,
    ),
    MessageType.SUBSCRIBE_NAMESPACE: (
        SubscribeNamespace,
        enc_subscribe_namespace,
        dec_subscribe_namespace,
    ),
    MessageType.SUBSCRIBE_NAMESPACE_OK: (
        SubscribeNamespaceOk,
        enc_request_id,
        partial(dec_request_id, SubscribeNamespaceOk),
    ),
    MessageType.SUBSCRIBE_NAMESPACE_ERROR: (
        SubscribeNamespaceError,
        enc_error,
        partial(dec_error, SubscribeNamespaceError),
    ),
    MessageType.UNSUBSCRIBE_NAMESPACE: (
        UnsubscribeNamespace,
        enc_unsubscribe_namespace,
        dec_unsubscribe_namespace,
    ),
}
"""Registry entries of the namespace family."""


# ---------------------------------------------------------------- draft-16 (d16 §9.20-§9.25)
# PUBLISH_NAMESPACE_DONE and _CANCEL name a request ID; OK/ERROR answers are REQUEST_OK /
# REQUEST_ERROR (:mod:`.request`); SUBSCRIBE_NAMESPACE has Subscribe Options and runs on its
# own bidirectional stream, where NAMESPACE / NAMESPACE_DONE report suffixes; there is no
# UNSUBSCRIBE_NAMESPACE (closing that stream ends it).


@dataclass(frozen=True, kw_only=True, slots=True)
class Namespace:
    """NAMESPACE (0x08, d16 §9.21): a namespace under a SUBSCRIBE_NAMESPACE prefix exists."""

    TYPE: ClassVar[MessageTypeD16] = MessageTypeD16.NAMESPACE
    track_namespace_suffix: tuple[bytes, ...]
    """The namespace's fields after the subscribed prefix."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NamespaceDone:
    """NAMESPACE_DONE (0x0E, d16 §9.23): a namespace reported by NAMESPACE went away."""

    TYPE: ClassVar[MessageTypeD16] = MessageTypeD16.NAMESPACE_DONE
    track_namespace_suffix: tuple[bytes, ...]
    """The namespace's fields after the subscribed prefix."""


def enc_publish_namespace_16(w: Writer, m: PublishNamespace) -> None:
    """PUBLISH_NAMESPACE payload of draft-16 (delta-encoded parameters)."""
    w.varint(m.request_id)
    write_namespace(w, m.track_namespace)
    write_params(w, m.parameters, version=DRAFT_16)


def dec_publish_namespace_16(r: Reader, opts: DecodeOptions) -> PublishNamespace:
    """PUBLISH_NAMESPACE payload of draft-16."""
    request_id = r.varint()
    namespace = read_namespace(r)
    return PublishNamespace(
        request_id=request_id,
        track_namespace=namespace,
        parameters=read_params(r, MessageParameters, version=opts.version),
    )


def _need_request_id(m: PublishNamespaceDone | PublishNamespaceCancel) -> int:
    if m.request_id is None:
        raise LocalProtocolError(f"draft-16 {type(m).__name__} needs request_id")
    return m.request_id


def enc_publish_namespace_done_16(w: Writer, m: PublishNamespaceDone) -> None:
    """PUBLISH_NAMESPACE_DONE payload of draft-16: a Request ID."""
    w.varint(_need_request_id(m))


def dec_publish_namespace_done_16(r: Reader, opts: DecodeOptions) -> PublishNamespaceDone:
    """PUBLISH_NAMESPACE_DONE payload of draft-16."""
    return PublishNamespaceDone(request_id=r.varint())


def enc_publish_namespace_cancel_16(w: Writer, m: PublishNamespaceCancel) -> None:
    """PUBLISH_NAMESPACE_CANCEL payload of draft-16: Request ID, Error Code, Reason."""
    w.varint(_need_request_id(m)).varint(m.error_code).reason(m.reason)


def dec_publish_namespace_cancel_16(r: Reader, opts: DecodeOptions) -> PublishNamespaceCancel:
    """PUBLISH_NAMESPACE_CANCEL payload of draft-16."""
    request_id = r.varint()
    error_code = r.varint()
    return PublishNamespaceCancel(request_id=request_id, error_code=error_code, reason=r.reason())


def enc_subscribe_namespace_16(w: Writer, m: SubscribeNamespace) -> None:
    """SUBSCRIBE_NAMESPACE payload of draft-16 (a 0-field prefix is allowed, d16 §9.25)."""
    if m.subscribe_options not in (0, 1, 2):
        raise LocalProtocolError(f"subscribe options {m.subscribe_options} not in 0..2")
    w.varint(m.request_id)
    write_namespace(w, m.track_namespace_prefix, allow_empty=True)
    w.varint(m.subscribe_options)
    write_params(w, m.parameters, version=DRAFT_16)


def dec_subscribe_namespace_16(r: Reader, opts: DecodeOptions) -> SubscribeNamespace:
    """SUBSCRIBE_NAMESPACE payload of draft-16."""
    request_id = r.varint()
    prefix = read_namespace(r, allow_empty=True)
    options = r.varint()
    if options > 2:
        raise ProtocolViolation(f"subscribe options {options} not in 0..2")
    return SubscribeNamespace(
        request_id=request_id,
        track_namespace_prefix=prefix,
        subscribe_options=options,
        parameters=read_params(r, MessageParameters, version=opts.version),
    )


def enc_namespace_16(w: Writer, m: Namespace | NamespaceDone) -> None:
    """NAMESPACE / NAMESPACE_DONE payload: a Track Namespace Suffix."""
    write_namespace(w, m.track_namespace_suffix, allow_empty=True)


def dec_namespace_16(r: Reader, opts: DecodeOptions) -> Namespace:
    """NAMESPACE payload."""
    return Namespace(track_namespace_suffix=read_namespace(r, allow_empty=True))


def dec_namespace_done_16(r: Reader, opts: DecodeOptions) -> NamespaceDone:
    """NAMESPACE_DONE payload."""
    return NamespaceDone(track_namespace_suffix=read_namespace(r, allow_empty=True))


CODECS_16: Codecs = {
    MessageTypeD16.PUBLISH_NAMESPACE: (
        PublishNamespace,
        enc_publish_namespace_16,
        dec_publish_namespace_16,
    ),
    MessageTypeD16.NAMESPACE: (Namespace, enc_namespace_16, dec_namespace_16),
    MessageTypeD16.PUBLISH_NAMESPACE_DONE: (
        PublishNamespaceDone,
        enc_publish_namespace_done_16,
        dec_publish_namespace_done_16,
    ),
    MessageTypeD16.NAMESPACE_DONE: (NamespaceDone, enc_namespace_16, dec_namespace_done_16),
    MessageTypeD16.PUBLISH_NAMESPACE_CANCEL: (
        PublishNamespaceCancel,
        enc_publish_namespace_cancel_16,
        dec_publish_namespace_cancel_16,
    ),
    MessageTypeD16.SUBSCRIBE_NAMESPACE: (
        SubscribeNamespace,
        enc_subscribe_namespace_16,
        dec_subscribe_namespace_16,
    ),
}
"""Draft-16 registry entries of the namespace family."""


NamespaceMessage = (
    Namespace
    | NamespaceDone
    | PublishNamespace
    | PublishNamespaceOk
    | PublishNamespaceError
    | PublishNamespaceDone
    | PublishNamespaceCancel
    | SubscribeNamespace
    | SubscribeNamespaceOk
    | SubscribeNamespaceError
    | UnsubscribeNamespace
)
"""Any message of this family."""
