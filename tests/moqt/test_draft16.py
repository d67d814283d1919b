"""Draft-16 codec: every control message type of d16 §9, OBJECT_DATAGRAM (d16 §10.3.1) and the
subgroup and fetch streams (d16 §10.4).

Vectors are written by hand from draft-16's layouts (section cited per vector; d16 §1.4.2 for
the delta-encoded Key-Value-Pairs), never produced by our encoder: each one decodes to its
message, re-encodes byte for byte, and parses the same fed one byte at a time. Then the
malformed-input and Hypothesis suites run on draft-16 the way the draft-14 ones do.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_kvmoq.moqt.codec import (
    ClientSetup,
    Fetch,
    FetchCancel,
    FetchOk,
    Goaway,
    Location,
    MaxRequestId,
    MessageParameters,
    Namespace,
    NamespaceDone,
    Publish,
    PublishDone,
    PublishNamespace,
    PublishNamespaceCancel,
    PublishNamespaceDone,
    PublishOk,
    RequestErrorMessage,
    RequestOk,
    RequestsBlocked,
    RequestUpdate,
    ServerSetup,
    SetupParameters,
    Subscribe,
    SubscribeError,
    SubscribeNamespace,
    SubscribeOk,
    TrackStatus,
    Unsubscribe,
)
from ray_kvmoq.moqt.codec.control import (
    MESSAGE_CLASSES_BY_VERSION,
    ControlStreamParser,
    decode_control,
    encode_control,
    read_control_frame,
)
from ray_kvmoq.moqt.codec.datagrams import ObjectDatagram, decode_datagram, encode_datagram
from ray_kvmoq.moqt.codec.errors import (
    LocalProtocolError,
    NeedMoreData,
    ObjectTooLarge,
    ProtocolViolation,
    UnknownMessageType,
    UnknownStreamType,
)
from ray_kvmoq.moqt.codec.streams import (
    FetchHeaderParsed,
    ObjectParsed,
    StreamFinished,
    SubgroupHeaderParsed,
)
from ray_kvmoq.moqt.codec.streams16 import (
    DataStreamParser16,
    FetchObjectWriter16,
    FetchRangeEnded,
    StreamParser16,
    encode_subgroup_header_16,
    encode_subgroup_object_16,
)
from ray_kvmoq.moqt.codec.types import (
    ALPN_BY_VERSION,
    DRAFT_14,
    DRAFT_16,
    DataStreamType,
    FetchType,
    FilterType,
    GroupOrder,
    MessageTypeD16,
    ObjectStatus,
    SessionError,
)
from ray_kvmoq.moqt.codec.wire import decode_varint, encode_varint

NS = (b"kv", b"m1")

VECTORS: list[tuple[str, str, object]] = [
    (
        "CLIENT_SETUP PATH, MAX_REQUEST_ID, MOQT_IMPLEMENTATION (d16 §9.3: no versions; "
        "types 1, 2, 7 as deltas 1, 1, 5)",
        "20 000e 03 01 03 2f6b76 01 4064 05 03 726179",
        ClientSetup(
            versions=(DRAFT_16,),
            parameters=SetupParameters(items=((1, b"/kv"), (2, 100), (7, b"ray"))),
        ),
    ),
    (
        "SERVER_SETUP MAX_REQUEST_ID 32 (d16 §9.3)",
        "21 0003 01 02 20",
        ServerSetup(selected_version=DRAFT_16, parameters=SetupParameters(items=((2, 32),))),
    ),
    ("GOAWAY empty URI (d16 §9.4)", "10 0001 00", Goaway()),
    ("MAX_REQUEST_ID 10 (d16 §9.5)", "15 0001 0a", MaxRequestId(max_request_id=10)),
    (
        "REQUEST_ERROR TRACK_DOES_NOT_EXIST, no retry (d16 §9.8)",
        "05 0006 04 04 00 02 6e6f",
        RequestErrorMessage(request_id=4, error_code=4, retry_interval=0, reason="no"),
    ),
    ("REQUEST_OK no parameters (d16 §9.7)", "07 0002 02 00", RequestOk(request_id=2)),
    (
        "REQUEST_OK LARGEST_OBJECT {5, 0} (d16 §9.7, §9.2.2.6)",
        "07 0006 02 01 09 02 0500",
        RequestOk(request_id=2, parameters=MessageParameters(items=((9, b"\x05\x00"),))),
    ),
    (
        "SUBSCRIBE without parameters (d16 §9.9)",
        "03 000b 00 02 02 6b76 02 6d31 01 74 00",
        Subscribe(request_id=0, track_namespace=NS, track_name=b"t"),
    ),
    (
        "SUBSCRIBE FORWARD 0, PRIORITY 1, FILTER AbsoluteStart {3, 0}, GROUP_ORDER 2 "
        "(d16 §9.9, §9.2.2; types 0x10 0x20 0x21 0x22 as deltas 0x10 0x10 1 1)",
        "03 0016 02 02 02 6b76 02 6d31 01 74 04 10 00 10 01 01 03 030300 01 02",
        Subscribe(
            request_id=2,
            track_namespace=NS,
            track_name=b"t",
            subscriber_priority=1,
            group_order=GroupOrder.DESCENDING,
            forward=False,
            filter_type=FilterType.ABSOLUTE_START,
            start=Location(3, 0),
            parameters=MessageParameters(
                items=((0x10, 0), (0x20, 1), (0x21, b"\x03\x03\x00"), (0x22, 2))
            ),
        ),
    ),
    (
        "SUBSCRIBE_OK LARGEST_OBJECT {2, 5}, track extensions 0x3c=1 and 0x41='ab' "
        "(d16 §9.10; extension types as deltas 0x3c, 5)",
        "04 000d 00 07 01 09 02 0205 3c 01 05 02 6162",
        SubscribeOk(
            request_id=0,
            track_alias=7,
            largest=Location(2, 5),
            parameters=MessageParameters(items=((9, b"\x02\x05"),)),
            track_extensions=((0x3C, 1), (0x41, b"ab")),
        ),
    ),
    ("UNSUBSCRIBE 2 (d16 §9.12)", "0a 0001 02", Unsubscribe(request_id=2)),
    ("FETCH_CANCEL 8 (d16 §9.18)", "17 0001 08", FetchCancel(request_id=8)),
    ("REQUESTS_BLOCKED 10 (d16 §9.6)", "1a 0001 0a", RequestsBlocked(max_request_id=10)),
    (
        "REQUEST_UPDATE FORWARD 0 (d16 §9.11)",
        "02 0005 04 00 01 10 00",
        RequestUpdate(
            request_id=4, existing_request_id=0, parameters=MessageParameters(items=((0x10, 0),))
        ),
    ),
    (
        "PUBLISH FORWARD 0, extension 0x3c=1 (d16 §9.13)",
        "1d 0010 01 02 02 6b76 02 6d31 01 74 05 01 10 00 3c 01",
        Publish(
            request_id=1,
            track_namespace=NS,
            track_name=b"t",
            track_alias=5,
            forward=False,
            parameters=MessageParameters(items=((0x10, 0),)),
            track_extensions=((0x3C, 1),),
        ),
    ),
    ("PUBLISH_OK defaults (d16 §9.14)", "1e 0002 01 00", PublishOk(request_id=1)),
    (
        "PUBLISH_DONE TRACK_ENDED, 1 stream (d16 §9.15)",
        "0b 0004 00 02 01 00",
        PublishDone(request_id=0, status_code=2, stream_count=1),
    ),
    (
        "FETCH standalone {0,0}..{2,0} (d16 §9.16)",
        "16 0010 08 01 02 02 6b76 02 6d31 01 74 00 00 02 00 00",
        Fetch(
            request_id=8,
            fetch_type=FetchType.STANDALONE,
            track_namespace=NS,
            track_name=b"t",
            start=Location(0, 0),
            end=Location(2, 0),
        ),
    ),
    (
        "FETCH absolute joining, SUBSCRIBER_PRIORITY 3 (d16 §9.16)",
        "16 0007 0a 03 00 05 01 20 03",
        Fetch(
            request_id=10,
            fetch_type=FetchType.ABSOLUTE_JOINING,
            joining_request_id=0,
            joining_start=5,
            subscriber_priority=3,
            parameters=MessageParameters(items=((0x20, 3),)),
        ),
    ),
    (
        "FETCH_OK end {2,0} (d16 §9.17)",
        "18 0005 08 00 02 00 00",
        FetchOk(request_id=8, end=Location(2, 0)),
    ),
    (
        "TRACK_STATUS (d16 §9.19: SUBSCRIBE's layout)",
        "0d 000b 06 02 02 6b76 02 6d31 01 74 00",
        TrackStatus(request_id=6, track_namespace=NS, track_name=b"t"),
    ),
    (
        "PUBLISH_NAMESPACE (d16 §9.20)",
        "06 0009 02 02 02 6b76 02 6d31 00",
        PublishNamespace(request_id=2, track_namespace=NS),
    ),
    (
        "NAMESPACE suffix 'x' (d16 §9.21)",
        "08 0003 01 01 78",
        Namespace(track_namespace_suffix=(b"x",)),
    ),
    (
        "PUBLISH_NAMESPACE_DONE by request ID (d16 §9.22)",
        "09 0001 02",
        PublishNamespaceDone(request_id=2),
    ),
    (
        "NAMESPACE_DONE suffix 'x' (d16 §9.23)",
        "0e 0003 01 01 78",
        NamespaceDone(track_namespace_suffix=(b"x",)),
    ),
    (
        "PUBLISH_NAMESPACE_CANCEL by request ID (d16 §9.24)",
        "0c 0003 02 04 00",
        PublishNamespaceCancel(request_id=2, error_code=4),
    ),
    (
        "SUBSCRIBE_NAMESPACE empty prefix, options NAMESPACE (d16 §9.25)",
        "11 0004 04 00 01 00",
        SubscribeNamespace(request_id=4, track_namespace_prefix=(), subscribe_options=1),
    ),
]


def _wire(hexstr: str) -> bytes:
    return bytes.fromhex(hexstr.replace(" ", ""))


@pytest.mark.parametrize(("label", "hexstr", "msg"), VECTORS, ids=[v[0] for v in VECTORS])
def test_vector_decodes_and_reencodes_byte_exact(label: str, hexstr: str, msg: object) -> None:
    wire = _wire(hexstr)
    msg_type, payload, end = read_control_frame(wire, version=DRAFT_16)
    assert end == len(wire)
    assert decode_control(msg_type, payload, version=DRAFT_16) == msg
    assert encode_control(msg, version=DRAFT_16) == wire  # type: ignore[arg-type]
    parser = ControlStreamParser(version=DRAFT_16)
    got = [m for i in range(len(wire)) for m in parser.feed(wire[i : i + 1])]
    assert got == [msg] and parser.buffered == 0


def test_alpn_per_version() -> None:
    assert ALPN_BY_VERSION == {DRAFT_14: "moq-00", DRAFT_16: "moqt-16"}


def test_defaults_are_not_spelled_out() -> None:
    """A constructed SUBSCRIBE with default priority/order/forward/filter sends no parameters."""
    wire = encode_control(
        Subscribe(request_id=0, track_namespace=NS, track_name=b"t"), version=DRAFT_16
    )
    assert wire.endswith(b"\x00")  # Number of Parameters = 0
    moved = replace(Subscribe(request_id=0, track_namespace=NS, track_name=b"t"), forward=False)
    assert encode_control(moved, version=DRAFT_16).endswith(b"\x01\x10\x00")


def test_every_draft16_message_type_has_a_codec_and_a_vector() -> None:
    assert set(MESSAGE_CLASSES_BY_VERSION[DRAFT_16]) == set(MessageTypeD16)
    with_vector = {read_control_frame(_wire(h), version=DRAFT_16)[0] for _, h, _ in VECTORS}
    assert with_vector == set(MessageTypeD16)
    with pytest.raises(LocalProtocolError, match="not a control message of version"):
        encode_control(SubscribeError(request_id=0, error_code=1), version=DRAFT_16)
    with pytest.raises(LocalProtocolError):
        encode_control(RequestOk(request_id=0), version=DRAFT_14)  # a draft-16 message
    with pytest.raises(LocalProtocolError):
        encode_control(SubscribeOk(request_id=0, track_alias=1, track_extensions=((2, 1),)))


# ------------------------------------------------------------------------------ malformed, d16

PV = SessionError.PROTOCOL_VIOLATION
MALFORMED: list[tuple[str, bytes, type[BaseException]]] = []
TRUNCATED: list[tuple[str, bytes]] = []


def _frame(msg_type: int, payload: bytes) -> bytes:
    return encode_varint(msg_type) + len(payload).to_bytes(2, "big") + payload


def _vi(*values: int) -> bytes:
    return b"".join(encode_varint(v) for v in values)


_EXTENSION_BOUNDARIES = {MessageTypeD16.SUBSCRIBE_OK: (7, 9), MessageTypeD16.PUBLISH: (14,)}
"""Offsets in the vectors' payloads where a track extension starts."""

for _label, _hex, _msg in VECTORS:
    _w = _wire(_hex)
    _t, _at = decode_varint(_w)
    _payload = _w[_at + 2 :]
    TRUNCATED += [(f"{_label} frame cut {cut}", _w[:cut]) for cut in range(len(_w))]
    MALFORMED += [
        (f"{_label} payload cut {cut}", _frame(_t, _payload[:cut]), ProtocolViolation)
        for cut in range(len(_payload))
        # Track extensions run to the end: a cut right before one of them is well formed.
        if cut not in _EXTENSION_BOUNDARIES.get(_t, ())
    ]
    MALFORMED.append((f"{_label} length +1", _frame(_t, _payload + b"\x00"), ProtocolViolation))

_SUB = _vi(0) + _vi(2, 2) + b"kv" + _vi(2) + b"m1" + _vi(1) + b"t"
_MAX = (1 << 62) - 1
MALFORMED += [
    # d16 §1.4.2: a delta that takes the type past 2**64 - 1.
    (
        "KVP delta type past 2**64 - 1",
        _frame(3, _SUB + _vi(5, _MAX, 0, _MAX, 0, _MAX, 0, _MAX, 0, _MAX, 0)),
        ProtocolViolation,
    ),
    ("FORWARD twice (delta 0)", _frame(3, _SUB + _vi(2, 0x10, 1, 0, 1)), ProtocolViolation),
    ("FORWARD 2", _frame(3, _SUB + _vi(1, 0x10, 2)), ProtocolViolation),
    ("SUBSCRIBER_PRIORITY 256", _frame(3, _SUB + _vi(1, 0x20, 256)), ProtocolViolation),
    ("GROUP_ORDER 3", _frame(3, _SUB + _vi(1, 0x22, 3)), ProtocolViolation),
    ("GROUP_ORDER 0", _frame(3, _SUB + _vi(1, 0x22, 0)), ProtocolViolation),
    ("FILTER type 9", _frame(3, _SUB + _vi(1, 0x21, 1, 9)), ProtocolViolation),
    ("FILTER trailing byte", _frame(3, _SUB + _vi(1, 0x21, 2, 2, 0)), ProtocolViolation),
    ("FILTER truncated start", _frame(3, _SUB + _vi(1, 0x21, 2, 3, 1)), ProtocolViolation),
    # An empty LARGEST_OBJECT is a truncated Location, not an absent parameter (regression:
    # the decoders tested the value's truthiness, so b"" read as "no largest").
    ("SUBSCRIBE_OK LARGEST_OBJECT empty", _frame(4, _vi(0, 7, 1, 9, 0)), ProtocolViolation),
    (
        "PUBLISH LARGEST_OBJECT empty",
        _frame(0x1D, _vi(1) + _SUB[1:] + _vi(5) + _vi(1, 9, 0)),
        ProtocolViolation,
    ),
    (
        "SUBSCRIBE_OK LARGEST_OBJECT truncated",
        _frame(4, _vi(0, 7, 1, 9, 1, 2)),
        ProtocolViolation,
    ),
    # Draft-14 message types that draft-16 removed.
    *[
        (f"removed type {t:#x}", _frame(t, _vi(0, 0) + _vi(0)), UnknownMessageType)
        for t in (0x0F, 0x12, 0x13, 0x14, 0x19, 0x1F)
    ],
]


def _dedupe(cases: list) -> tuple[list, int]:
    """Keep the first case of each input; return them and how many duplicates were dropped."""
    seen: dict[bytes, tuple] = {}
    for c in cases:
        seen.setdefault(c[1], c)
    return list(seen.values()), len(cases) - len(seen)


TRUNCATED, TRUNCATED_DUPLICATES = _dedupe(TRUNCATED)
MALFORMED, MALFORMED_DUPLICATES = _dedupe(MALFORMED)


@pytest.mark.parametrize(("label", "wire"), TRUNCATED, ids=[t[0] for t in TRUNCATED])
def test_truncated_frame_needs_more_data(label: str, wire: bytes) -> None:
    with pytest.raises(NeedMoreData):
        read_control_frame(wire, version=DRAFT_16)


@pytest.mark.parametrize(("label", "wire", "exc"), MALFORMED, ids=[m[0] for m in MALFORMED])
def test_malformed_draft16(label: str, wire: bytes, exc: type[BaseException]) -> None:
    with pytest.raises(BaseException) as info:
        ControlStreamParser(version=DRAFT_16).feed(wire)
    assert type(info.value) is exc, f"{label}: {info.value!r}"
    assert info.value.error_code == PV  # type: ignore[attr-defined]


_COUNTS = {
    "distinct malformed (PROTOCOL_VIOLATION)": len(MALFORMED),
    "distinct truncations (need more data)": len(TRUNCATED),
    "generated duplicates dropped": TRUNCATED_DUPLICATES + MALFORMED_DUPLICATES,
}


@pytest.mark.parametrize(
    "counts", [_COUNTS], ids=[" ".join(f"{k}={v}" for k, v in _COUNTS.items())]
)
def test_malformed_counts(counts: dict[str, int]) -> None:
    assert counts == {
        "distinct malformed (PROTOCOL_VIOLATION)": 209,
        "distinct truncations (need more data)": 220,
        "generated duplicates dropped": 36,
    }


# ------------------------------------------------------------------------------ Hypothesis, d16

_names = st.binary(min_size=1, max_size=8)
_namespaces = st.lists(_names, min_size=1, max_size=4).map(tuple)
_varints = st.integers(min_value=0, max_value=(1 << 62) - 1)
_locations = st.builds(Location, _varints, _varints)


@st.composite
def _subscribes(draw: st.DrawFn) -> Subscribe:
    filter_type = draw(st.sampled_from(list(FilterType)))
    start = draw(_locations) if filter_type.has_start else None
    end = None
    if filter_type.has_end_group:
        assert start is not None
        end = draw(st.integers(min_value=start.group, max_value=(1 << 62) - 1))
    return Subscribe(
        request_id=draw(_varints),
        track_namespace=draw(_namespaces),
        track_name=draw(_names),
        subscriber_priority=draw(st.integers(0, 255)),
        group_order=draw(st.sampled_from(list(GroupOrder))),
        forward=draw(st.booleans()),
        filter_type=filter_type,
        start=start,
        end_group=end,
    )


_TS_FIELDS = ("request_id", "track_namespace", "track_name", "subscriber_priority")
_TS_FIELDS += ("group_order", "forward", "filter_type", "start", "end_group")
_PUBOK_FIELDS = ("request_id", "forward", "subscriber_priority", "group_order", "filter_type")
_PUBOK_FIELDS += ("start", "end_group")

_extensions = st.dictionaries(st.integers(0, 1000), st.binary(max_size=8), max_size=4).map(
    lambda d: tuple(sorted((k, v if k & 1 else len(v)) for k, v in d.items()))
)

_messages = st.one_of(
    _subscribes(),
    st.builds(
        SubscribeOk,
        request_id=_varints,
        track_alias=_varints,
        expires=_varints,
        largest=st.none() | _locations,
        track_extensions=_extensions,
    ),
    st.builds(
        RequestErrorMessage,
        request_id=_varints,
        error_code=_varints,
        retry_interval=_varints,
        reason=st.text(max_size=20),
    ),
    st.builds(RequestOk, request_id=_varints),
    _subscribes().map(lambda s: TrackStatus(**{f: getattr(s, f) for f in _TS_FIELDS})),
    st.builds(
        Publish,
        request_id=_varints,
        track_namespace=_namespaces,
        track_name=_names,
        track_alias=_varints,
        largest=st.none() | _locations,
        forward=st.booleans(),
        track_extensions=_extensions,
    ),
    _subscribes().map(lambda s: PublishOk(**{f: getattr(s, f) for f in _PUBOK_FIELDS})),
    st.builds(
        Fetch,
        request_id=_varints,
        fetch_type=st.just(FetchType.STANDALONE),
        subscriber_priority=st.integers(0, 255),
        group_order=st.sampled_from(list(GroupOrder)),
        track_namespace=_namespaces,
        track_name=_names,
        start=_locations,
        end=_locations,
    ),
    st.builds(
        Fetch,
        request_id=_varints,
        fetch_type=st.sampled_from([FetchType.RELATIVE_JOINING, FetchType.ABSOLUTE_JOINING]),
        joining_request_id=_varints,
        joining_start=_varints,
    ),
    st.builds(
        FetchOk,
        request_id=_varints,
        end_of_track=st.booleans(),
        end=_locations,
        track_extensions=_extensions,
    ),
    st.builds(
        SubscribeNamespace,
        request_id=_varints,
        track_namespace_prefix=st.lists(_names, max_size=3).map(tuple),
        subscribe_options=st.integers(0, 2),
    ),
    st.builds(Namespace, track_namespace_suffix=st.lists(_names, max_size=3).map(tuple)),
    st.builds(PublishNamespaceDone, request_id=_varints),
    st.builds(Unsubscribe, request_id=_varints),
    st.builds(MaxRequestId, max_request_id=_varints),
)


@settings(max_examples=300, deadline=None)
@given(_messages)
def test_draft16_round_trip(msg: object) -> None:
    """decode(encode(m)) keeps every field, and re-encodes to the same bytes."""
    wire = encode_control(msg, version=DRAFT_16)  # type: ignore[arg-type]
    msg_type, payload, _ = read_control_frame(wire, version=DRAFT_16)
    back = decode_control(msg_type, payload, version=DRAFT_16)
    assert encode_control(back, version=DRAFT_16) == wire
    if isinstance(msg, Subscribe | SubscribeOk | TrackStatus | Publish | PublishOk | Fetch):
        # Fields moved to parameters come back as fields *and* as the parameters that carry them.
        assert replace(back, parameters=msg.parameters) == msg  # type: ignore[type-var]
    else:
        assert back == msg


# ------------------------------------------------------------------------------ datagrams, d16

DATAGRAMS: list[tuple[str, str, ObjectDatagram]] = [
    (
        "payload, Object ID omitted (type 0x04, d16 §10.3.1)",
        "04 02 05 80 6869",
        ObjectDatagram(track_alias=2, group=5, object_id=0, payload=b"hi"),
    ),
    (
        "payload, extensions 0x3c=1 and 0x41='ab', end of group, default priority (type 0x0b)",
        "0b 02 05 03 06 3c01 05026162 7a",
        ObjectDatagram(
            track_alias=2,
            group=5,
            object_id=3,
            extensions=((0x3C, 1), (0x41, b"ab")),
            payload=b"z",
            end_of_group=True,
            default_priority=True,
        ),
    ),
    (
        "status End of Group, Object ID 0, default priority (type 0x2c)",
        "2c 02 05 03",
        ObjectDatagram(
            track_alias=2,
            group=5,
            object_id=0,
            status=ObjectStatus.END_OF_GROUP,
            default_priority=True,
        ),
    ),
    (
        "status End of Track with Object ID and priority (type 0x20)",
        "20 01 00 07 10 04",
        ObjectDatagram(
            track_alias=1,
            group=0,
            object_id=7,
            publisher_priority=0x10,
            status=ObjectStatus.END_OF_TRACK,
        ),
    ),
]


@pytest.mark.parametrize(("label", "hexstr", "dgram"), DATAGRAMS, ids=[d[0] for d in DATAGRAMS])
def test_datagram_vector(label: str, hexstr: str, dgram: ObjectDatagram) -> None:
    wire = _wire(hexstr)
    assert decode_datagram(wire, version=DRAFT_16) == dgram
    assert encode_datagram(dgram, version=DRAFT_16) == wire


BAD_DATAGRAMS: list[tuple[str, bytes, type[BaseException]]] = [
    *[
        (f"datagram type {t:#x}", _vi(t, 1, 0, 7) + b"\x10" + _vi(0), UnknownStreamType)
        for t in (0x10, 0x22, 0x23, 0x26, 0x2F, 0x30, 0x40)
    ],
    ("status 1 (draft-14's Does-Not-Exist)", _wire("20 01 00 07 10 01"), ProtocolViolation),
    ("extensions on End of Group", _wire("21 01 00 07 10 02 3c01 03"), ProtocolViolation),
    ("empty extension block", _wire("01 02 05 03 80 00 7a"), ProtocolViolation),
    ("status trailing byte", _wire("20 01 00 07 10 04 00"), ProtocolViolation),
    *[
        (f"{label} cut {cut}", _wire(h)[:cut], ProtocolViolation)
        for label, h, d in DATAGRAMS
        for cut in range(len(_wire(h)) - len(d.payload))
    ],
]


@pytest.mark.parametrize(("label", "wire", "exc"), BAD_DATAGRAMS, ids=[b[0] for b in BAD_DATAGRAMS])
def test_malformed_datagram_draft16(label: str, wire: bytes, exc: type[BaseException]) -> None:
    with pytest.raises(BaseException) as info:
        decode_datagram(wire, version=DRAFT_16)
    assert type(info.value) is exc, f"{label}: {info.value!r}"
    assert info.value.error_code == PV  # type: ignore[attr-defined]


@settings(max_examples=200, deadline=None)
@given(
    st.builds(
        ObjectDatagram,
        track_alias=_varints,
        group=_varints,
        object_id=_varints,
        publisher_priority=st.integers(0, 255),
        extensions=_extensions,
        payload=st.binary(max_size=16),
        end_of_group=st.booleans(),
    ),
    st.booleans(),
)
def test_datagram_round_trip_draft16(dgram: ObjectDatagram, default_priority: bool) -> None:
    if default_priority:
        dgram = replace(dgram, default_priority=True, publisher_priority=128)
    wire = encode_datagram(dgram, version=DRAFT_16)
    assert decode_datagram(wire, version=DRAFT_16) == dgram


# ------------------------------------------------------------------------------ streams, d16

_N = ObjectStatus.NORMAL
STREAMS: list[tuple[str, str, list[object]]] = [
    (
        "subgroup 0x14, priority 0, objects 0 and 1 (d16 §10.4.2; the draft's first example)",
        "14 02 00 00 00  00 04 61626364  00 04 65666768",
        [
            SubgroupHeaderParsed(
                stream_type=DataStreamType(0x14),
                track_alias=2,
                group=0,
                subgroup=0,
                publisher_priority=0,
            ),
            ObjectParsed(
                group=0,
                subgroup=0,
                object_id=0,
                publisher_priority=0,
                extensions=(),
                status=_N,
                payload=b"abcd",
            ),
            ObjectParsed(
                group=0,
                subgroup=0,
                object_id=1,
                publisher_priority=0,
                extensions=(),
                status=_N,
                payload=b"efgh",
            ),
            StreamFinished(end_of_group=False, end_of_track=False, last_object_id=1),
        ],
    ),
    (
        "subgroup 0x39 (extensions, end of group, default priority), then an End of Group "
        "status (d16 §10.4.2, §10.2.1)",
        "39 02 03  00 02 3c01 01 7a  00 00 00 03",
        [
            SubgroupHeaderParsed(
                stream_type=DataStreamType(0x19),
                track_alias=2,
                group=3,
                subgroup=0,
                publisher_priority=128,
            ),
            ObjectParsed(
                group=3,
                subgroup=0,
                object_id=0,
                publisher_priority=128,
                extensions=((0x3C, 1),),
                status=_N,
                payload=b"z",
            ),
            ObjectParsed(
                group=3,
                subgroup=0,
                object_id=1,
                publisher_priority=128,
                extensions=(),
                status=ObjectStatus.END_OF_GROUP,
                payload=b"",
            ),
            StreamFinished(end_of_group=True, end_of_track=False, last_object_id=1),
        ],
    ),
    (
        "fetch: two objects, End of Non-Existent Range {0, 5}, an object of group 1 "
        "(d16 §10.4.4: flags 0x1c, 0x01, 0x8c, 0x0d)",
        "05 08  1c 00 00 80 01 61  01 01 62  408c 00 05  0d 01 00 01 63",
        [
            FetchHeaderParsed(request_id=8),
            ObjectParsed(
                group=0,
                subgroup=0,
                object_id=0,
                publisher_priority=128,
                extensions=(),
                status=_N,
                payload=b"a",
            ),
            ObjectParsed(
                group=0,
                subgroup=0,
                object_id=1,
                publisher_priority=128,
                extensions=(),
                status=_N,
                payload=b"b",
            ),
            FetchRangeEnded(group=0, object_id=5, unknown=False),
            ObjectParsed(
                group=1,
                subgroup=0,
                object_id=0,
                publisher_priority=128,
                extensions=(),
                status=_N,
                payload=b"c",
            ),
            StreamFinished(end_of_group=False, end_of_track=False, last_object_id=0),
        ],
    ),
]


def _encode_stream(events: list[object]) -> bytes:
    """Our draft-16 encoders, driven by the events a stream should parse to."""
    out = bytearray()
    writer = FetchObjectWriter16()
    header = None
    previous: int | None = None
    for e in events:
        if isinstance(e, SubgroupHeaderParsed):
            header = e
            default = e.publisher_priority == 128  # these vectors use 128 for "no priority byte"
            out += encode_subgroup_header_16(
                track_alias=e.track_alias,
                group=e.group,
                subgroup=e.subgroup or 0,
                publisher_priority=None if default else e.publisher_priority,
                extensions=e.stream_type.has_extensions,
                end_of_group=e.stream_type.end_of_group,
                mode=e.stream_type.subgroup_id_mode,
            )
        elif isinstance(e, FetchHeaderParsed):
            out += writer.header(e.request_id)
        elif isinstance(e, FetchRangeEnded):
            out += writer.range_end(group=e.group, object_id=e.object_id, unknown=e.unknown)
        elif isinstance(e, ObjectParsed) and header is not None:
            out += encode_subgroup_object_16(
                previous_id=previous,
                object_id=e.object_id,
                payload=e.payload,
                status=e.status,
                extensions=e.extensions,
                with_extensions=header.stream_type.has_extensions,
            )
            previous = e.object_id
        elif isinstance(e, ObjectParsed):
            out += writer.object(
                group=e.group,
                subgroup=e.subgroup,
                object_id=e.object_id,
                publisher_priority=e.publisher_priority,
                payload=e.payload,
                extensions=e.extensions,
            )
    return bytes(out)


PARSERS16 = pytest.mark.parametrize(
    "parser_cls", [StreamParser16, DataStreamParser16], ids=["reference", "fast"]
)
"""Both draft-16 stream parsers must agree on every vector and every malformed stream."""


@PARSERS16
@pytest.mark.parametrize(("label", "hexstr", "events"), STREAMS, ids=[s[0] for s in STREAMS])
def test_stream_vector(label: str, hexstr: str, events: list[object], parser_cls: type) -> None:
    wire = _wire(hexstr)
    assert parser_cls().feed(wire, fin=True) == events
    parser = parser_cls()
    got = [e for i in range(len(wire)) for e in parser.feed(wire[i : i + 1])]
    assert got + parser.feed(b"", fin=True) == events
    assert _encode_stream(events) == wire


_SG = _wire("11 02 03 80")  # ZERO mode, extensions, priority 0x80
BAD_STREAMS: list[tuple[str, bytes, bool, type[BaseException]]] = [
    *[
        (f"stream type {t:#x}", _vi(t, 1, 0) + b"\x80", False, UnknownStreamType)
        for t in (0x00, 0x06, 0x0F, 0x16, 0x17, 0x1E, 0x1F, 0x36, 0x3F, 0x40, 0x50)
    ],
    ("status 1 (draft-14's Does-Not-Exist)", _SG + _wire("00 00 00 01"), False, ProtocolViolation),
    ("status 2", _SG + _wire("00 00 00 02"), False, ProtocolViolation),
    ("extensions on End of Group", _SG + _wire("00 02 3c01 00 03"), False, ProtocolViolation),
    ("object after End of Group", _SG + _wire("00 00 00 03 00 00 01 7a"), False, ProtocolViolation),
    ("extension overrun", _SG + _wire("00 02 3c 01"), True, ProtocolViolation),
    (
        "fetch: first object uses prior subgroup",
        _wire("05 08 1d 00 00 80 00"),
        False,
        ProtocolViolation,
    ),
    ("fetch: first object without Group ID", _wire("05 08 14 00 80 00"), False, ProtocolViolation),
    ("fetch: first object without priority", _wire("05 08 0c 00 00 00"), False, ProtocolViolation),
    ("fetch: serialization flags 0x80", _wire("05 08 4080 00 00"), False, ProtocolViolation),
    ("empty stream", b"", True, ProtocolViolation),
    *[
        (f"{label} FIN at {cut}", _wire(h)[:cut], True, ProtocolViolation)
        for label, h, events in STREAMS
        for cut in range(len(_wire(h)))
        if cut not in {len(_encode_stream(events[: k + 1])) for k in range(len(events) - 1)}
    ],
]


@PARSERS16
@pytest.mark.parametrize(
    ("label", "wire", "fin", "exc"), BAD_STREAMS, ids=[b[0] for b in BAD_STREAMS]
)
def test_malformed_stream_draft16(
    label: str, wire: bytes, fin: bool, exc: type[BaseException], parser_cls: type
) -> None:
    parser = parser_cls()
    with pytest.raises(BaseException) as info:
        parser.feed(wire, fin=fin)
    assert type(info.value) is exc, f"{label}: {info.value!r}"
    assert info.value.error_code == PV  # type: ignore[attr-defined]
    with pytest.raises(exc):
        parser.feed(b"x")  # a failed parser stays failed


@PARSERS16
def test_stream_caps_draft16(parser_cls: type) -> None:
    with pytest.raises(ObjectTooLarge) as info:
        parser_cls(max_object_size=8).feed(_wire("14 02 00 00 00 00 09"))
    assert info.value.error_code == SessionError.INTERNAL_ERROR
    with pytest.raises(ObjectTooLarge):
        parser_cls(max_extensions_size=1).feed(_SG + _wire("00 02"))


def _fast_parser_agrees(wire: bytes, events: list[object]) -> None:
    """The zero-copy parser yields the reference's events, whole and byte by byte."""
    assert DataStreamParser16().feed(wire, fin=True) == events
    parser = DataStreamParser16()
    got = [e for i in range(len(wire)) for e in parser.feed(wire[i : i + 1])]
    assert got + parser.feed(b"", fin=True) == events


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.binary(min_size=1, max_size=6),
            st.lists(st.tuples(st.integers(0, 40), st.integers(0, 9)), max_size=2),
        ),
        min_size=1,
        max_size=6,
    ),
    st.booleans(),
)
def test_subgroup_round_trip_draft16(objects: list, default_priority: bool) -> None:
    header = encode_subgroup_header_16(
        track_alias=1,
        group=4,
        publisher_priority=None if default_priority else 7,
        extensions=True,
    )
    wire = bytearray(header)
    previous = None
    object_id = 0
    want = []
    for gap, payload, exts in objects:
        object_id = gap if previous is None else previous + 1 + gap
        extensions = tuple(sorted({k * 2: v for k, v in exts}.items()))
        wire += encode_subgroup_object_16(
            previous_id=previous,
            object_id=object_id,
            payload=payload,
            extensions=extensions,
            with_extensions=True,
        )
        want.append((object_id, payload, extensions))
        previous = object_id
    events = StreamParser16().feed(bytes(wire), fin=True)
    _fast_parser_agrees(bytes(wire), events)
    objs = [e for e in events if isinstance(e, ObjectParsed)]
    assert [(o.object_id, o.payload, o.extensions) for o in objs] == want
    assert all(o.publisher_priority == (128 if default_priority else 7) for o in objs)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.sampled_from([None, 0, 1, 2, 7]),
            st.integers(0, 5),
            st.integers(0, 255),
            st.binary(max_size=4),
        ),
        min_size=1,
        max_size=8,
    )
)
def test_fetch_round_trip_draft16(objects: list) -> None:
    writer = FetchObjectWriter16()
    wire = bytearray(writer.header(3))
    want = []
    for group, subgroup, object_id, priority, payload in objects:
        wire += writer.object(
            group=group,
            subgroup=subgroup,
            object_id=object_id,
            publisher_priority=priority,
            payload=payload,
        )
        want.append((group, subgroup or 0, object_id, priority, payload))
    events = StreamParser16().feed(bytes(wire), fin=True)
    _fast_parser_agrees(bytes(wire), events)
    got = [
        (e.group, e.subgroup, e.object_id, e.publisher_priority, e.payload)
        for e in events
        if isinstance(e, ObjectParsed)
    ]
    assert got == want
