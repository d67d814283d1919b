"""MoqtSession end to end over two real aioquic connections in memory (tests/moqt/harness.py).

Covers setup, SUBSCRIBE with every filter, objects and PUBLISH_DONE, PUBLISH, standalone and
joining FETCH, namespaces, TRACK_STATUS, GOAWAY, request-id flow control, auth tokens, close,
and the peer quirks of moqt-draft14.md §3.7.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_kvmoq.moqt.codec import (
    AuthToken,
    ClientSetup,
    FetchError,
    Location,
    MessageParameters,
    ServerSetup,
    SetupParameters,
)
from ray_kvmoq.moqt.codec.control import encode_control
from ray_kvmoq.moqt.codec.errors import LocalProtocolError
from ray_kvmoq.moqt.codec.types import (
    DRAFT_14,
    FetchErrorCode,
    FetchType,
    FilterType,
    GroupOrder,
    ObjectStatus,
    PublishDoneCode,
    SessionError,
    StreamResetCode,
    SubscribeErrorCode,
    TokenAliasType,
)
from ray_kvmoq.moqt.events import (
    DataStreamReset,
    FetchAccepted,
    FetchCancelled,
    FetchRejected,
    FetchRequested,
    FetchStreamEnded,
    GoawayReceived,
    MaxRequestIdRaised,
    ObjectReceived,
    PublishAccepted,
    PublishDoneReceived,
    PublishNamespaceAccepted,
    PublishNamespaceCancelled,
    PublishNamespaceDone,
    PublishNamespaceRejected,
    PublishNamespaceRequested,
    PublishRejected,
    PublishRequested,
    RequestsBlockedReceived,
    SessionTerminated,
    SetupCompleted,
    SubgroupStreamEnded,
    SubscribeAccepted,
    SubscribeNamespaceAccepted,
    SubscribeNamespaceRejected,
    SubscribeNamespaceRequested,
    SubscribeRejected,
    SubscribeRequested,
    SubscribeUpdated,
    TrackStatusReceived,
    TrackStatusRejected,
    TrackStatusRequested,
    Unsubscribed,
    UnsubscribedNamespace,
)
from ray_kvmoq.moqt.session import MoqtSession, SessionConfig
from ray_kvmoq.moqt.state import SessionState

from .harness import Harness

NS = (b"kv", b"m1")
TRACK = b"layer0"


def token(value: bytes) -> AuthToken:
    return AuthToken(alias_type=TokenAliasType.USE_VALUE, token_type=0, value=value)


def subscribed(h: Harness, **kwargs: object) -> tuple[int, int]:
    """Client subscribes to NS/TRACK, server accepts; returns (request id, alias)."""
    rid = h.client.session.subscribe(NS, TRACK, **kwargs)  # type: ignore[arg-type]
    h.pump()
    alias = h.server.session.accept_subscribe(rid, largest=Location(3, 4))
    h.pump()
    return rid, alias


def objects(h: Harness) -> list[ObjectReceived]:
    return h.client.of_type(ObjectReceived)


# ------------------------------------------------------------------------------ setup / close


def test_setup_exchanges_parameters() -> None:
    cfg = SessionConfig(
        path=b"/moq?x=1",
        authority=b"127.0.0.1:4443",
        auth_tokens=(token(b"secret"),),
        implementation=b"test-client",
        max_request_id=40,
    )
    h = Harness(client_config=cfg, server_config=SessionConfig(max_request_id=60))
    seen = h.server.last(SetupCompleted)
    assert seen.version == DRAFT_14
    assert (seen.path, seen.authority) == (b"/moq?x=1", b"127.0.0.1:4443")
    assert seen.auth_tokens == (token(b"secret"),)
    assert seen.implementation == b"test-client"
    assert seen.peer_max_request_id == 40
    assert h.client.last(SetupCompleted).peer_max_request_id == 60
    assert h.client.session.state is SessionState.READY
    assert h.server.session.state is SessionState.READY


def test_client_close_is_seen_by_server() -> None:
    h = Harness()
    events = h.client.session.close(SessionError.UNAUTHORIZED, "go away")
    assert events == [SessionTerminated(error_code=0x2, reason="go away", by_peer=False)]
    assert h.client.session.close() == []  # only once
    assert h.close_code(h.server) == SessionError.UNAUTHORIZED
    ended = h.server.last(SessionTerminated)
    assert ended.by_peer and ended.error_code == 0x2 and ended.reason == "go away"
    with pytest.raises(LocalProtocolError):
        h.client.session.subscribe(NS, TRACK)


def test_server_refuses_setup_token_by_closing() -> None:
    h = Harness(client_config=SessionConfig(auth_tokens=(token(b"bad"),)))
    assert h.server.last(SetupCompleted).auth_tokens[0].value == b"bad"
    h.server.session.close(SessionError.UNAUTHORIZED, "bad token")
    assert h.close_code(h.client) == SessionError.UNAUTHORIZED


def test_setup_only_from_client() -> None:
    h = Harness()
    with pytest.raises(LocalProtocolError):
        h.server.session.setup()
    with pytest.raises(LocalProtocolError):
        h.client.session.setup()


def test_unknown_setup_params_and_raw_server_without_max_request_id() -> None:
    """Quirks 6 and 7: private setup params are ignored; SERVER_SETUP without MAX_REQUEST_ID
    (aiomoqt) leaves a lenient client free to send requests."""
    h = Harness(raw_server=True)
    h.client.session.setup()
    h.pump()
    params = SetupParameters(items=((0x40B5A, 1), (0x40B5C, 1), (0x7, b"aiomoqt")))
    h.inject(h.server, 0, encode_control(ServerSetup(parameters=params)))
    assert h.client.last(SetupCompleted).peer_max_request_id == 0
    assert h.client.session.can_send_request
    assert h.client.session.subscribe(NS, TRACK) == 0


def test_strict_client_blocks_without_max_request_id() -> None:
    h = Harness(raw_server=True, client_config=SessionConfig(strict_request_limit=True))
    h.client.session.setup()
    h.pump()
    h.inject(h.server, 0, encode_control(ServerSetup()))
    assert not h.client.session.can_send_request
    with pytest.raises(LocalProtocolError, match="MAX_REQUEST_ID"):
        h.client.session.subscribe(NS, TRACK)


def test_server_ignores_unknown_client_setup_params() -> None:
    h = Harness(setup=False)
    h.client.session._flow.control_stream_id = 0  # we script CLIENT_SETUP ourselves
    params = SetupParameters(items=((0x40B5A, 1), (0x40B5A, 2), (0x21, b"x"), (0x2, 10)))
    h.inject(
        h.client, 0, encode_control(ClientSetup(versions=(0xFF000010, DRAFT_14), parameters=params))
    )
    assert h.server.last(SetupCompleted).peer_max_request_id == 10


# ------------------------------------------------------------------------------ subscribe


def test_subscribe_objects_and_publish_done() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid = c.subscribe(NS, TRACK, subscriber_priority=7, group_order=GroupOrder.DESCENDING)
    h.pump()
    req = h.server.last(SubscribeRequested)
    assert (req.request_id, req.track_namespace, req.track_name) == (rid, NS, TRACK)
    assert (req.subscriber_priority, req.group_order, req.filter_type) == (
        7,
        GroupOrder.DESCENDING,
        FilterType.LARGEST_OBJECT,
    )
    alias = s.accept_subscribe(rid, largest=Location(3, 4), group_order=GroupOrder.ASCENDING)
    h.pump()
    ok = h.client.last(SubscribeAccepted)
    assert (ok.track_alias, ok.largest, ok.group_order) == (alias, Location(3, 4), 1)
    sid = s.open_subgroup(rid, 4, priority=9, with_extensions=True, end_of_group=True)
    s.write_object(sid, 0, b"a" * 1000, extensions=((0x20, 42), (0x21, b"digest")))
    s.write_objects(sid, [(1, b"b" * 70_000), (3, b"c", ((0x20, 1),))])
    s.write_object(sid, 4, status=ObjectStatus.END_OF_GROUP, end_stream=True)
    h.pump()
    got = objects(h)
    assert [(o.group, o.object_id, len(o.payload)) for o in got] == [
        (4, 0, 1000),
        (4, 1, 70_000),
        (4, 3, 1),
        (4, 4, 0),
    ]
    assert got[0].extensions == ((0x20, 42), (0x21, b"digest"))
    assert got[0].publisher_priority == 9 and got[0].track_alias == alias
    assert got[3].status is ObjectStatus.END_OF_GROUP
    end = h.client.last(SubgroupStreamEnded)
    assert (end.request_id, end.group, end.end_of_group) == (rid, 4, True)
    s.publish_done(rid, PublishDoneCode.TRACK_ENDED, "bye")
    h.pump()
    done = h.client.last(PublishDoneReceived)
    assert (done.status_code, done.stream_count, done.reason) == (2, 1, "bye")
    assert rid not in c._subs.subs_out  # one stream counted, one seen: state dropped
    assert rid not in s._subs.subs_in


def test_publish_done_before_data_waits_for_streams() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid, _ = subscribed(h)
    sid = s.open_subgroup(rid, 5)
    s.write_object(sid, 0, b"x")
    s.publish_done(rid, PublishDoneCode.SUBSCRIPTION_ENDED, stream_count=2)
    h.pump()
    assert rid in c._subs.subs_out  # one of two streams still outstanding
    s._data._send_streams.pop(sid)  # the record is gone, write the FIN directly
    h.server.quic.send_stream_data(sid, b"", end_stream=True)
    h.pump()
    assert rid in c._subs.subs_out
    h.advance(6.0)  # publish_done_linger
    assert rid not in c._subs.subs_out


@pytest.mark.parametrize(
    ("filter_type", "start", "end_group", "resolved"),
    [
        (FilterType.NEXT_GROUP_START, None, None, Location(4, 0)),
        (FilterType.LARGEST_OBJECT, None, None, Location(3, 5)),
        (FilterType.ABSOLUTE_START, Location(1, 2), None, Location(1, 2)),
        (FilterType.ABSOLUTE_RANGE, Location(1, 2), 9, Location(1, 2)),
    ],
)
def test_filter_types(
    filter_type: FilterType, start: Location | None, end_group: int | None, resolved: Location
) -> None:
    h = Harness()
    rid, _ = subscribed(h, filter_type=filter_type, start=start, end_group=end_group)
    req = h.server.last(SubscribeRequested)
    assert (req.filter_type, req.start, req.end_group) == (filter_type, start, end_group)
    assert h.server.session._subs.subs_in[rid].start == resolved
    assert h.client.session._subs.subs_out[rid].start == resolved
    # Narrowing is fine, in both directions of the check.
    upd = h.client.session.subscribe_update(
        rid, start=Location(resolved.group, resolved.object + 1), end_group=8, forward=False
    )
    h.pump()
    got = h.server.last(SubscribeUpdated)
    assert (got.request_id, got.update_request_id, got.end_group, got.forward) == (
        rid,
        upd,
        8,
        False,
    )
    with pytest.raises(LocalProtocolError, match="start back"):
        h.client.session.subscribe_update(rid, start=resolved, end_group=8)
    with pytest.raises(LocalProtocolError, match="widens"):
        h.client.session.subscribe_update(rid, start=got.start, end_group=None)


def test_reject_subscribe() -> None:
    h = Harness()
    rid = h.client.session.subscribe((b"nonexistent", b"namespace"), b"test-track")
    h.pump()
    h.server.session.reject_subscribe(rid, SubscribeErrorCode.TRACK_DOES_NOT_EXIST, "not found")
    h.pump()
    err = h.client.last(SubscribeRejected)
    assert (err.request_id, err.error_code, err.reason) == (rid, 4, "not found")
    with pytest.raises(LocalProtocolError):
        h.client.session.unsubscribe(rid)


def test_reject_subscribe_with_unauthorized_token() -> None:
    h = Harness()
    rid = h.client.session.subscribe(NS, TRACK, auth_tokens=(token(b"t0k"),))
    h.pump()
    assert h.server.last(SubscribeRequested).auth_tokens == (token(b"t0k"),)
    h.server.session.reject_subscribe(rid, SubscribeErrorCode.UNAUTHORIZED)
    h.pump()
    assert h.client.last(SubscribeRejected).error_code == SubscribeErrorCode.UNAUTHORIZED


def test_unsubscribe_resets_streams_and_drops_late_writes() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid, _ = subscribed(h)
    sid = s.open_subgroup(rid, 4)
    s.write_object(sid, 0, b"first")
    h.pump()
    c.unsubscribe(rid)
    h.pump()
    assert h.server.last(Unsubscribed).request_id == rid
    s.write_object(sid, 1, b"late")  # racing the event: dropped silently
    s.end_subgroup(sid)
    h.pump()
    assert [o.payload for o in objects(h)] == [b"first"]
    assert h.client.last(DataStreamReset).error_code == StreamResetCode.CANCELLED
    with pytest.raises(LocalProtocolError):
        s.open_subgroup(rid, 5)
    with pytest.raises(LocalProtocolError):
        s.write_object(12345, 0, b"")


def test_objects_before_subscribe_ok_are_parked() -> None:
    """d14 §10.4.2: a subgroup stream may beat SUBSCRIBE_OK; it waits for the alias."""
    h = Harness()
    rid = h.client.session.subscribe(NS, TRACK)
    h.pump()
    # Server writes data for alias 9 before it answers (bypassing its session).
    h.inject_uni(h.server, bytes.fromhex("14 09 01 00 80 00 04 61626364 00 04 65666768"), fin=True)
    assert objects(h) == []
    h.server.session.accept_subscribe(rid, track_alias=9)
    h.pump()
    assert [o.payload for o in objects(h)] == [b"abcd", b"efgh"]
    assert h.client.last(SubgroupStreamEnded).request_id == rid
    assert h.client.session._data._parked_total == 0


def test_stop_sending_is_answered_with_reset() -> None:
    h = Harness()
    rid, _ = subscribed(h)
    sid = h.server.session.open_subgroup(rid, 4)
    h.server.session.write_object(sid, 0, b"x")
    h.pump()
    h.client.quic.stop_stream(sid, StreamResetCode.CANCELLED)
    h.pump()
    h.server.session.write_object(sid, 1, b"y")  # dropped: the stream was reset
    h.pump()
    assert h.client.last(DataStreamReset).stream_id == sid


def test_datagram_objects() -> None:
    h = Harness()
    rid, alias = subscribed(h)
    h.server.session.send_datagram_object(rid, 7, 0, b"hi")
    h.server.session.send_datagram_object(rid, 7, 5, status=ObjectStatus.END_OF_GROUP)
    h.pump()
    got = objects(h)
    assert [(o.group, o.object_id, o.payload, o.status, o.stream_id) for o in got] == [
        (7, 0, b"hi", ObjectStatus.NORMAL, None),
        (7, 5, b"", ObjectStatus.END_OF_GROUP, None),
    ]
    assert got[0].track_alias == alias


def test_repeated_subscribe_unsubscribe_probes() -> None:
    """Quirk 3: a relay probes with SUBSCRIBE/UNSUBSCRIBE repeatedly, and re-unsubscribes."""
    h = Harness()
    for _ in range(3):
        rid, _ = subscribed(h)
        h.client.session.unsubscribe(rid)
        h.pump()
        h.inject(h.client, 0, bytes.fromhex(f"0a0001{rid:02x}"))  # duplicate UNSUBSCRIBE
    assert len(h.server.of_type(Unsubscribed)) == 3
    assert h.server.terminated is None


def test_subscribe_ok_group_order_differs() -> None:
    """Quirk 5: a publisher may answer with another group order than the one requested."""
    h = Harness()
    rid, _ = subscribed(h, group_order=GroupOrder.ASCENDING)
    h2 = Harness()
    rid2 = h2.client.session.subscribe(NS, TRACK, group_order=GroupOrder.ASCENDING)
    h2.pump()
    h2.server.session.accept_subscribe(rid2, group_order=GroupOrder.DESCENDING)
    h2.pump()
    assert h2.client.last(SubscribeAccepted).group_order is GroupOrder.DESCENDING
    assert rid == rid2 == 0


# ------------------------------------------------------------------------------ publish


def test_publish_flow() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid, alias = s.publish(NS, TRACK, largest=Location(1, 1), auth_tokens=(token(b"p"),))
    sid = s.open_subgroup(rid, 2)  # forward=1: data may precede PUBLISH_OK
    s.write_object(sid, 0, b"early")
    h.pump()
    req = h.client.last(PublishRequested)
    assert (req.request_id, req.track_alias, req.largest, req.auth_tokens) == (
        rid,
        alias,
        Location(1, 1),
        (token(b"p"),),
    )
    assert objects(h)[0].payload == b"early" and objects(h)[0].request_id == rid
    c.publish_ok(rid, forward=True, filter_type=FilterType.ABSOLUTE_START, start=Location(2, 0))
    h.pump()
    acc = h.server.last(PublishAccepted)
    assert (acc.request_id, acc.filter_type, acc.start) == (rid, 3, Location(2, 0))
    s.write_object(sid, 1, b"late", end_stream=True)
    s.publish_done(rid, PublishDoneCode.TRACK_ENDED)
    h.pump()
    assert [o.payload for o in objects(h)] == [b"early", b"late"]
    assert h.client.last(PublishDoneReceived).stream_count == 1
    assert rid not in c._subs.subs_out


def test_publish_error() -> None:
    h = Harness()
    rid, _ = h.server.session.publish(NS, TRACK)
    h.pump()
    h.client.session.publish_error(rid, 4, "uninterested")
    h.pump()
    rej = h.server.last(PublishRejected)
    assert (rej.request_id, rej.error_code, rej.reason) == (rid, 4, "uninterested")
    with pytest.raises(LocalProtocolError):
        h.server.session.open_subgroup(rid, 0)


def test_publish_alias_collision_is_local_error() -> None:
    h = Harness()
    h.server.session.publish(NS, TRACK, track_alias=5)
    with pytest.raises(LocalProtocolError):
        h.server.session.publish(NS, b"other", track_alias=5)


# ------------------------------------------------------------------------------ fetch


def test_standalone_fetch() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid = c.fetch(
        NS, TRACK, start=Location(0, 0), end=Location(2, 0), group_order=GroupOrder.ASCENDING
    )
    h.pump()
    req = h.server.last(FetchRequested)
    assert (req.fetch_type, req.start, req.end, req.track_name) == (
        FetchType.STANDALONE,
        Location(0, 0),
        Location(2, 0),
        TRACK,
    )
    sid = s.open_fetch_stream(rid)  # objects may precede FETCH_OK
    s.write_fetch_object(sid, group=0, subgroup=0, object_id=0, payload=b"abcd")
    h.pump()
    s.accept_fetch(rid, end=Location(2, 0))
    s.write_fetch_objects(
        sid, [(1, 0, 3, b"e", ((0x20, 7),)), (1, 0, 4, b"f" * 50_000)], end_stream=True
    )
    h.pump()
    assert h.client.last(FetchAccepted).end == Location(2, 0)
    got = objects(h)
    assert [(o.group, o.object_id, o.payload[:4], o.track_alias) for o in got] == [
        (0, 0, b"abcd", None),
        (1, 3, b"e", None),
        (1, 4, b"ffff", None),
    ]
    assert got[1].extensions == ((0x20, 7),)
    assert h.client.last(FetchStreamEnded).request_id == rid
    assert rid not in c._requests.fetch_out and rid not in s._requests.fetch_in


def test_fetch_rejected_with_unknown_code() -> None:
    """Quirk 8: moq-dev answers FETCH_ERROR code 500; keep it as an int."""
    h = Harness()
    rid = h.client.session.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    h.server.session.reject_fetch(rid, 500, "unsupported")
    h.pump()
    rej = h.client.last(FetchRejected)
    assert (rej.error_code, rej.reason) == (500, "unsupported")


def test_fetch_cancel_resets_stream() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid = c.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    s.accept_fetch(rid, end=Location(1, 0))
    sid = s.open_fetch_stream(rid)
    s.write_fetch_object(sid, group=0, subgroup=0, object_id=0, payload=b"a")
    h.pump()
    c.fetch_cancel(rid)
    h.pump()
    assert h.server.last(FetchCancelled).request_id == rid
    s.write_fetch_object(sid, group=0, subgroup=0, object_id=1, payload=b"b")  # dropped
    h.pump()
    assert [o.payload for o in objects(h)] == [b"a"]
    assert rid not in s._requests.fetch_in and h.client.terminated is None


def test_fetch_cancel_before_response_swallows_crossing_ok() -> None:
    h = Harness()
    rid = h.client.session.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.client.session.fetch_cancel(rid)
    h.pump()
    assert h.server.of_type(FetchCancelled) == [FetchCancelled(request_id=rid)]
    # The server app answers anyway (it raced the cancel): the record is gone.
    with pytest.raises(LocalProtocolError):
        h.server.session.accept_fetch(rid, end=Location(1, 0))
    h.inject(h.server, 0, encode_control(FetchError(request_id=rid, error_code=0)))
    assert h.client.of_type(FetchRejected) == [] and h.client.terminated is None


@pytest.mark.parametrize(
    ("absolute", "joining_start", "start"),
    [(False, 2, Location(1, 0)), (False, 9, Location(0, 0)), (True, 2, Location(2, 0))],
)
def test_joining_fetch(absolute: bool, joining_start: int, start: Location) -> None:
    h = Harness()
    rid, _ = subscribed(h)  # largest {3, 4}
    fid = h.client.session.joining_fetch(rid, joining_start, absolute=absolute)
    h.pump()
    req = h.server.last(FetchRequested)
    assert (req.request_id, req.joining_request_id, req.start, req.end) == (
        fid,
        rid,
        start,
        Location(3, 5),
    )
    assert (req.track_namespace, req.track_name) == (NS, TRACK)


def test_joining_fetch_before_subscribe_answered_and_refusals() -> None:
    """Quirk 4: a joining FETCH right behind every SUBSCRIBE, which may be refused."""
    h = Harness()
    c, s = h.client.session, h.server.session
    rid = c.subscribe(NS, TRACK)
    fid = c.joining_fetch(rid, 0)
    h.pump()
    req = h.server.last(FetchRequested)
    assert (req.joining_request_id, req.start, req.end) == (rid, None, None)
    s.reject_fetch(fid, FetchErrorCode.NOT_SUPPORTED)
    s.accept_subscribe(rid)  # no content yet
    h.pump()
    assert h.client.last(FetchRejected).error_code == FetchErrorCode.NOT_SUPPORTED
    # Now Content Exists = 0: the session answers INVALID_RANGE itself.
    c.joining_fetch(rid, 0)
    h.pump()
    assert h.client.last(FetchRejected).error_code == FetchErrorCode.INVALID_RANGE
    # An unknown joining request id gets INVALID_JOINING_REQUEST_ID (raw: our API refuses it).
    nxt = c.next_request_id
    c._flow.next_request_id += 2
    c._requests.fetch_out[nxt] = c._requests._new_fetch(nxt, serving=False)
    h.inject(h.client, 0, bytes.fromhex(f"16 0007 {nxt:02x} 80 01 02 {nxt + 40:02x} 00 00"))
    assert h.client.last(FetchRejected).error_code == FetchErrorCode.INVALID_JOINING_REQUEST_ID
    with pytest.raises(LocalProtocolError):
        c.joining_fetch(999, 0)


def test_joining_fetch_needs_largest_object_subscription_locally() -> None:
    h = Harness()
    rid, _ = subscribed(h, filter_type=FilterType.ABSOLUTE_START, start=Location(0, 0))
    with pytest.raises(LocalProtocolError, match="LargestObject"):
        h.client.session.joining_fetch(rid, 0)


# ------------------------------------------------------------------------------ namespaces


def test_publish_namespace_lifecycle() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid = c.publish_namespace(NS, auth_tokens=(token(b"interop-test"),))
    h.pump()
    req = h.server.last(PublishNamespaceRequested)
    assert (req.track_namespace, req.auth_tokens) == (NS, (token(b"interop-test"),))
    s.accept_publish_namespace(rid)
    h.pump()
    assert h.client.last(PublishNamespaceAccepted) == PublishNamespaceAccepted(
        request_id=rid, track_namespace=NS
    )
    c.publish_namespace_done(NS)
    h.pump()
    assert h.server.last(PublishNamespaceDone) == PublishNamespaceDone(
        track_namespace=NS, request_ids=(rid,)
    )
    assert not s._namespaces._pubns_in and not c._namespaces._pubns_out
    with pytest.raises(LocalProtocolError):
        c.publish_namespace_done(NS)


def test_publish_namespace_reject_and_cancel() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    r1 = c.publish_namespace((b"a",))
    r2 = c.publish_namespace((b"b",))
    h.pump()
    s.reject_publish_namespace(r1, 1, "no")
    s.accept_publish_namespace(r2)
    s.publish_namespace_cancel((b"b",), 4, "uninterested")
    h.pump()
    assert h.client.last(PublishNamespaceRejected).error_code == 1
    cancelled = h.client.last(PublishNamespaceCancelled)
    assert (cancelled.request_ids, cancelled.error_code) == ((r2,), 4)
    # A DONE for a namespace the server already dropped is ignored.
    c._namespaces._pubns_out[r2] = c._namespaces._new_namespace(r2, (b"b",), responder=False)
    c.publish_namespace_done((b"b",))
    h.pump()
    assert h.server.terminated is None and h.server.of_type(PublishNamespaceDone) == []


def test_unsolicited_duplicate_publish_namespace_answered_each() -> None:
    """Quirk 2: the same namespace announced twice (request ids 2 and 4) - answer both."""
    h = Harness()
    c, s = h.client.session, h.server.session
    r1, r2 = c.publish_namespace(NS), c.publish_namespace(NS)
    h.pump()
    s.accept_publish_namespace(r1)
    s.accept_publish_namespace(r2)
    h.pump()
    assert len(h.client.of_type(PublishNamespaceAccepted)) == 2
    c.publish_namespace_done(NS)
    h.pump()
    assert h.server.last(PublishNamespaceDone).request_ids == (r1, r2)


def test_subscribe_namespace_empty_prefix_and_unsubscribe() -> None:
    """Quirk 1: moq-dev sends SUBSCRIBE_NAMESPACE with an empty prefix; answer it."""
    h = Harness()
    c, s = h.client.session, h.server.session
    nxt = c.next_request_id
    # Our API refuses an empty prefix, so write the bytes moq-dev sends and book the id.
    c._flow.next_request_id += 2
    c._namespaces._subns_out[nxt] = c._namespaces._new_namespace(nxt, (), responder=False)
    h.inject(h.client, 0, bytes.fromhex(f"11 0003 {nxt:02x} 00 00"))
    req = h.server.last(SubscribeNamespaceRequested)
    assert req.track_namespace_prefix == ()
    s.reject_subscribe_namespace(req.request_id, 4, "unknown prefix")
    rid = c.subscribe_namespace((b"kv",))
    h.pump()
    s.accept_subscribe_namespace(rid)
    h.pump()
    assert h.client.last(SubscribeNamespaceAccepted).track_namespace_prefix == (b"kv",)
    c.unsubscribe_namespace((b"kv",))
    h.pump()
    assert h.server.last(UnsubscribedNamespace).request_ids == (rid,)


def test_subscribe_namespace_rejected() -> None:
    h = Harness()
    rid = h.client.session.subscribe_namespace((b"kv",))
    h.pump()
    h.server.session.reject_subscribe_namespace(rid, 5, "overlap")
    h.pump()
    assert h.client.last(SubscribeNamespaceRejected).error_code == 5


# ------------------------------------------------------------------------------ track status


def test_track_status() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    r1 = c.track_status(NS, TRACK)
    r2 = c.track_status(NS, b"missing")
    h.pump()
    reqs = h.server.of_type(TrackStatusRequested)
    assert [r.track_name for r in reqs] == [TRACK, b"missing"]
    s.track_status_ok(r1, largest=Location(9, 1), expires=100)
    s.track_status_error(r2, SubscribeErrorCode.TRACK_DOES_NOT_EXIST)
    h.pump()
    ok = h.client.last(TrackStatusReceived)
    assert (ok.request_id, ok.largest, ok.expires) == (r1, Location(9, 1), 100)
    assert h.client.last(TrackStatusRejected).request_id == r2
    with pytest.raises(LocalProtocolError):
        s.track_status_ok(r1)


# ------------------------------------------------------------------------------ goaway


def test_goaway_drains() -> None:
    h = Harness()
    h.server.session.goaway(b"moqt://elsewhere:4443/moq")
    h.pump()
    assert h.client.last(GoawayReceived).new_session_uri == b"moqt://elsewhere:4443/moq"
    assert h.client.session.state is SessionState.DRAINING_REMOTE
    with pytest.raises(LocalProtocolError):
        h.client.session.subscribe(NS, TRACK)
    with pytest.raises(LocalProtocolError):
        h.client.session.goaway(b"moqt://x")  # clients send no URI
    with pytest.raises(LocalProtocolError):
        h.server.session.goaway()  # only once
    h.client.session.goaway()
    h.pump()
    assert h.server.session.state is SessionState.DRAINING
    assert h.client.session.state is SessionState.DRAINING


def test_goaway_timeout_closes() -> None:
    h = Harness(server_config=SessionConfig(goaway_timeout=1.0))
    deadline = h.now + 1.0
    h.server.session.goaway(now=h.now)
    h.pump()
    assert h.server.session.get_timer() == pytest.approx(deadline)
    h.advance(1.5)
    assert h.close_code(h.client) == SessionError.GOAWAY_TIMEOUT


# ------------------------------------------------------------------------------ request ids


def test_request_id_flow_control_and_replenishment() -> None:
    h = Harness(server_config=SessionConfig(max_request_id=4))
    c, s = h.client.session, h.server.session
    assert c.peer_max_request_id == 4
    r0, r1 = c.track_status(NS, b"0"), c.track_status(NS, b"1")
    assert (r0, r1) == (0, 2)
    assert not c.can_send_request
    with pytest.raises(LocalProtocolError, match="MaxRequestIdRaised"):
        c.track_status(NS, b"2")
    with pytest.raises(LocalProtocolError):  # REQUESTS_BLOCKED goes out only once
        c.subscribe(NS, TRACK)
    h.pump()
    assert h.server.of_type(RequestsBlockedReceived) == [RequestsBlockedReceived(max_request_id=4)]
    s.track_status_ok(r0)
    h.pump()
    assert h.client.last(MaxRequestIdRaised).max_request_id == 6
    assert c.track_status(NS, b"2") == 4
    s.track_status_ok(r1)
    h.pump()
    s.raise_max_request_id(100)
    with pytest.raises(LocalProtocolError):
        s.raise_max_request_id(100)  # must increase
    h.pump()
    assert c.peer_max_request_id == 100 and s.granted_max_request_id == 100


def test_large_window_replenishes_in_batches() -> None:
    h = Harness(server_config=SessionConfig(max_request_id=20))
    c, s = h.client.session, h.server.session
    rids = [c.track_status(NS, b"%d" % i) for i in range(6)]  # ids 0..10
    h.pump()
    for rid in rids[:3]:
        s.track_status_ok(rid)
    h.pump()
    assert h.client.of_type(MaxRequestIdRaised) == []  # not yet half a window
    for rid in rids[3:5]:
        s.track_status_ok(rid)
    h.pump()
    assert h.client.last(MaxRequestIdRaised).max_request_id == 30  # next id 12 + 20 - 2
    # A peer that used its whole window gets credit as soon as anything completes.
    while c.can_send_request:
        rids.append(c.track_status(NS, b"x"))
    h.pump()
    s.track_status_ok(rids[5])
    h.pump()
    assert h.client.last(MaxRequestIdRaised).max_request_id > 30


def test_zero_window_grants_nothing() -> None:
    h = Harness(client_config=SessionConfig(max_request_id=0))
    assert h.server.session.peer_max_request_id == 0
    with pytest.raises(LocalProtocolError):
        h.server.session.publish(NS, TRACK)


# ------------------------------------------------------------------------------ auth tokens


def test_auth_token_aliases() -> None:
    """REGISTER stores a token (within MAX_AUTH_TOKEN_CACHE_SIZE); USE_ALIAS resolves it."""
    h = Harness(server_config=SessionConfig(max_auth_token_cache_size=64))
    reg = AuthToken(alias_type=TokenAliasType.REGISTER, alias=7, token_type=1, value=b"jwt")
    use = AuthToken(alias_type=TokenAliasType.USE_ALIAS, alias=7)
    c = h.client.session
    c.subscribe(NS, TRACK, auth_tokens=(reg,))
    c.subscribe(NS, b"t2", auth_tokens=(use,))
    c.subscribe(NS, b"t3", auth_tokens=(AuthToken(alias_type=TokenAliasType.DELETE, alias=7),))
    h.pump()
    reqs = h.server.of_type(SubscribeRequested)
    assert reqs[0].auth_tokens == (reg,)
    assert reqs[1].auth_tokens[0].value == b"jwt" and reqs[1].auth_tokens[0].token_type == 1
    assert reqs[2].auth_tokens == ()
    assert h.server.session._flow._token_cache_bytes == 0


# ------------------------------------------------------------------------------ misc


def test_message_parameters_survive() -> None:
    h = Harness()
    params = MessageParameters.build(delivery_timeout=500).with_param(0x3E, 9)
    rid = h.client.session.subscribe(NS, TRACK, parameters=params)  # type: ignore[arg-type]
    h.pump()
    assert h.server.last(SubscribeRequested).parameters.delivery_timeout == 500
    h.server.session.accept_subscribe(
        rid, parameters=MessageParameters.build(max_cache_duration=1000)
    )
    h.pump()
    assert h.client.last(SubscribeAccepted).parameters.max_cache_duration == 1000


def test_events_after_termination_are_ignored() -> None:
    h = Harness()
    h.client.session.close()
    h.settle()
    assert h.client.session.handle_event(h.client.quic_events[-1]) == []
    assert h.client.session.get_timer() is None
    assert h.client.session.handle_timer(100.0) == []


def test_session_without_config() -> None:
    h = Harness()
    session = MoqtSession(h.client.quic, is_client=True)
    assert session.state is SessionState.CONNECTED and session.next_request_id == 0


# ------------------------------------------------------------------------------ random walks
# Two of our own sessions driven through random API calls, with messages allowed to cross on
# the wire (pumps happen at random points): whatever the application does, misuse is a
# LocalProtocolError at the call and the sessions never make each other fail.


def _pending(peer_events: list[object], kind: type, done: set[int]) -> list[int]:
    return [e.request_id for e in peer_events if isinstance(e, kind) and e.request_id not in done]  # type: ignore[attr-defined]


def _walk_step(h: Harness, data: st.DataObject, opened: dict[int, int]) -> None:
    c, s = h.client.session, h.server.session
    cev, sev = h.client.events, h.server.events
    ops = [
        "subscribe",
        "accept",
        "reject",
        "data",
        "done",
        "unsubscribe",
        "update",
        "fetch",
        "join",
        "answer_fetch",
        "serve_fetch",
        "cancel_fetch",
        "publish",
        "answer_publish",
        "namespace",
        "status",
        "subns",
        "unsubns",
        "cancel_ns",
        "reset",
        "datagram",
        "pump",
    ]
    op = data.draw(st.sampled_from(ops))
    pick = lambda xs: data.draw(st.sampled_from(xs)) if xs else None  # noqa: E731
    subs_in = list(s._subs.subs_in)
    if op == "subscribe":
        f = data.draw(st.sampled_from(list(FilterType)))
        start = Location(1, 0) if f.has_start else None
        c.subscribe(NS, TRACK, filter_type=f, start=start, end_group=5 if f.has_end_group else None)
    elif op == "accept" and (rid := pick(subs_in)) is not None:
        s.accept_subscribe(rid, largest=pick([None, Location(2, 3)]))
    elif op == "reject" and (rid := pick(subs_in)) is not None:
        s.reject_subscribe(rid, 4)
    elif op == "data" and (rid := pick(subs_in)) is not None:
        sid = opened.get(rid)
        if sid is None or data.draw(st.booleans()):
            sid = opened[rid] = s.open_subgroup(rid, data.draw(st.integers(0, 5)))
            s.write_objects(sid, [(0, b"a"), (1, b"b")])
        else:
            s.end_subgroup(sid)
            opened.pop(rid, None)
    elif op == "done" and (rid := pick(subs_in)) is not None:
        for sid in s._subs.subs_in[rid].open_streams.copy():
            s.end_subgroup(sid)
        opened.pop(rid, None)
        s.publish_done(rid, 2)
    elif op == "unsubscribe" and (rid := pick(list(c._subs.subs_out))) is not None:
        c.unsubscribe(rid)
    elif op == "update" and (rid := pick(list(c._subs.subs_out))) is not None:
        cur = c._subs.subs_out[rid].start or Location(0, 0)
        c.subscribe_update(rid, start=cur, end_group=c._subs.subs_out[rid].end_group)
    elif op == "fetch":
        c.fetch(NS, TRACK, start=Location(0, 0), end=Location(2, 0))
    elif op == "join" and (rid := pick(list(c._subs.subs_out))) is not None:
        c.joining_fetch(rid, 1)
    elif op == "answer_fetch" and (fid := pick(list(s._requests.fetch_in))) is not None:
        if data.draw(st.booleans()):
            s.accept_fetch(fid, end=Location(2, 0))
        else:
            s.reject_fetch(fid, 500)
    elif op == "serve_fetch" and (fid := pick(list(s._requests.fetch_in))) is not None:
        rec = s._requests.fetch_in[fid]
        if rec.stream_id is None:
            sid = s.open_fetch_stream(fid)
            s.write_fetch_object(sid, group=0, subgroup=0, object_id=0, payload=b"f")
        else:
            s.end_fetch_stream(rec.stream_id)
    elif op == "cancel_fetch" and (fid := pick(list(c._requests.fetch_out))) is not None:
        c.fetch_cancel(fid)
    elif op == "publish":
        s.publish(NS, b"pub%d" % data.draw(st.integers(0, 3)))
    elif op == "answer_publish":
        offered = [r for r, rec in c._subs.subs_out.items() if rec.machine.state.name == "OFFERED"]
        if (rid := pick(offered)) is not None:
            if data.draw(st.booleans()):
                c.publish_ok(rid)
            else:
                c.publish_error(rid, 4)
    elif op == "namespace":
        rid = c.publish_namespace(NS)
        h.pump()
        s.accept_publish_namespace(rid)
        if data.draw(st.booleans()):
            c.publish_namespace_done(NS)
    elif op == "status":
        c.track_status(NS, TRACK)
        h.pump()
        for rid in list(s._requests._ts_in):
            s.track_status_ok(rid)
    elif op == "subns":
        rid = c.subscribe_namespace((b"kv",))
        if data.draw(st.booleans()):
            h.pump()
            s.accept_subscribe_namespace(rid)
    elif op == "unsubns":
        c.unsubscribe_namespace((b"kv",))
    elif op == "cancel_ns":
        s.publish_namespace_cancel(NS, 4)
    elif op == "reset" and (rid := pick(list(opened))) is not None:
        s.reset_subgroup(opened.pop(rid))
    elif op == "datagram" and (rid := pick(subs_in)) is not None:
        s.send_datagram_object(rid, 0, 0, b"d")
    elif op == "pump":
        h.pump()
    del cev, sev


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_api_walks_never_violate(data: st.DataObject) -> None:
    h = Harness(server_config=SessionConfig(max_request_id=30))
    opened: dict[int, int] = {}
    for _ in range(data.draw(st.integers(1, 25))):
        try:
            _walk_step(h, data, opened)
        except LocalProtocolError:
            pass  # the application asked for something the protocol forbids right now
    h.pump()
    h.advance(10.0)
    assert h.client.terminated is None, h.client.terminated
    assert h.server.terminated is None, h.server.terminated


# ------------------------------------------------------------------------------ surface


def _isort_key(name: str) -> tuple[int, str]:
    return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)


def test_public_surface_is_pinned_and_documented() -> None:
    import dataclasses
    import typing

    from ray_kvmoq.moqt import events as events_mod
    from ray_kvmoq.moqt import session as session_mod

    for mod in (events_mod, session_mod):
        assert mod.__all__ == sorted(mod.__all__, key=_isort_key), mod.__name__
        assert all(hasattr(mod, n) for n in mod.__all__)
    assert session_mod.__all__ == [
        "MoqtSession",
        "OutgoingFetchObject",
        "OutgoingObject",
        "SessionConfig",
    ]
    classes = [getattr(events_mod, n) for n in events_mod.__all__ if n != "MoqtEvent"]
    assert set(typing.get_args(events_mod.MoqtEvent)) == set(classes)
    for cls in classes:
        assert cls.__doc__ and cls.__bases__ == (object,), cls  # never subclass an event
        assert cls.__dataclass_params__.frozen and hasattr(cls, "__slots__"), cls
        assert all(f.kw_only for f in dataclasses.fields(cls)), cls
    public = [n for n in dir(MoqtSession) if not n.startswith("_")]
    assert {"handle_event", "handle_timer", "get_timer", "setup", "close"} <= set(public)
    for name in public:
        assert getattr(MoqtSession, name).__doc__, name


def test_reset_fetch_stream_after_ok_ends_the_fetch() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid = c.fetch(NS, TRACK, start=Location(0, 0), end=Location(5, 0))
    h.pump()
    s.accept_fetch(rid, end=Location(5, 0))
    sid = s.open_fetch_stream(rid)
    s.write_fetch_object(sid, group=0, subgroup=0, object_id=0, payload=b"a")
    h.pump()
    s.reset_subgroup(sid, StreamResetCode.INTERNAL_ERROR)  # the upstream failed mid-way
    h.pump()
    assert rid not in s._requests.fetch_in and rid not in c._requests.fetch_out
    reset = h.client.last(DataStreamReset)
    assert (reset.request_id, reset.error_code) == (rid, StreamResetCode.INTERNAL_ERROR)
    s.reset_subgroup(sid)  # again: a no-op
    with pytest.raises(LocalProtocolError):
        s.reject_fetch(rid, 0)


def test_reject_fetch_after_stream_opened_resets_it() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid = c.fetch(NS, TRACK, start=Location(0, 0), end=Location(5, 0))
    h.pump()
    sid = s.open_fetch_stream(rid)
    s.write_fetch_object(sid, group=0, subgroup=0, object_id=0, payload=b"a")
    h.pump()
    s.reject_fetch(rid, FetchErrorCode.TIMEOUT, "upstream timed out")
    h.pump()
    assert h.client.last(FetchRejected).error_code == FetchErrorCode.TIMEOUT
    assert rid not in s._requests.fetch_in and rid not in c._requests.fetch_out
    assert h.client.terminated is None and h.server.terminated is None


# ------------------------------------------------------------------------------ captured bytes
# Byte strings captured from real peers (moqt-draft14.md §2.10), fed to our server session.


def _raw_client_session() -> Harness:
    h = Harness(setup=False)
    h.client.raw = True  # the test writes the client's bytes
    return h


def test_aiomoqt_client_setup_vector() -> None:
    """aiomoqt 0.5.3 CLIENT_SETUP (d14 §9.3) [captured]."""
    h = _raw_client_session()
    h.inject(
        h.client,
        0,
        bytes.fromhex(
            "200033 01 c0000000ff00000e 04 01042f6d6f71 050f3132372e302e302e313a3234343833"
            " 026710 070d61696f6d6f71742f302e352e33"
        ),
    )
    done = h.server.last(SetupCompleted)
    assert (done.path, done.authority, done.implementation) == (
        b"/moq",
        b"127.0.0.1:24483",
        b"aiomoqt/0.5.3",
    )
    assert done.peer_max_request_id == 10000
    # Our SERVER_SETUP went back on the same stream: type 0x21, version d14.
    assert h.received(h.client).startswith(b"\x21") and bytes.fromhex(
        "c0000000ff00000e"
    ) in h.received(h.client)


def test_moq_dev_session_start_vectors() -> None:
    """moq-dev (moq-ffi 0.4.18): CLIENT_SETUP with private params, SUBSCRIBE_NAMESPACE with an
    empty prefix, SUBSCRIBE and its automatic joining FETCH (d14 §9.3, §9.7, §9.16, §9.28)
    [captured]."""
    h = _raw_client_session()
    setup = (
        "20003b 01 c0000000ff00000e 05 02c0000000ffffffff 80040b5a01 80040b5c01"
        " 070b6d6f712d6c6974652d7273 050f3132372e302e302e313a3234343533"
    )
    h.inject(h.client, 0, bytes.fromhex(setup))
    assert h.server.last(SetupCompleted).peer_max_request_id == 0xFFFFFFFF
    h.inject(h.client, 0, bytes.fromhex("110003 00 00 00"))
    h.inject(h.client, 0, bytes.fromhex("030012 02 02 026b76 0474657374 027430 ff 02 01 02 00"))
    h.inject(h.client, 0, bytes.fromhex("160007 04 ff 01 02 02 00 00"))
    assert h.server.last(SubscribeNamespaceRequested).track_namespace_prefix == ()
    sub = h.server.last(SubscribeRequested)
    assert (sub.request_id, sub.track_namespace, sub.track_name) == (2, (b"kv", b"test"), b"t0")
    assert (sub.subscriber_priority, sub.group_order, sub.filter_type) == (255, 2, 2)
    fetch = h.server.last(FetchRequested)
    assert (fetch.fetch_type, fetch.joining_request_id, fetch.joining_start) == (2, 2, 0)
    # Accepting the SUBSCRIBE with content later does not retro-resolve the fetch; the
    # application may refuse it (moq-dev tolerates that) - quirk 4.
    h.server.session.accept_subscribe(2, track_alias=3, largest=Location(0, 0))
    h.server.session.reject_fetch(4, FetchErrorCode.NOT_SUPPORTED)
    h.pump()
    assert h.server.terminated is None
    # SUBSCRIBE_OK as moq-dev's publisher would decode it: 04 len 02 03 00 01 01 00 00 00.
    assert bytes.fromhex("0400080203000101000000") in h.received(h.client)


# ------------------------------------------------------------------------------ crossings


def test_data_crossing_unsubscribe_is_dropped() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid, alias = subscribed(h)
    sid = s.open_subgroup(rid, 4)
    s.write_object(sid, 0, b"before")
    h.pump()
    c.unsubscribe(rid)
    # Before the UNSUBSCRIBE lands, more data is already on the wire: one more object on the
    # open stream and a brand-new stream (written below the server's session).
    h.server.quic.send_stream_data(sid, bytes.fromhex("00 05") + b"after")
    h.inject_uni(h.server, bytes([0x10, alias, 5, 0x80, 0, 1]) + b"x")
    assert [o.payload for o in objects(h)] == [b"before"]
    assert h.client.last(PublishDoneReceived).status_code == PublishDoneCode.SUBSCRIPTION_ENDED
    assert not c._subs.subs_out
    assert all(st.ignore for st in c._data._recv.values())  # whatever is left is being dropped
    assert h.client.terminated is None and h.server.terminated is None


def test_fetch_stream_crossing_cancel_is_stopped() -> None:
    h = Harness()
    c, s = h.client.session, h.server.session
    rid = c.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    c.fetch_cancel(rid)  # not yet delivered when the server answers
    s.accept_fetch(rid, end=Location(1, 0))
    sid = s.open_fetch_stream(rid)
    s.write_fetch_object(sid, group=0, subgroup=0, object_id=0, payload=b"a")
    h.pump()
    assert objects(h) == [] and h.client.of_type(FetchAccepted) == []
    assert h.server.last(FetchCancelled).request_id == rid
    assert h.client.terminated is None and h.server.terminated is None


def test_parked_stream_reset_releases_its_budget() -> None:
    h = Harness()
    sid = h.inject_uni(h.server, bytes.fromhex("10 09 01 80 00 04 61626364"))
    assert h.client.session._data._parked_total > 0
    h.server.quic.reset_stream(sid, StreamResetCode.CANCELLED)
    h.pump()
    assert h.client.session._data._parked_total == 0 and not h.client.session._data.parked_by_alias
    assert h.client.session.get_timer() is None
    h.advance(5.0)
    assert h.client.terminated is None


def test_cancel_namespace_answers_pending_announcements_with_error() -> None:
    """CANCEL names a namespace: an announcement not yet answered gets an ERROR instead, so
    a re-announcement crossing the CANCEL keeps exactly one answer."""
    h = Harness()
    c, s = h.client.session, h.server.session
    r1 = c.publish_namespace(NS)
    h.pump()
    s.accept_publish_namespace(r1)
    r2 = c.publish_namespace(NS)
    h.pump()
    s.publish_namespace_cancel(NS, 4, "go")
    h.pump()
    assert h.client.last(PublishNamespaceCancelled).request_ids == (r1,)
    assert h.client.last(PublishNamespaceRejected).request_id == r2
    assert not c._namespaces._pubns_out and not s._namespaces._pubns_in
    # Only pending ones: an ERROR each and no CANCEL at all.
    r3 = c.publish_namespace(NS)
    h.pump()
    s.publish_namespace_cancel(NS, 4)
    h.pump()
    assert h.client.last(PublishNamespaceRejected).request_id == r3
    assert len(h.client.of_type(PublishNamespaceCancelled)) == 1


@pytest.mark.parametrize("size", [16 << 10, (16 << 10) + 1, 300_000])
def test_large_payload_views_are_written_after_their_header(size: int) -> None:
    """Payloads over the inline limit go to QUIC on their own (no concatenation copy), also as
    read-only views; the bytes on the wire are the same either way."""
    h = Harness()
    c, s = h.client.session, h.server.session
    big = memoryview(bytes(range(256)) * (size // 256 + 1))[:size]
    rid, _ = subscribed(h)
    sid = s.open_subgroup(rid, 1, with_extensions=True)
    s.write_object(sid, 0, big, extensions=((0x20, 5),))
    s.write_object(sid, 2, b"tail", end_stream=True)
    frid = c.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    fsid = s.open_fetch_stream(frid)
    s.accept_fetch(frid, end=Location(1, 0))
    s.write_fetch_object(fsid, group=0, subgroup=0, object_id=7, payload=big)
    s.write_fetch_object(fsid, group=0, subgroup=0, object_id=8, payload=b"x", end_stream=True)
    h.pump()
    got = [(o.group, o.object_id, o.payload, o.extensions) for o in objects(h)]
    assert got == [
        (1, 0, bytes(big), ((0x20, 5),)),
        (1, 2, b"tail", ()),
        (0, 7, bytes(big), ()),
        (0, 8, b"x", ()),
    ]
