"""Hex vectors of ../shared/docs/moqt-draft14.md §2.10 (and §2.1, §2.5), each decoded to the
expected message, re-encoded byte-exact, and fed to the incremental parsers whole and one byte
at a time. Vectors marked [captured] were read off the wire from aiomoqt / moq-dev; the others
were validated against moq-dev (see the digest)."""

from __future__ import annotations

from typing import Any

import pytest

from ray_kvmoq.moqt.codec import (
    AuthToken,
    ClientSetup,
    Fetch,
    FetchOk,
    Goaway,
    Location,
    MaxRequestId,
    Message,
    MessageParameters,
    Publish,
    PublishDone,
    PublishNamespace,
    PublishNamespaceCancel,
    PublishNamespaceDone,
    PublishNamespaceOk,
    PublishOk,
    RequestsBlocked,
    ServerSetup,
    SetupParameters,
    Subscribe,
    SubscribeError,
    SubscribeNamespace,
    SubscribeOk,
    SubscribeUpdate,
    Unsubscribe,
    UnsubscribeNamespace,
)
from ray_kvmoq.moqt.codec.control import ControlStreamParser, decode_control, encode_control
from ray_kvmoq.moqt.codec.datagrams import ObjectDatagram, decode_datagram, encode_datagram
from ray_kvmoq.moqt.codec.streams import (
    DataStreamParser,
    ObjectParsed,
    StreamFinished,
    SubgroupHeaderParsed,
)
from ray_kvmoq.moqt.codec.types import (
    DRAFT_14,
    DataStreamType,
    FetchType,
    FilterType,
    GroupOrder,
    ObjectStatus,
    TokenAliasType,
)
from ray_kvmoq.moqt.codec.wire import decode_varint, encode_varint


def h(text: str) -> bytes:
    """Hex with spaces and ``|`` separators, plus "quoted ascii" runs."""
    out = bytearray()
    parts = text.replace("|", " ").split('"')
    for i, part in enumerate(parts):
        out += part.encode() if i % 2 else bytes.fromhex(part)
    return bytes(out)


KV_M1 = (b"kv", b"m1")

# (digest section/label, hex, expected message)
CONTROL_VECTORS: list[tuple[str, bytes, Message]] = [
    (
        "2.10 CLIENT_SETUP aiomoqt [captured]",
        h(
            '20 0033 01 c0000000ff00000e 04 01 04 "/moq" 05 0f "127.0.0.1:24483" 02 6710 07 0d'
            ' "aiomoqt/0.5.3"'
        ),
        ClientSetup(
            versions=(DRAFT_14,),
            parameters=SetupParameters(
                items=((1, b"/moq"), (5, b"127.0.0.1:24483"), (2, 10000), (7, b"aiomoqt/0.5.3"))
            ),
        ),
    ),
    (
        "2.10 CLIENT_SETUP moq-dev [captured]",
        h(
            "20 003b 01 c0000000ff00000e 05 02 c0000000ffffffff 80040b5a 01 80040b5c 01 07 0b"
            ' "moq-lite-rs" 05 0f "127.0.0.1:24453"'
        ),
        ClientSetup(
            versions=(DRAFT_14,),
            parameters=SetupParameters(
                items=(
                    (2, 0xFFFFFFFF),
                    (0x40B5A, 1),
                    (0x40B5C, 1),
                    (7, b"moq-lite-rs"),
                    (5, b"127.0.0.1:24453"),
                )
            ),
        ),
    ),
    (
        "2.10 SERVER_SETUP [validated]",
        h("21 000c c0000000ff00000e 01 02 4064"),
        ServerSetup(
            selected_version=DRAFT_14, parameters=SetupParameters.build(max_request_id=100)
        ),
    ),
    (
        "2.10 SUBSCRIBE aiomoqt [captured]",
        h('03 0028 00 02 0b "nonexistent" 09 "namespace" 0a "test-track" 80 01 01 02 00'),
        Subscribe(
            request_id=0,
            track_namespace=(b"nonexistent", b"namespace"),
            track_name=b"test-track",
            subscriber_priority=128,
            group_order=GroupOrder.ASCENDING,
            forward=True,
            filter_type=FilterType.LARGEST_OBJECT,
        ),
    ),
    (
        "2.10 SUBSCRIBE moq-dev [captured]",
        h("03 0012 02 02 02 6b76 04 74657374 02 7430 ff 02 01 02 00"),
        Subscribe(
            request_id=2,
            track_namespace=(b"kv", b"test"),
            track_name=b"t0",
            subscriber_priority=255,
            group_order=GroupOrder.DESCENDING,
        ),
    ),
    (
        "2.10 FETCH relative joining moq-dev [captured]",
        h("16 0007 04 ff 01 02 02 00 00"),
        Fetch(
            request_id=4,
            subscriber_priority=255,
            group_order=GroupOrder.ASCENDING,
            fetch_type=FetchType.RELATIVE_JOINING,
            joining_request_id=2,
            joining_start=0,
        ),
    ),
    (
        "2.10 SUBSCRIBE_OK [validated]",
        h("04 0008 02 07 00 01 01 00 00 00"),
        SubscribeOk(
            request_id=2, track_alias=7, group_order=GroupOrder.ASCENDING, largest=Location(0, 0)
        ),
    ),
    (
        "2.10 SUBSCRIBE_OK moq-dev",
        h("04 0006 03 03 00 02 00 00"),
        SubscribeOk(request_id=3, track_alias=3, group_order=GroupOrder.DESCENDING),
    ),
    (
        "2.10 SUBSCRIBE AbsoluteRange",
        h("03 0017 04 02 02 6b76 02 6d31 06 6c6179657230 80 01 01 04 05 00 09 00"),
        Subscribe(
            request_id=4,
            track_namespace=KV_M1,
            track_name=b"layer0",
            group_order=GroupOrder.ASCENDING,
            filter_type=FilterType.ABSOLUTE_RANGE,
            start=Location(5, 0),
            end_group=9,
        ),
    ),
    (
        "2.10 PUBLISH_NAMESPACE with token aiomoqt [captured]",
        h('06 0024 00 02 08 "moq-test" 07 "interop" 01 03 0e 03 00 "interop-test"'),
        PublishNamespace(
            request_id=0,
            track_namespace=(b"moq-test", b"interop"),
            parameters=MessageParameters.build(
                auth_tokens=(
                    AuthToken(
                        alias_type=TokenAliasType.USE_VALUE, token_type=0, value=b"interop-test"
                    ),
                )
            ),
        ),
    ),
    ("2.10 PUBLISH_NAMESPACE_OK", h("07 0001 00"), PublishNamespaceOk(request_id=0)),
    (
        "2.10 PUBLISH_NAMESPACE_DONE",
        h("09 0007 02 02 6b76 02 6d31"),
        PublishNamespaceDone(track_namespace=KV_M1),
    ),
    (
        "2.10 PUBLISH_DONE moq-dev [captured]",
        h("0b 000f 03 02 03 0b 747261636b20656e646564"),
        PublishDone(request_id=3, status_code=2, stream_count=3, reason="track ended"),
    ),
    (
        "2.10 FETCH standalone",
        h("16 0017 02 80 01 01 02 02 6b76 02 6d31 06 6c6179657230 00 00 02 00 00"),
        Fetch(
            request_id=2,
            group_order=GroupOrder.ASCENDING,
            fetch_type=FetchType.STANDALONE,
            track_namespace=KV_M1,
            track_name=b"layer0",
            start=Location(0, 0),
            end=Location(2, 0),
        ),
    ),
    (
        "2.10 FETCH_OK",
        h("18 0006 02 01 00 02 00 00"),
        FetchOk(request_id=2, group_order=GroupOrder.ASCENDING, end=Location(2, 0)),
    ),
    ("2.10 UNSUBSCRIBE", h("0a 0001 04"), Unsubscribe(request_id=4)),
    ("2.10 MAX_REQUEST_ID", h("15 0002 40c8"), MaxRequestId(max_request_id=200)),
    ("2.10 GOAWAY empty", h("10 0001 00"), Goaway()),
    (
        "2.10 SUBSCRIBE_UPDATE",
        h("02 0008 06 04 05 00 00 80 00 00"),
        SubscribeUpdate(
            request_id=6,
            subscription_request_id=4,
            start=Location(5, 0),
            end_group=0,
            forward=False,
        ),
    ),
    (
        "2.10 PUBLISH",
        h("1d 0016 08 02 02 6b76 02 6d31 06 6c6179657230 03 01 01 02 05 01 00"),
        Publish(
            request_id=8,
            track_namespace=KV_M1,
            track_name=b"layer0",
            track_alias=3,
            group_order=GroupOrder.ASCENDING,
            largest=Location(2, 5),
            forward=True,
        ),
    ),
    (
        "2.10 PUBLISH_OK",
        h("1e 0006 08 01 80 01 02 00"),
        PublishOk(request_id=8, group_order=GroupOrder.ASCENDING),
    ),
    (
        "2.10 SUBSCRIBE_ERROR",
        h("05 000c 00 04 09 6e6f7420666f756e64"),
        SubscribeError(request_id=0, error_code=4, reason="not found"),
    ),
]

EMPTY_PREFIX = h("11 0003 00 00 00")  # 2.10 SUBSCRIBE_NAMESPACE moq-dev [captured]

LOC_TS = bytes(range(16))
# (label, hex of a complete stream, expected events after the header)
STREAM_VECTORS: list[tuple[str, bytes, list[object]]] = [
    (
        "2.10 subgroup 0x14 [validated]",
        h("14 07 01 00 80 | 00 04 61626364 | 00 04 65666768"),
        [
            SubgroupHeaderParsed(
                stream_type=DataStreamType.SUBGROUP_EXPLICIT,
                track_alias=7,
                group=1,
                subgroup=0,
                publisher_priority=128,
            ),
            ObjectParsed(
                group=1,
                subgroup=0,
                object_id=0,
                publisher_priority=128,
                extensions=(),
                status=ObjectStatus.NORMAL,
                payload=b"abcd",
            ),
            ObjectParsed(
                group=1,
                subgroup=0,
                object_id=1,
                publisher_priority=128,
                extensions=(),
                status=ObjectStatus.NORMAL,
                payload=b"efgh",
            ),
            StreamFinished(end_of_group=False, end_of_track=False, last_object_id=1),
        ],
    ),
    (
        "2.10 subgroup 0x11 with extension [validated]",
        h("11 07 02 80 | 00 02 20 2a 03 78797a | 00 00 03 757677"),
        [
            SubgroupHeaderParsed(
                stream_type=DataStreamType.SUBGROUP_ZERO_EXT,
                track_alias=7,
                group=2,
                subgroup=0,
                publisher_priority=128,
            ),
            ObjectParsed(
                group=2,
                subgroup=0,
                object_id=0,
                publisher_priority=128,
                extensions=((0x20, 42),),
                status=ObjectStatus.NORMAL,
                payload=b"xyz",
            ),
            ObjectParsed(
                group=2,
                subgroup=0,
                object_id=1,
                publisher_priority=128,
                extensions=(),
                status=ObjectStatus.NORMAL,
                payload=b"uvw",
            ),
            StreamFinished(end_of_group=False, end_of_track=False, last_object_id=1),
        ],
    ),
    (
        "2.10 moq-dev group 0x19 with LOC timestamps [captured]",
        h("19 03 00 80 | 00 02 10 00 10") + LOC_TS + h("00 03 10 43e8 10") + LOC_TS,
        [
            SubgroupHeaderParsed(
                stream_type=DataStreamType.SUBGROUP_ZERO_EXT_EOG,
                track_alias=3,
                group=0,
                subgroup=0,
                publisher_priority=128,
            ),
            ObjectParsed(
                group=0,
                subgroup=0,
                object_id=0,
                publisher_priority=128,
                extensions=((0x10, 0),),
                status=ObjectStatus.NORMAL,
                payload=LOC_TS,
            ),
            ObjectParsed(
                group=0,
                subgroup=0,
                object_id=1,
                publisher_priority=128,
                extensions=((0x10, 1000),),
                status=ObjectStatus.NORMAL,
                payload=LOC_TS,
            ),
            StreamFinished(end_of_group=True, end_of_track=False, last_object_id=1),
        ],
    ),
    (
        "2.8 moq-dev end of track [captured]",
        h("18 03 05 80 | 00 00 04"),
        [
            SubgroupHeaderParsed(
                stream_type=DataStreamType.SUBGROUP_ZERO_EOG,
                track_alias=3,
                group=5,
                subgroup=0,
                publisher_priority=128,
            ),
            ObjectParsed(
                group=5,
                subgroup=0,
                object_id=0,
                publisher_priority=128,
                extensions=(),
                status=ObjectStatus.END_OF_TRACK,
                payload=b"",
            ),
            StreamFinished(end_of_group=True, end_of_track=True, last_object_id=0),
        ],
    ),
    (
        "2.10 fetch stream",
        h("05 02 | 00 00 00 80 00 04 61626364"),
        [
            None,  # FetchHeaderParsed(request_id=2), checked below
            ObjectParsed(
                group=0,
                subgroup=0,
                object_id=0,
                publisher_priority=128,
                extensions=(),
                status=ObjectStatus.NORMAL,
                payload=b"abcd",
            ),
            StreamFinished(end_of_group=False, end_of_track=False, last_object_id=0),
        ],
    ),
]

DATAGRAM_VECTORS = [
    (
        "2.10 datagram 0x04",
        h("04 03 07 80 6869"),
        ObjectDatagram(track_alias=3, group=7, object_id=0, payload=b"hi"),
    ),
    (
        "2.10 status datagram 0x20",
        h("20 03 07 05 80 03"),
        ObjectDatagram(track_alias=3, group=7, object_id=5, status=ObjectStatus.END_OF_GROUP),
    ),
]


def _ids(vectors: list) -> list[str]:
    return [v[0] for v in vectors]


@pytest.mark.parametrize(("label", "wire", "expected"), CONTROL_VECTORS, ids=_ids(CONTROL_VECTORS))
def test_control_vector(label: str, wire: bytes, expected: Message) -> None:
    msg_type, at = decode_varint(wire)
    length = int.from_bytes(wire[at : at + 2], "big")
    assert length == len(wire) - at - 2
    assert decode_control(msg_type, wire[at + 2 :], version=DRAFT_14) == expected
    assert encode_control(expected, version=DRAFT_14) == wire
    assert ControlStreamParser().feed(wire) == [expected]
    parser = ControlStreamParser()
    got = [m for i in range(len(wire)) for m in parser.feed(wire[i : i + 1])]
    assert got == [expected]
    assert parser.buffered == 0


def test_control_vectors_back_to_back() -> None:
    stream = b"".join(v[1] for v in CONTROL_VECTORS)
    expected = [v[2] for v in CONTROL_VECTORS]
    assert ControlStreamParser().feed(stream) == expected
    parser = ControlStreamParser()
    got = [m for i in range(0, len(stream), 7) for m in parser.feed(stream[i : i + 7])]
    assert got == expected


def test_empty_namespace_prefix_tolerated_only_with_flag() -> None:
    """§3.7 quirk 1: moq-dev's SUBSCRIBE_NAMESPACE with a 0-field prefix."""
    expected = SubscribeNamespace(request_id=0, track_namespace_prefix=())
    parser = ControlStreamParser(allow_empty_namespace_prefix=True)
    assert parser.feed(EMPTY_PREFIX) == [expected]
    assert encode_control(expected) == EMPTY_PREFIX
    from ray_kvmoq.moqt.codec.errors import ProtocolViolation

    with pytest.raises(ProtocolViolation):
        ControlStreamParser().feed(EMPTY_PREFIX)


def test_auth_token_vector() -> None:
    """§2.5: aiomoqt's USE_VALUE token, type 0, "interop-test"."""
    [msg] = ControlStreamParser().feed(CONTROL_VECTORS[9][1])
    assert isinstance(msg, PublishNamespace)
    [token] = msg.parameters.auth_tokens
    assert token.alias_type is TokenAliasType.USE_VALUE
    assert token.encode() == h('03 00 "interop-test"')


def _check_stream_events(events: list, expected: list) -> None:
    assert len(events) == len(expected)
    for got, want in zip(events, expected, strict=True):
        if want is not None:
            assert got == want


@pytest.mark.parametrize(("label", "wire", "expected"), STREAM_VECTORS, ids=_ids(STREAM_VECTORS))
def test_stream_vector(label: str, wire: bytes, expected: list) -> None:
    whole = DataStreamParser().feed(wire, fin=True)
    _check_stream_events(whole, expected)
    parser = DataStreamParser()
    bytewise = [e for i in range(len(wire)) for e in parser.feed(wire[i : i + 1])]
    bytewise += parser.feed(b"", fin=True)
    assert bytewise == whole


def test_stream_vectors_reencode() -> None:
    """Re-encode each parsed stream with the encoders and compare byte-exact."""
    from ray_kvmoq.moqt.codec.streams import (
        FetchHeaderParsed,
        encode_fetch_header,
        encode_fetch_object,
        encode_subgroup_header,
        encode_subgroup_object,
    )

    for _label, wire, _ in STREAM_VECTORS:
        events = DataStreamParser().feed(wire, fin=True)
        header = events[0]
        out = bytearray()
        if isinstance(header, FetchHeaderParsed):
            out += encode_fetch_header(header.request_id)
            for obj in events[1:-1]:
                assert isinstance(obj, ObjectParsed)
                encode_fetch_object(
                    group=obj.group,
                    subgroup=obj.subgroup,
                    object_id=obj.object_id,
                    publisher_priority=obj.publisher_priority,
                    payload=obj.payload,
                    extensions=obj.extensions,
                    status=obj.status,
                    out=out,
                )
        else:
            assert isinstance(header, SubgroupHeaderParsed)
            st = header.stream_type
            out += encode_subgroup_header(
                track_alias=header.track_alias,
                group=header.group,
                subgroup=header.subgroup or 0,
                publisher_priority=header.publisher_priority,
                extensions=st.has_extensions,
                end_of_group=st.end_of_group,
                mode=st.subgroup_id_mode,
            )
            prev = None
            for obj in events[1:-1]:
                assert isinstance(obj, ObjectParsed)
                encode_subgroup_object(
                    prev,
                    obj.object_id,
                    obj.payload,
                    extensions=obj.extensions,
                    with_ext=st.has_extensions,
                    status=obj.status,
                    out=out,
                )
                prev = obj.object_id
        assert bytes(out) == wire


@pytest.mark.parametrize(
    ("label", "wire", "expected"), DATAGRAM_VECTORS, ids=_ids(DATAGRAM_VECTORS)
)
def test_datagram_vector(label: str, wire: bytes, expected: ObjectDatagram) -> None:
    assert decode_datagram(wire, version=DRAFT_14) == expected
    assert encode_datagram(expected, version=DRAFT_14) == wire


@pytest.mark.parametrize(
    ("value", "wire"),
    [
        (37, "25"),
        (63, "3f"),
        (64, "4040"),
        (15293, "7bbd"),
        (16384, "80004000"),
        (494878333, "9d7f3e7d"),
        (0xFF00000E, "c0000000ff00000e"),
    ],
)
def test_varint_vectors(value: int, wire: str) -> None:
    """§2.1 varint examples (RFC 9000 §16 / A.1)."""
    assert encode_varint(value).hex() == wire
    assert decode_varint(bytes.fromhex(wire)) == (value, len(wire) // 2)


# ---------------------------------------------------------------- aiomoqt 0.5.3 as an oracle
# aiomoqt is an independent draft-14 implementation (pure Python, a dev dependency): every
# message it serializes must decode to the expected value, and ours must be byte-identical.

NS2 = (b"kv", b"m1")


def _aiomoqt_pairs(am: Any, at: Any) -> list[tuple[Any, Message]]:
    asc, exists = at.GroupOrder.ASCENDING, at.ContentExistsCode.EXISTS
    return [
        (
            am.Subscribe(
                request_id=4,
                track_namespace=NS2,
                track_name=b"layer0",
                priority=7,
                group_order=2,
                forward=0,
                filter_type=4,
                start_group=5,
                start_object=1,
                end_group=9,
                parameters={},
            ),
            Subscribe(
                request_id=4,
                track_namespace=NS2,
                track_name=b"layer0",
                subscriber_priority=7,
                group_order=GroupOrder.DESCENDING,
                forward=False,
                filter_type=FilterType.ABSOLUTE_RANGE,
                start=Location(5, 1),
                end_group=9,
            ),
        ),
        (
            am.SubscribeOk(
                request_id=4,
                track_alias=9,
                expires=1000,
                group_order=asc,
                content_exists=exists,
                largest_group_id=3,
                largest_object_id=2,
                parameters={2: 500},
            ),
            SubscribeOk(
                request_id=4,
                track_alias=9,
                expires=1000,
                group_order=GroupOrder.ASCENDING,
                largest=Location(3, 2),
                parameters=MessageParameters.build(delivery_timeout=500),
            ),
        ),
        (
            am.SubscribeUpdate(
                request_id=6,
                subscription_request_id=4,
                start_group=5,
                start_object=0,
                end_group=0,
                priority=128,
                forward=1,
                parameters={},
            ),
            SubscribeUpdate(request_id=6, subscription_request_id=4, start=Location(5, 0)),
        ),
        (
            am.SubscribeDone(request_id=4, status_code=2, stream_count=3, reason="done"),
            PublishDone(request_id=4, status_code=2, stream_count=3, reason="done"),
        ),
        (
            am.Publish(
                request_id=8,
                track_namespace=NS2,
                track_name=b"layer0",
                track_alias=3,
                group_order=1,
                content_exists=1,
                largest_group_id=2,
                largest_object_id=5,
                forward=1,
                parameters={},
            ),
            Publish(
                request_id=8,
                track_namespace=NS2,
                track_name=b"layer0",
                track_alias=3,
                largest=Location(2, 5),
            ),
        ),
        (
            am.PublishOk(
                request_id=8,
                forward=1,
                priority=128,
                group_order=1,
                filter_type=3,
                start_group=1,
                start_object=2,
                parameters={},
            ),
            PublishOk(
                request_id=8,
                group_order=GroupOrder.ASCENDING,
                filter_type=FilterType.ABSOLUTE_START,
                start=Location(1, 2),
            ),
        ),
        (
            am.Fetch(
                fetch_type=1,
                request_id=2,
                subscriber_priority=128,
                group_order=1,
                namespace=NS2,
                track_name=b"layer0",
                start_group=0,
                start_object=0,
                end_group=2,
                end_object=0,
                parameters={},
            ),
            CONTROL_VECTORS[13][2],
        ),
        (
            am.FetchOk(
                request_id=2,
                group_order=1,
                end_of_track=1,
                largest_group_id=2,
                largest_object_id=0,
                parameters={},
            ),
            FetchOk(
                request_id=2,
                group_order=GroupOrder.ASCENDING,
                end_of_track=True,
                end=Location(2, 0),
            ),
        ),
        (
            am.PublishNamespaceCancel(namespace=NS2, error_code=1, reason="c"),
            PublishNamespaceCancel(track_namespace=NS2, error_code=1, reason="c"),
        ),
        (
            am.SubscribeNamespace(request_id=2, namespace_prefix=(b"kv",), parameters={}),
            SubscribeNamespace(request_id=2, track_namespace_prefix=(b"kv",)),
        ),
        (
            am.UnsubscribeNamespace(namespace_prefix=(b"kv",)),
            UnsubscribeNamespace(track_namespace_prefix=(b"kv",)),
        ),
        (
            am.ClientSetup(versions=[DRAFT_14], parameters={2: 100}),
            ClientSetup(parameters=SetupParameters.build(max_request_id=100)),
        ),
        (am.GoAway(new_session_uri="moqt://x"), Goaway(new_session_uri=b"moqt://x")),
        (am.SubscribesBlocked(maximum_request_id=200), RequestsBlocked(max_request_id=200)),
    ]


def test_aiomoqt_control_messages_agree() -> None:
    am = pytest.importorskip("aiomoqt.messages")
    at = pytest.importorskip("aiomoqt.types")
    pairs = _aiomoqt_pairs(am, at)
    assert len(pairs) == 14
    for theirs, ours in pairs:
        wire = bytes(theirs.serialize().data)
        assert ControlStreamParser().feed(wire) == [ours], type(theirs).__name__
        assert encode_control(ours) == wire, type(theirs).__name__


def test_aiomoqt_data_plane_agrees() -> None:
    am = pytest.importorskip("aiomoqt.messages")
    for ext in (False, True):
        header = am.SubgroupHeader(track_alias=5, group_id=9, subgroup_id=3, extensions_present=ext)
        wire = bytes(header.serialize().data)
        wire += bytes(
            header.next_object(payload=b"hello", extensions={0x20: 7} if ext else None).data
        )
        wire += bytes(header.next_object(payload=b"").data)
        wire += bytes(header.next_object(payload=b"", status=am.ObjectStatus.END_OF_GROUP).data)
        events = DataStreamParser().feed(wire, fin=True)
        objects = [e for e in events if isinstance(e, ObjectParsed)]
        assert [(o.subgroup, o.object_id, o.payload, o.status) for o in objects] == [
            (3, 0, b"hello", ObjectStatus.NORMAL),
            (3, 1, b"", ObjectStatus.NORMAL),
            (3, 2, b"", ObjectStatus.END_OF_GROUP),
        ]
        assert objects[0].extensions == (((0x20, 7),) if ext else ())
    dgram = am.ObjectDatagram(
        track_alias=3, group_id=7, object_id=4, payload=b"hi", end_of_group=True
    )
    assert decode_datagram(bytes(dgram.serialize().data), version=DRAFT_14) == ObjectDatagram(
        track_alias=3, group=7, object_id=4, payload=b"hi", end_of_group=True
    )
    status = am.ObjectDatagramStatus(
        track_alias=3, group_id=7, object_id=5, status=am.ObjectStatus.END_OF_GROUP
    )
    assert (
        decode_datagram(bytes(status.serialize().data), version=DRAFT_14) == DATAGRAM_VECTORS[1][2]
    )
