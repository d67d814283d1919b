"""What the roles of a MoQT session share: configuration, request records, request-id flow control.

:class:`~ray_kvmoq.moqt.session.MoqtSession` is a thin router over role objects, each owning
its records: :class:`~.session_subscribe.Subscriptions` (SUBSCRIBE/PUBLISH, both sides, and the
track aliases), :class:`~.session_requests.Requests` (FETCH, TRACK_STATUS),
:class:`~.session_namespaces.Namespaces` (PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE) and
:class:`~.session_data.DataStreams` (data plane). They share one :class:`RequestFlow` (defined
here): the QUIC connection and control stream, the session table, the version, request ids and
MAX_REQUEST_ID, abandoned requests and the token-alias cache. A role reaches another role only
through an explicit reference (``flow``, ``subs``, ``requests``, ``data``), never through shared
attributes. Nothing here does I/O: writes go through the aioquic ``QuicConnection``, which only
buffers.

Invariants:

* Every request is a record in exactly one dict of its role, keyed by request id, holding a
  :class:`~ray_kvmoq.moqt.state.StateMachine`; a record leaves its dict when its machine
  reaches ``CLOSED`` (``drop_*`` helpers), so a response to it afterwards is "unknown" - a
  PROTOCOL_VIOLATION, unless we *abandoned* the request first (FETCH_CANCEL,
  PUBLISH_NAMESPACE_DONE, UNSUBSCRIBE_NAMESPACE, PUBLISH_DONE before PUBLISH_OK, PUBLISH_ERROR,
  an UNSUBSCRIBE never answered): then a response crossing ours on the wire is dropped quietly
  (``RequestFlow.abandon``, bounded).
* Request ids: ours are ``next_request_id`` (client even, server odd, +2); the peer's must be
  exactly ``_peer_next_id`` and below ``granted`` (d14 §9.1). ``_peer_active`` holds the peer's
  requests still open; MAX_REQUEST_ID is replenished from it (``maybe_grant``).
* Every peer-driven collection is bounded: requests by the granted window, parked data by
  ``SessionConfig.unknown_alias_buffer_bytes``, retired aliases and abandoned ids by
  ``RETIRED_MAX``, the token cache by the size we advertised.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar

from aioquic.quic.connection import QuicConnection

from .codec import AuthToken, Location, Message, Parameters, RequestsBlocked
from .codec import MaxRequestId as MaxRequestIdMessage
from .codec.control import ControlStreamParser, encode_control
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
from .session_versions import to_wire
from .state import (
    SESSION_CLIENT,
    SESSION_SERVER,
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
    pass

__all__ = [
    "RETIRED_MAX",
    "FetchRecord",
    "NamespaceRecord",
    "PublisherRecord",
    "RequestFlow",
    "SessionConfig",
    "SubscriberRecord",
    "TrackStatusRecord",
]

_R = TypeVar("_R")

RETIRED_MAX = 4096
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
    stream_id: int | None = None
    """Draft-16 SUBSCRIBE_NAMESPACE: the bidirectional stream the request runs on."""
    parser: ControlStreamParser | None = None
    """Draft-16 SUBSCRIBE_NAMESPACE: parser of the peer's half of that stream."""
    answered: bool = False
    """Draft-16 SUBSCRIBE_NAMESPACE we sent: its REQUEST_OK / REQUEST_ERROR arrived."""
    reported: set[tuple[bytes, ...]] = field(default_factory=set)
    """Draft-16 SUBSCRIBE_NAMESPACE: namespaces NAMESPACE reported and not NAMESPACE_DONE."""


@dataclass(slots=True, kw_only=True)
class TrackStatusRecord:
    """A TRACK_STATUS on either side."""

    request_id: int
    machine: StateMachine[TrackStatusState, TrackStatusInput]


class RequestFlow:
    """What every role of a session shares: the QUIC connection and control stream, the session
    table, the negotiated version, request-id flow control (ours and the peer's), abandoned
    requests, and the peer's authorization-token aliases. See the module docstring."""

    def __init__(self, quic: QuicConnection, *, is_client: bool, config: SessionConfig) -> None:
        self.quic = quic
        self.is_client = is_client
        self.config = config
        table = SESSION_CLIENT if is_client else SESSION_SERVER
        self.machine: StateMachine[SessionState, SessionInput] = StateMachine(
            table, SessionState.CONNECTED
        )
        self.version = DRAFT_14
        self.control_stream_id: int | None = None
        self.terminated = False
        self.now = 0.0
        # Request ids (d14 §9.1).
        self.next_request_id = 0 if is_client else 1
        self._peer_next_id = 1 if is_client else 0
        self.granted = config.max_request_id
        self.peer_limit = 0
        self.peer_limit_known = False
        self._blocked_sent_at: int | None = None
        self._peer_active: set[int] = set()
        self._peer_gaps: set[int] = set()
        """Draft-16: peer request ids skipped by a later request, still to arrive."""
        self._abandoned: OrderedDict[int, None] = OrderedDict()
        # Authorization token aliases the peer registered with us (d14 §9.2.1.1).
        self._token_cache: dict[int, AuthToken] = {}
        self._token_cache_bytes = 0

    # ---------------------------------------------------------------- control stream

    def limit_enforced(self) -> bool:
        return self.peer_limit_known or self.config.strict_request_limit

    def encode(self, msg: Message) -> bytes:
        """One control message framed for the negotiated version; draft-14 answers become
        REQUEST_OK / REQUEST_ERROR on draft-16 (:func:`~.session_versions.to_wire`)."""
        return encode_control(to_wire(msg, self.version), version=self.version)

    def send(self, msg: Message) -> None:
        """Encode one control message and buffer it on the control stream."""
        assert self.control_stream_id is not None
        self.quic.send_stream_data(self.control_stream_id, self.encode(msg))

    def send_control(self, msg: Message) -> None:
        """Send a non-request control message (responses, cancels, flow control)."""
        self.send_raw_control(self.encode(msg))

    def send_raw_control(self, data: bytes) -> None:
        """Send an already encoded non-request control message."""
        self.machine.apply(SessionInput.SEND_CONTROL)
        assert self.control_stream_id is not None
        self.quic.send_stream_data(self.control_stream_id, data)

    def unknown_reference(self, rid: int, what: str) -> None:
        """A message naming a request we do not track: ignore it if that request existed."""
        if not self.issued(rid):
            raise ProtocolViolation(f"{what} names request id {rid}, which never existed")

    # ---------------------------------------------------------------- request ids

    def start_request(self, build: Callable[[int], Message]) -> int:
        """Send a new request built for our next request id (honouring MAX_REQUEST_ID).

        The message is encoded before the id is consumed, so an invalid request raises
        LocalProtocolError without leaving a gap in our request ids.
        """
        rid, data = self._new_request(build)
        assert self.control_stream_id is not None
        self.quic.send_stream_data(self.control_stream_id, data)
        return rid

    def start_stream_request(self, build: Callable[[int], Message]) -> tuple[int, int]:
        """Like :meth:`start_request`, but the request opens its own bidirectional stream
        (draft-16 SUBSCRIBE_NAMESPACE, d16 §9.25); returns ``(request_id, stream_id)``."""
        rid, data = self._new_request(build)
        stream_id = self.quic.get_next_available_stream_id(is_unidirectional=False)
        self.quic.send_stream_data(stream_id, data)
        return rid, stream_id

    def _new_request(self, build: Callable[[int], Message]) -> tuple[int, bytes]:
        self.machine.apply(SessionInput.SEND_REQUEST)
        rid = self.next_request_id
        if self.limit_enforced() and rid >= self.peer_limit:
            if self._blocked_sent_at != self.peer_limit:
                self._blocked_sent_at = self.peer_limit
                self.send(RequestsBlocked(max_request_id=self.peer_limit))
            raise LocalProtocolError(
                f"request id {rid} not below the peer's MAX_REQUEST_ID {self.peer_limit}: "
                "wait for MaxRequestIdRaised"
            )
        data = self.encode(build(rid))
        self.next_request_id += 2
        return rid, data

    def accept_peer_request_id(self, rid: int) -> None:
        """Validate the id of a new request from the peer (d14 §9.1, d16 §9.1).

        Draft-16 requests travel on more than one stream (SUBSCRIBE_NAMESPACE has its own),
        and QUIC does not order streams against each other: a request may arrive after one
        with a higher id. So on draft-16 an id may skip ahead (the skipped ones are expected
        later, each once) as long as it has the peer's parity and stays below our
        MAX_REQUEST_ID; draft-14 ids must come exactly in sequence.
        """
        self.machine.apply(SessionInput.RECV_REQUEST)
        if rid != self._peer_next_id:
            late = rid in self._peer_gaps
            ahead = rid > self._peer_next_id and rid % 2 == self._peer_next_id % 2
            if self.version == DRAFT_14 or not (late or ahead):
                raise InvalidRequestId(f"request id {rid}, expected {self._peer_next_id}")
            if late:
                self._peer_gaps.discard(rid)
                self._peer_active.add(rid)
                return
        if rid >= self.granted:
            raise TooManyRequests(f"request id {rid} not below MAX_REQUEST_ID {self.granted}")
        self._peer_gaps.update(range(self._peer_next_id, rid, 2))
        self._peer_next_id = rid + 2
        self._peer_active.add(rid)

    def is_ours(self, rid: int) -> bool:
        return rid % 2 == (0 if self.is_client else 1)

    def issued(self, rid: int) -> bool:
        """True when ``rid`` is a request id either side has already used."""
        if self.is_ours(rid):
            return rid < self.next_request_id
        return rid < self._peer_next_id

    def peer_request_done(self, rid: int) -> None:
        """A peer request ended: maybe replenish its MAX_REQUEST_ID."""
        self._peer_active.discard(rid)
        self.maybe_grant()

    def maybe_grant(self) -> None:
        window = self.config.max_request_id
        if window <= 0 or self.terminated:
            return
        target = self._peer_next_id + window - 2 * len(self._peer_active)
        if target >= self.granted + max(2, window // 2) or (
            target > self.granted and self.granted <= self._peer_next_id
        ):
            self.grant(target)

    def grant(self, new_max: int) -> None:
        if new_max <= self.granted:
            raise LocalProtocolError(f"MAX_REQUEST_ID must increase (now {self.granted})")
        self.granted = new_max
        self.send_control(MaxRequestIdMessage(max_request_id=new_max))

    # ---------------------------------------------------------------- aliases

    # ---------------------------------------------------------------- tokens

    def tokens(self, params: Parameters | None) -> tuple[AuthToken, ...]:
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
        if self._token_cache_bytes + cost > self.config.max_auth_token_cache_size:
            raise AuthTokenCacheOverflow(
                f"registering {cost} bytes exceeds the {self.config.max_auth_token_cache_size}"
                "-byte token cache"
            )
        self._token_cache[alias] = token
        self._token_cache_bytes += cost

    # ---------------------------------------------------------------- record lookup

    def lookup(self, table: dict[int, _R], rid: int, what: str) -> _R | None:
        """The record a response refers to; None for one of our requests we abandoned (the
        response crossed our cancel); any other unknown id is a PROTOCOL_VIOLATION, which
        also catches duplicate responses (d14 §9: exactly one response per request)."""
        rec = table.get(rid)
        if rec is None:
            if rid in self._abandoned:
                return None
            raise ProtocolViolation(f"{what} for unknown request id {rid}")
        return rec

    def abandon(self, rid: int) -> None:
        """Forget one of our requests before the peer is done with it (FETCH_CANCEL,
        PUBLISH_NAMESPACE_DONE, ...): whatever still arrives for it is dropped quietly."""
        self._abandoned[rid] = None
        while len(self._abandoned) > RETIRED_MAX:
            self._abandoned.popitem(last=False)
