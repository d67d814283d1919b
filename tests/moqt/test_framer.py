"""Control framing: encode-side validation (LocalProtocolError), the incremental
ControlStreamParser's buffering/FIN/failure behaviour, and the message value types."""

from __future__ import annotations

import pytest

from ray_kvmoq.moqt.codec import (
    AuthToken,
    ClientSetup,
    Fetch,
    Goaway,
    Location,
    MaxRequestId,
    MessageParameters,
    Parameters,
    PublishNamespace,
    SetupParameters,
    Subscribe,
    SubscribeError,
    SubscribeOk,
    Unsubscribe,
)
from ray_kvmoq.moqt.codec.control import (
    ControlStreamParser,
    decode_control,
    encode_control,
    read_control_frame,
)
from ray_kvmoq.moqt.codec.errors import (
    KeyValueFormattingError,
    LocalProtocolError,
    MoqtError,
    NeedMoreData,
    ProtocolViolation,
    RemoteProtocolError,
    UnknownMessageType,
)
from ray_kvmoq.moqt.codec.types import (
    DRAFT_14,
    DRAFT_16,
    FetchType,
    FilterType,
    GroupOrder,
    MessageType,
    SessionError,
    TokenAliasType,
)

NS = (b"kv", b"m1")


def sub(**kw: object) -> Subscribe:
    fields: dict = {"request_id": 0, "track_namespace": NS, "track_name": b"t"}
    fields.update(kw)
    return Subscribe(**fields)


INVALID_MESSAGES = {
    "empty namespace": sub(track_namespace=()),
    "33 fields": sub(track_namespace=(b"x",) * 33),
    "str field": sub(track_namespace=("kv",)),
    "str name": sub(track_name="t"),
    "name 4097": sub(track_name=b"n" * 4097),
    "ns+name 4097": sub(track_namespace=(b"a" * 4096,), track_name=b"b"),
    "priority 256": sub(subscriber_priority=256),
    "group order 3": sub(group_order=3),
    "filter 5": sub(filter_type=5),
    "start missing": sub(filter_type=FilterType.ABSOLUTE_START),
    "start with LargestObject": sub(start=Location(1, 0)),
    "end before start": sub(
        filter_type=FilterType.ABSOLUTE_RANGE, start=Location(5, 0), end_group=4
    ),
    "negative request id": sub(request_id=-1),
    "None request id": sub(request_id=None),
    "duplicate delivery timeout": sub(parameters=MessageParameters(items=((2, 1), (2, 2)))),
    "odd param with int": sub(parameters=MessageParameters(items=((5, 1),))),
    "ok group order 0": SubscribeOk(
        request_id=0, track_alias=1, group_order=GroupOrder.PUBLISHER_DEFAULT
    ),
    "reason 1025": SubscribeError(request_id=0, error_code=1, reason="r" * 1025),
    "standalone without range": Fetch(request_id=0, fetch_type=FetchType.STANDALONE),
    "joining without ids": Fetch(request_id=0, fetch_type=FetchType.RELATIVE_JOINING),
    "fetch type 4": Fetch(request_id=0, fetch_type=4, joining_request_id=0, joining_start=0),  # type: ignore[arg-type]
    "goaway uri 8193": Goaway(new_session_uri=b"u" * 8193),
    "payload over 65535": ClientSetup(
        parameters=SetupParameters(items=((0x41, b"a" * 40000), (0x43, b"b" * 40000)))
    ),
}


@pytest.mark.parametrize("msg", INVALID_MESSAGES.values(), ids=INVALID_MESSAGES.keys())
def test_encode_rejects_invalid_values(msg: object) -> None:
    with pytest.raises(LocalProtocolError) as info:
        encode_control(msg)  # type: ignore[arg-type]
    assert info.value.error_code is SessionError.INTERNAL_ERROR


def test_encode_rejects_non_messages_and_versions() -> None:
    with pytest.raises(LocalProtocolError):
        encode_control(Location(1, 2))  # type: ignore[arg-type]
    with pytest.raises(LocalProtocolError):
        encode_control(Unsubscribe(request_id=1), version=0xFF00000D)
    with pytest.raises(LocalProtocolError):
        decode_control(MessageType.UNSUBSCRIBE, b"\x01", version=0xFF00000F)  # draft-15
    # Draft-16 is known, but a draft-14-only message is refused under it, not mis-encoded.
    with pytest.raises(LocalProtocolError, match="not a control message of version"):
        encode_control(SubscribeError(request_id=0, error_code=1), version=DRAFT_16)
    with pytest.raises(LocalProtocolError):
        ControlStreamParser(version=1)


def test_parser_buffers_across_feeds_and_batches() -> None:
    a = encode_control(Unsubscribe(request_id=1))
    b = encode_control(MaxRequestId(max_request_id=100))
    c = encode_control(sub())
    parser = ControlStreamParser()
    assert parser.feed(a + b + c[:5]) == [
        Unsubscribe(request_id=1),
        MaxRequestId(max_request_id=100),
    ]
    assert parser.buffered == 5
    assert parser.feed(c[5:-1]) == []
    assert parser.feed(c[-1:] + a) == [sub(), Unsubscribe(request_id=1)]
    assert parser.buffered == 0
    assert parser.feed(bytearray(a)) == [Unsubscribe(request_id=1)]
    assert parser.feed(memoryview(a)) == [Unsubscribe(request_id=1)]


def test_parser_fin() -> None:
    a = encode_control(Unsubscribe(request_id=1))
    parser = ControlStreamParser()
    assert parser.feed(a, fin=True) == [Unsubscribe(request_id=1)]
    assert parser.closed
    with pytest.raises(LocalProtocolError):
        parser.feed(a)
    with pytest.raises(ProtocolViolation):
        ControlStreamParser().feed(a[:-1], fin=True)


def test_unknown_type_detected_before_payload() -> None:
    parser = ControlStreamParser()
    with pytest.raises(UnknownMessageType) as info:
        parser.feed(b"\x40\x01")  # SETUP of draft-00, reserved
    assert info.value.error_code is SessionError.PROTOCOL_VIOLATION
    with pytest.raises(UnknownMessageType) as again:
        parser.feed(b"")
    assert again.value is info.value


def test_read_control_frame() -> None:
    wire = encode_control(Unsubscribe(request_id=7)) + b"\x0a"
    assert read_control_frame(wire) == (MessageType.UNSUBSCRIBE, b"\x07", 4)
    with pytest.raises(NeedMoreData):
        read_control_frame(wire, 4)


def test_decode_control_accepts_memoryview() -> None:
    payload = encode_control(sub())[3:]
    assert decode_control(MessageType.SUBSCRIBE, memoryview(payload), version=DRAFT_14) == sub()
    with pytest.raises(ProtocolViolation):
        decode_control(MessageType.SUBSCRIBE, payload + b"\x00", version=DRAFT_14)
    with pytest.raises(ProtocolViolation):
        decode_control(MessageType.GOAWAY, b"\x00" * 65536, version=DRAFT_14)


def test_error_tree() -> None:
    assert issubclass(ProtocolViolation, RemoteProtocolError)
    assert issubclass(LocalProtocolError, MoqtError)
    assert not issubclass(NeedMoreData, MoqtError)
    assert KeyValueFormattingError.error_code is SessionError.KEY_VALUE_FORMATTING_ERROR
    err = ProtocolViolation("odd", error_code=SessionError.MALFORMED_PATH)
    assert err.error_code is SessionError.MALFORMED_PATH
    assert ProtocolViolation.error_code is SessionError.PROTOCOL_VIOLATION
    assert err.reason == "odd"
    assert "MALFORMED_PATH" in repr(err)


def test_parameters_helpers() -> None:
    token = AuthToken(alias_type=TokenAliasType.REGISTER, alias=1, token_type=0, value=b"v")
    setup = SetupParameters.build(
        path=b"/moq",
        authority=b"h:1",
        max_request_id=10,
        max_auth_token_cache_size=4096,
        implementation=b"ray_kvmoq",
        auth_tokens=(token,),
    )
    assert (setup.path, setup.authority, setup.implementation) == (b"/moq", b"h:1", b"ray_kvmoq")
    assert (setup.max_request_id, setup.max_auth_token_cache_size) == (10, 4096)
    assert setup.auth_tokens == [token]
    assert SetupParameters().max_request_id is None
    more = setup.with_param(0x40, 1).with_param(0x40, 2)
    assert isinstance(more, SetupParameters)
    assert more.get_all(0x40) == [1, 2]
    assert more.get_int(0x01) is None
    assert more.get_bytes(0x02) is None
    assert len(more) == len(setup) + 2
    msg = MessageParameters.build(delivery_timeout=5, max_cache_duration=6)
    assert (msg.delivery_timeout, msg.max_cache_duration) == (5, 6)
    assert isinstance(msg, Parameters)
    wire = encode_control(PublishNamespace(request_id=0, track_namespace=NS, parameters=msg))
    assert ControlStreamParser().feed(wire)[0].parameters == msg  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "token",
    [
        AuthToken(alias_type=TokenAliasType.DELETE),
        AuthToken(alias_type=TokenAliasType.USE_VALUE, alias=1, token_type=0),
        AuthToken(alias_type=TokenAliasType.USE_ALIAS, alias=1, token_type=0),
        AuthToken(alias_type=TokenAliasType.DELETE, alias=1, value=b"x"),
    ],
)
def test_auth_token_presence_rules(token: AuthToken) -> None:
    with pytest.raises(LocalProtocolError):
        token.encode()


def test_location_and_fetch_helpers() -> None:
    assert Location(1, 5) < Location(2, 0) < Location(2, 1)
    assert Location(2, 1).next_object() == Location(2, 2)
    assert Fetch(request_id=0, fetch_type=FetchType.ABSOLUTE_JOINING).is_joining
    assert not Fetch(request_id=0, fetch_type=FetchType.STANDALONE).is_joining


LIMIT_MESSAGES = {
    "32 fields": sub(track_namespace=(b"x",) * 32),
    "full track name 4096": sub(track_namespace=(b"a" * 4000,), track_name=b"b" * 96),
    "reason 1024": SubscribeError(request_id=0, error_code=1, reason="r" * 1024),
    "goaway uri 8192": Goaway(new_session_uri=b"u" * 8192),
    "max varints": Unsubscribe(request_id=(1 << 62) - 1),
}


@pytest.mark.parametrize("msg", LIMIT_MESSAGES.values(), ids=LIMIT_MESSAGES.keys())
def test_values_at_the_limits_round_trip(msg: object) -> None:
    wire = encode_control(msg)  # type: ignore[arg-type]
    assert ControlStreamParser().feed(wire) == [msg]
