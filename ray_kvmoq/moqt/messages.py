"""Every draft-14 control message as a frozen, kw_only, slotted dataclass.

This module defines the session-level and namespace messages and re-exports the track-level
ones (:mod:`.messages_track`) and the shared value types (:mod:`.messages_base`), so callers
import everything from here. ``Message`` is the union of all message classes and
``MESSAGE_CLASSES`` maps each :class:`MessageType` to its class.

Invariants: messages hold values, never bytes on the wire; each class has a ``TYPE`` class
attribute; validation of peer input happens in :mod:`.framer`, of our own values at encode time.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .messages_base import AuthToken, Location, MessageParameters, Parameters, SetupParameters
from .messages_track import (
    Fetch,
    FetchCancel,
    FetchError,
    FetchOk,
    Publish,
    PublishDone,
    PublishError,
    PublishOk,
    Subscribe,
    SubscribeError,
    SubscribeOk,
    SubscribeUpdate,
    TrackStatus,
    TrackStatusError,
    TrackStatusOk,
    Unsubscribe,
)
from .types import DRAFT_14, MessageType

__all__ = [
    "MESSAGE_CLASSES",
    "AuthToken",
    "ClientSetup",
    "Fetch",
    "FetchCancel",
    "FetchError",
    "FetchOk",
    "Goaway",
    "Location",
    "MaxRequestId",
    "Message",
    "MessageParameters",
    "Parameters",
    "Publish",
    "PublishDone",
    "PublishError",
    "PublishNamespace",
    "PublishNamespaceCancel",
    "PublishNamespaceDone",
    "PublishNamespaceError",
    "PublishNamespaceOk",
    "PublishOk",
    "RequestsBlocked",
    "ServerSetup",
    "SetupParameters",
    "Subscribe",
    "SubscribeError",
    "SubscribeNamespace",
    "SubscribeNamespaceError",
    "SubscribeNamespaceOk",
    "SubscribeOk",
    "SubscribeUpdate",
    "TrackStatus",
    "TrackStatusError",
    "TrackStatusOk",
    "Unsubscribe",
    "UnsubscribeNamespace",
]

_NO_SETUP_PARAMS = SetupParameters()
_NO_PARAMS = MessageParameters()


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientSetup:
    """CLIENT_SETUP (0x20, d14 §9.3): first message of the client on the control stream."""

    TYPE: ClassVar[MessageType] = MessageType.CLIENT_SETUP
    versions: tuple[int, ...] = (DRAFT_14,)
    """Supported versions, most preferred first."""
    parameters: SetupParameters = _NO_SETUP_PARAMS
    """Setup parameters (PATH, AUTHORITY, MAX_REQUEST_ID, ...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerSetup:
    """SERVER_SETUP (0x21, d14 §9.3): the server's answer to CLIENT_SETUP."""

    TYPE: ClassVar[MessageType] = MessageType.SERVER_SETUP
    selected_version: int = DRAFT_14
    """The version chosen from the client's list."""
    parameters: SetupParameters = _NO_SETUP_PARAMS
    """Setup parameters (MAX_REQUEST_ID, MOQT_IMPLEMENTATION, ...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Goaway:
    """GOAWAY (0x10, d14 §9.4): the sender asks the peer to move to a new session."""

    TYPE: ClassVar[MessageType] = MessageType.GOAWAY
    new_session_uri: bytes = b""
    """URI to reconnect to (at most 8192 bytes); empty = reuse the current one."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MaxRequestId:
    """MAX_REQUEST_ID (0x15, d14 §9.5): raise the peer's request ID limit."""

    TYPE: ClassVar[MessageType] = MessageType.MAX_REQUEST_ID
    max_request_id: int
    """New Maximum Request ID: the peer may use request IDs strictly below it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestsBlocked:
    """REQUESTS_BLOCKED (0x1A, d14 §9.6): the sender is out of request IDs."""

    TYPE: ClassVar[MessageType] = MessageType.REQUESTS_BLOCKED
    max_request_id: int
    """The Maximum Request ID the sender is blocked at."""


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
    track_namespace: tuple[bytes, ...]
    """The namespace withdrawn (d14 identifies it by name, not request ID)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceCancel:
    """PUBLISH_NAMESPACE_CANCEL (0x0C, d14 §9.27): the receiver stops accepting a namespace."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_NAMESPACE_CANCEL
    track_namespace: tuple[bytes, ...]
    """The namespace cancelled."""
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


Message = (
    ClientSetup
    | ServerSetup
    | Goaway
    | MaxRequestId
    | RequestsBlocked
    | Subscribe
    | SubscribeOk
    | SubscribeError
    | SubscribeUpdate
    | Unsubscribe
    | PublishDone
    | Publish
    | PublishOk
    | PublishError
    | Fetch
    | FetchOk
    | FetchError
    | FetchCancel
    | TrackStatus
    | TrackStatusOk
    | TrackStatusError
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
"""Any draft-14 control message."""

MESSAGE_CLASSES: dict[MessageType, type[Message]] = {
    cls.TYPE: cls
    for cls in (
        ClientSetup,
        ServerSetup,
        Goaway,
        MaxRequestId,
        RequestsBlocked,
        Subscribe,
        SubscribeOk,
        SubscribeError,
        SubscribeUpdate,
        Unsubscribe,
        PublishDone,
        Publish,
        PublishOk,
        PublishError,
        Fetch,
        FetchOk,
        FetchError,
        FetchCancel,
        TrackStatus,
        TrackStatusOk,
        TrackStatusError,
        PublishNamespace,
        PublishNamespaceOk,
        PublishNamespaceError,
        PublishNamespaceDone,
        PublishNamespaceCancel,
        SubscribeNamespace,
        SubscribeNamespaceOk,
        SubscribeNamespaceError,
        UnsubscribeNamespace,
    )
}
"""The message class for every MessageType."""
