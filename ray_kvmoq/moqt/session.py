"""The MoQT session: a sans-I/O state machine layered on an aioquic ``QuicConnection``.

Shape (STYLE rules 1-2, after aioquic's ``H3Connection``): the session owns no socket, task or
clock. The application (or :mod:`.aio`) feeds every ``QuicEvent`` of the connection to
:meth:`MoqtSession.handle_event` together with ``now``, gets back a list of
:mod:`.events`, and calls commands (``subscribe``, ``accept_subscribe``, ``open_subgroup``,
...) that only *buffer* bytes on the ``QuicConnection``; transmitting is the caller's job, as it
is with aioquic. ``get_timer``/``handle_timer`` drive the few timeouts (data parked for unknown
track aliases, GOAWAY, PUBLISH_DONE lingering).

Layers: :mod:`.codec` turns bytes into messages and objects; the lifecycles live in the
transition tables of :mod:`.state`. This class is a thin router over role objects that own
their records: :class:`~.session_subscribe.Subscriptions` (SUBSCRIBE/PUBLISH),
:class:`~.session_requests.Requests` (FETCH, TRACK_STATUS),
:class:`~.session_namespaces.Namespaces` (PUBLISH_NAMESPACE, SUBSCRIBE_NAMESPACE) and
:class:`~.session_data.DataStreams` (data plane); they share one
:class:`~.session_core.RequestFlow` (request ids, control stream, session table). Control
messages go to the handler each role lists in its ``HANDLERS``; the session itself handles only
SETUP, GOAWAY, MAX_REQUEST_ID and REQUESTS_BLOCKED. Commands are the roles' methods,
re-exported here with their signatures (``_delegate``).

Errors: :meth:`handle_event` is the single entry point for peer input and catches every
:class:`~ray_kvmoq.moqt.codec.errors.MoqtError`: it closes the QUIC connection with
``exc.error_code`` and returns :class:`SessionTerminated`. Commands raise
:class:`~ray_kvmoq.moqt.codec.errors.LocalProtocolError` on misuse and never close the session.

Invariants:

* Exactly one :class:`SessionTerminated` is reported per session; afterwards every event is
  ignored and every command raises LocalProtocolError.
* The control stream is the first client-initiated bidirectional stream; any other
  bidirectional stream, or the control stream ending or being reset, is a PROTOCOL_VIOLATION
  (d14 §3.3).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import attrgetter
from typing import Any, Concatenate, ParamSpec, TypeVar

from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import (
    ConnectionTerminated,
    DatagramFrameReceived,
    HandshakeCompleted,
    QuicEvent,
    StopSendingReceived,
    StreamDataReceived,
    StreamReset,
)

from .codec import (
    MESSAGE_CLASSES_BY_VERSION,
    ClientSetup,
    Goaway,
    MaxRequestId,
    Message,
    RequestErrorMessage,
    RequestOk,
    RequestsBlocked,
    ServerSetup,
    SetupParameters,
)
from .codec.control import ControlStreamParser
from .codec.errors import (
    GoawayTimeout,
    LocalProtocolError,
    MalformedAuthority,
    MalformedPath,
    MoqtError,
    ProtocolViolation,
    VersionNegotiationFailed,
)
from .codec.types import (
    DRAFT_14,
    DRAFT_16,
    SessionError,
)
from .events import (
    GoawayReceived,
    MaxRequestIdRaised,
    MoqtEvent,
    RequestsBlockedReceived,
    SessionTerminated,
    SetupCompleted,
)
from .session_core import RequestFlow, SessionConfig
from .session_data import DataStreams, OutgoingFetchObject, OutgoingObject
from .session_namespaces import Namespaces
from .session_requests import Requests
from .session_subscribe import Subscriptions
from .session_versions import from_request_error, from_request_ok, version_for_alpn
from .state import SessionInput, SessionState, SubscriberSubInput

__all__ = ["MoqtSession", "OutgoingFetchObject", "OutgoingObject", "SessionConfig"]

_P = ParamSpec("_P")
_R = TypeVar("_R")

SUPPORTED_VERSIONS: tuple[int, ...] = (DRAFT_14,)
"""Versions offered in CLIENT_SETUP / accepted from it, most preferred first (ALPN ``moq-00``;
from draft-15 on the ALPN alone names the version, :mod:`.session_versions`)."""


def _delegate(
    role: str, method: Callable[Concatenate[Any, _P], _R]
) -> Callable[Concatenate[Any, _P], _R]:
    """A session command that runs ``method`` on the role object held in attribute ``role``.

    The commands live on the roles that own their records; the session re-exports them with
    the role method's signature and docstring (mypy sees the exact signature).
    """
    get_role = attrgetter(role)

    def command(self: Any, *args: _P.args, **kwargs: _P.kwargs) -> _R:
        return method(get_role(self), *args, **kwargs)

    command.__name__ = command.__qualname__ = method.__name__
    command.__doc__ = method.__doc__
    return command


class MoqtSession:
    """One MoQT session over one aioquic ``QuicConnection`` (client or server role).

    Usage: create it right after the QUIC connection (client: call :meth:`setup`), pass every
    QUIC event to :meth:`handle_event`, act on the returned events, and transmit after each
    call. See the module docstring for the error model.
    """

    def __init__(
        self,
        quic: QuicConnection,
        *,
        is_client: bool,
        config: SessionConfig | None = None,
        alpn: str | None = None,
    ) -> None:
        """``alpn``: the ALPN the handshake negotiated, when it is already done (a client
        created after connecting); otherwise the session reads it from ``HandshakeCompleted``.
        ``moqt-16`` makes it a draft-16 session, ``moq-00`` (or none) draft-14.
        """
        flow = RequestFlow(quic, is_client=is_client, config=config or SessionConfig())
        self._flow = flow
        self._subs = Subscriptions(flow)
        self._requests = Requests(flow, self._subs)
        self._namespaces = Namespaces(flow)
        self._data = DataStreams(flow, self._subs, self._requests)
        self._subs.data = self._requests.data = self._data
        self._goaway_deadline: float | None = None
        self._control_parser = ControlStreamParser(allow_empty_namespace_prefix=True)
        self._handlers: dict[type, Callable[[Any, list[MoqtEvent]], None]] = {
            cls: getattr(self, name) for cls, name in _HANDLERS.items()
        }
        self._requests_types: frozenset[type] = frozenset()
        for role in (self._subs, self._requests, self._namespaces):
            self._handlers.update({cls: getattr(role, n) for cls, n in role.HANDLERS.items()})
            self._requests_types |= role.REQUESTS
        if alpn is not None:
            self._set_version(version_for_alpn(alpn))

    # ------------------------------------------------------------ entry points

    def handle_event(self, event: QuicEvent, now: float = 0.0) -> list[MoqtEvent]:
        """Process one QUIC event; returns the MoQT events it produced.

        Peer protocol errors close the session here (QUIC CONNECTION_CLOSE with the MoQT
        error code) and come back as a final :class:`SessionTerminated`.
        """
        if self._flow.terminated:
            return []
        self._flow.now = now
        out: list[MoqtEvent] = []
        try:
            if isinstance(event, StreamDataReceived):
                self._on_stream_data(event, out)
            elif isinstance(event, HandshakeCompleted):
                self._set_version(version_for_alpn(event.alpn_protocol))
            elif isinstance(event, DatagramFrameReceived):
                self._data.on_datagram(event.data, out)
            elif isinstance(event, StreamReset):
                self._on_stream_reset(event, out)
            elif isinstance(event, StopSendingReceived):
                if event.stream_id == self._flow.control_stream_id:
                    raise ProtocolViolation("peer sent STOP_SENDING on the control stream")
                if not event.stream_id & 0x2:
                    self._namespaces.on_request_stream_stopped(event.stream_id)
                else:
                    self._data.on_stop_sending(event.stream_id)
            elif isinstance(event, ConnectionTerminated):
                self._on_connection_terminated(event, out)
                return out
            self._run_timers(now)
        except MoqtError as exc:
            out.append(self._fail(exc.error_code, exc.reason or type(exc).__name__))
        return out

    def get_timer(self) -> float | None:
        """The next time :meth:`handle_timer` must be called (None: no timer pending)."""
        if self._flow.terminated:
            return None
        times = [t for t in (self._goaway_deadline, self._data.parked_deadline()) if t is not None]
        times.extend(self._subs.lingering.values())
        return min(times) if times else None

    def handle_timer(self, now: float) -> list[MoqtEvent]:
        """Run expired timers; may fail the session (GOAWAY_TIMEOUT, unknown aliases)."""
        if self._flow.terminated:
            return []
        self._flow.now = now
        try:
            self._run_timers(now)
        except MoqtError as exc:
            return [self._fail(exc.error_code, exc.reason)]
        return []

    # ------------------------------------------------------------ session commands

    def setup(self) -> int:
        """Client: open the control stream and send CLIENT_SETUP; returns the stream id."""
        if not self._flow.is_client:
            raise LocalProtocolError("only the client sends CLIENT_SETUP")
        self._flow.machine.apply(SessionInput.SEND_CLIENT_SETUP)
        self._flow.control_stream_id = self._flow.quic.get_next_available_stream_id(
            is_unidirectional=False
        )
        cfg = self._flow.config
        self._flow.send(
            ClientSetup(
                versions=SUPPORTED_VERSIONS if self._flow.version == DRAFT_14 else (),
                parameters=SetupParameters.build(
                    path=cfg.path,
                    authority=cfg.authority,
                    max_request_id=self._flow.granted,
                    max_auth_token_cache_size=cfg.max_auth_token_cache_size or None,
                    implementation=cfg.implementation,
                    auth_tokens=cfg.auth_tokens,
                ),
            )
        )
        return self._flow.control_stream_id

    def goaway(self, new_session_uri: bytes = b"", *, now: float | None = None) -> None:
        """Ask the peer to move to a new session (GOAWAY). Clients must send an empty URI.

        With ``SessionConfig.goaway_timeout`` the session closes with GOAWAY_TIMEOUT that long
        after ``now`` (default: the time of the last event handled).
        """
        if self._flow.is_client and new_session_uri:
            raise LocalProtocolError("a client's GOAWAY carries no new session URI (d14 §9.4)")
        self._flow.machine.apply(SessionInput.SEND_GOAWAY)
        self._flow.send(Goaway(new_session_uri=new_session_uri))
        if self._flow.config.goaway_timeout is not None:
            start = self._flow.now if now is None else now
            self._goaway_deadline = start + self._flow.config.goaway_timeout

    def raise_max_request_id(self, max_request_id: int) -> None:
        """Let the peer use request ids below ``max_request_id`` (MAX_REQUEST_ID)."""
        self._flow.grant(max_request_id)

    def close(self, error_code: int = SessionError.NO_ERROR, reason: str = "") -> list[MoqtEvent]:
        """Close the session (QUIC CONNECTION_CLOSE with ``error_code``).

        Returns the :class:`SessionTerminated` event (empty if already terminated).
        """
        if self._flow.terminated:
            return []
        return [self._fail(error_code, reason)]

    @property
    def terminated(self) -> bool:
        """True once the session has ended (either side)."""
        return self._flow.terminated

    # ------------------------------------------------------------ state

    @property
    def is_client(self) -> bool:
        """True for the client role (even request ids, sends CLIENT_SETUP)."""
        return self._flow.is_client

    @property
    def state(self) -> SessionState:
        """Current session state."""
        return self._flow.machine.state

    @property
    def version(self) -> int:
        """MoQT version in use (from the ALPN; draft-14 until the handshake says otherwise)."""
        return self._flow.version

    def _set_version(self, version: int) -> None:
        if self._flow.machine.state is not SessionState.CONNECTED:
            if version != self._flow.version:
                raise ProtocolViolation("the MoQT version changed after SETUP began")
            return
        self._flow.version = version
        self._control_parser.version = version

    @property
    def peer_max_request_id(self) -> int:
        """The peer's limit on our request ids (0 until SETUP, or if it advertised none)."""
        return self._flow.peer_limit

    @property
    def next_request_id(self) -> int:
        """The request id our next request will use."""
        return self._flow.next_request_id

    @property
    def granted_max_request_id(self) -> int:
        """The MAX_REQUEST_ID we last granted the peer."""
        return self._flow.granted

    @property
    def can_send_request(self) -> bool:
        """True when a new request fits the peer's limit (or the limit is not enforced)."""
        flow = self._flow
        return not flow.limit_enforced() or flow.next_request_id < flow.peer_limit

    # ------------------------------------------------------------ commands, owned by the roles

    # Subscriptions (session_subscribe.py)
    subscribe = _delegate("_subs", Subscriptions.subscribe)
    subscribe_update = _delegate("_subs", Subscriptions.subscribe_update)
    unsubscribe = _delegate("_subs", Subscriptions.unsubscribe)
    publish_ok = _delegate("_subs", Subscriptions.publish_ok)
    publish_error = _delegate("_subs", Subscriptions.publish_error)
    accept_subscribe = _delegate("_subs", Subscriptions.accept_subscribe)
    reject_subscribe = _delegate("_subs", Subscriptions.reject_subscribe)
    publish = _delegate("_subs", Subscriptions.publish)
    publish_done = _delegate("_subs", Subscriptions.publish_done)

    # Requests (session_requests.py)
    fetch = _delegate("_requests", Requests.fetch)
    joining_fetch = _delegate("_requests", Requests.joining_fetch)
    fetch_cancel = _delegate("_requests", Requests.fetch_cancel)
    accept_fetch = _delegate("_requests", Requests.accept_fetch)
    reject_fetch = _delegate("_requests", Requests.reject_fetch)
    track_status = _delegate("_requests", Requests.track_status)
    track_status_ok = _delegate("_requests", Requests.track_status_ok)
    track_status_error = _delegate("_requests", Requests.track_status_error)

    # Namespaces (session_namespaces.py)
    namespace = _delegate("_namespaces", Namespaces.namespace)
    namespace_done = _delegate("_namespaces", Namespaces.namespace_done)
    namespace_subscriptions = _delegate("_namespaces", Namespaces.namespace_subscriptions)
    publish_namespace = _delegate("_namespaces", Namespaces.publish_namespace)
    accept_publish_namespace = _delegate("_namespaces", Namespaces.accept_publish_namespace)
    reject_publish_namespace = _delegate("_namespaces", Namespaces.reject_publish_namespace)
    publish_namespace_done = _delegate("_namespaces", Namespaces.publish_namespace_done)
    publish_namespace_cancel = _delegate("_namespaces", Namespaces.publish_namespace_cancel)
    subscribe_namespace = _delegate("_namespaces", Namespaces.subscribe_namespace)
    accept_subscribe_namespace = _delegate("_namespaces", Namespaces.accept_subscribe_namespace)
    reject_subscribe_namespace = _delegate("_namespaces", Namespaces.reject_subscribe_namespace)
    unsubscribe_namespace = _delegate("_namespaces", Namespaces.unsubscribe_namespace)

    # DataStreams (session_data.py)
    open_subgroup = _delegate("_data", DataStreams.open_subgroup)
    write_object = _delegate("_data", DataStreams.write_object)
    write_objects = _delegate("_data", DataStreams.write_objects)
    end_subgroup = _delegate("_data", DataStreams.end_subgroup)
    reset_subgroup = _delegate("_data", DataStreams.reset_subgroup)
    open_fetch_stream = _delegate("_data", DataStreams.open_fetch_stream)
    write_fetch_object = _delegate("_data", DataStreams.write_fetch_object)
    write_fetch_objects = _delegate("_data", DataStreams.write_fetch_objects)
    end_fetch_stream = _delegate("_data", DataStreams.end_fetch_stream)
    send_datagram_object = _delegate("_data", DataStreams.send_datagram_object)

    # ------------------------------------------------------------ QUIC event routing

    def _on_stream_data(self, event: StreamDataReceived, out: list[MoqtEvent]) -> None:
        sid = event.stream_id
        if sid & 0x2:
            if bool(sid & 0x1) == (not self._flow.is_client):
                return  # our own unidirectional stream: nothing to receive
            if self._flow.machine.allows(SessionInput.RECV_DATA):
                self._flow.machine.apply(SessionInput.RECV_DATA)
            self._data.on_data_stream(sid, event.data, event.end_stream, out)
            return
        if self._flow.control_stream_id is None and not self._flow.is_client and not sid & 0x1:
            self._flow.control_stream_id = sid
        if sid != self._flow.control_stream_id:
            if self._flow.version == DRAFT_16 and self._flow.control_stream_id is not None:
                # d16 §9.25: SUBSCRIBE_NAMESPACE runs on a bidirectional stream of its own.
                self._namespaces.on_request_stream(sid, event.data, event.end_stream, out)
                return
            raise ProtocolViolation(f"unexpected bidirectional stream {sid}")
        for msg in self._control_parser.feed(event.data, fin=event.end_stream):
            self._dispatch(msg, out)
        if event.end_stream:
            raise ProtocolViolation("peer closed the control stream")

    def _on_stream_reset(self, event: StreamReset, out: list[MoqtEvent]) -> None:
        if not event.stream_id & 0x2:
            sid = event.stream_id
            if self._flow.version == DRAFT_16 and sid != self._flow.control_stream_id:
                self._namespaces.on_request_stream(sid, b"", True, out)
                return
            raise ProtocolViolation(f"peer reset bidirectional stream {sid}")
        self._data.on_data_stream_reset(event.stream_id, event.error_code, out)

    def _on_connection_terminated(self, event: ConnectionTerminated, out: list[MoqtEvent]) -> None:
        self._flow.terminated = True
        self._flow.machine.apply(SessionInput.TERMINATED)
        out.append(
            SessionTerminated(error_code=event.error_code, reason=event.reason_phrase, by_peer=True)
        )

    def _fail(self, error_code: int, reason: str) -> SessionTerminated:
        self._flow.terminated = True
        self._flow.machine.apply(SessionInput.SEND_CLOSE)
        self._flow.quic.close(error_code=int(error_code), reason_phrase=reason)
        return SessionTerminated(error_code=int(error_code), reason=reason, by_peer=False)

    def _run_timers(self, now: float) -> None:
        if self._goaway_deadline is not None and now >= self._goaway_deadline:
            raise GoawayTimeout("peer did not close the session after GOAWAY")
        if self._data.parked_by_alias:
            self._data.check_parked(now)
        for rid, deadline in list(self._subs.lingering.items()):
            if now >= deadline:
                rec = self._subs.subs_out.get(rid)
                self._subs.lingering.pop(rid, None)
                if rec is not None:
                    rec.machine.apply(SubscriberSubInput.STREAMS_COMPLETE)
                    self._subs.drop_subscriber(rec)
                    self._flow.abandon(rid)  # a PUBLISH_DONE may still arrive after UNSUBSCRIBE

    def _dispatch(self, msg: Message, out: list[MoqtEvent]) -> None:
        if type(msg) not in self._requests_types and type(msg) not in _SESSION_LEVEL:
            self._flow.machine.apply(SessionInput.RECV_CONTROL)
        self._handlers[type(msg)](msg, out)

    # ------------------------------------------------------------ session-level messages

    def _on_client_setup(self, msg: ClientSetup, out: list[MoqtEvent]) -> None:
        self._flow.machine.apply(SessionInput.RECV_CLIENT_SETUP)
        version: int | None = self._flow.version  # d15 and later: the ALPN chose it
        if version == DRAFT_14:
            version = next((v for v in SUPPORTED_VERSIONS if v in msg.versions), None)
        if version is None:
            offered = ", ".join(f"{v:#x}" for v in msg.versions)
            raise VersionNegotiationFailed(f"no common version in CLIENT_SETUP ({offered})")
        params = msg.parameters
        _check_path(params.path)
        _check_authority(params.authority)
        tokens = self._flow.tokens(params)
        self._set_peer_limit(params.max_request_id)
        self._flow.version = version
        cfg = self._flow.config
        self._flow.send(
            ServerSetup(
                selected_version=version,
                parameters=SetupParameters.build(
                    max_request_id=self._flow.granted,
                    max_auth_token_cache_size=cfg.max_auth_token_cache_size or None,
                    implementation=cfg.implementation,
                    auth_tokens=cfg.auth_tokens,
                ),
            )
        )
        self._flow.machine.apply(SessionInput.SEND_SERVER_SETUP)
        out.append(self._setup_completed(params, tokens))

    def _on_server_setup(self, msg: ServerSetup, out: list[MoqtEvent]) -> None:
        self._flow.machine.apply(SessionInput.RECV_SERVER_SETUP)
        if self._flow.version == DRAFT_14 and msg.selected_version not in SUPPORTED_VERSIONS:
            raise VersionNegotiationFailed(
                f"server selected version {msg.selected_version:#x}, which we did not offer"
            )
        self._flow.version = msg.selected_version
        tokens = self._flow.tokens(msg.parameters)
        self._set_peer_limit(msg.parameters.max_request_id)
        out.append(self._setup_completed(msg.parameters, tokens))

    def _setup_completed(self, params: SetupParameters, tokens: tuple[Any, ...]) -> SetupCompleted:
        return SetupCompleted(
            version=self._flow.version,
            parameters=params,
            peer_max_request_id=self._flow.peer_limit,
            path=params.path,
            authority=params.authority,
            auth_tokens=tokens,
            implementation=params.implementation,
        )

    def _set_peer_limit(self, value: int | None) -> None:
        if value is not None:
            self._flow.peer_limit = value
            self._flow.peer_limit_known = True

    def _on_goaway(self, msg: Goaway, out: list[MoqtEvent]) -> None:
        self._flow.machine.apply(SessionInput.RECV_GOAWAY)
        if not self._flow.is_client and msg.new_session_uri:
            raise ProtocolViolation("a client's GOAWAY must not carry a new session URI")
        out.append(GoawayReceived(new_session_uri=msg.new_session_uri))

    def _on_max_request_id(self, msg: MaxRequestId, out: list[MoqtEvent]) -> None:
        if self._flow.peer_limit_known and msg.max_request_id <= self._flow.peer_limit:
            raise ProtocolViolation(
                f"MAX_REQUEST_ID {msg.max_request_id} does not exceed {self._flow.peer_limit}"
            )
        self._flow.peer_limit = msg.max_request_id
        self._flow.peer_limit_known = True
        out.append(MaxRequestIdRaised(max_request_id=msg.max_request_id))

    def _on_requests_blocked(self, msg: RequestsBlocked, out: list[MoqtEvent]) -> None:
        out.append(RequestsBlockedReceived(max_request_id=msg.max_request_id))
        self._flow.maybe_grant()  # credit freed since our last MAX_REQUEST_ID goes out now

    # ------------------------------------------------------------ draft-16 answers

    def _answers(self, rid: int, what: str) -> tuple[type, type | None] | None:
        """The (error, OK) answer classes of our request ``rid``, asked of the role that owns
        it; None for a request we abandoned. A REQUEST_OK / REQUEST_ERROR names one of *our*
        requests, so any other id is a PROTOCOL_VIOLATION."""
        if self._flow.is_ours(rid):
            if self._subs.take_update_answer(rid):
                return None  # our REQUEST_UPDATE's answer: nothing waits for it
            for role in (self._subs, self._requests, self._namespaces):
                found = role.answers(rid)
                if found is not None:
                    return found
        self._flow.lookup({}, rid, what)  # raises unless we abandoned it
        return None

    def _on_request_error(self, msg: RequestErrorMessage, out: list[MoqtEvent]) -> None:
        found = self._answers(msg.request_id, "REQUEST_ERROR")
        if found is not None:
            self._handlers[found[0]](from_request_error(msg, found[0]), out)

    def _on_request_ok(self, msg: RequestOk, out: list[MoqtEvent]) -> None:
        found = self._answers(msg.request_id, "REQUEST_OK")
        if found is None:
            return
        if found[1] is None:
            raise ProtocolViolation(
                f"REQUEST_OK answers request {msg.request_id}, whose kind has no REQUEST_OK"
            )
        self._handlers[found[1]](from_request_ok(msg, found[1]), out)


def _check_path(path: bytes | None) -> None:
    """PATH must be ``path-abempty [ "?" query ]`` (d14 §9.3.2.1)."""
    if path and (not path.startswith(b"/") or any(c <= 0x20 or c >= 0x7F for c in path)):
        raise MalformedPath(f"malformed PATH {path[:64]!r}")


def _check_authority(authority: bytes | None) -> None:
    """AUTHORITY must be ``host [ ":" port ]`` (d14 §9.3.2.2)."""
    if authority is None:
        return
    if not authority or any(c in b"/?#@ " or c < 0x20 or c >= 0x7F for c in authority):
        raise MalformedAuthority(f"malformed AUTHORITY {authority[:64]!r}")


_HANDLERS: dict[type, str] = {
    ClientSetup: "_on_client_setup",
    ServerSetup: "_on_server_setup",
    Goaway: "_on_goaway",
    MaxRequestId: "_on_max_request_id",
    RequestsBlocked: "_on_requests_blocked",
    RequestErrorMessage: "_on_request_error",
    RequestOk: "_on_request_ok",
}
"""Handler method of every session-level control message (the roles declare their own)."""

_SESSION_LEVEL = frozenset({ClientSetup, ServerSetup, Goaway})
"""Messages whose handlers drive the session table themselves."""

assert set(_HANDLERS).union(
    *(role.HANDLERS for role in (Subscriptions, Requests, Namespaces))
) == set().union(*(set(m.values()) for m in MESSAGE_CLASSES_BY_VERSION.values())), (
    "every control message of every version has exactly one handler"
)
