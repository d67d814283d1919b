"""Transition tables for every MoQT draft-14 lifecycle the session tracks.

Design (STYLE rule 6, after h2's ``H2ConnectionStateMachine`` and h11's ``_state.py``): each
lifecycle is an :class:`enum.Enum` of states, an :class:`enum.Enum` of inputs and a
:class:`TransitionTable` mapping ``(state, input) -> next state``. The session never branches on
a state by hand; it feeds the table an input and acts on the result.

Invariants:

* Any ``(state, input)`` pair missing from a table is an error. Inputs whose name starts with
  ``SEND_`` are things *we* do (a missing pair raises :class:`~ray_kvmoq.moqt.codec.errors.
  LocalProtocolError`: the application misused the API); every other input is something the
  *peer* did (a missing pair raises :class:`~ray_kvmoq.moqt.codec.errors.ProtocolViolation`, which the
  session turns into a CONNECTION_CLOSE with PROTOCOL_VIOLATION).
* ``CLOSED`` is terminal in every table: no pair starts from it.
* Tables are plain data (``MappingProxyType``) and can be tested exhaustively over
  ``states × inputs``.

Lifecycles (d14 section numbers):

* session (§3, §9.3, §9.4): ``CONNECTED → SETUP_SENT → READY`` (client) or
  ``CONNECTED → AWAITING_SETUP → READY`` (server: CLIENT_SETUP received, SERVER_SETUP not yet
  sent), then GOAWAY drains: ``DRAINING_LOCAL`` (we sent it), ``DRAINING_REMOTE`` (the peer did),
  ``DRAINING`` (both). A second GOAWAY from the peer is a violation (§9.4).
* subscription, subscriber side (§9.7-§9.14): created by our SUBSCRIBE (``PENDING``) or the
  peer's PUBLISH (``OFFERED``).
* subscription, publisher side: created by the peer's SUBSCRIBE (``REQUESTED``) or our PUBLISH
  (``OFFERED``).
* fetch, both sides (§9.16-§9.19, §10.4.4): FETCH_OK/ERROR and the fetch stream may come in
  either order; FETCH_CANCEL ends the subscriber's state at once (the session then drops a
  crossing response quietly).
* namespace requests (PUBLISH_NAMESPACE §9.23-§9.27, SUBSCRIBE_NAMESPACE §9.28-§9.31), both sides.
* TRACK_STATUS (§9.20-§9.22), both sides.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Generic, TypeVar

from .codec.errors import LocalProtocolError, ProtocolViolation

__all__ = [
    "FETCH_PUBLISHER",
    "FETCH_SUBSCRIBER",
    "NAMESPACE_REQUESTER",
    "NAMESPACE_RESPONDER",
    "SESSION_CLIENT",
    "SESSION_SERVER",
    "SUBSCRIPTION_PUBLISHER",
    "SUBSCRIPTION_SUBSCRIBER",
    "TABLES",
    "TRACK_STATUS_REQUESTER",
    "TRACK_STATUS_RESPONDER",
    "FetchInput",
    "FetchState",
    "NamespaceInput",
    "NamespaceState",
    "PublisherSubInput",
    "PublisherSubState",
    "SessionInput",
    "SessionState",
    "StateMachine",
    "SubscriberSubInput",
    "SubscriberSubState",
    "TrackStatusInput",
    "TrackStatusState",
    "TransitionTable",
    "is_local",
]

S = TypeVar("S", bound=enum.Enum)
I = TypeVar("I", bound=enum.Enum)  # noqa: E741


def is_local(inp: enum.Enum) -> bool:
    """True when ``inp`` is something this endpoint does (its name starts with ``SEND_``)."""
    return inp.name.startswith("SEND_")


@dataclass(frozen=True)
class TransitionTable(Generic[S, I]):
    """An immutable ``(state, input) -> next state`` map with a name for error messages."""

    name: str
    """Lifecycle name used in error messages, e.g. ``"subscription (subscriber)"``."""
    states: type[S]
    """The state enum."""
    inputs: type[I]
    """The input enum."""
    transitions: Mapping[tuple[S, I], S]
    """Every allowed pair; anything else is an error."""

    def next_state(self, state: S, inp: I) -> S:
        """The state after ``inp`` in ``state``; raises if the pair is not in the table."""
        try:
            return self.transitions[(state, inp)]
        except KeyError:
            msg = f"{self.name}: {inp.name} not allowed in state {state.name}"
            if is_local(inp):
                raise LocalProtocolError(msg) from None
            raise ProtocolViolation(msg) from None

    def allows(self, state: S, inp: I) -> bool:
        """True when ``inp`` is allowed in ``state``."""
        return (state, inp) in self.transitions


def _table(
    name: str, states: type[S], inputs: type[I], rows: dict[S, dict[I, S]]
) -> TransitionTable[S, I]:
    flat = {(s, i): nxt for s, row in rows.items() for i, nxt in row.items()}
    return TransitionTable(name, states, inputs, MappingProxyType(flat))


class StateMachine(Generic[S, I]):
    """A current state driven through a :class:`TransitionTable`."""

    __slots__ = ("state", "table")

    def __init__(self, table: TransitionTable[S, I], initial: S) -> None:
        self.table = table
        self.state = initial

    def apply(self, inp: I) -> S:
        """Move to the next state for ``inp`` (raising on a missing pair) and return it."""
        self.state = self.table.next_state(self.state, inp)
        return self.state

    def allows(self, inp: I) -> bool:
        """True when ``inp`` is allowed now."""
        return self.table.allows(self.state, inp)


# --------------------------------------------------------------------------------------------
# Session
# --------------------------------------------------------------------------------------------


class SessionState(enum.Enum):
    """Session lifecycle states."""

    CONNECTED = enum.auto()
    SETUP_SENT = enum.auto()
    AWAITING_SETUP = enum.auto()
    READY = enum.auto()
    DRAINING_LOCAL = enum.auto()
    DRAINING_REMOTE = enum.auto()
    DRAINING = enum.auto()
    CLOSED = enum.auto()


class SessionInput(enum.Enum):
    """Session lifecycle inputs."""

    SEND_CLIENT_SETUP = enum.auto()
    RECV_CLIENT_SETUP = enum.auto()
    SEND_SERVER_SETUP = enum.auto()
    RECV_SERVER_SETUP = enum.auto()
    SEND_REQUEST = enum.auto()
    """We start a new request (consumes a request id)."""
    RECV_REQUEST = enum.auto()
    """The peer starts a new request."""
    SEND_CONTROL = enum.auto()
    """We send any other control message (responses, cancellations, flow control)."""
    RECV_CONTROL = enum.auto()
    """The peer sends any other control message."""
    SEND_DATA = enum.auto()
    """We open a data stream or send a datagram."""
    RECV_DATA = enum.auto()
    """A data stream or datagram arrives."""
    SEND_GOAWAY = enum.auto()
    RECV_GOAWAY = enum.auto()
    SEND_CLOSE = enum.auto()
    """We close the session."""
    TERMINATED = enum.auto()
    """The QUIC connection ended (either side)."""


_SS, _SI = SessionState, SessionInput
_OPERATING = (_SI.SEND_CONTROL, _SI.RECV_CONTROL, _SI.SEND_DATA, _SI.RECV_DATA, _SI.RECV_REQUEST)
_CLOSE = {_SI.SEND_CLOSE: _SS.CLOSED, _SI.TERMINATED: _SS.CLOSED}


def _operating(state: SessionState, **extra: SessionState) -> dict[SessionInput, SessionState]:
    row = dict.fromkeys(_OPERATING, state)
    row.update({_SI[k]: v for k, v in extra.items()})
    row.update(_CLOSE)
    return row


# After GOAWAY the peer SHOULD NOT start new requests (d14 §9.4); we still accept them (and the
# application may refuse them), but we never start one ourselves once the peer asked us to go.
_SESSION_COMMON: dict[SessionState, dict[SessionInput, SessionState]] = {
    _SS.READY: _operating(
        _SS.READY,
        SEND_REQUEST=_SS.READY,
        SEND_GOAWAY=_SS.DRAINING_LOCAL,
        RECV_GOAWAY=_SS.DRAINING_REMOTE,
    ),
    _SS.DRAINING_LOCAL: _operating(
        _SS.DRAINING_LOCAL, SEND_REQUEST=_SS.DRAINING_LOCAL, RECV_GOAWAY=_SS.DRAINING
    ),
    _SS.DRAINING_REMOTE: _operating(_SS.DRAINING_REMOTE, SEND_GOAWAY=_SS.DRAINING),
    _SS.DRAINING: _operating(_SS.DRAINING),
    _SS.CLOSED: {},
}

SESSION_CLIENT: TransitionTable[SessionState, SessionInput] = _table(
    "session (client)",
    SessionState,
    SessionInput,
    {
        _SS.CONNECTED: {_SI.SEND_CLIENT_SETUP: _SS.SETUP_SENT, **_CLOSE},
        _SS.SETUP_SENT: {_SI.RECV_SERVER_SETUP: _SS.READY, **_CLOSE},
        **_SESSION_COMMON,
    },
)
"""Client session: CLIENT_SETUP out, SERVER_SETUP in, then READY."""

SESSION_SERVER: TransitionTable[SessionState, SessionInput] = _table(
    "session (server)",
    SessionState,
    SessionInput,
    {
        _SS.CONNECTED: {_SI.RECV_CLIENT_SETUP: _SS.AWAITING_SETUP, **_CLOSE},
        _SS.AWAITING_SETUP: {_SI.SEND_SERVER_SETUP: _SS.READY, **_CLOSE},
        **_SESSION_COMMON,
    },
)
"""Server session: CLIENT_SETUP in, SERVER_SETUP out, then READY."""


# --------------------------------------------------------------------------------------------
# Subscriptions
# --------------------------------------------------------------------------------------------


class SubscriberSubState(enum.Enum):
    """A subscription seen from the subscriber (the endpoint receiving objects)."""

    PENDING = enum.auto()
    """We sent SUBSCRIBE; no SUBSCRIBE_OK/ERROR yet."""
    OFFERED = enum.auto()
    """The peer sent PUBLISH; we have not answered PUBLISH_OK/ERROR yet."""
    ESTABLISHED = enum.auto()
    UNSUBSCRIBED = enum.auto()
    """We sent UNSUBSCRIBE; waiting for PUBLISH_DONE (or a crossing response)."""
    DONE = enum.auto()
    """PUBLISH_DONE received; in-flight data streams may still arrive."""
    CLOSED = enum.auto()


class SubscriberSubInput(enum.Enum):
    """Inputs of the subscriber-side subscription lifecycle."""

    RECV_SUBSCRIBE_OK = enum.auto()
    RECV_SUBSCRIBE_ERROR = enum.auto()
    SEND_PUBLISH_OK = enum.auto()
    SEND_PUBLISH_ERROR = enum.auto()
    SEND_UPDATE = enum.auto()
    SEND_UNSUBSCRIBE = enum.auto()
    RECV_PUBLISH_DONE = enum.auto()
    RECV_OBJECT = enum.auto()
    STREAMS_COMPLETE = enum.auto()
    """Every data stream counted by PUBLISH_DONE has been seen, or the linger timer after
    PUBLISH_DONE / UNSUBSCRIBE ran out (a publisher may never answer an UNSUBSCRIBE)."""


_B, _BI = SubscriberSubState, SubscriberSubInput
SUBSCRIPTION_SUBSCRIBER: TransitionTable[SubscriberSubState, SubscriberSubInput] = _table(
    "subscription (subscriber)",
    SubscriberSubState,
    SubscriberSubInput,
    {
        _B.PENDING: {
            _BI.RECV_SUBSCRIBE_OK: _B.ESTABLISHED,
            _BI.RECV_SUBSCRIBE_ERROR: _B.CLOSED,
            _BI.SEND_UNSUBSCRIBE: _B.UNSUBSCRIBED,
        },
        # PUBLISH with Forward=1 lets the publisher send before our PUBLISH_OK (d14 §9.13).
        _B.OFFERED: {
            _BI.SEND_PUBLISH_OK: _B.ESTABLISHED,
            _BI.SEND_PUBLISH_ERROR: _B.CLOSED,
            _BI.RECV_OBJECT: _B.OFFERED,
            _BI.RECV_PUBLISH_DONE: _B.DONE,
        },
        _B.ESTABLISHED: {
            _BI.SEND_UPDATE: _B.ESTABLISHED,
            _BI.SEND_UNSUBSCRIBE: _B.UNSUBSCRIBED,
            _BI.RECV_OBJECT: _B.ESTABLISHED,
            _BI.RECV_PUBLISH_DONE: _B.DONE,
        },
        # Responses and data may cross our UNSUBSCRIBE on the wire.
        _B.UNSUBSCRIBED: {
            _BI.RECV_SUBSCRIBE_OK: _B.UNSUBSCRIBED,
            _BI.RECV_SUBSCRIBE_ERROR: _B.CLOSED,
            _BI.RECV_OBJECT: _B.UNSUBSCRIBED,
            _BI.RECV_PUBLISH_DONE: _B.CLOSED,
            _BI.STREAMS_COMPLETE: _B.CLOSED,
        },
        _B.DONE: {_BI.RECV_OBJECT: _B.DONE, _BI.STREAMS_COMPLETE: _B.CLOSED},
        _B.CLOSED: {},
    },
)
"""Subscriber side: SUBSCRIBE → OK/ERROR, or PUBLISH → PUBLISH_OK/ERROR, → PUBLISH_DONE."""


class PublisherSubState(enum.Enum):
    """A subscription seen from the publisher (the endpoint sending objects)."""

    REQUESTED = enum.auto()
    """The peer sent SUBSCRIBE; the application has not answered yet."""
    OFFERED = enum.auto()
    """We sent PUBLISH; no PUBLISH_OK/ERROR yet."""
    ESTABLISHED = enum.auto()
    CLOSED = enum.auto()


class PublisherSubInput(enum.Enum):
    """Inputs of the publisher-side subscription lifecycle."""

    SEND_SUBSCRIBE_OK = enum.auto()
    SEND_SUBSCRIBE_ERROR = enum.auto()
    RECV_PUBLISH_OK = enum.auto()
    RECV_PUBLISH_ERROR = enum.auto()
    RECV_UPDATE = enum.auto()
    RECV_UNSUBSCRIBE = enum.auto()
    SEND_PUBLISH_DONE = enum.auto()
    SEND_OBJECT = enum.auto()


_P, _PI = PublisherSubState, PublisherSubInput
SUBSCRIPTION_PUBLISHER: TransitionTable[PublisherSubState, PublisherSubInput] = _table(
    "subscription (publisher)",
    PublisherSubState,
    PublisherSubInput,
    {
        _P.REQUESTED: {
            _PI.SEND_SUBSCRIBE_OK: _P.ESTABLISHED,
            _PI.SEND_SUBSCRIBE_ERROR: _P.CLOSED,
            _PI.RECV_UPDATE: _P.REQUESTED,
            _PI.RECV_UNSUBSCRIBE: _P.CLOSED,
        },
        _P.OFFERED: {
            _PI.RECV_PUBLISH_OK: _P.ESTABLISHED,
            _PI.RECV_PUBLISH_ERROR: _P.CLOSED,
            _PI.RECV_UPDATE: _P.OFFERED,
            _PI.RECV_UNSUBSCRIBE: _P.CLOSED,
            _PI.SEND_PUBLISH_DONE: _P.CLOSED,
            _PI.SEND_OBJECT: _P.OFFERED,
        },
        _P.ESTABLISHED: {
            _PI.RECV_UPDATE: _P.ESTABLISHED,
            _PI.RECV_UNSUBSCRIBE: _P.CLOSED,
            _PI.SEND_PUBLISH_DONE: _P.CLOSED,
            _PI.SEND_OBJECT: _P.ESTABLISHED,
        },
        _P.CLOSED: {},
    },
)
"""Publisher side: SUBSCRIBE → OK/ERROR, or PUBLISH → PUBLISH_OK/ERROR, → PUBLISH_DONE."""


# --------------------------------------------------------------------------------------------
# Fetches
# --------------------------------------------------------------------------------------------


class FetchState(enum.Enum):
    """A FETCH on either side."""

    PENDING = enum.auto()
    """Requested; no FETCH_OK/ERROR yet and no fetch stream."""
    PENDING_STREAMING = enum.auto()
    """Requested; the fetch stream is open but FETCH_OK/ERROR has not been exchanged."""
    PENDING_ENDED = enum.auto()
    """The fetch stream already ended, FETCH_OK/ERROR has not been exchanged."""
    ACCEPTED = enum.auto()
    """FETCH_OK exchanged; no fetch stream yet."""
    STREAMING = enum.auto()
    """FETCH_OK exchanged and the fetch stream is open."""
    CLOSED = enum.auto()


class FetchInput(enum.Enum):
    """Inputs of the fetch lifecycle; which ones are ``SEND_`` depends on the side."""

    SEND_FETCH_OK = enum.auto()
    SEND_FETCH_ERROR = enum.auto()
    RECV_FETCH_OK = enum.auto()
    RECV_FETCH_ERROR = enum.auto()
    SEND_STREAM = enum.auto()
    """Publisher opens the fetch stream."""
    RECV_STREAM = enum.auto()
    """The fetch stream's FETCH_HEADER arrives."""
    SEND_STREAM_END = enum.auto()
    """Publisher ends (FIN) or resets the fetch stream."""
    RECV_STREAM_END = enum.auto()
    """The fetch stream ends (FIN) or is reset."""
    SEND_CANCEL = enum.auto()
    RECV_CANCEL = enum.auto()


_F, _FI = FetchState, FetchInput
FETCH_SUBSCRIBER: TransitionTable[FetchState, FetchInput] = _table(
    "fetch (subscriber)",
    FetchState,
    FetchInput,
    {
        # Objects (and even the FIN) MAY precede FETCH_OK (d14 §9.16.3).
        # FETCH_CANCEL ends our state at once; the session remembers the id so that a
        # response or stream crossing the cancel is dropped quietly.
        _F.PENDING: {
            _FI.RECV_FETCH_OK: _F.ACCEPTED,
            _FI.RECV_FETCH_ERROR: _F.CLOSED,
            _FI.RECV_STREAM: _F.PENDING_STREAMING,
            _FI.SEND_CANCEL: _F.CLOSED,
        },
        _F.PENDING_STREAMING: {
            _FI.RECV_FETCH_OK: _F.STREAMING,
            _FI.RECV_FETCH_ERROR: _F.CLOSED,
            _FI.RECV_STREAM_END: _F.PENDING_ENDED,
            _FI.SEND_CANCEL: _F.CLOSED,
        },
        _F.PENDING_ENDED: {
            _FI.RECV_FETCH_OK: _F.CLOSED,
            _FI.RECV_FETCH_ERROR: _F.CLOSED,
            _FI.SEND_CANCEL: _F.CLOSED,
        },
        _F.ACCEPTED: {_FI.RECV_STREAM: _F.STREAMING, _FI.SEND_CANCEL: _F.CLOSED},
        _F.STREAMING: {_FI.RECV_STREAM_END: _F.CLOSED, _FI.SEND_CANCEL: _F.CLOSED},
        _F.CLOSED: {},
    },
)
"""Fetch, requesting side. A second fetch stream or a second response is a violation."""

FETCH_PUBLISHER: TransitionTable[FetchState, FetchInput] = _table(
    "fetch (publisher)",
    FetchState,
    FetchInput,
    {
        _F.PENDING: {
            _FI.SEND_FETCH_OK: _F.ACCEPTED,
            _FI.SEND_FETCH_ERROR: _F.CLOSED,
            _FI.SEND_STREAM: _F.PENDING_STREAMING,
            _FI.RECV_CANCEL: _F.CLOSED,
        },
        _F.PENDING_STREAMING: {
            _FI.SEND_FETCH_OK: _F.STREAMING,
            _FI.SEND_FETCH_ERROR: _F.CLOSED,
            _FI.SEND_STREAM_END: _F.PENDING_ENDED,
            _FI.RECV_CANCEL: _F.CLOSED,
        },
        _F.PENDING_ENDED: {
            _FI.SEND_FETCH_OK: _F.CLOSED,
            _FI.SEND_FETCH_ERROR: _F.CLOSED,
            _FI.RECV_CANCEL: _F.CLOSED,
        },
        _F.ACCEPTED: {_FI.SEND_STREAM: _F.STREAMING, _FI.RECV_CANCEL: _F.CLOSED},
        _F.STREAMING: {_FI.SEND_STREAM_END: _F.CLOSED, _FI.RECV_CANCEL: _F.CLOSED},
        _F.CLOSED: {},
    },
)
"""Fetch, serving side: FETCH_OK/ERROR and at most one fetch stream."""


# --------------------------------------------------------------------------------------------
# Namespace requests (PUBLISH_NAMESPACE and SUBSCRIBE_NAMESPACE)
# --------------------------------------------------------------------------------------------


class NamespaceState(enum.Enum):
    """A PUBLISH_NAMESPACE or SUBSCRIBE_NAMESPACE request on either side."""

    PENDING = enum.auto()
    ACTIVE = enum.auto()
    CLOSED = enum.auto()


class NamespaceInput(enum.Enum):
    """Inputs of the namespace lifecycle.

    ``DONE`` is the requester's withdrawal (PUBLISH_NAMESPACE_DONE or UNSUBSCRIBE_NAMESPACE);
    ``CANCEL`` the responder's (PUBLISH_NAMESPACE_CANCEL; SUBSCRIBE_NAMESPACE has none).
    """

    SEND_OK = enum.auto()
    SEND_ERROR = enum.auto()
    RECV_OK = enum.auto()
    RECV_ERROR = enum.auto()
    SEND_DONE = enum.auto()
    RECV_DONE = enum.auto()
    SEND_CANCEL = enum.auto()
    RECV_CANCEL = enum.auto()


_N, _NI = NamespaceState, NamespaceInput
NAMESPACE_REQUESTER: TransitionTable[NamespaceState, NamespaceInput] = _table(
    "namespace (requester)",
    NamespaceState,
    NamespaceInput,
    {
        # A CANCEL names a namespace, not a request, so it only ends accepted ones: an
        # unanswered request still gets its OK or ERROR (the responder sends ERROR instead).
        _N.PENDING: {_NI.RECV_OK: _N.ACTIVE, _NI.RECV_ERROR: _N.CLOSED, _NI.SEND_DONE: _N.CLOSED},
        _N.ACTIVE: {_NI.SEND_DONE: _N.CLOSED, _NI.RECV_CANCEL: _N.CLOSED},
        _N.CLOSED: {},
    },
)
"""Our PUBLISH_NAMESPACE / SUBSCRIBE_NAMESPACE."""

NAMESPACE_RESPONDER: TransitionTable[NamespaceState, NamespaceInput] = _table(
    "namespace (responder)",
    NamespaceState,
    NamespaceInput,
    {
        _N.PENDING: {_NI.SEND_OK: _N.ACTIVE, _NI.SEND_ERROR: _N.CLOSED, _NI.RECV_DONE: _N.CLOSED},
        _N.ACTIVE: {_NI.RECV_DONE: _N.CLOSED, _NI.SEND_CANCEL: _N.CLOSED},
        _N.CLOSED: {},
    },
)
"""The peer's PUBLISH_NAMESPACE / SUBSCRIBE_NAMESPACE."""


# --------------------------------------------------------------------------------------------
# TRACK_STATUS
# --------------------------------------------------------------------------------------------


class TrackStatusState(enum.Enum):
    """A TRACK_STATUS request on either side."""

    PENDING = enum.auto()
    CLOSED = enum.auto()


class TrackStatusInput(enum.Enum):
    """Inputs of the TRACK_STATUS lifecycle."""

    SEND_OK = enum.auto()
    SEND_ERROR = enum.auto()
    RECV_OK = enum.auto()
    RECV_ERROR = enum.auto()


_T, _TI = TrackStatusState, TrackStatusInput
TRACK_STATUS_REQUESTER: TransitionTable[TrackStatusState, TrackStatusInput] = _table(
    "track status (requester)",
    TrackStatusState,
    TrackStatusInput,
    {_T.PENDING: {_TI.RECV_OK: _T.CLOSED, _TI.RECV_ERROR: _T.CLOSED}, _T.CLOSED: {}},
)
"""Our TRACK_STATUS: exactly one TRACK_STATUS_OK or TRACK_STATUS_ERROR."""

TRACK_STATUS_RESPONDER: TransitionTable[TrackStatusState, TrackStatusInput] = _table(
    "track status (responder)",
    TrackStatusState,
    TrackStatusInput,
    {_T.PENDING: {_TI.SEND_OK: _T.CLOSED, _TI.SEND_ERROR: _T.CLOSED}, _T.CLOSED: {}},
)
"""The peer's TRACK_STATUS: we answer exactly once."""

TABLES: tuple[TransitionTable[Any, Any], ...] = (
    SESSION_CLIENT,
    SESSION_SERVER,
    SUBSCRIPTION_SUBSCRIBER,
    SUBSCRIPTION_PUBLISHER,
    FETCH_SUBSCRIBER,
    FETCH_PUBLISHER,
    NAMESPACE_REQUESTER,
    NAMESPACE_RESPONDER,
    TRACK_STATUS_REQUESTER,
    TRACK_STATUS_RESPONDER,
)
"""Every table, for exhaustive tests."""
