"""Exhaustive and property tests over the lifecycle transition tables (STYLE rules 6 and 10).

Every ``(state, input)`` pair of every table is checked against ``DRAFT_TABLES``, the draft's
lifecycles written out by hand from its prose (with section references) in a different form
than :mod:`ray_kvmoq.moqt.state` — never against the table itself: a written pair yields its
written next state, any other pair raises :class:`LocalProtocolError` for our own inputs
(``SEND_*``) and :class:`ProtocolViolation` for the peer's. Hypothesis then walks random input sequences and
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
    """Every pair behaves as the draft transcription says (``DRAFT_TABLES``): a written pair
    moves to its written state, any other is refused with the right error class."""
    want = _parse(DRAFT_TABLES[table.name])
    if (s.name, i.name) in want:
        nxt = table.next_state(s, i)
        assert nxt is table.states[want[(s.name, i.name)]]
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


# --------------------------------------------------------------------------------------------
# The draft's lifecycles, written out independently of state.py (issue 12 item 7).
#
# Draft-14 states these lifecycles in prose, not as tables; each block below is that prose turned
# into rows by hand, with the section it comes from. One line per state:
#   STATE: INPUT INPUT -> NEXT; INPUT -> NEXT
# A pair that is not written here must be refused. ``test_tables_match_the_draft`` compares the
# code's tables with these, pair by pair, and names every difference.
# --------------------------------------------------------------------------------------------

_OPERATE = "SEND_CONTROL RECV_CONTROL SEND_DATA RECV_DATA RECV_REQUEST"
_END = "SEND_CLOSE TERMINATED -> CLOSED"
DRAFT_TABLES: dict[str, str] = {
    # §3.3: the client's first control message is CLIENT_SETUP; nothing else flows until the
    # server's SERVER_SETUP. §9.4: after GOAWAY the receiver SHOULD NOT start new requests (we
    # never do; we accept the peer's, it is only a SHOULD) and a second GOAWAY is a violation.
    "session (client)": f"""
        CONNECTED: SEND_CLIENT_SETUP -> SETUP_SENT; {_END}
        SETUP_SENT: RECV_SERVER_SETUP -> READY; {_END}
        READY: {_OPERATE} SEND_REQUEST -> READY; SEND_GOAWAY -> DRAINING_LOCAL; \
RECV_GOAWAY -> DRAINING_REMOTE; {_END}
        DRAINING_LOCAL: {_OPERATE} SEND_REQUEST -> DRAINING_LOCAL; RECV_GOAWAY -> DRAINING; {_END}
        DRAINING_REMOTE: {_OPERATE} -> DRAINING_REMOTE; SEND_GOAWAY -> DRAINING; {_END}
        DRAINING: {_OPERATE} -> DRAINING; {_END}
    """,
    # §3.3: the server answers CLIENT_SETUP with SERVER_SETUP before anything else.
    "session (server)": f"""
        CONNECTED: RECV_CLIENT_SETUP -> AWAITING_SETUP; {_END}
        AWAITING_SETUP: SEND_SERVER_SETUP -> READY; {_END}
        READY: {_OPERATE} SEND_REQUEST -> READY; SEND_GOAWAY -> DRAINING_LOCAL; \
RECV_GOAWAY -> DRAINING_REMOTE; {_END}
        DRAINING_LOCAL: {_OPERATE} SEND_REQUEST -> DRAINING_LOCAL; RECV_GOAWAY -> DRAINING; {_END}
        DRAINING_REMOTE: {_OPERATE} -> DRAINING_REMOTE; SEND_GOAWAY -> DRAINING; {_END}
        DRAINING: {_OPERATE} -> DRAINING; {_END}
    """,
    # §9.7-§9.9: SUBSCRIBE gets exactly one SUBSCRIBE_OK or SUBSCRIBE_ERROR. §9.11: UNSUBSCRIBE
    # may cross either on the wire, and objects already sent. §9.12: PUBLISH_DONE carries the
    # stream count; data streams may still arrive after it. §9.13: PUBLISH with Forward=1 may
    # send objects before PUBLISH_OK. §9.10: SUBSCRIBE_UPDATE only on an established one.
    "subscription (subscriber)": """
        PENDING: RECV_SUBSCRIBE_OK -> ESTABLISHED; RECV_SUBSCRIBE_ERROR -> CLOSED; \
SEND_UNSUBSCRIBE -> UNSUBSCRIBED
        OFFERED: SEND_PUBLISH_OK -> ESTABLISHED; SEND_PUBLISH_ERROR -> CLOSED; \
RECV_OBJECT -> OFFERED; RECV_PUBLISH_DONE -> DONE
        ESTABLISHED: SEND_UPDATE RECV_OBJECT -> ESTABLISHED; SEND_UNSUBSCRIBE -> UNSUBSCRIBED; \
RECV_PUBLISH_DONE -> DONE
        UNSUBSCRIBED: RECV_SUBSCRIBE_OK RECV_OBJECT -> UNSUBSCRIBED; \
RECV_SUBSCRIBE_ERROR RECV_PUBLISH_DONE STREAMS_COMPLETE -> CLOSED
        DONE: RECV_OBJECT -> DONE; STREAMS_COMPLETE -> CLOSED
    """,
    # The same from the publisher: §9.8/§9.9 answer once; §9.10 updates may come before the
    # answer; §9.11 UNSUBSCRIBE ends it; §9.12 PUBLISH_DONE only after answering (or for our own
    # PUBLISH); objects only once accepted, or under our PUBLISH (§9.13).
    "subscription (publisher)": """
        REQUESTED: SEND_SUBSCRIBE_OK -> ESTABLISHED; SEND_SUBSCRIBE_ERROR -> CLOSED; \
RECV_UPDATE -> REQUESTED; RECV_UNSUBSCRIBE -> CLOSED
        OFFERED: RECV_PUBLISH_OK -> ESTABLISHED; \
RECV_PUBLISH_ERROR RECV_UNSUBSCRIBE SEND_PUBLISH_DONE -> CLOSED; RECV_UPDATE SEND_OBJECT -> OFFERED
        ESTABLISHED: RECV_UPDATE SEND_OBJECT -> ESTABLISHED; \
RECV_UNSUBSCRIBE SEND_PUBLISH_DONE -> CLOSED
    """,
    # §9.16.3: the fetch stream (even its FIN) may precede FETCH_OK; one FETCH_OK or FETCH_ERROR;
    # one fetch stream. §9.19: FETCH_CANCEL ends it at any point.
    "fetch (subscriber)": """
        PENDING: RECV_FETCH_OK -> ACCEPTED; RECV_FETCH_ERROR SEND_CANCEL -> CLOSED; \
RECV_STREAM -> PENDING_STREAMING
        PENDING_STREAMING: RECV_FETCH_OK -> STREAMING; RECV_FETCH_ERROR SEND_CANCEL -> CLOSED; \
RECV_STREAM_END -> PENDING_ENDED
        PENDING_ENDED: RECV_FETCH_OK RECV_FETCH_ERROR SEND_CANCEL -> CLOSED
        ACCEPTED: RECV_STREAM -> STREAMING; SEND_CANCEL -> CLOSED
        STREAMING: RECV_STREAM_END SEND_CANCEL -> CLOSED
    """,
    "fetch (publisher)": """
        PENDING: SEND_FETCH_OK -> ACCEPTED; SEND_FETCH_ERROR RECV_CANCEL -> CLOSED; \
SEND_STREAM -> PENDING_STREAMING
        PENDING_STREAMING: SEND_FETCH_OK -> STREAMING; SEND_FETCH_ERROR RECV_CANCEL -> CLOSED; \
SEND_STREAM_END -> PENDING_ENDED
        PENDING_ENDED: SEND_FETCH_OK SEND_FETCH_ERROR RECV_CANCEL -> CLOSED
        ACCEPTED: SEND_STREAM -> STREAMING; RECV_CANCEL -> CLOSED
        STREAMING: SEND_STREAM_END RECV_CANCEL -> CLOSED
    """,
    # §9.23-§9.27 and §9.28-§9.31: one OK or ERROR; the requester may withdraw at any time
    # (PUBLISH_NAMESPACE_DONE / UNSUBSCRIBE_NAMESPACE); the responder's CANCEL names a namespace,
    # so it ends accepted requests only.
    "namespace (requester)": """
        PENDING: RECV_OK -> ACTIVE; RECV_ERROR SEND_DONE -> CLOSED
        ACTIVE: SEND_DONE RECV_CANCEL -> CLOSED
    """,
    "namespace (responder)": """
        PENDING: SEND_OK -> ACTIVE; SEND_ERROR RECV_DONE -> CLOSED
        ACTIVE: RECV_DONE SEND_CANCEL -> CLOSED
    """,
    # §9.20-§9.22: exactly one TRACK_STATUS_OK or TRACK_STATUS_ERROR.
    "track status (requester)": "PENDING: RECV_OK RECV_ERROR -> CLOSED",
    "track status (responder)": "PENDING: SEND_OK SEND_ERROR -> CLOSED",
}


def _parse(text: str) -> dict[tuple[str, str], str]:
    pairs: dict[tuple[str, str], str] = {}
    for line in filter(None, (raw.strip() for raw in text.strip().splitlines())):
        state, rules = line.split(":", 1)
        for rule in rules.split(";"):
            inputs, nxt = rule.split("->")
            for inp in inputs.split():
                assert (state, inp) not in pairs, f"{state} {inp} written twice"
                pairs[(state, inp)] = nxt.strip()
    return pairs


@pytest.mark.parametrize("table", TABLES, ids=[t.name for t in TABLES])
def test_tables_match_the_draft(table: TransitionTable[Any, Any]) -> None:
    want = _parse(DRAFT_TABLES[table.name])
    have = {(s.name, i.name): n.name for (s, i), n in table.transitions.items()}
    missing = sorted(set(want) - set(have))
    extra = sorted(set(have) - set(want))
    wrong = sorted(k for k in set(want) & set(have) if want[k] != have[k])
    assert not (missing or extra or wrong), f"missing {missing}, extra {extra}, wrong {wrong}"
    for state, inp in want:  # every written name is a real state and input
        assert table.states[state] is not None and table.inputs[inp] is not None


def test_every_table_is_written_out() -> None:
    assert set(DRAFT_TABLES) == {t.name for t in TABLES}
