"""Sessions speaking draft-16 (negotiated by ALPN ``moqt-16``) in the in-memory harness.

* negotiation: both ends offering both ALPNs agree on draft-16; a peer offering only ``moq-00``
  gets draft-14; CLIENT_SETUP / SERVER_SETUP carry no version (d16 §9.3);
* every draft-14 scenario of ``test_session.py`` that does not write draft-14 bytes by hand runs
  again over draft-16 (same API, same events, draft-16 on the wire);
* what draft-16 changes: answers as REQUEST_OK / REQUEST_ERROR routed by request id,
  PUBLISH_NAMESPACE_DONE by request id, SUBSCRIBE_NAMESPACE on its own bidirectional stream
  with NAMESPACE / NAMESPACE_DONE, REQUEST_UPDATE refused, and each malformed case closing the
  session with the draft's code;
* the KV digest extension header crossing from a draft-16 session to a draft-14 one and back
  unchanged (re-encoded per hop: draft-16 delta-encodes extension types).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import tests.moqt.test_session as d14
from ray_kvmoq.moqt.codec import (
    ClientSetup,
    Location,
    MessageParameters,
    Namespace,
    NamespaceDone,
    RequestErrorMessage,
    RequestOk,
    RequestUpdate,
    Subscribe,
    SubscribeNamespace,
)
from ray_kvmoq.moqt.codec.control import ControlStreamParser, encode_control
from ray_kvmoq.moqt.codec.errors import LocalProtocolError, MoqtError
from ray_kvmoq.moqt.codec.subscribe import filter_bytes
from ray_kvmoq.moqt.codec.types import (
    ALPN,
    DRAFT_14,
    DRAFT_16,
    FilterType,
    GroupOrder,
    MessageParameterD16,
    SessionError,
    SubscribeErrorCode,
)
from ray_kvmoq.moqt.events import (
    NamespaceDoneReceived,
    NamespaceReceived,
    ObjectReceived,
    PublishNamespaceDone,
    PublishNamespaceRequested,
    SetupCompleted,
    SubscribeNamespaceAccepted,
    SubscribeNamespaceRejected,
    SubscribeNamespaceRequested,
    SubscribeRejected,
    SubscribeRequested,
    SubscribeUpdated,
    TrackStatusReceived,
    UnsubscribedNamespace,
)
from ray_kvmoq.moqt.session import MoqtSession, SessionConfig
from tests.moqt.harness import Harness

BOTH = ("moqt-16", ALPN)
NS = (b"kv", b"m")
TRACK = b"t"
KV_DIGEST = 0x4B57  # kvcache.integrity.KV_DIGEST_EXTENSION (the relay side never imports it)


class Harness16(Harness):
    """The harness with both ends offering ``moqt-16`` before ``moq-00``."""

    def __init__(self, **kwargs: object) -> None:
        kwargs.setdefault("client_alpns", BOTH)
        kwargs.setdefault("server_alpns", BOTH)
        super().__init__(**kwargs)  # type: ignore[arg-type]


def _control_messages(h: Harness, peer_name: str, stream_id: int = 0) -> list[object]:
    """Every control message ``peer_name`` received on ``stream_id``, decoded as draft-16."""
    peer = h.client if peer_name == "client" else h.server
    return ControlStreamParser(version=DRAFT_16, allow_empty_namespace_prefix=True).feed(
        h.received(peer, stream_id)
    )


# ------------------------------------------------------------------------------ negotiation


def test_both_ends_offering_both_alpns_negotiate_draft16() -> None:
    h = Harness16()
    assert h.client.session.version == h.server.session.version == DRAFT_16
    assert h.server.last(SetupCompleted).version == DRAFT_16
    assert h.client.last(SetupCompleted).version == DRAFT_16


@pytest.mark.parametrize("side", ["client", "server"])
def test_peer_offering_only_moq00_gets_draft14(side: str) -> None:
    alpns = {"client_alpns": (ALPN,)} if side == "client" else {"server_alpns": (ALPN,)}
    h = Harness16(**alpns)  # type: ignore[arg-type]
    assert h.client.session.version == h.server.session.version == DRAFT_14
    assert h.server.last(SetupCompleted).version == DRAFT_14


def test_draft16_client_setup_carries_no_version_list() -> None:
    h = Harness16()
    sent = h.received(h.server, 0)
    setup = encode_control(
        ClientSetup(versions=(), parameters=h.server.last(SetupCompleted).parameters),
        version=DRAFT_16,
    )
    assert sent.startswith(setup)  # type 0x20, length, then the parameter count at once
    assert sent[0] == 0x20


def test_session_created_with_moqt16_alpn_speaks_draft16_before_any_event() -> None:
    h = Harness16(setup=False)
    session = MoqtSession(h.client.quic, is_client=True, alpn="moqt-16")
    assert session.version == DRAFT_16


def test_unknown_alpn_fails_version_negotiation() -> None:
    h = Harness16(setup=False)
    with pytest.raises(MoqtError) as info:
        MoqtSession(h.client.quic, is_client=True, alpn="moqt-99")
    assert info.value.error_code == SessionError.VERSION_NEGOTIATION_FAILED


# ------------------------------------------------------------------------------ d14 scenarios

_SCENARIOS: list[Callable[[], None]] = [
    d14.test_auth_token_aliases,
    d14.test_cancel_namespace_answers_pending_announcements_with_error,
    d14.test_client_close_is_seen_by_server,
    d14.test_data_crossing_unsubscribe_is_dropped,
    d14.test_datagram_objects,
    d14.test_events_after_termination_are_ignored,
    d14.test_fetch_cancel_resets_stream,
    d14.test_fetch_rejected_with_unknown_code,
    d14.test_fetch_stream_crossing_cancel_is_stopped,
    d14.test_goaway_drains,
    d14.test_goaway_timeout_closes,
    d14.test_joining_fetch_needs_largest_object_subscription_locally,
    d14.test_large_window_replenishes_in_batches,
    d14.test_message_parameters_survive,
    d14.test_objects_before_subscribe_ok_are_parked,
    d14.test_parked_stream_reset_releases_its_budget,
    d14.test_publish_alias_collision_is_local_error,
    d14.test_publish_done_before_data_waits_for_streams,
    d14.test_publish_error,
    d14.test_publish_flow,
    d14.test_publish_namespace_lifecycle,
    d14.test_publish_namespace_reject_and_cancel,
    d14.test_reject_fetch_after_stream_opened_resets_it,
    d14.test_reject_subscribe,
    d14.test_reject_subscribe_with_unauthorized_token,
    d14.test_repeated_subscribe_unsubscribe_probes,
    d14.test_request_id_flow_control_and_replenishment,
    d14.test_reset_fetch_stream_after_ok_ends_the_fetch,
    d14.test_server_refuses_setup_token_by_closing,
    d14.test_session_without_config,
    d14.test_setup_only_from_client,
    d14.test_standalone_fetch,
    d14.test_stop_sending_is_answered_with_reset,
    d14.test_subscribe_namespace_rejected,
    d14.test_subscribe_objects_and_publish_done,
    d14.test_track_status,
    d14.test_unsubscribe_resets_streams_and_drops_late_writes,
    d14.test_zero_window_grants_nothing,
]


@pytest.mark.parametrize("scenario", _SCENARIOS, ids=lambda f: f.__name__[5:])
def test_draft14_scenario_behaves_the_same_over_draft16(
    scenario: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(d14, "Harness", Harness16)
    scenario()


@pytest.mark.parametrize("size", [100, 70_000])
def test_draft16_subgroup_objects_of_any_size_arrive_intact(
    size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(d14, "Harness", Harness16)
    d14.test_large_payload_views_are_written_after_their_header(size)


@pytest.mark.parametrize(
    ("absolute", "joining_start", "start"),
    [(False, 2, Location(1, 0)), (False, 9, Location(0, 0)), (True, 2, Location(2, 0))],
)
def test_draft16_joining_fetch_resolves_like_draft14(
    absolute: bool, joining_start: int, start: Location, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(d14, "Harness", Harness16)
    d14.test_joining_fetch(absolute, joining_start, start)


@pytest.mark.parametrize(
    ("filter_type", "start", "end_group"),
    [
        (FilterType.NEXT_GROUP_START, None, None),
        (FilterType.LARGEST_OBJECT, None, None),
        (FilterType.ABSOLUTE_START, Location(1, 2), None),
        (FilterType.ABSOLUTE_RANGE, Location(1, 2), 9),
    ],
)
def test_subscribe_fields_travel_as_draft16_parameters(
    filter_type: FilterType, start: Location | None, end_group: int | None
) -> None:
    h = Harness16()
    rid = h.client.session.subscribe(
        NS,
        TRACK,
        filter_type=filter_type,
        start=start,
        end_group=end_group,
        subscriber_priority=7,
        group_order=GroupOrder.DESCENDING,
        forward=False,
    )
    h.pump()
    req = h.server.last(SubscribeRequested)
    assert (req.request_id, req.filter_type, req.start, req.end_group) == (
        rid,
        filter_type,
        start,
        end_group,
    )
    assert (req.subscriber_priority, req.group_order, req.forward) == (
        7,
        GroupOrder.DESCENDING,
        False,
    )
    sent = [m for m in _control_messages(h, "server") if isinstance(m, Subscribe)]
    params = {k for k, _ in sent[0].parameters.items}
    assert {
        MessageParameterD16.SUBSCRIBER_PRIORITY,
        MessageParameterD16.GROUP_ORDER,
        MessageParameterD16.FORWARD,
    } <= params
    assert (MessageParameterD16.SUBSCRIPTION_FILTER in params) == (
        filter_type is not FilterType.LARGEST_OBJECT
    )


# ------------------------------------------------------------------------------ answers


def test_subscribe_error_goes_out_as_request_error_with_its_code() -> None:
    h = Harness16()
    rid = h.client.session.subscribe(NS, TRACK)
    h.pump()
    h.server.session.reject_subscribe(rid, SubscribeErrorCode.TRACK_DOES_NOT_EXIST, "no")
    h.pump()
    wire = [m for m in _control_messages(h, "client") if isinstance(m, RequestErrorMessage)]
    assert wire == [
        RequestErrorMessage(
            request_id=rid, error_code=SubscribeErrorCode.TRACK_DOES_NOT_EXIST, reason="no"
        )
    ]
    rejected = h.client.last(SubscribeRejected)
    assert (rejected.request_id, rejected.error_code) == (rid, 4)


def test_track_status_ok_goes_out_as_request_ok_with_largest_object() -> None:
    h = Harness16()
    rid = h.client.session.track_status(NS, TRACK)
    h.pump()
    h.server.session.track_status_ok(rid, largest=Location(3, 7), expires=9)
    h.pump()
    assert any(isinstance(m, RequestOk) for m in _control_messages(h, "client"))
    got = h.client.last(TrackStatusReceived)
    assert (got.largest, got.expires) == (Location(3, 7), 9)


def test_request_error_for_a_request_never_sent_closes_with_protocol_violation() -> None:
    h = Harness16()
    h.inject(
        h.server,
        0,
        encode_control(RequestErrorMessage(request_id=40, error_code=0), version=DRAFT_16),
    )
    assert h.close_code(h.server) == SessionError.PROTOCOL_VIOLATION


def test_request_ok_answering_a_subscribe_closes_with_protocol_violation() -> None:
    h = Harness16()
    rid = h.client.session.subscribe(NS, TRACK)
    h.pump()
    h.inject(h.server, 0, encode_control(RequestOk(request_id=rid), version=DRAFT_16))
    assert h.close_code(h.server) == SessionError.PROTOCOL_VIOLATION


def test_request_error_crossing_our_cancel_is_dropped_quietly() -> None:
    h = Harness16()
    rid = h.client.session.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.client.session.fetch_cancel(rid)
    h.pump()
    h.inject(
        h.server,
        0,
        encode_control(RequestErrorMessage(request_id=rid, error_code=0), version=DRAFT_16),
    )
    assert h.client.terminated is None


def _raw_update(h: Harness, existing: int, **params: int | bytes) -> RequestUpdate:
    """The client writes a REQUEST_UPDATE by hand (our sessions do not send one yet) and
    reads the answer raw."""
    items = tuple((int(getattr(MessageParameterD16, k)), v) for k, v in params.items())
    update = RequestUpdate(
        request_id=h.client.session.next_request_id,
        existing_request_id=existing,
        parameters=MessageParameters(items=items),
    )
    h.client.raw = True
    h.inject(h.client, 0, encode_control(update, version=DRAFT_16))
    return update


def test_request_update_widens_a_subscription_and_is_answered_with_request_ok() -> None:
    h = Harness16()
    rid = h.client.session.subscribe(
        NS, TRACK, filter_type=FilterType.ABSOLUTE_RANGE, start=Location(1, 0), end_group=3
    )
    h.pump()
    h.server.session.accept_subscribe(rid, largest=Location(2, 0))
    h.pump()
    wider = filter_bytes(FilterType.ABSOLUTE_RANGE, Location(0, 0), 9)
    update = _raw_update(h, rid, FORWARD=0, SUBSCRIBER_PRIORITY=3, SUBSCRIPTION_FILTER=wider)
    got = h.server.last(SubscribeUpdated)
    assert (got.request_id, got.update_request_id) == (rid, update.request_id)
    assert (got.start, got.end_group, got.forward, got.subscriber_priority) == (
        Location(0, 0),
        9,
        False,
        3,
    )
    assert RequestOk(request_id=update.request_id) in _control_messages(h, "client")
    assert h.server.terminated is None


def test_subscribe_update_over_draft16_sends_request_update_that_may_widen() -> None:
    h = Harness16()
    c = h.client.session
    rid = c.subscribe(
        NS, TRACK, filter_type=FilterType.ABSOLUTE_RANGE, start=Location(2, 0), end_group=4
    )
    h.pump()
    h.server.session.accept_subscribe(rid)
    h.pump()
    upd = c.subscribe_update(rid, start=Location(0, 0), end_group=9, forward=False)
    h.pump()
    got = h.server.last(SubscribeUpdated)
    assert (got.request_id, got.update_request_id, got.start, got.end_group, got.forward) == (
        rid,
        upd,
        Location(0, 0),
        9,
        False,
    )
    sent = [m for m in _control_messages(h, "server") if isinstance(m, RequestUpdate)]
    assert [(m.request_id, m.existing_request_id) for m in sent] == [(upd, rid)]
    assert RequestOk(request_id=upd) in _control_messages(h, "client")
    assert h.client.terminated is None and h.server.terminated is None
    # A second update after the first was answered still routes its own answer.
    c.subscribe_update(rid, start=Location(1, 0))
    h.pump()
    assert h.server.last(SubscribeUpdated).end_group is None
    assert h.client.terminated is None and h.server.terminated is None


def test_request_update_of_a_fetch_is_refused_with_not_supported() -> None:
    h = Harness16()
    fid = h.client.session.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    update = _raw_update(h, fid, FORWARD=0)
    errors = [m for m in _control_messages(h, "client") if isinstance(m, RequestErrorMessage)]
    assert [(e.request_id, e.error_code) for e in errors] == [
        (update.request_id, SubscribeErrorCode.NOT_SUPPORTED)
    ]
    assert h.server.terminated is None


@pytest.mark.parametrize(
    ("existing", "params"),
    [(40, {}), (0, {"FORWARD": 2}), (0, {"SUBSCRIBER_PRIORITY": 256})],
    ids=["unknown existing id", "forward 2", "priority 256"],
)
def test_malformed_request_update_closes_with_protocol_violation(
    existing: int, params: dict[str, int]
) -> None:
    h = Harness16()
    rid = h.client.session.subscribe(NS, TRACK)
    h.pump()
    h.server.session.accept_subscribe(rid)
    h.pump()
    _raw_update(h, existing, **params)
    assert h.close_code(h.client) == SessionError.PROTOCOL_VIOLATION


# ------------------------------------------------------------------------------ namespaces


def test_publish_namespace_done_names_each_request_id() -> None:
    h = Harness16()
    c, s = h.client.session, h.server.session
    first = c.publish_namespace(NS)
    second = c.publish_namespace(NS)
    h.pump()
    for rid in (first, second):
        s.accept_publish_namespace(rid)
    h.pump()
    c.publish_namespace_done(NS)
    h.pump()
    done = [m for m in _control_messages(h, "server") if type(m).__name__ == "PublishNamespaceDone"]
    assert [m.request_id for m in done] == [first, second]  # type: ignore[attr-defined]
    assert sorted(rid for e in h.server.of_type(PublishNamespaceDone) for rid in e.request_ids) == [
        first,
        second,
    ]


def test_subscribe_namespace_runs_on_its_own_stream_with_namespace_messages() -> None:
    h = Harness16()
    c, s = h.client.session, h.server.session
    rid = c.subscribe_namespace((b"kv",))
    h.pump()
    req = h.server.last(SubscribeNamespaceRequested)
    assert req.request_id == rid and req.track_namespace_prefix == (b"kv",)
    assert not [m for m in _control_messages(h, "server") if isinstance(m, SubscribeNamespace)]
    s.accept_subscribe_namespace(rid)
    s.namespace(rid, (b"kv", b"m1"))
    s.namespace(rid, (b"kv", b"m2"))
    s.namespace_done(rid, (b"kv", b"m1"))
    h.pump()
    on_stream = _control_messages(h, "client", 4)
    assert on_stream == [
        RequestOk(request_id=rid),
        Namespace(track_namespace_suffix=(b"m1",)),
        Namespace(track_namespace_suffix=(b"m2",)),
        NamespaceDone(track_namespace_suffix=(b"m1",)),
    ]
    assert h.client.last(SubscribeNamespaceAccepted).request_id == rid
    assert [e.track_namespace for e in h.client.of_type(NamespaceReceived)] == [
        (b"kv", b"m1"),
        (b"kv", b"m2"),
    ]
    assert h.client.last(NamespaceDoneReceived).track_namespace == (b"kv", b"m1")
    c.unsubscribe_namespace((b"kv",))  # closing the stream ends it (d16 §9.25)
    h.pump()
    assert h.server.last(UnsubscribedNamespace).request_ids == (rid,)
    assert h.client.terminated is None and h.server.terminated is None


def test_rejected_subscribe_namespace_gets_request_error_then_fin_on_its_stream() -> None:
    h = Harness16()
    rid = h.client.session.subscribe_namespace((b"kv",))
    h.pump()
    h.server.session.reject_subscribe_namespace(rid, 5, "overlap")
    h.pump()
    assert _control_messages(h, "client", 4) == [
        RequestErrorMessage(request_id=rid, error_code=5, reason="overlap")
    ]
    assert any(e.end_stream for e in h.client.quic_events if getattr(e, "stream_id", -1) == 4)
    assert h.client.last(SubscribeNamespaceRejected).error_code == 5
    assert h.client.terminated is None


def test_namespace_outside_the_prefix_or_unsent_is_a_local_error() -> None:
    h = Harness16()
    rid = h.client.session.subscribe_namespace((b"kv",))
    h.pump()
    with pytest.raises(LocalProtocolError):
        h.server.session.namespace(rid, (b"kv", b"m"))  # not accepted yet
    h.server.session.accept_subscribe_namespace(rid)
    with pytest.raises(LocalProtocolError):
        h.server.session.namespace(rid, (b"other",))
    with pytest.raises(LocalProtocolError):
        h.server.session.namespace_done(rid, (b"kv", b"m"))


def test_namespace_done_before_its_namespace_closes_with_protocol_violation() -> None:
    h = Harness16()
    rid = h.client.session.subscribe_namespace((b"kv",))
    h.pump()
    h.server.session.accept_subscribe_namespace(rid)
    h.pump()
    h.inject(
        h.server, 4, encode_control(NamespaceDone(track_namespace_suffix=(b"m",)), version=DRAFT_16)
    )
    assert h.close_code(h.server) == SessionError.PROTOCOL_VIOLATION


def test_second_answer_on_a_subscribe_namespace_stream_closes_with_protocol_violation() -> None:
    h = Harness16()
    rid = h.client.session.subscribe_namespace((b"kv",))
    h.pump()
    h.server.session.accept_subscribe_namespace(rid)
    h.pump()
    h.inject(h.server, 4, encode_control(RequestOk(request_id=rid), version=DRAFT_16))
    assert h.close_code(h.server) == SessionError.PROTOCOL_VIOLATION


def test_subscribe_namespace_on_the_control_stream_closes_with_protocol_violation() -> None:
    h = Harness16()
    msg = SubscribeNamespace(request_id=0, track_namespace_prefix=(b"kv",))
    h.client.session._flow.next_request_id += 2
    h.inject(h.client, 0, encode_control(msg, version=DRAFT_16))
    assert h.close_code(h.client) == SessionError.PROTOCOL_VIOLATION


def test_namespace_on_the_control_stream_closes_with_protocol_violation() -> None:
    h = Harness16()
    h.inject(
        h.server, 1, encode_control(Namespace(track_namespace_suffix=(b"m",)), version=DRAFT_16)
    )
    assert h.close_code(h.server) == SessionError.PROTOCOL_VIOLATION


def test_other_request_opening_a_bidirectional_stream_closes_with_protocol_violation() -> None:
    h = Harness16()
    sid = h.client.quic.get_next_available_stream_id(is_unidirectional=False)
    h.inject(h.client, sid, encode_control(RequestOk(request_id=0), version=DRAFT_16))
    assert h.close_code(h.client) == SessionError.PROTOCOL_VIOLATION


def test_publish_namespace_reaches_the_peer_over_draft16() -> None:
    h = Harness16()
    rid = h.client.session.publish_namespace(NS)
    h.pump()
    assert h.server.last(PublishNamespaceRequested).request_id == rid


def test_request_overtaken_on_another_stream_is_accepted_once() -> None:
    """d16 requests use several streams, which QUIC does not order: SUBSCRIBE_NAMESPACE 0 on
    its stream may arrive after SUBSCRIBE 2 on the control stream; a repeat of 0 is refused."""
    h = Harness16()
    h.client.session._flow.next_request_id = 4  # both written by hand below
    sub = Subscribe(request_id=2, track_namespace=NS, track_name=TRACK)
    h.inject(h.client, 0, encode_control(sub, version=DRAFT_16))
    subns = SubscribeNamespace(request_id=0, track_namespace_prefix=(b"kv",))
    h.inject(h.client, 4, encode_control(subns, version=DRAFT_16))
    assert h.server.last(SubscribeRequested).request_id == 2
    assert h.server.last(SubscribeNamespaceRequested).request_id == 0
    assert h.server.terminated is None
    h.inject(h.client, 8, encode_control(subns, version=DRAFT_16))
    assert h.close_code(h.client) == SessionError.INVALID_REQUEST_ID


def test_draft14_request_ids_must_still_come_in_sequence() -> None:
    h = Harness()
    h.client.session._flow.next_request_id = 4
    sub = Subscribe(request_id=2, track_namespace=NS, track_name=TRACK)
    h.inject(h.client, 0, encode_control(sub))
    assert h.close_code(h.client) == SessionError.INVALID_REQUEST_ID


# ------------------------------------------------------------------------------ data plane


def _subscribed(h: Harness) -> tuple[int, int]:
    rid = h.client.session.subscribe(NS, TRACK)
    h.pump()
    alias = h.server.session.accept_subscribe(rid)
    h.pump()
    return rid, alias


def test_kv_digest_extension_crosses_draft16_and_draft14_hops_unchanged() -> None:
    digest = bytes(range(32))
    extensions = ((0x20, 7), (KV_DIGEST, digest))
    hops = [Harness16(), Harness(), Harness16()]  # publisher -> d16 -> relay -> d14 -> d16
    sent = [(0, b"kv-payload", extensions), (1, b"more", ((KV_DIGEST, digest[::-1]),))]
    for h in hops:
        rid, _ = _subscribed(h)
        sid = h.server.session.open_subgroup(rid, 0, with_extensions=True)
        h.server.session.write_objects(sid, sent, end_stream=True)
        h.pump()
        got = h.client.of_type(ObjectReceived)
        # What a relay does: re-encode the decoded extensions on its next session.
        sent = [(o.object_id, o.payload, o.extensions) for o in got]
    assert [(oid, payload, dict(ext)) for oid, payload, ext in sent] == [
        (0, b"kv-payload", dict(extensions)),
        (1, b"more", {KV_DIGEST: digest[::-1]}),
    ]
    assert hops[0].client.session.version == DRAFT_16
    assert hops[1].client.session.version == DRAFT_14


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_random_api_walks_never_violate_over_draft16(data: st.DataObject) -> None:
    h = Harness16(server_config=SessionConfig(max_request_id=30))
    assert h.client.session.version == DRAFT_16
    opened: dict[int, int] = {}
    for _ in range(data.draw(st.integers(1, 25))):
        try:
            d14._walk_step(h, data, opened)
        except LocalProtocolError:
            pass  # the application asked for something the protocol forbids right now
    h.pump()
    h.advance(10.0)
    assert h.client.terminated is None, h.client.terminated
    assert h.server.terminated is None, h.server.terminated
