"""Exhaustive and property tests over the lifecycle transition tables (STYLE rules 6 and 10).

Every ``(state, input)`` pair of every table is checked: a listed pair yields its next state, a
missing pair raises :class:`LocalProtocolError` for our own inputs (``SEND_*``) and
:class:`ProtocolViolation` for the peer's. Hypothesis then walks random input sequences and
checks the invariants the session relies on.
"""

from __future__ import annotations

import itertools
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_kvmoq.moqt import state as state_mod
from ray_kvmoq.moqt.codec.errors import LocalProtocolError, ProtocolViolation
from ray_kvmoq.moqt.state import (
    FETCH_SUBSCRIBER,
    NAMESPACE_REQUESTER,
    NAMESPACE_RESPONDER,
    SESSION_CLIENT,
    SESSION_SERVER,
    SUBSCRIPTION_PUBLISHER,
    SUBSCRIPTION_SUBSCRIBER,
    TABLES,
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
    TransitionTable,
    is_local,
)


def _members(enum_type: Any) -> list[Any]:
    return list(enum_type.__members__.values())


ALL_PAIRS = [
    (table, s, i)
    for table in TABLES
    for s, i in itertools.product(_members(table.states), _members(table.inputs))
]


def test_all_is_sorted_and_complete() -> None:
    # isort-style, as ruff's RUF022 keeps it: CONSTANTS, then Classes, then functions.
    def key(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert state_mod.__all__ == sorted(state_mod.__all__, key=key)
    for name in state_mod.__all__:
        assert hasattr(state_mod, name)


@pytest.mark.parametrize(
    ("table", "s", "i"),
    ALL_PAIRS,
    ids=[f"{t.name}:{s.name}:{i.name}" for t, s, i in ALL_PAIRS],
)
def test_every_pair(table: TransitionTable[Any, Any], s: Any, i: Any) -> None:
    if (s, i) in table.transitions:
        nxt = table.next_state(s, i)
        assert nxt is table.transitions[(s, i)]
        assert isinstance(nxt, table.states)
        assert table.allows(s, i)
    else:
        assert not table.allows(s, i)
        expected = LocalProtocolError if is_local(i) else ProtocolViolation
        with pytest.raises(expected) as info:
            table.next_state(s, i)
        # Never the other class: a peer's misstep must not read as our bug and vice versa.
        other = ProtocolViolation if expected is LocalProtocolError else LocalProtocolError
        assert not isinstance(info.value, other)
        assert i.name in info.value.reason and s.name in info.value.reason


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_closed_is_terminal_and_reachable(table: TransitionTable[Any, Any]) -> None:
    closed = table.states["CLOSED"]
    assert not any(s is closed for s, _ in table.transitions)
    # Every state can reach CLOSED (no lifecycle can get stuck holding state forever).
    reach = {closed}
    changed = True
    while changed:
        changed = False
        for (s, _), nxt in table.transitions.items():
            if nxt in reach and s not in reach:
                reach.add(s)
                changed = True
    used = {s for s, _ in table.transitions} | set(table.transitions.values())
    assert not used - reach


def test_tables_are_immutable() -> None:
    with pytest.raises(TypeError):
        SESSION_CLIENT.transitions[(SessionState.CLOSED, SessionInput.SEND_CLOSE)] = (  # type: ignore[index]
            SessionState.READY
        )


def test_is_local() -> None:
    assert is_local(SessionInput.SEND_GOAWAY)
    assert not is_local(SessionInput.RECV_GOAWAY)
    assert not is_local(SessionInput.TERMINATED)


def test_client_happy_path() -> None:
    m = StateMachine(SESSION_CLIENT, SessionState.CONNECTED)
    assert m.apply(SessionInput.SEND_CLIENT_SETUP) is SessionState.SETUP_SENT
    with pytest.raises(ProtocolViolation):
        m.apply(SessionInput.RECV_CONTROL)  # nothing but SERVER_SETUP before READY
    assert m.state is SessionState.SETUP_SENT
    assert m.apply(SessionInput.RECV_SERVER_SETUP) is SessionState.READY
    assert m.apply(SessionInput.RECV_GOAWAY) is SessionState.DRAINING_REMOTE
    with pytest.raises(ProtocolViolation):
        m.apply(SessionInput.RECV_GOAWAY)  # second GOAWAY (d14 §9.4)
    with pytest.raises(LocalProtocolError):
        m.apply(SessionInput.SEND_REQUEST)  # asked to go away: no new requests
    assert m.apply(SessionInput.SEND_CLOSE) is SessionState.CLOSED


def test_server_rejects_second_client_setup() -> None:
    m = StateMachine(SESSION_SERVER, SessionState.CONNECTED)
    m.apply(SessionInput.RECV_CLIENT_SETUP)
    m.apply(SessionInput.SEND_SERVER_SETUP)
    with pytest.raises(ProtocolViolation):
        m.apply(SessionInput.RECV_CLIENT_SETUP)
    with pytest.raises(ProtocolViolation):
        SESSION_SERVER.next_state(SessionState.CONNECTED, SessionInput.RECV_SERVER_SETUP)


def test_subscriber_duplicate_response_is_violation() -> None:
    m = StateMachine(SUBSCRIPTION_SUBSCRIBER, SubscriberSubState.PENDING)
    m.apply(SubscriberSubInput.RECV_SUBSCRIBE_OK)
    with pytest.raises(ProtocolViolation):
        m.apply(SubscriberSubInput.RECV_SUBSCRIBE_OK)
    with pytest.raises(ProtocolViolation):
        m.apply(SubscriberSubInput.RECV_SUBSCRIBE_ERROR)


def test_unsubscribe_tolerates_crossing_response() -> None:
    m = StateMachine(SUBSCRIPTION_SUBSCRIBER, SubscriberSubState.PENDING)
    m.apply(SubscriberSubInput.SEND_UNSUBSCRIBE)
    assert m.apply(SubscriberSubInput.RECV_SUBSCRIBE_OK) is SubscriberSubState.UNSUBSCRIBED
    assert m.apply(SubscriberSubInput.RECV_OBJECT) is SubscriberSubState.UNSUBSCRIBED
    assert m.apply(SubscriberSubInput.RECV_PUBLISH_DONE) is SubscriberSubState.CLOSED


def test_publisher_cannot_send_before_accepting_subscribe() -> None:
    with pytest.raises(LocalProtocolError):
        SUBSCRIPTION_PUBLISHER.next_state(
            PublisherSubState.REQUESTED, PublisherSubInput.SEND_OBJECT
        )


def test_fetch_second_stream_is_violation() -> None:
    m = StateMachine(FETCH_SUBSCRIBER, FetchState.PENDING)
    m.apply(FetchInput.RECV_STREAM)
    with pytest.raises(ProtocolViolation):
        m.apply(FetchInput.RECV_STREAM)
    assert m.apply(FetchInput.RECV_FETCH_OK) is FetchState.STREAMING


def test_namespace_tables_are_mirror_images() -> None:
    swap = {"SEND": "RECV", "RECV": "SEND"}
    mirrored = {
        (s, NamespaceInput[swap[i.name[:4]] + i.name[4:]]): nxt
        for (s, i), nxt in NAMESPACE_REQUESTER.transitions.items()
    }
    assert mirrored == dict(NAMESPACE_RESPONDER.transitions)
    assert NAMESPACE_REQUESTER.next_state(NamespaceState.PENDING, NamespaceInput.RECV_OK) is (
        NamespaceState.ACTIVE
    )


@st.composite
def _walks(draw: st.DrawFn) -> tuple[TransitionTable[Any, Any], list[Any]]:
    table = draw(st.sampled_from(TABLES))
    inputs = draw(st.lists(st.sampled_from(_members(table.inputs)), max_size=12))
    return table, inputs


@settings(max_examples=300, deadline=None)
@given(_walks())
def test_random_walks(walk: tuple[TransitionTable[Any, Any], list[Any]]) -> None:
    """A failed input leaves the state unchanged; a walk never leaves CLOSED."""
    table, inputs = walk
    initial = _members(table.states)[0]
    m = StateMachine(table, initial)
    seen_closed = False
    for inp in inputs:
        before = m.state
        allowed = m.allows(inp)
        try:
            m.apply(inp)
        except (LocalProtocolError, ProtocolViolation) as exc:
            assert not allowed
            assert isinstance(exc, LocalProtocolError) == is_local(inp)
            assert m.state is before
        else:
            assert allowed
        if m.state.name == "CLOSED":
            seen_closed = True
        if seen_closed:
            assert m.state.name == "CLOSED"
