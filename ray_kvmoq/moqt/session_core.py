"""Shared state of a MoQT session: configuration, request records, request-id flow control.

:class:`~ray_kvmoq.moqt.session.MoqtSession` is assembled from mixins (subscriptions in
:mod:`.session_subscribe`, FETCH and TRACK_STATUS in :mod:`.session_requests`, namespaces in
:mod:`.session_namespaces`, the data plane in :mod:`.session_data`); they all derive from
:class:`SessionCore`, which owns every attribute and the helpers they share. Nothing here does
I/O: writes go through the aioquic ``QuicConnection``, which only buffers.

Invariants:

* Every request is a record in exactly one dict, keyed by request id, holding a
  :class:`~ray_kvmoq.moqt.state.StateMachine`; a record leaves its dict when its machine
  reaches ``CLOSED`` (``_drop_*`` helpers), so a response to it afterwards is "unknown" - a
  PROTOCOL_VIOLATION, unless we *abandoned* the request first (FETCH_CANCEL,
  PUBLISH_NAMESPACE_DONE, UNSUBSCRIBE_NAMESPACE, PUBLISH_DONE before PUBLISH_OK, PUBLISH_ERROR,
  an UNSUBSCRIBE never answered): then a response crossing ours on the wire is dropped quietly
  (``_abandoned``, bounded).
* Request ids: ours are ``_next_request_id`` (client even, server odd, +2); the peer's must be
  exactly ``_peer_next_id`` and below ``_granted`` (d14 §9.1). ``_peer_active`` holds the peer's
  requests still open; MAX_REQUEST_ID is replenished from it (``_maybe_grant``).
* Every peer-driven collection is bounded: requests by the granted window, parked data by
  ``SessionConfig.unknown_alias_buffer_bytes``, retired aliases and abandoned ids by
  ``_RETIRED_MAX``, the token cache by the size we advertised.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from aioquic.quic.connection import QuicConnection

from .codec import AuthToken, Location, Message, Parameters, RequestsBlocked
from .codec import MaxRequestId as MaxRequestIdMessage
from .codec.control import encode_control
from .codec.errors import (
    AuthTokenCacheOverflow,
    DuplicateAuthTokenAlias,
    InvalidRequestId,
    LocalProtocolError,
    ProtocolViolation,
    TooManyRequests,
    UnknownAuthTokenAlias,
)
from .codec.types import DEFAULT_MAX_OBJECT_SIZE, DRAFT_14, FilterType, TokenAliasType
from .state import (
    FETCH_PUBLISHER,
    FETCH_SUBSCRIBER,
    NAMESPACE_REQUESTER,
    NAMESPACE_RESPONDER,
    SESSION_CLIENT,
    SESSION_SERVER,
    SUBSCRIPTION_PUBLISHER,
    SUBSCRIPTION_SUBSCRIBER,
    TRACK_STATUS_REQUESTER,
    TRACK_STATUS_RESPONDER,
    FetchInput,
    FetchState,
    NamespaceInput,
    NamespaceState,
    PublisherSubInput,
    PublisherSubState,
    SessionInput,
    SessionState,
    StateMachine,
    SubscriberSubInput,
    SubscriberSubState,
    TrackStatusInput,
    TrackStatusState,
)

if TYPE_CHECKING:
    from .events import MoqtEvent

__all__ = ["SessionConfig", "SessionCore"]

_R = TypeVar("_R")

_RETIRED_MAX = 4096
"""How many retired track aliases / stream ids we remember to drop late data quietly."""


@dataclass(frozen=True, kw_only=True)
class SessionConfig:
    """Knobs of one :class:`~ray_kvmoq.moqt.session.MoqtSession`."""

    max_request_id: int = 1000
    """Initial MAX_REQUEST_ID we grant the peer (its ids stay below it; 0 = no requests).
    Replenished with MAX_REQUEST_ID as the peer's requests complete."""
    strict_request_limit: bool = False
    """Enforce the peer's limit even when it never advertised one (absent = 0 per d14). Off by
    default: aiomoqt's server sends no MAX_REQUEST_ID at all."""
    implementation: bytes | None = b"ray_kvmoq"
    """MOQT_IMPLEMENTATION setup parameter (None: not sent)."""
    path: bytes | None = None
    """Client: PATH setup parameter (``/path?query`` of a ``moqt://`` URI)."""
    authority: bytes | None = None
    """Client: AUTHORITY setup parameter (``host:port``)."""
    auth_tokens: tuple[AuthToken, ...] = ()
    """AUTHORIZATION TOKEN setup parameters we send."""
    max_auth_token_cache_size: int = 0
    """Token-alias cache we offer the peer, in bytes (d14 default 0: no aliases)."""
    unknown_alias_buffer_bytes: int = 1 << 20
    """Bytes of data streams with a not-yet-known track alias we hold (d14 §10.4.2)."""
    unknown_alias_timeout: float = 2.0
    """Seconds such a stream may wait for its alias before the session fails."""
    max_object_size: int = DEFAULT_MAX_OBJECT_SIZE
    """Largest object payload accepted on a data stream (checked before buffering)."""
    publish_done_linger: float = 5.0
    """Seconds after PUBLISH_DONE we wait for in-flight data streams of that subscription."""
    goaway_timeout: float | None = None
    """After we send GOAWAY, close with GOAWAY_TIMEOUT if the session is still open this long
    later (None: never)."""


@dataclass(slots=True, kw_only=True)
class SubscriberRecord:
    """A subscription we receive objects for (our SUBSCRIBE, or the peer's PUBLISH)."""

    request_id: int
    machine: StateMachine[SubscriberSubState, SubscriberSubInput]
    track_namespace: tuple[bytes, ...]
    track_name: bytes
    filter_type: FilterType
    start: Location | None = None
    end_group: int | None = None
    track_alias: int | None = None
    streams_seen: int = 0
    open_streams: int = 0
    expected_streams: int | None = None


@dataclass(slots=True, kw_only=True)
class PublisherRecord:
    """A subscription we send objects for (the peer's SUBSCRIBE, or our PUBLISH)."""

    request_id: int
    machine: StateMachine[PublisherSubState, PublisherSubInput]
    track_namespace: tuple[bytes, ...]
    track_name: bytes
    filter_type: FilterType
    start: Location | None = None
    end_group: int | None = None
    track_alias: int | None = None
    largest: Location | None = None
    accepted: bool = False
    forward: bool = True
    streams_opened: int = 0
    open_streams: set[int] = field(default_factory=set)


@dataclass(slots=True, kw_only=True)
class FetchRecord:
    """A fetch on either side."""

    request_id: int
    machine: StateMachine[FetchState, FetchInput]
    stream_id: int | None = None


@dataclass(slots=True, kw_only=True)
class NamespaceRecord:
    """A PUBLISH_NAMESPACE or SUBSCRIBE_NAMESPACE on either side."""

    request_id: int
    machine: StateMachine[NamespaceState, NamespaceInput]
    namespace: tuple[bytes, ...]


@dataclass(slots=True, kw_only=True)
class TrackStatusRecord:
    """A TRACK_STATUS on either side."""

    request_id: int
    machine: StateMachine[TrackStatusState, TrackStatusInput]


class SessionCore:
    """State and shared helpers of a session; see the module docstring for invariants."""

    def __init__(self, quic: QuicConnection, *, is_client: bool, config: SessionConfig) -> None:
        self._quic = quic
        self._is_client = is_client
        self._config = config
        table = SESSION_CLIENT if is_client else SESSION_SERVER
        self._session: StateMachine[SessionState, SessionInput] = StateMachine(
            table, SessionState.CONNECTED
        )
        self._version = DRAFT_14
        self._control_stream_id: int | None = None
        self._terminated = False
        self._now = 0.0
        # Request ids (d14 §9.1).
        self._next_request_id = 0 if is_client else 1
        self._peer_next_id = 1 if is_client else 0
        self._granted = config.max_request_id
        self._peer_limit = 0
        self._peer_limit_known = False
        self._blocked_sent_at: int | None = None
        self._peer_active: set[int] = set()
        # Records, keyed by request id.
        self._subs_out: dict[int, SubscriberRecord] = {}
        self._subs_in: dict[int, PublisherRecord] = {}
        self._fetch_out: dict[int, FetchRecord] = {}
        self._fetch_in: dict[int, FetchRecord] = {}
        self._pubns_out: dict[int, NamespaceRecord] = {}
        self._pubns_in: dict[int, NamespaceRecord] = {}
        self._subns_out: dict[int, NamespaceRecord] = {}
        self._subns_in: dict[int, NamespaceRecord] = {}
        self._ts_out: dict[int, TrackStatusRecord] = {}
        self._ts_in: dict[int, TrackStatusRecord] = {}
        # Track aliases: the peer's (we subscribe) and ours (we publish).
        self._alias_in: dict[int, int] = {}
        self._alias_out: dict[int, int] = {}
        self._retired_aliases: OrderedDict[int, None] = OrderedDict()
        self._abandoned: OrderedDict[int, None] = OrderedDict()
        self._next_alias = 0
        self._lingering: dict[int, float] = {}
        self._goaway_deadline: float | None = None
        # Authorization token aliases the peer registered with us (d14 §9.2.1.1).
        self._token_cache: dict[int, AuthToken] = {}
        self._token_cache_bytes = 0

    # ---------------------------------------------------------------- state helpers

    @property
    def is_client(self) -> bool:
        """True for the client role (even request ids, sends CLIENT_SETUP)."""
        return self._is_client

    @property
    def state(self) -> SessionState:
        """Current session state."""
        return self._session.state

    @property
    def version(self) -> int:
        """MoQT version in use (draft-14)."""
        return self._version

    @property
    def peer_max_request_id(self) -> int:
        """The peer's limit on our request ids (0 until SETUP, or if it advertised none)."""
        return self._peer_limit

    @property
    def next_request_id(self) -> int:
        """The request id our next request will use."""
        return self._next_request_id

    @property
    def granted_max_request_id(self) -> int:
        """The MAX_REQUEST_ID we last granted the peer."""
        return self._granted

    @property
    def can_send_request(self) -> bool:
        """True when a new request fits the peer's limit (or the limit is not enforced)."""
        return not self._limit_enforced() or self._next_request_id < self._peer_limit

    def _limit_enforced(self) -> bool:
        return self._peer_limit_known or self._config.strict_request_limit

    def _send(self, msg: Message) -> None:
        """Encode one control message and buffer it on the control stream."""
        assert self._control_stream_id is not None
        self._quic.send_stream_data(self._control_stream_id, encode_control(msg))

    def _send_control(self, msg: Message) -> None:
        """Send a non-request control message (responses, cancels, flow control)."""
        self._send_raw_control(encode_control(msg))

    def _send_raw_control(self, data: bytes) -> None:
        """Send an already encoded non-request control message."""
        self._session.apply(SessionInput.SEND_CONTROL)
        assert self._control_stream_id is not None
        self._quic.send_stream_data(self._control_stream_id, data)

    def _unknown_reference(self, rid: int, what: str) -> None:
        """A message naming a request we do not track: ignore it if that request existed."""
        if not self._issued(rid):
            raise ProtocolViolation(f"{what} names request id {rid}, which never existed")

    def _drop_subscriber(self, rec: SubscriberRecord) -> None:
        self._subs_out.pop(rec.request_id, None)
        self._lingering.pop(rec.request_id, None)
        self._retire_alias(rec.track_alias)
        if not self._is_ours(rec.request_id):
            self._peer_request_done(rec.request_id)

    def _drop_publisher(self, rec: PublisherRecord) -> None:
        self._subs_in.pop(rec.request_id, None)
        if rec.track_alias is not None and self._alias_out.get(rec.track_alias) == rec.request_id:
            del self._alias_out[rec.track_alias]
        if not self._is_ours(rec.request_id):
            self._peer_request_done(rec.request_id)

    def _check_subscriber_done(self, rec: SubscriberRecord) -> None:
        """Close a DONE subscription once every counted data stream has come and gone."""
        if rec.machine.state is not SubscriberSubState.DONE or rec.open_streams:
            return
        if rec.expected_streams is not None and rec.streams_seen >= rec.expected_streams:
            rec.machine.apply(SubscriberSubInput.STREAMS_COMPLETE)
            self._drop_subscriber(rec)

    # Hooks the data-plane mixin (session_data.DataMixin) defines; declared here, as typed
    # attributes, so every control-plane mixin can call them and mypy checks the calls.

    _alias_known: Callable[[int, list[MoqtEvent]], None]
    """A track alias became known: replay data streams parked for it."""
    _cancel_publisher_streams: Callable[[PublisherRecord], None]
    """Reset every open subgroup stream of a subscription we publish."""
    _stop_data_stream: Callable[[int], None]
    """STOP_SENDING a data stream we receive and drop whatever else arrives on it."""
    _reset_data_stream_quietly: Callable[[int, int], None]
    """RESET a data stream we send; later writes to it are dropped silently."""

    # ---------------------------------------------------------------- request ids

    def _start_request(self, build: Callable[[int], Message]) -> int:
        """Send a new request built for our next request id (honouring MAX_REQUEST_ID).

        The message is encoded before the id is consumed, so an invalid request raises
        LocalProtocolError without leaving a gap in our request ids.
        """
        self._session.apply(SessionInput.SEND_REQUEST)
        rid = self._next_request_id
        if self._limit_enforced() and rid >= self._peer_limit:
            if self._blocked_sent_at != self._peer_limit:
                self._blocked_sent_at = self._peer_limit
                self._send(RequestsBlocked(max_request_id=self._peer_limit))
            raise LocalProtocolError(
                f"request id {rid} not below the peer's MAX_REQUEST_ID {self._peer_limit}: "
                "wait for MaxRequestIdRaised"
            )
        data = encode_control(build(rid))
        self._next_request_id += 2
        assert self._control_stream_id is not None
        self._quic.send_stream_data(self._control_stream_id, data)
        return rid

    def _accept_peer_request_id(self, rid: int) -> None:
        """Validate the id of a new request from the peer (d14 §9.1)."""
        self._session.apply(SessionInput.RECV_REQUEST)
        if rid != self._peer_next_id:
            raise InvalidRequestId(f"request id {rid}, expected {self._peer_next_id}")
        if rid >= self._granted:
            raise TooManyRequests(f"request id {rid} not below MAX_REQUEST_ID {self._granted}")
        self._peer_next_id += 2
        self._peer_active.add(rid)

    def _is_ours(self, rid: int) -> bool:
        return rid % 2 == (0 if self._is_client else 1)

    def _issued(self, rid: int) -> bool:
        """True when ``rid`` is a request id either side has already used."""
        if self._is_ours(rid):
            return rid < self._next_request_id
        return rid < self._peer_next_id

    def _peer_request_done(self, rid: int) -> None:
        """A peer request ended: maybe replenish its MAX_REQUEST_ID."""
        self._peer_active.discard(rid)
        self._maybe_grant()

    def _maybe_grant(self) -> None:
        window = self._config.max_request_id
        if window <= 0 or self._terminated:
            return
        target = self._peer_next_id + window - 2 * len(self._peer_active)
        if target >= self._granted + max(2, window // 2) or (
            target > self._granted and self._granted <= self._peer_next_id
        ):
            self._grant(target)

    def _grant(self, new_max: int) -> None:
        if new_max <= self._granted:
            raise LocalProtocolError(f"MAX_REQUEST_ID must increase (now {self._granted})")
        self._granted = new_max
        self._send_control(MaxRequestIdMessage(max_request_id=new_max))

    # ---------------------------------------------------------------- aliases

    def _retire_alias(self, alias: int | None) -> None:
        if alias is None:
            return
        self._alias_in.pop(alias, None)
        self._retired_aliases[alias] = None
        while len(self._retired_aliases) > _RETIRED_MAX:
            self._retired_aliases.popitem(last=False)

    def _allocate_alias(self) -> int:
        while self._next_alias in self._alias_out:
            self._next_alias += 1
        alias = self._next_alias
        self._next_alias += 1
        return alias

    # ---------------------------------------------------------------- tokens

    def _tokens(self, params: Parameters | None) -> tuple[AuthToken, ...]:
        """Decode the AUTHORIZATION TOKEN parameters and apply alias operations.

        Returns the tokens in effect for the request: USE_VALUE and REGISTER tokens as sent,
        USE_ALIAS resolved to the registered value (as USE_VALUE); DELETE returns nothing.
        """
        if params is None:
            return ()
        out: list[AuthToken] = []
        for token in params.auth_tokens:
            kind = token.alias_type
            if kind is TokenAliasType.USE_VALUE:
                out.append(token)
            elif kind is TokenAliasType.REGISTER:
                self._register_token(token)
                out.append(token)
            elif kind is TokenAliasType.USE_ALIAS:
                known = self._token_cache.get(token.alias or 0)
                if known is None:
                    raise UnknownAuthTokenAlias(f"token alias {token.alias} is not registered")
                out.append(
                    AuthToken(
                        alias_type=TokenAliasType.USE_VALUE,
                        token_type=known.token_type,
                        value=known.value,
                    )
                )
            else:  # DELETE
                known = self._token_cache.pop(token.alias or 0, None)
                if known is None:
                    raise UnknownAuthTokenAlias(f"token alias {token.alias} is not registered")
                self._token_cache_bytes -= 16 + len(known.value)
        return tuple(out)

    def _register_token(self, token: AuthToken) -> None:
        alias = token.alias or 0
        if alias in self._token_cache:
            raise DuplicateAuthTokenAlias(f"token alias {alias} already registered")
        cost = 16 + len(token.value)
        if self._token_cache_bytes + cost > self._config.max_auth_token_cache_size:
            raise AuthTokenCacheOverflow(
                f"registering {cost} bytes exceeds the {self._config.max_auth_token_cache_size}"
                "-byte token cache"
            )
        self._token_cache[alias] = token
        self._token_cache_bytes += cost

    # ---------------------------------------------------------------- record lookup

    def _lookup(self, table: dict[int, _R], rid: int, what: str) -> _R | None:
        """The record a response refers to; None for one of our requests we abandoned (the
        response crossed our cancel); any other unknown id is a PROTOCOL_VIOLATION, which
        also catches duplicate responses (d14 §9: exactly one response per request)."""
        rec = table.get(rid)
        if rec is None:
            if rid in self._abandoned:
                return None
            raise ProtocolViolation(f"{what} for unknown request id {rid}")
        return rec

    def _abandon(self, rid: int) -> None:
        """Forget one of our requests before the peer is done with it (FETCH_CANCEL,
        PUBLISH_NAMESPACE_DONE, ...): whatever still arrives for it is dropped quietly."""
        self._abandoned[rid] = None
        while len(self._abandoned) > _RETIRED_MAX:
            self._abandoned.popitem(last=False)

    @staticmethod
    def _new_subscriber(rid: int, state: SubscriberSubState, **kwargs: object) -> SubscriberRecord:
        return SubscriberRecord(
            request_id=rid,
            machine=StateMachine(SUBSCRIPTION_SUBSCRIBER, state),
            **kwargs,  # type: ignore[arg-type]
        )

    @staticmethod
    def _new_publisher(rid: int, state: PublisherSubState, **kwargs: object) -> PublisherRecord:
        return PublisherRecord(
            request_id=rid,
            machine=StateMachine(SUBSCRIPTION_PUBLISHER, state),
            **kwargs,  # type: ignore[arg-type]
        )

    @staticmethod
    def _new_fetch(rid: int, *, serving: bool) -> FetchRecord:
        table = FETCH_PUBLISHER if serving else FETCH_SUBSCRIBER
        return FetchRecord(request_id=rid, machine=StateMachine(table, FetchState.PENDING))

    @staticmethod
    def _new_namespace(rid: int, ns: tuple[bytes, ...], *, responder: bool) -> NamespaceRecord:
        table = NAMESPACE_RESPONDER if responder else NAMESPACE_REQUESTER
        return NamespaceRecord(
            request_id=rid, machine=StateMachine(table, NamespaceState.PENDING), namespace=ns
        )

    @staticmethod
    def _new_track_status(rid: int, *, responder: bool) -> TrackStatusRecord:
        table = TRACK_STATUS_RESPONDER if responder else TRACK_STATUS_REQUESTER
        return TrackStatusRecord(
            request_id=rid, machine=StateMachine(table, TrackStatusState.PENDING)
        )
