"""Payload codecs of the session and namespace control messages (d14 §9.3-§9.6, §9.23-§9.31).

Same conventions as :mod:`.framer_track`: ``enc_*(w, msg)`` writes the payload only,
``dec_*(r, opts)`` reads it.
"""

from __future__ import annotations

from typing import TypeVar

from .errors import LocalProtocolError
from .framer_common import DecodeOptions, read_namespace, read_params, write_namespace, write_params
from .messages import (
    ClientSetup,
    Goaway,
    MaxRequestId,
    PublishNamespace,
    PublishNamespaceCancel,
    PublishNamespaceDone,
    PublishNamespaceError,
    PublishNamespaceOk,
    RequestsBlocked,
    ServerSetup,
    SubscribeNamespace,
    SubscribeNamespaceError,
    SubscribeNamespaceOk,
    UnsubscribeNamespace,
)
from .messages_base import MessageParameters, SetupParameters
from .types import MAX_GOAWAY_URI
from .wire import Reader, Writer

NsError = TypeVar("NsError", PublishNamespaceError, SubscribeNamespaceError)
NsOk = TypeVar("NsOk", PublishNamespaceOk, SubscribeNamespaceOk)
Limit = TypeVar("Limit", MaxRequestId, RequestsBlocked)


def enc_client_setup(w: Writer, m: ClientSetup) -> None:
    """CLIENT_SETUP payload."""
    w.varint(len(m.versions))
    for version in m.versions:
        w.varint(version)
    write_params(w, m.parameters)


def dec_client_setup(r: Reader, opts: DecodeOptions) -> ClientSetup:
    """CLIENT_SETUP payload."""
    count = r.varint()
    versions = tuple(r.varint() for _ in range(count))
    return ClientSetup(versions=versions, parameters=read_params(r, SetupParameters))


def enc_server_setup(w: Writer, m: ServerSetup) -> None:
    """SERVER_SETUP payload."""
    w.varint(m.selected_version)
    write_params(w, m.parameters)


def dec_server_setup(r: Reader, opts: DecodeOptions) -> ServerSetup:
    """SERVER_SETUP payload."""
    version = r.varint()
    return ServerSetup(selected_version=version, parameters=read_params(r, SetupParameters))


def enc_goaway(w: Writer, m: Goaway) -> None:
    """GOAWAY payload."""
    if len(m.new_session_uri) > MAX_GOAWAY_URI:
        raise LocalProtocolError(f"GOAWAY URI longer than {MAX_GOAWAY_URI} bytes")
    w.length_prefixed(m.new_session_uri)


def dec_goaway(r: Reader, opts: DecodeOptions) -> Goaway:
    """GOAWAY payload; URI at most 8192 bytes (d14 §9.4)."""
    return Goaway(new_session_uri=r.length_prefixed(MAX_GOAWAY_URI, "GOAWAY URI"))


def enc_limit(w: Writer, m: MaxRequestId | RequestsBlocked) -> None:
    """MAX_REQUEST_ID / REQUESTS_BLOCKED payload."""
    w.varint(m.max_request_id)


def dec_limit(cls: type[Limit], r: Reader, opts: DecodeOptions) -> Limit:
    """MAX_REQUEST_ID / REQUESTS_BLOCKED payload."""
    return cls(max_request_id=r.varint())


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


def enc_ns_ok(w: Writer, m: PublishNamespaceOk | SubscribeNamespaceOk) -> None:
    """PUBLISH_NAMESPACE_OK / SUBSCRIBE_NAMESPACE_OK payload."""
    w.varint(m.request_id)


def dec_ns_ok(cls: type[NsOk], r: Reader, opts: DecodeOptions) -> NsOk:
    """PUBLISH_NAMESPACE_OK / SUBSCRIBE_NAMESPACE_OK payload."""
    return cls(request_id=r.varint())


def enc_ns_error(w: Writer, m: PublishNamespaceError | SubscribeNamespaceError) -> None:
    """PUBLISH_NAMESPACE_ERROR / SUBSCRIBE_NAMESPACE_ERROR payload."""
    w.varint(m.request_id).varint(m.error_code).reason(m.reason)


def dec_ns_error(cls: type[NsError], r: Reader, opts: DecodeOptions) -> NsError:
    """PUBLISH_NAMESPACE_ERROR / SUBSCRIBE_NAMESPACE_ERROR payload."""
    request_id = r.varint()
    error_code = r.varint()
    return cls(request_id=request_id, error_code=error_code, reason=r.reason())


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
