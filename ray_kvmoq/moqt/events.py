"""Events a :class:`~ray_kvmoq.moqt.session.MoqtSession` returns from ``handle_event``.

Design (STYLE rule 5, after h11 ``_events.py`` and aioquic ``quic/events.py``): each event is a
frozen, kw_only, slotted dataclass named as a past-tense fact about the peer or the connection;
no event subclasses another, and ``MoqtEvent`` is their union. Events carry values only (never
the session or a stream object), so they can cross threads, queues and Ray actors.

Conventions: namespaces are ``tuple[bytes, ...]``, track names ``bytes``; ``request_id`` is the
id of the request the event belongs to (for a received request, the peer's id; for a response,
the id of our request). Authorization tokens found in a request's parameters are decoded into
``auth_tokens`` so the application can accept or refuse (``reject_*(UNAUTHORIZED, ...)`` or
``close(SessionError.UNAUTHORIZED)``); the session itself never judges a token.
"""

from __future__ import annotations

from dataclasses import dataclass

from .codec import AuthToken, Location, MessageParameters, SetupParameters
from .codec.types import FetchType, FilterType, GroupOrder, ObjectStatus

__all__ = [
    "DataStreamReset",
    "FetchAccepted",
    "FetchCancelled",
    "FetchRejected",
    "FetchRequested",
    "FetchStreamEnded",
    "GoawayReceived",
    "MaxRequestIdRaised",
    "MoqtEvent",
    "NamespaceDoneReceived",
    "NamespaceReceived",
    "ObjectReceived",
    "PublishAccepted",
    "PublishDoneReceived",
    "PublishNamespaceAccepted",
    "PublishNamespaceCancelled",
    "PublishNamespaceDone",
    "PublishNamespaceRejected",
    "PublishNamespaceRequested",
    "PublishRejected",
    "PublishRequested",
    "RequestsBlockedReceived",
    "SessionTerminated",
    "SetupCompleted",
    "SubgroupStreamEnded",
    "SubscribeAccepted",
    "SubscribeNamespaceAccepted",
    "SubscribeNamespaceRejected",
    "SubscribeNamespaceRequested",
    "SubscribeRejected",
    "SubscribeRequested",
    "SubscribeUpdated",
    "TrackStatusReceived",
    "TrackStatusRejected",
    "TrackStatusRequested",
    "Unsubscribed",
    "UnsubscribedNamespace",
]

# --------------------------------------------------------------------------------------------
# Session
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SetupCompleted:
    """CLIENT_SETUP / SERVER_SETUP exchanged: the session is READY."""

    version: int
    """Negotiated MoQT version (0xff00000e for draft-14)."""
    parameters: SetupParameters
    """The peer's setup parameters, unknown ones included."""
    peer_max_request_id: int
    """The peer's initial Maximum Request ID: our request ids must stay below it."""
    path: bytes | None
    """PATH the client asked for (server side; None when absent)."""
    authority: bytes | None
    """AUTHORITY the client asked for (server side; None when absent)."""
    auth_tokens: tuple[AuthToken, ...]
    """AUTHORIZATION TOKEN setup parameters of the peer, decoded."""
    implementation: bytes | None
    """The peer's MOQT_IMPLEMENTATION parameter, if any."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GoawayReceived:
    """The peer sent GOAWAY: start no new requests and move to a new session soon."""

    new_session_uri: bytes
    """Where to reconnect; empty = the current URI."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MaxRequestIdRaised:
    """The peer raised our request limit (MAX_REQUEST_ID)."""

    max_request_id: int
    """New limit: our request ids must stay strictly below it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestsBlockedReceived:
    """The peer says it ran out of request ids (REQUESTS_BLOCKED)."""

    max_request_id: int
    """The limit the peer is blocked at."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SessionTerminated:
    """The session ended: a protocol error, ``close()``, or the QUIC connection closing."""

    error_code: int
    """Session error code (a SessionError value, or the QUIC/peer's code as received)."""
    reason: str
    """Reason phrase."""
    by_peer: bool
    """True when the peer (or its QUIC stack) closed; False when we did."""


# --------------------------------------------------------------------------------------------
# Subscriptions (SUBSCRIBE / PUBLISH)
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeRequested:
    """The peer sent SUBSCRIBE; answer with ``accept_subscribe`` or ``reject_subscribe``."""

    request_id: int
    """The peer's request id of the subscription."""
    track_namespace: tuple[bytes, ...]
    """Track namespace."""
    track_name: bytes
    """Track name."""
    subscriber_priority: int
    """Subscriber priority 0 (highest) .. 255."""
    group_order: GroupOrder
    """Requested group order (PUBLISHER_DEFAULT = ours)."""
    forward: bool
    """Whether objects should flow right away."""
    filter_type: FilterType
    """Subscription filter."""
    start: Location | None
    """Start location (AbsoluteStart / AbsoluteRange)."""
    end_group: int | None
    """Inclusive end group (AbsoluteRange)."""
    parameters: MessageParameters
    """All request parameters (DELIVERY_TIMEOUT, unknown ones, ...)."""
    auth_tokens: tuple[AuthToken, ...]
    """AUTHORIZATION TOKEN parameters, decoded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeAccepted:
    """Our SUBSCRIBE got SUBSCRIBE_OK."""

    request_id: int
    """Our request id of the subscription."""
    track_alias: int
    """Alias the publisher uses on data streams of this subscription."""
    expires: int
    """Milliseconds until the subscription expires; 0 = never."""
    group_order: GroupOrder
    """Group order the publisher will use."""
    largest: Location | None
    """Largest location published so far (None: no content yet)."""
    parameters: MessageParameters
    """Response parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeRejected:
    """Our SUBSCRIBE got SUBSCRIBE_ERROR."""

    request_id: int
    """Our request id of the subscription."""
    error_code: int
    """A SubscribeErrorCode (unknown codes kept as int)."""
    reason: str
    """Reason phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeUpdated:
    """The peer narrowed one of our publisher-side subscriptions (SUBSCRIBE_UPDATE)."""

    request_id: int
    """Request id of the subscription updated."""
    update_request_id: int
    """The new request id the update consumed."""
    start: Location
    """New start location."""
    end_group: int | None
    """New inclusive end group; None = open-ended."""
    subscriber_priority: int
    """New subscriber priority."""
    forward: bool
    """New forward state."""
    parameters: MessageParameters
    """Update parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Unsubscribed:
    """The peer ended a subscription we publish (UNSUBSCRIBE); stop sending and reset streams."""

    request_id: int
    """Request id of the subscription."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishDoneReceived:
    """The publisher ended one of our subscriptions (PUBLISH_DONE)."""

    request_id: int
    """Our request id of the subscription (or the peer's id of its PUBLISH)."""
    status_code: int
    """A PublishDoneCode (unknown codes kept as int)."""
    stream_count: int
    """Number of data streams the publisher opened for it (2**62-1 = unknown)."""
    reason: str
    """Reason phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishRequested:
    """The peer sent PUBLISH; answer with ``publish_ok`` or ``publish_error``."""

    request_id: int
    """The peer's request id."""
    track_namespace: tuple[bytes, ...]
    """Track namespace."""
    track_name: bytes
    """Track name."""
    track_alias: int
    """Alias the publisher uses on data streams."""
    group_order: GroupOrder
    """Group order of the track."""
    largest: Location | None
    """Largest location published so far (None: no content yet)."""
    forward: bool
    """Whether objects may already be flowing."""
    parameters: MessageParameters
    """Request parameters."""
    auth_tokens: tuple[AuthToken, ...]
    """AUTHORIZATION TOKEN parameters, decoded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishAccepted:
    """Our PUBLISH got PUBLISH_OK."""

    request_id: int
    """Our request id of the PUBLISH."""
    forward: bool
    """Forward state the subscriber wants."""
    subscriber_priority: int
    """Subscriber priority."""
    group_order: GroupOrder
    """Requested group order."""
    filter_type: FilterType
    """Subscriber's filter."""
    start: Location | None
    """Start location (AbsoluteStart / AbsoluteRange)."""
    end_group: int | None
    """Inclusive end group (AbsoluteRange)."""
    parameters: MessageParameters
    """Response parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishRejected:
    """Our PUBLISH got PUBLISH_ERROR."""

    request_id: int
    """Our request id of the PUBLISH."""
    error_code: int
    """A PublishErrorCode (unknown codes kept as int)."""
    reason: str
    """Reason phrase."""


# --------------------------------------------------------------------------------------------
# Fetches
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchRequested:
    """The peer sent FETCH; answer with ``accept_fetch`` or ``reject_fetch``.

    For joining fetches the session resolves the range from the Largest location given in our
    ``accept_subscribe`` (d14 §9.16.2); ``start``/``end`` stay None if that subscription has not
    been accepted yet, and the application resolves it itself.
    """

    request_id: int
    """The peer's request id."""
    fetch_type: FetchType
    """Standalone, relative joining or absolute joining."""
    subscriber_priority: int
    """Subscriber priority."""
    group_order: GroupOrder
    """Requested group order."""
    track_namespace: tuple[bytes, ...]
    """Track namespace (for joining fetches: that of the joined subscription)."""
    track_name: bytes
    """Track name (for joining fetches: that of the joined subscription)."""
    start: Location | None
    """First location requested (resolved for joining fetches when possible)."""
    end: Location | None
    """End location plus one object; Object 0 = whole group (resolved when possible)."""
    joining_request_id: int | None
    """Joining fetches: request id of the joined subscription."""
    joining_start: int | None
    """Joining fetches: the raw Joining Start field."""
    parameters: MessageParameters
    """Request parameters."""
    auth_tokens: tuple[AuthToken, ...]
    """AUTHORIZATION TOKEN parameters, decoded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchAccepted:
    """Our FETCH got FETCH_OK."""

    request_id: int
    """Our request id of the fetch."""
    group_order: GroupOrder
    """Group order of the fetch stream."""
    end_of_track: bool
    """True when the range reaches the end of the track."""
    end: Location
    """End location plus one object of what will be delivered."""
    parameters: MessageParameters
    """Response parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchRejected:
    """Our FETCH got FETCH_ERROR (codes outside d14, e.g. moq-dev's 500, are kept)."""

    request_id: int
    """Our request id of the fetch."""
    error_code: int
    """A FetchErrorCode (unknown codes kept as int)."""
    reason: str
    """Reason phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchCancelled:
    """The peer cancelled a fetch we serve (FETCH_CANCEL); its stream was reset."""

    request_id: int
    """Request id of the fetch."""


# --------------------------------------------------------------------------------------------
# Namespaces
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceRequested:
    """The peer announced a namespace (PUBLISH_NAMESPACE); answer accept or reject."""

    request_id: int
    """The peer's request id."""
    track_namespace: tuple[bytes, ...]
    """The namespace announced."""
    parameters: MessageParameters
    """Request parameters."""
    auth_tokens: tuple[AuthToken, ...]
    """AUTHORIZATION TOKEN parameters, decoded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceAccepted:
    """Our PUBLISH_NAMESPACE got PUBLISH_NAMESPACE_OK."""

    request_id: int
    """Our request id."""
    track_namespace: tuple[bytes, ...]
    """The namespace announced."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceRejected:
    """Our PUBLISH_NAMESPACE got PUBLISH_NAMESPACE_ERROR."""

    request_id: int
    """Our request id."""
    track_namespace: tuple[bytes, ...]
    """The namespace announced."""
    error_code: int
    """A PublishNamespaceErrorCode (unknown codes kept as int)."""
    reason: str
    """Reason phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceDone:
    """The peer withdrew a namespace it announced (PUBLISH_NAMESPACE_DONE)."""

    track_namespace: tuple[bytes, ...]
    """The namespace withdrawn."""
    request_ids: tuple[int, ...]
    """Request ids of the matching announcements (empty if none was known)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishNamespaceCancelled:
    """The peer stopped accepting a namespace we announced (PUBLISH_NAMESPACE_CANCEL)."""

    track_namespace: tuple[bytes, ...]
    """The namespace cancelled."""
    request_ids: tuple[int, ...]
    """Our request ids of the matching announcements."""
    error_code: int
    """A PublishNamespaceErrorCode (unknown codes kept as int)."""
    reason: str
    """Reason phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeNamespaceRequested:
    """The peer sent SUBSCRIBE_NAMESPACE (the prefix may be empty: moq-dev does that)."""

    request_id: int
    """The peer's request id."""
    track_namespace_prefix: tuple[bytes, ...]
    """Namespace prefix (possibly empty)."""
    parameters: MessageParameters
    """Request parameters."""
    auth_tokens: tuple[AuthToken, ...]
    """AUTHORIZATION TOKEN parameters, decoded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeNamespaceAccepted:
    """Our SUBSCRIBE_NAMESPACE got SUBSCRIBE_NAMESPACE_OK."""

    request_id: int
    """Our request id."""
    track_namespace_prefix: tuple[bytes, ...]
    """The prefix subscribed."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeNamespaceRejected:
    """Our SUBSCRIBE_NAMESPACE got SUBSCRIBE_NAMESPACE_ERROR."""

    request_id: int
    """Our request id."""
    track_namespace_prefix: tuple[bytes, ...]
    """The prefix subscribed."""
    error_code: int
    """A SubscribeNamespaceErrorCode (unknown codes kept as int)."""
    reason: str
    """Reason phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class UnsubscribedNamespace:
    """The peer ended a namespace subscription (UNSUBSCRIBE_NAMESPACE)."""

    track_namespace_prefix: tuple[bytes, ...]
    """The prefix unsubscribed."""
    request_ids: tuple[int, ...]
    """Request ids of the matching SUBSCRIBE_NAMESPACE requests."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NamespaceReceived:
    """Draft-16 NAMESPACE arrived on our SUBSCRIBE_NAMESPACE's stream (d16 §9.21): the
    publisher has tracks in a namespace under our prefix."""

    request_id: int
    """Request id of our SUBSCRIBE_NAMESPACE."""
    track_namespace: tuple[bytes, ...]
    """The whole namespace: our prefix followed by the suffix sent."""


@dataclass(frozen=True, kw_only=True, slots=True)
class NamespaceDoneReceived:
    """Draft-16 NAMESPACE_DONE arrived on our SUBSCRIBE_NAMESPACE's stream (d16 §9.23): a
    namespace reported by NAMESPACE went away."""

    request_id: int
    """Request id of our SUBSCRIBE_NAMESPACE."""
    track_namespace: tuple[bytes, ...]
    """The whole namespace: our prefix followed by the suffix sent."""


# --------------------------------------------------------------------------------------------
# TRACK_STATUS
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackStatusRequested:
    """The peer sent TRACK_STATUS; answer with ``track_status_ok`` or ``track_status_error``."""

    request_id: int
    """The peer's request id."""
    track_namespace: tuple[bytes, ...]
    """Track namespace."""
    track_name: bytes
    """Track name."""
    parameters: MessageParameters
    """Request parameters."""
    auth_tokens: tuple[AuthToken, ...]
    """AUTHORIZATION TOKEN parameters, decoded."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackStatusReceived:
    """Our TRACK_STATUS got TRACK_STATUS_OK."""

    request_id: int
    """Our request id."""
    expires: int
    """Milliseconds the status stays valid; 0 = unknown."""
    group_order: GroupOrder
    """Group order of the track."""
    largest: Location | None
    """Largest location (None: no content)."""
    parameters: MessageParameters
    """Response parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackStatusRejected:
    """Our TRACK_STATUS got TRACK_STATUS_ERROR."""

    request_id: int
    """Our request id."""
    error_code: int
    """A SubscribeErrorCode (unknown codes kept as int)."""
    reason: str
    """Reason phrase."""


# --------------------------------------------------------------------------------------------
# Data plane
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True, slots=True)
class ObjectReceived:
    """One whole object arrived on a subgroup stream, a fetch stream or a datagram."""

    request_id: int
    """Request id of the subscription (ours, or the peer's PUBLISH) or of our fetch."""
    track_alias: int | None
    """Track alias from the subgroup header/datagram; None for fetch-stream objects."""
    group: int
    """Group ID."""
    subgroup: int
    """Subgroup ID (for datagrams: the Object ID)."""
    object_id: int
    """Object ID."""
    publisher_priority: int
    """Publisher priority 0 (highest) .. 255."""
    extensions: tuple[tuple[int, int | bytes], ...]
    """Extension headers in wire order (even type: int, odd type: bytes)."""
    status: ObjectStatus
    """NORMAL, or a status object (DOES_NOT_EXIST, END_OF_GROUP, END_OF_TRACK)."""
    payload: bytes
    """Object payload (empty for status objects)."""
    stream_id: int | None
    """QUIC stream the object came on; None for a datagram."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubgroupStreamEnded:
    """A subgroup stream ended cleanly (FIN after a whole object)."""

    stream_id: int
    """QUIC stream id."""
    request_id: int
    """Request id of the subscription."""
    track_alias: int
    """Track alias from the header."""
    group: int
    """Group ID."""
    subgroup: int
    """Subgroup ID."""
    end_of_group: bool
    """The header said this subgroup holds the group's last object."""


@dataclass(frozen=True, kw_only=True, slots=True)
class DataStreamReset:
    """A subgroup or fetch stream was reset by its publisher (RESET_STREAM)."""

    stream_id: int
    """QUIC stream id."""
    request_id: int | None
    """Request id of the subscription or fetch (None if the header never arrived)."""
    error_code: int
    """A StreamResetCode (unknown codes kept as int)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchStreamEnded:
    """A fetch stream ended cleanly (FIN): every object of the range was delivered."""

    stream_id: int
    """QUIC stream id."""
    request_id: int
    """Our request id of the fetch."""


MoqtEvent = (
    SetupCompleted
    | GoawayReceived
    | MaxRequestIdRaised
    | RequestsBlockedReceived
    | SessionTerminated
    | SubscribeRequested
    | SubscribeAccepted
    | SubscribeRejected
    | SubscribeUpdated
    | Unsubscribed
    | PublishDoneReceived
    | PublishRequested
    | PublishAccepted
    | PublishRejected
    | FetchRequested
    | FetchAccepted
    | FetchRejected
    | FetchCancelled
    | PublishNamespaceRequested
    | PublishNamespaceAccepted
    | PublishNamespaceRejected
    | PublishNamespaceDone
    | PublishNamespaceCancelled
    | SubscribeNamespaceRequested
    | SubscribeNamespaceAccepted
    | SubscribeNamespaceRejected
    | UnsubscribedNamespace
    | NamespaceReceived
    | NamespaceDoneReceived
    | TrackStatusRequested
    | TrackStatusReceived
    | TrackStatusRejected
    | ObjectReceived
    | SubgroupStreamEnded
    | DataStreamReset
    | FetchStreamEnded
)
"""Any event a session returns."""
