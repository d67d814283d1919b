"""Session-level malformed input: raw bytes on a real QuicConnection's control or data streams.

Each case scripts one peer's QUIC connection by hand (bypassing its session), lets the other
side's :class:`MoqtSession` process the bytes, and asserts the exact session error code that
went out in the QUIC CONNECTION_CLOSE (as seen by the scripted side) and that the closing
session reported the same code in its :class:`SessionTerminated`. Request-level errors are
asserted on the response. No case may raise, hang, or allocate what a length field claims.
"""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from aioquic.quic.events import StreamDataReceived
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ray_kvmoq.moqt.codec import (
    AuthToken,
    ClientSetup,
    Fetch,
    FetchCancel,
    FetchError,
    FetchOk,
    Goaway,
    Location,
    MaxRequestId,
    Message,
    MessageParameters,
    Publish,
    PublishDone,
    PublishError,
    PublishNamespace,
    PublishNamespaceError,
    PublishNamespaceOk,
    PublishOk,
    ServerSetup,
    SetupParameters,
    Subscribe,
    SubscribeError,
    SubscribeNamespaceError,
    SubscribeNamespaceOk,
    SubscribeOk,
    SubscribeUpdate,
    TrackStatus,
    TrackStatusError,
    TrackStatusOk,
    Unsubscribe,
)
from ray_kvmoq.moqt.codec.control import encode_control
from ray_kvmoq.moqt.codec.types import (
    DRAFT_14,
    FetchErrorCode,
    FetchType,
    FilterType,
    GroupOrder,
    PublishDoneCode,
    SessionError,
    TokenAliasType,
)
from ray_kvmoq.moqt.codec.wire import encode_varint
from ray_kvmoq.moqt.events import (
    FetchRejected,
    PublishDoneReceived,
    SessionTerminated,
    SubscribeRequested,
)
from ray_kvmoq.moqt.session import SessionConfig

from .harness import Harness, Peer

PV = SessionError.PROTOCOL_VIOLATION
NS = (b"kv", b"m1")
TRACK = b"t"


@dataclass(frozen=True)
class Case:
    name: str
    run: Callable[[], tuple[Harness, Peer]]
    """Builds the scenario; returns the harness and the side that should *see* the close."""
    code: int


CASES: list[Case] = []


def case(code: int) -> Callable[[Callable[[], tuple[Harness, Peer]]], None]:
    def register(fn: Callable[[], tuple[Harness, Peer]]) -> None:
        CASES.append(Case(fn.__name__, fn, code))

    return register


def enc(msg: Message) -> bytes:
    return encode_control(msg)


def frame(msg_type: int, payload: bytes) -> bytes:
    """A control frame with an arbitrary payload (the length is computed)."""
    return encode_varint(msg_type) + len(payload).to_bytes(2, "big") + payload


def c2s(data: bytes, **kwargs: object) -> tuple[Harness, Peer]:
    """A set-up session; ``data`` is written on the client's control stream to the server."""
    h = Harness(**kwargs)  # type: ignore[arg-type]
    h.inject(h.client, 0, data)
    return h, h.client


def s2c(data: bytes, **kwargs: object) -> tuple[Harness, Peer]:
    """A set-up session; ``data`` is written on the server's control stream to the client."""
    h = Harness(**kwargs)  # type: ignore[arg-type]
    h.inject(h.server, 0, data)
    return h, h.server


def pre_setup(data: bytes, **kwargs: object) -> tuple[Harness, Peer]:
    """No CLIENT_SETUP yet: ``data`` is the first thing on the client's control stream."""
    h = Harness(setup=False, **kwargs)  # type: ignore[arg-type]
    h.inject(h.client, 0, data)
    return h, h.client


def with_client_sub(**sub: object) -> Harness:
    """A session where the client subscribed to NS/TRACK (request id 0), not yet answered."""
    h = Harness()
    h.client.session.subscribe(NS, TRACK, **sub)  # type: ignore[arg-type]
    h.pump()
    return h


def accepted_sub(**sub: object) -> Harness:
    """Client subscribed (request id 0) and the server accepted with alias 0, largest {3,4}."""
    h = with_client_sub(**sub)
    h.server.session.accept_subscribe(0, track_alias=0, largest=Location(3, 4))
    h.pump()
    return h


def sub(rid: int, **kwargs: object) -> bytes:
    return enc(Subscribe(request_id=rid, track_namespace=NS, track_name=TRACK, **kwargs))  # type: ignore[arg-type]


def token_param(raw: bytes) -> MessageParameters:
    return MessageParameters(items=((0x03, raw),))


# ------------------------------------------------------------------------------ before setup


@case(PV)
def subscribe_before_client_setup() -> tuple[Harness, Peer]:
    return pre_setup(sub(0))


@case(SessionError.VERSION_NEGOTIATION_FAILED)
def client_setup_unknown_version() -> tuple[Harness, Peer]:
    return pre_setup(enc(ClientSetup(versions=(0xFF00000D,))))


@case(SessionError.VERSION_NEGOTIATION_FAILED)
def client_setup_only_future_versions() -> tuple[Harness, Peer]:
    return pre_setup(enc(ClientSetup(versions=(0xFF000010, 0xFF000012, 1))))


@case(PV)
def server_setup_from_client() -> tuple[Harness, Peer]:
    return pre_setup(enc(ServerSetup()))


@case(PV)
def max_request_id_before_setup() -> tuple[Harness, Peer]:
    return pre_setup(enc(MaxRequestId(max_request_id=10)))


@case(PV)
def goaway_before_setup() -> tuple[Harness, Peer]:
    return pre_setup(enc(Goaway()))


@case(PV)
def unknown_message_type_first() -> tuple[Harness, Peer]:
    return pre_setup(frame(0x3F, b"\x00"))


@case(PV)
def control_stream_fin_right_after_setup() -> tuple[Harness, Peer]:
    h = Harness(setup=False)
    h.inject(h.client, 0, enc(ClientSetup()), fin=True)
    return h, h.client


@case(PV)
def truncated_client_setup_then_fin() -> tuple[Harness, Peer]:
    h = Harness(setup=False)
    h.inject(h.client, 0, enc(ClientSetup())[:-3], fin=True)
    return h, h.client


@case(SessionError.MALFORMED_PATH)
def client_setup_path_without_slash() -> tuple[Harness, Peer]:
    return pre_setup(enc(ClientSetup(parameters=SetupParameters.build(path=b"moq"))))


@case(SessionError.MALFORMED_PATH)
def client_setup_path_with_space() -> tuple[Harness, Peer]:
    return pre_setup(enc(ClientSetup(parameters=SetupParameters.build(path=b"/a b"))))


@case(SessionError.MALFORMED_AUTHORITY)
def client_setup_authority_with_path() -> tuple[Harness, Peer]:
    return pre_setup(enc(ClientSetup(parameters=SetupParameters.build(authority=b"h:1/x"))))


@case(SessionError.MALFORMED_AUTHORITY)
def client_setup_empty_authority() -> tuple[Harness, Peer]:
    return pre_setup(enc(ClientSetup(parameters=SetupParameters.build(authority=b""))))


@case(SessionError.AUTH_TOKEN_CACHE_OVERFLOW)
def setup_token_register_without_cache() -> tuple[Harness, Peer]:
    reg = AuthToken(alias_type=TokenAliasType.REGISTER, alias=1, token_type=0, value=b"x")
    return pre_setup(enc(ClientSetup(parameters=SetupParameters.build(auth_tokens=(reg,)))))


@case(SessionError.UNKNOWN_AUTH_TOKEN_ALIAS)
def setup_token_unknown_alias() -> tuple[Harness, Peer]:
    use = AuthToken(alias_type=TokenAliasType.USE_ALIAS, alias=5)
    return pre_setup(enc(ClientSetup(parameters=SetupParameters.build(auth_tokens=(use,)))))


@case(SessionError.UNKNOWN_AUTH_TOKEN_ALIAS)
def setup_token_delete_unknown_alias() -> tuple[Harness, Peer]:
    delete = AuthToken(alias_type=TokenAliasType.DELETE, alias=5)
    return pre_setup(enc(ClientSetup(parameters=SetupParameters.build(auth_tokens=(delete,)))))


@case(SessionError.KEY_VALUE_FORMATTING_ERROR)
def setup_token_bad_alias_type() -> tuple[Harness, Peer]:
    params = SetupParameters(items=((0x03, b"\x09\x00"),))
    return pre_setup(enc(ClientSetup(parameters=params)))


@case(SessionError.KEY_VALUE_FORMATTING_ERROR)
def setup_token_truncated() -> tuple[Harness, Peer]:
    params = SetupParameters(items=((0x03, b"\x03"),))  # USE_VALUE without a token type
    return pre_setup(enc(ClientSetup(parameters=params)))


@case(SessionError.DUPLICATE_AUTH_TOKEN_ALIAS)
def setup_token_registered_twice() -> tuple[Harness, Peer]:
    reg = AuthToken(alias_type=TokenAliasType.REGISTER, alias=1, token_type=0, value=b"x")
    params = SetupParameters.build(auth_tokens=(reg, reg))
    return pre_setup(
        enc(ClientSetup(parameters=params)),
        server_config=SessionConfig(max_auth_token_cache_size=1000),
    )


@case(PV)
def client_setup_param_overruns_message() -> tuple[Harness, Peer]:
    payload = b"\x01" + encode_varint(DRAFT_14) + b"\x01" + b"\x01\x20abc"  # PATH len 32, 3 B
    return pre_setup(frame(0x20, payload))


@case(PV)
def client_setup_trailing_bytes() -> tuple[Harness, Peer]:
    return pre_setup(frame(0x20, enc(ClientSetup())[3:] + b"\x00"))


@case(PV)
def data_stream_before_setup_times_out() -> tuple[Harness, Peer]:
    h = Harness(setup=False)
    h.inject_uni(h.client, bytes.fromhex("14 07 01 00 80 00 04 61626364"))
    h.advance(3.0)
    return h, h.client


# ------------------------------------------------------------------------------ session state


@case(PV)
def second_client_setup() -> tuple[Harness, Peer]:
    return c2s(enc(ClientSetup()))


@case(PV)
def second_server_setup() -> tuple[Harness, Peer]:
    return s2c(enc(ServerSetup()))


@case(SessionError.VERSION_NEGOTIATION_FAILED)
def server_selects_unoffered_version() -> tuple[Harness, Peer]:
    h = Harness(raw_server=True)
    h.client.session.setup()
    h.pump()
    h.inject(h.server, 0, enc(ServerSetup(selected_version=0xFF00000D)))
    return h, h.server


@case(PV)
def server_sends_client_setup() -> tuple[Harness, Peer]:
    h = Harness(raw_server=True)
    h.client.session.setup()
    h.pump()
    h.inject(h.server, 0, enc(ClientSetup()))
    return h, h.server


@case(PV)
def request_before_server_setup() -> tuple[Harness, Peer]:
    h = Harness(raw_server=True)
    h.client.session.setup()
    h.pump()
    h.inject(h.server, 0, sub(1))
    return h, h.server


@case(PV)
def second_goaway() -> tuple[Harness, Peer]:
    return s2c(enc(Goaway()) + enc(Goaway()))


@case(PV)
def goaway_with_uri_from_client() -> tuple[Harness, Peer]:
    return c2s(enc(Goaway(new_session_uri=b"moqt://elsewhere")))


@case(PV)
def max_request_id_decreases() -> tuple[Harness, Peer]:
    return c2s(enc(MaxRequestId(max_request_id=10)))  # client granted 1000 in SETUP


@case(PV)
def max_request_id_unchanged() -> tuple[Harness, Peer]:
    return c2s(enc(MaxRequestId(max_request_id=1000)))


@case(PV)
def unknown_message_type_after_setup() -> tuple[Harness, Peer]:
    return c2s(frame(0x40, b""))


@case(PV)
def reserved_setup_type_0x40() -> tuple[Harness, Peer]:
    return c2s(frame(0x40, enc(ClientSetup())[3:]))


@case(PV)
def payload_longer_than_fields() -> tuple[Harness, Peer]:
    return c2s(frame(0x0A, b"\x00\x00"))  # UNSUBSCRIBE with one extra byte


@case(PV)
def payload_shorter_than_fields() -> tuple[Harness, Peer]:
    return c2s(frame(0x03, b"\x00\x01"))  # SUBSCRIBE cut inside the namespace


@case(PV)
def huge_declared_length_then_fin() -> tuple[Harness, Peer]:
    h = Harness()
    h.inject(h.client, 0, b"\x03\xff\xff" + b"\x00" * 10, fin=True)
    return h, h.client


@case(PV)
def control_stream_fin_after_setup() -> tuple[Harness, Peer]:
    h = Harness()
    h.inject(h.client, 0, b"", fin=True)
    return h, h.client


@case(PV)
def control_stream_reset() -> tuple[Harness, Peer]:
    h = Harness()
    h.client.quic.reset_stream(0, 0)
    h.pump()
    return h, h.client


@case(PV)
def control_stream_stop_sending() -> tuple[Harness, Peer]:
    h = Harness()
    h.client.quic.stop_stream(0, 0)
    h.pump()
    return h, h.client


@case(PV)
def second_bidirectional_stream() -> tuple[Harness, Peer]:
    h = Harness()
    h.inject(h.client, 4, sub(0))
    return h, h.client


@case(PV)
def server_initiated_bidirectional_stream() -> tuple[Harness, Peer]:
    h = Harness()
    h.inject(h.server, 1, b"\x00")
    return h, h.server


# ------------------------------------------------------------------------------ request ids


@case(SessionError.INVALID_REQUEST_ID)
def request_id_wrong_parity() -> tuple[Harness, Peer]:
    return c2s(sub(1))


@case(SessionError.INVALID_REQUEST_ID)
def request_id_skips_ahead() -> tuple[Harness, Peer]:
    return c2s(sub(2))


@case(SessionError.INVALID_REQUEST_ID)
def request_id_reused() -> tuple[Harness, Peer]:
    return c2s(sub(0) + sub(0))


@case(SessionError.INVALID_REQUEST_ID)
def request_id_goes_back() -> tuple[Harness, Peer]:
    return c2s(
        sub(0) + sub(2) + enc(TrackStatus(request_id=0, track_namespace=NS, track_name=TRACK))
    )


@case(SessionError.INVALID_REQUEST_ID)
def server_request_with_even_id() -> tuple[Harness, Peer]:
    return s2c(sub(0))


@case(SessionError.INVALID_REQUEST_ID)
def fetch_wrong_parity() -> tuple[Harness, Peer]:
    return c2s(
        enc(
            Fetch(
                request_id=3,
                fetch_type=FetchType.STANDALONE,
                track_namespace=NS,
                track_name=TRACK,
                start=Location(0, 0),
                end=Location(1, 0),
            )
        )
    )


@case(SessionError.INVALID_REQUEST_ID)
def subscribe_update_reuses_subscription_id() -> tuple[Harness, Peer]:
    update = SubscribeUpdate(request_id=0, subscription_request_id=0, start=Location(0, 0))
    return c2s(sub(0) + enc(update))


@case(SessionError.TOO_MANY_REQUESTS)
def request_beyond_max_request_id() -> tuple[Harness, Peer]:
    return c2s(sub(0) + sub(2) + sub(4), server_config=SessionConfig(max_request_id=4))


@case(SessionError.TOO_MANY_REQUESTS)
def request_with_zero_window() -> tuple[Harness, Peer]:
    return c2s(
        enc(PublishNamespace(request_id=0, track_namespace=NS)),
        server_config=SessionConfig(max_request_id=0),
    )


@case(SessionError.TOO_MANY_REQUESTS)
def server_request_beyond_client_window() -> tuple[Harness, Peer]:
    msg = enc(TrackStatus(request_id=1, track_namespace=NS, track_name=TRACK))
    return s2c(msg, client_config=SessionConfig(max_request_id=1))


# ------------------------------------------------------------------------------ responses


def _unknown_response(msg: Message) -> tuple[Harness, Peer]:
    return c2s(enc(msg))


@case(PV)
def subscribe_ok_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(SubscribeOk(request_id=1, track_alias=0))


@case(PV)
def subscribe_error_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(SubscribeError(request_id=1, error_code=0))


@case(PV)
def fetch_ok_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(FetchOk(request_id=1, end=Location(0, 0)))


@case(PV)
def fetch_error_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(FetchError(request_id=1, error_code=0))


@case(PV)
def publish_ok_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(PublishOk(request_id=1, group_order=GroupOrder.ASCENDING))


@case(PV)
def publish_error_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(PublishError(request_id=1, error_code=0))


@case(PV)
def publish_namespace_ok_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(PublishNamespaceOk(request_id=1))


@case(PV)
def publish_namespace_error_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(PublishNamespaceError(request_id=1, error_code=0))


@case(PV)
def subscribe_namespace_ok_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(SubscribeNamespaceOk(request_id=1))


@case(PV)
def subscribe_namespace_error_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(SubscribeNamespaceError(request_id=1, error_code=0))


@case(PV)
def track_status_ok_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(TrackStatusOk(request_id=1))


@case(PV)
def track_status_error_unknown_request() -> tuple[Harness, Peer]:
    return _unknown_response(TrackStatusError(request_id=1, error_code=0))


@case(PV)
def publish_done_unknown_request() -> tuple[Harness, Peer]:
    return s2c(enc(PublishDone(request_id=0, status_code=0, stream_count=0)))


@case(PV)
def subscribe_ok_for_a_fetch() -> tuple[Harness, Peer]:
    h = Harness()
    h.client.session.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    h.inject(h.server, 0, enc(SubscribeOk(request_id=0, track_alias=0)))
    return h, h.server


@case(PV)
def duplicate_subscribe_ok() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject(h.server, 0, enc(SubscribeOk(request_id=0, track_alias=1)))
    return h, h.server


@case(PV)
def subscribe_error_after_ok() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject(h.server, 0, enc(SubscribeError(request_id=0, error_code=0)))
    return h, h.server


@case(PV)
def subscribe_ok_after_error() -> tuple[Harness, Peer]:
    h = with_client_sub()
    h.server.session.reject_subscribe(0, 4)
    h.pump()
    h.inject(h.server, 0, enc(SubscribeOk(request_id=0, track_alias=1)))
    return h, h.server


@case(PV)
def second_publish_done() -> tuple[Harness, Peer]:
    h = accepted_sub()
    done = enc(PublishDone(request_id=0, status_code=2, stream_count=5))
    h.inject(h.server, 0, done + done)
    return h, h.server


@case(PV)
def duplicate_fetch_ok() -> tuple[Harness, Peer]:
    h = Harness()
    rid = h.client.session.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    ok = enc(FetchOk(request_id=rid, end=Location(1, 0)))
    h.inject(h.server, 0, ok + ok)
    return h, h.server


@case(PV)
def duplicate_publish_namespace_ok() -> tuple[Harness, Peer]:
    h = Harness()
    rid = h.client.session.publish_namespace(NS)
    h.pump()
    h.inject(h.server, 0, enc(PublishNamespaceOk(request_id=rid)) * 2)
    return h, h.server


@case(PV)
def duplicate_track_status_ok() -> tuple[Harness, Peer]:
    h = Harness()
    rid = h.client.session.track_status(NS, TRACK)
    h.pump()
    h.inject(h.server, 0, enc(TrackStatusOk(request_id=rid)) * 2)
    return h, h.server


@case(PV)
def duplicate_publish_ok() -> tuple[Harness, Peer]:
    h = Harness()
    rid, _ = h.client.session.publish(NS, TRACK)
    h.pump()
    h.inject(h.server, 0, enc(PublishOk(request_id=rid, group_order=GroupOrder.ASCENDING)) * 2)
    return h, h.server


@case(PV)
def publish_ok_for_a_subscribe() -> tuple[Harness, Peer]:
    h = with_client_sub()  # the server holds the client's SUBSCRIBE 0 as a publisher
    h.inject(h.client, 0, enc(PublishOk(request_id=0, group_order=GroupOrder.ASCENDING)))
    return h, h.client


@case(PV)
def publish_ok_with_group_order_zero() -> tuple[Harness, Peer]:
    h = Harness()
    rid, _ = h.client.session.publish(NS, TRACK)
    h.pump()
    payload = bytes([rid, 1, 128, 0, 2, 0])  # group order 0 is invalid in PUBLISH_OK
    h.inject(h.server, 0, frame(0x1E, payload))
    return h, h.server


# ------------------------------------------------------------------------------ aliases


@case(SessionError.DUPLICATE_TRACK_ALIAS)
def subscribe_ok_reuses_alias() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.client.session.subscribe(NS, b"other")
    h.pump()
    h.inject(h.server, 0, enc(SubscribeOk(request_id=2, track_alias=0)))
    return h, h.server


@case(SessionError.DUPLICATE_TRACK_ALIAS)
def publish_reuses_alias() -> tuple[Harness, Peer]:
    h = accepted_sub()
    msg = Publish(request_id=1, track_namespace=NS, track_name=b"x", track_alias=0)
    h.inject(h.server, 0, enc(msg))
    return h, h.server


# ------------------------------------------------------------------------------ subscriptions


@case(PV)
def subscribe_update_for_request_never_made() -> tuple[Harness, Peer]:
    update = SubscribeUpdate(request_id=0, subscription_request_id=8, start=Location(0, 0))
    return c2s(enc(update))


@case(PV)
def subscribe_update_moves_start_back() -> tuple[Harness, Peer]:
    h = accepted_sub()  # LargestObject, largest {3,4}: start {3,5}
    update = SubscribeUpdate(request_id=2, subscription_request_id=0, start=Location(3, 4))
    h.inject(h.client, 0, enc(update))
    return h, h.client


@case(PV)
def subscribe_update_widens_end() -> tuple[Harness, Peer]:
    h = accepted_sub(filter_type=FilterType.ABSOLUTE_RANGE, start=Location(1, 0), end_group=5)
    update = SubscribeUpdate(
        request_id=2, subscription_request_id=0, start=Location(1, 0), end_group=7
    )
    h.inject(h.client, 0, enc(update))
    return h, h.client


@case(PV)
def subscribe_update_opens_closed_range() -> tuple[Harness, Peer]:
    h = accepted_sub(filter_type=FilterType.ABSOLUTE_RANGE, start=Location(1, 0), end_group=5)
    update = SubscribeUpdate(request_id=2, subscription_request_id=0, start=Location(1, 0))
    h.inject(h.client, 0, enc(update))
    return h, h.client


@case(PV)
def subscribe_update_end_before_start() -> tuple[Harness, Peer]:
    h = accepted_sub()
    update = SubscribeUpdate(
        request_id=2, subscription_request_id=0, start=Location(9, 0), end_group=4
    )
    h.inject(h.client, 0, enc(update))
    return h, h.client


@case(PV)
def subscribe_range_end_before_start() -> tuple[Harness, Peer]:
    # AbsoluteRange from {5, 0} to group 2 (our encoder refuses to write this).
    return c2s(frame(0x03, b"\x00\x01\x02kv\x01t\x80\x00\x01\x04\x05\x00\x02\x00"))


@case(PV)
def unsubscribe_request_never_made() -> tuple[Harness, Peer]:
    return c2s(enc(Unsubscribe(request_id=40)))


@case(PV)
def fetch_cancel_request_never_made() -> tuple[Harness, Peer]:
    return c2s(enc(FetchCancel(request_id=40)))


@case(PV)
def joining_fetch_against_absolute_start() -> tuple[Harness, Peer]:
    h = with_client_sub(filter_type=FilterType.ABSOLUTE_START, start=Location(0, 0))
    fetch = Fetch(
        request_id=2, fetch_type=FetchType.RELATIVE_JOINING, joining_request_id=0, joining_start=0
    )
    h.inject(h.client, 0, enc(fetch))
    return h, h.client


@case(PV)
def subscribe_filter_type_5() -> tuple[Harness, Peer]:
    return c2s(frame(0x03, b"\x00\x01\x02kv\x01t\x80\x00\x01\x05\x00"))


@case(PV)
def subscribe_forward_2() -> tuple[Harness, Peer]:
    return c2s(frame(0x03, b"\x00\x01\x02kv\x01t\x80\x00\x02\x02\x00"))


@case(PV)
def subscribe_group_order_3() -> tuple[Harness, Peer]:
    return c2s(frame(0x03, b"\x00\x01\x02kv\x01t\x80\x03\x01\x02\x00"))


@case(PV)
def subscribe_namespace_33_fields() -> tuple[Harness, Peer]:
    return c2s(frame(0x03, b"\x00\x21" + b"\x01a" * 33 + b"\x01t\x80\x00\x01\x02\x00"))


@case(PV)
def subscribe_namespace_no_fields() -> tuple[Harness, Peer]:
    return c2s(frame(0x03, b"\x00\x00\x01t\x80\x00\x01\x02\x00"))


@case(PV)
def subscribe_full_track_name_over_4096() -> tuple[Harness, Peer]:
    name = b"n" * 4095
    return c2s(
        frame(0x03, b"\x00\x01\x02kv" + encode_varint(len(name)) + name + b"\x80\x00\x01\x02\x00")
    )


@case(PV)
def subscribe_error_reason_over_1024() -> tuple[Harness, Peer]:
    h = with_client_sub()
    reason = b"r" * 1025
    h.inject(h.server, 0, frame(0x05, b"\x00\x04" + encode_varint(len(reason)) + reason))
    return h, h.server


@case(SessionError.UNKNOWN_AUTH_TOKEN_ALIAS)
def subscribe_token_unknown_alias() -> tuple[Harness, Peer]:
    use = AuthToken(alias_type=TokenAliasType.USE_ALIAS, alias=3)
    return c2s(sub(0, parameters=token_param(use.encode())))


@case(SessionError.KEY_VALUE_FORMATTING_ERROR)
def subscribe_token_malformed() -> tuple[Harness, Peer]:
    return c2s(sub(0, parameters=token_param(b"\x07")))


@case(PV)
def kvp_value_overruns_message() -> tuple[Harness, Peer]:
    return c2s(frame(0x03, b"\x00\x01\x02kv\x01t\x80\x00\x01\x02\x01\x03\x40\x20ab"))


# ------------------------------------------------------------------------------ data plane


@case(PV)
def objects_on_unknown_alias_time_out() -> tuple[Harness, Peer]:
    h = Harness()
    h.inject_uni(h.server, bytes.fromhex("14 07 01 00 80 00 04 61626364"))
    h.advance(3.0)
    return h, h.server


@case(PV)
def objects_on_unknown_alias_exceed_buffer() -> tuple[Harness, Peer]:
    h = Harness(client_config=SessionConfig(unknown_alias_buffer_bytes=10_000))
    for _ in range(3):
        h.inject_uni(h.server, bytes.fromhex("10 07 01 80 00 4f a0") + b"x" * 4000)
    return h, h.server


@case(PV)
def unknown_data_stream_type() -> tuple[Harness, Peer]:
    h = Harness()
    h.inject_uni(h.server, b"\x30\x00\x00")
    return h, h.server


@case(PV)
def datagram_type_in_stream() -> tuple[Harness, Peer]:
    h = Harness()
    h.inject_uni(h.server, b"\x01\x00\x00")
    return h, h.server


@case(PV)
def fetch_stream_for_request_never_made() -> tuple[Harness, Peer]:
    h = Harness()
    h.inject_uni(h.server, b"\x05\x08")
    return h, h.server


@case(PV)
def second_fetch_stream_for_one_fetch() -> tuple[Harness, Peer]:
    h = Harness()
    h.client.session.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    h.inject_uni(h.server, b"\x05\x00")
    h.inject_uni(h.server, b"\x05\x00")
    return h, h.server


@case(PV)
def object_status_2() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject_uni(h.server, bytes.fromhex("10 00 04 80 00 00 02"))
    return h, h.server


@case(PV)
def does_not_exist_with_extensions() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject_uni(h.server, bytes.fromhex("11 00 04 80 00 02 20 01 00 01"))
    return h, h.server


@case(PV)
def fin_inside_object() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject_uni(h.server, bytes.fromhex("10 00 04 80 00 08 6162"), fin=True)
    return h, h.server


@case(PV)
def fin_inside_subgroup_header() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject_uni(h.server, bytes.fromhex("14 00 04"), fin=True)
    return h, h.server


@case(PV)
def object_after_end_of_group() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject_uni(h.server, bytes.fromhex("10 00 04 80 00 00 03 00 01 61"))
    return h, h.server


@case(PV)
def extension_block_overruns() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject_uni(h.server, bytes.fromhex("11 00 04 80 00 03 21 05 61 01 61"))
    return h, h.server


@case(SessionError.INTERNAL_ERROR)
def object_larger_than_cap() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.inject_uni(h.server, bytes.fromhex("10 00 04 80 00") + encode_varint(1 << 40))
    return h, h.server


@case(PV)
def unknown_datagram_type() -> tuple[Harness, Peer]:
    h = accepted_sub()
    h.server.quic.send_datagram_frame(b"\x3f\x00\x00")
    h.pump()
    return h, h.server


@case(PV)
def fetch_object_bad_status() -> tuple[Harness, Peer]:
    h = Harness()
    h.client.session.fetch(NS, TRACK, start=Location(0, 0), end=Location(1, 0))
    h.pump()
    h.inject_uni(h.server, bytes.fromhex("05 00 00 00 00 80 00 00 07"))
    return h, h.server


# ------------------------------------------------------------------------------ the runner


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_malformed_closes_with_exact_code(c: Case) -> None:
    h, victim = c.run()
    code = h.close_code(victim)
    assert code == c.code, f"{c.name}: closed with {code!r}, expected {c.code:#x}"
    closer = h.server if victim is h.client else h.client
    if not closer.raw:
        assert len(closer.of_type(SessionTerminated)) == 1


def _by_code() -> str:
    counts: dict[str, int] = {}
    for c in CASES:
        name = SessionError(c.code).name
        counts[name] = counts.get(name, 0) + 1
    return " ".join(f"{k}={v}" for k, v in sorted(counts.items()))


@pytest.mark.parametrize("summary", [_by_code()], ids=[f"cases={len(CASES)} {_by_code()}"])
def test_case_count(summary: str) -> None:
    """Each scenario is one distinct input, closing with its own draft code (counted by code)."""
    assert len({c.name for c in CASES}) == len(CASES) >= 60
    assert summary


# ------------------------------------------------------------------------------ request errors
# Malformed-but-answerable requests get an exact request error, not a session close.


def test_joining_fetch_unknown_subscription_gets_invalid_joining_request_id() -> None:
    h = Harness()
    c = h.client.session
    fid = c.joining_fetch(c.subscribe(NS, TRACK), 0)
    h.pump()
    h.server.session.reject_subscribe(0, 4)
    h.pump()
    fid = c.next_request_id
    c._flow.next_request_id += 2
    c._requests.fetch_out[fid] = c._requests._new_fetch(fid, serving=False)
    fetch = Fetch(
        request_id=fid, fetch_type=FetchType.ABSOLUTE_JOINING, joining_request_id=0, joining_start=0
    )
    h.inject(h.client, 0, enc(fetch))
    rej = h.client.last(FetchRejected)
    assert (rej.request_id, rej.error_code) == (fid, FetchErrorCode.INVALID_JOINING_REQUEST_ID)
    assert h.server.terminated is None


def test_late_unsubscribe_and_update_for_ended_subscription_are_ignored() -> None:
    h = accepted_sub()
    h.server.session.publish_done(0, 2)
    h.pump()
    h.inject(h.client, 0, enc(Unsubscribe(request_id=0)))
    update = SubscribeUpdate(request_id=2, subscription_request_id=0, start=Location(9, 0))
    h.inject(h.client, 0, enc(update))
    assert h.server.terminated is None and h.client.terminated is None


def test_data_for_retired_alias_is_stopped_not_fatal() -> None:
    h = accepted_sub()
    h.client.session.unsubscribe(0)
    h.pump()  # the server answers UNSUBSCRIBE with PUBLISH_DONE: alias 0 is retired
    assert h.client.last(PublishDoneReceived).status_code == PublishDoneCode.SUBSCRIPTION_ENDED
    assert not h.client.session._subs.subs_out
    h.inject_uni(h.server, bytes.fromhex("10 00 05 80 00 01 61"))
    h.advance(5.0)
    assert h.client.terminated is None


def test_huge_declared_object_is_rejected_before_allocation() -> None:
    h = accepted_sub()
    tracemalloc.start()
    try:
        h.inject_uni(h.server, bytes.fromhex("10 00 04 80 00") + encode_varint((1 << 62) - 1))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 << 20
    assert h.close_code(h.server) == SessionError.INTERNAL_ERROR


def test_flood_of_small_control_messages_is_bounded() -> None:
    """Many complete but pointless messages: the session keeps no state for them."""
    h = Harness()
    h.inject(h.client, 0, sub(0))
    h.server.session.reject_subscribe(0, 4)
    h.pump()
    h.inject(h.client, 0, enc(Unsubscribe(request_id=0)) * 2000)
    assert h.server.terminated is None
    assert not h.server.session._subs.subs_in
    assert len(h.server.of_type(SubscribeRequested)) == 1


def test_every_case_name_is_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


# ------------------------------------------------------------------------------ Hypothesis
# Random bytes and random sequences of well-formed messages, fed straight to a set-up server
# session as crafted QUIC events: never an exception other than a clean close, at most one
# SessionTerminated, and its code always a draft-14 session error.

_KNOWN_CODES = {int(c) for c in SessionError}


def _soup_message(draw: st.DrawFn) -> bytes:
    rid = draw(st.integers(0, 8))
    alias = draw(st.integers(0, 3))
    loc = Location(draw(st.integers(0, 4)), draw(st.integers(0, 4)))
    choices: list[Message] = [
        Subscribe(request_id=rid, track_namespace=NS, track_name=TRACK),
        Subscribe(
            request_id=rid,
            track_namespace=NS,
            track_name=TRACK,
            filter_type=FilterType.ABSOLUTE_RANGE,
            start=loc,
            end_group=loc.group + 1,
        ),
        SubscribeOk(request_id=rid, track_alias=alias, largest=loc),
        SubscribeError(request_id=rid, error_code=4),
        SubscribeUpdate(request_id=rid, subscription_request_id=max(0, rid - 2), start=loc),
        Unsubscribe(request_id=rid),
        PublishDone(request_id=rid, status_code=2, stream_count=draw(st.integers(0, 2))),
        Publish(request_id=rid, track_namespace=NS, track_name=b"p", track_alias=alias),
        PublishOk(request_id=rid, group_order=GroupOrder.ASCENDING),
        PublishError(request_id=rid, error_code=4),
        Fetch(
            request_id=rid,
            fetch_type=FetchType.STANDALONE,
            track_namespace=NS,
            track_name=TRACK,
            start=Location(0, 0),
            end=loc,
        ),
        Fetch(
            request_id=rid,
            fetch_type=draw(
                st.sampled_from([FetchType.RELATIVE_JOINING, FetchType.ABSOLUTE_JOINING])
            ),
            joining_request_id=draw(st.integers(0, 8)),
            joining_start=draw(st.integers(0, 3)),
        ),
        FetchOk(request_id=rid, end=loc),
        FetchError(request_id=rid, error_code=500),
        FetchCancel(request_id=rid),
        TrackStatus(request_id=rid, track_namespace=NS, track_name=TRACK),
        TrackStatusOk(request_id=rid),
        PublishNamespace(request_id=rid, track_namespace=NS),
        PublishNamespaceOk(request_id=rid),
        SubscribeNamespaceOk(request_id=rid),
        MaxRequestId(max_request_id=draw(st.integers(0, 3000))),
        Goaway(),
        ClientSetup(),
    ]
    return enc(draw(st.sampled_from(choices)))


@st.composite
def _control_input(draw: st.DrawFn) -> list[bytes]:
    parts = draw(
        st.lists(
            st.one_of(
                st.binary(max_size=40),
                st.composite(_soup_message)(),
            ),
            max_size=8,
        )
    )
    return parts


def _check_terminations(events: list[object]) -> None:
    ended = [e for e in events if isinstance(e, SessionTerminated)]
    assert len(ended) <= 1
    if ended:
        assert ended[0].error_code in _KNOWN_CODES and not ended[0].by_peer


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=_control_input(), split=st.integers(1, 7))
def test_fuzz_control_stream(parts: list[bytes], split: int) -> None:
    h = Harness()
    session = h.server.session
    data = b"".join(parts)
    events: list[object] = []
    for i in range(0, len(data), split):  # arbitrary chunking: the parser must reassemble
        events += session.handle_event(StreamDataReceived(data[i : i + split], False, 0), 1.0)
    events += session.handle_timer(100.0)
    _check_terminations(events)


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    streams=st.lists(
        st.tuples(st.sampled_from([2, 6, 10]), st.binary(max_size=30), st.booleans()),
        max_size=10,
    ),
    subscribe_first=st.booleans(),
)
def test_fuzz_data_streams(streams: list[tuple[int, bytes, bool]], subscribe_first: bool) -> None:
    h = accepted_sub() if subscribe_first else Harness()
    session = h.client.session  # data flows server -> client: server uni streams are 3 mod 4
    events: list[object] = []
    finished: set[int] = set()
    for sid, data, fin in streams:
        sid += 1
        if sid in finished:
            continue
        if fin:
            finished.add(sid)
        events += session.handle_event(StreamDataReceived(data, fin, sid), 1.0)
    events += session.handle_timer(100.0)
    _check_terminations(events)
