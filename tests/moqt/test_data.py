"""Data plane codec (d14 §10): subgroup/fetch encoders, the incremental DataStreamParser on
large objects and odd chunkings, FIN semantics, caps, and every datagram type."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from ray_kvmoq.moqt.codec.datagrams import ObjectDatagram, decode_datagram, encode_datagram
from ray_kvmoq.moqt.codec.errors import LocalProtocolError, ObjectTooLarge, ProtocolViolation
from ray_kvmoq.moqt.codec.streams import (
    DataStreamParser,
    FetchHeaderParsed,
    ObjectParsed,
    StreamFinished,
    SubgroupHeaderParsed,
    encode_fetch_header,
    encode_fetch_object,
    encode_subgroup_header,
    encode_subgroup_object,
    encode_subgroup_object_header,
)
from ray_kvmoq.moqt.codec.types import (
    DRAFT_14,
    DatagramType,
    DataStreamType,
    ObjectStatus,
    SubgroupIdMode,
)


def big_group(sizes: list[int], *, eog: bool = True) -> tuple[bytes, list[bytes]]:
    payloads = [bytes([i % 251]) * size for i, size in enumerate(sizes)]
    wire = bytearray(encode_subgroup_header(track_alias=9, group=3, end_of_group=eog))
    prev = None
    for oid, payload in enumerate(payloads):
        encode_subgroup_object(prev, oid, memoryview(payload), out=wire)
        prev = oid
    return bytes(wire), payloads


@pytest.mark.parametrize("chunk", [1, 7, 1350, 16384, 1 << 20])
def test_large_objects_any_chunking(chunk: int) -> None:
    sizes = [23 * 1024, 160 * 1024, 0, 1, 70000] if chunk > 1 else [3000, 0, 1, 5000]
    wire, payloads = big_group(sizes)
    parser = DataStreamParser()
    events = [e for i in range(0, len(wire), chunk) for e in parser.feed(wire[i : i + chunk])]
    events += parser.feed(b"", fin=True)
    assert isinstance(events[0], SubgroupHeaderParsed)
    objects = events[1:-1]
    assert [type(o.payload) for o in objects] == [bytes] * len(sizes)  # type: ignore[union-attr]
    assert [o.payload for o in objects] == payloads  # type: ignore[union-attr]
    assert [o.object_id for o in objects] == list(range(len(sizes)))  # type: ignore[union-attr]
    assert events[-1] == StreamFinished(
        end_of_group=True, end_of_track=False, last_object_id=4 if chunk > 1 else 3
    )
    assert parser.buffered == 0


def test_zero_length_normal_object_writes_status() -> None:
    assert encode_subgroup_object_header(None, 0, 0) == b"\x00\x00\x00"
    assert encode_subgroup_object_header(4, 5, 3) == b"\x00\x03"
    assert encode_subgroup_object_header(4, 9, 3) == b"\x04\x03"
    assert (
        encode_subgroup_object_header(None, 0, 0, status=ObjectStatus.END_OF_GROUP)
        == b"\x00\x00\x03"
    )


def test_input_buffers_are_snapshotted() -> None:
    wire, payloads = big_group([5000])
    mutable = bytearray(wire)
    parser = DataStreamParser()
    events = parser.feed(memoryview(mutable)[:3000])
    mutable[:] = b"\x00" * len(mutable)
    events += parser.feed(wire[3000:], fin=True)
    assert events[1].payload == payloads[0]  # type: ignore[union-attr]


def test_first_object_subgroup_mode() -> None:
    header = encode_subgroup_header(
        track_alias=1, group=2, subgroup=5, mode=SubgroupIdMode.FIRST_OBJECT
    )
    assert header == b"\x12\x01\x02\x80"
    wire = header + encode_subgroup_object(None, 5, b"a") + encode_subgroup_object(5, 7, b"b")  # type: ignore[operator]
    events = DataStreamParser().feed(wire, fin=True)
    assert events[0].subgroup is None  # type: ignore[union-attr]
    assert [(e.subgroup, e.object_id) for e in events[1:3]] == [(5, 5), (5, 7)]  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("kwargs", "expected_type"),
    [
        ({}, DataStreamType.SUBGROUP_ZERO),
        ({"subgroup": 4}, DataStreamType.SUBGROUP_EXPLICIT),
        ({"subgroup": 0, "mode": SubgroupIdMode.EXPLICIT}, DataStreamType.SUBGROUP_EXPLICIT),
        ({"extensions": True, "end_of_group": True}, DataStreamType.SUBGROUP_ZERO_EXT_EOG),
        (
            {"mode": SubgroupIdMode.FIRST_OBJECT, "extensions": True},
            DataStreamType.SUBGROUP_FIRST_OBJECT_EXT,
        ),
    ],
)
def test_subgroup_header_types(kwargs: dict, expected_type: DataStreamType) -> None:
    header = encode_subgroup_header(track_alias=1, group=1, **kwargs)
    assert header[0] == expected_type
    [event] = DataStreamParser().feed(header)
    assert event.stream_type is expected_type  # type: ignore[union-attr]


def test_stream_type_helpers() -> None:
    for st in DataStreamType:
        if not st.is_subgroup:
            continue
        rebuilt = DataStreamType.subgroup(
            extensions=st.has_extensions, mode=st.subgroup_id_mode, end_of_group=st.end_of_group
        )
        assert rebuilt is st
    assert not DataStreamType.FETCH_HEADER.has_extensions
    assert not DataStreamType.FETCH_HEADER.end_of_group


@pytest.mark.parametrize(
    "call",
    [
        lambda: encode_subgroup_header(
            track_alias=1, group=1, subgroup=3, mode=SubgroupIdMode.ZERO
        ),
        lambda: encode_subgroup_header(track_alias=1, group=1, publisher_priority=256),
        lambda: encode_subgroup_header(track_alias=1, group=1, version=0xFF00000D),
        lambda: encode_subgroup_object_header(5, 5, 1),
        lambda: encode_subgroup_object_header(None, 0, 1, extensions=((2, 1),)),
        lambda: encode_subgroup_object_header(None, 0, 1, status=ObjectStatus.END_OF_GROUP),
        lambda: encode_subgroup_object_header(
            None, 0, 0, extensions=((2, 1),), with_ext=True, status=ObjectStatus.DOES_NOT_EXIST
        ),
        lambda: encode_fetch_object_header_bad_priority(),
        lambda: DataStreamParser(version=1),
    ],
    ids=[
        "mode-zero-nonzero",
        "priority",
        "version",
        "non-increasing",
        "ext-without-bit",
        "status-with-payload",
        "dne-with-ext",
        "fetch-priority",
        "parser-version",
    ],
)
def test_encoder_misuse_is_local_error(call: Callable[[], object]) -> None:
    with pytest.raises(LocalProtocolError):
        call()


def encode_fetch_object_header_bad_priority() -> object:
    return encode_fetch_object(group=0, subgroup=0, object_id=0, publisher_priority=300)


def test_fetch_stream_round_trip() -> None:
    wire = bytearray(encode_fetch_header(11))
    encode_fetch_object(
        group=2, subgroup=1, object_id=4, publisher_priority=7, payload=b"x" * 5000, out=wire
    )
    encode_fetch_object(
        group=2,
        subgroup=1,
        object_id=5,
        publisher_priority=7,
        extensions=((0x3C, 2), (0x0B, b"imm")),
        status=ObjectStatus.END_OF_TRACK,
        out=wire,
    )
    events = DataStreamParser().feed(bytes(wire), fin=True)
    assert events == [
        FetchHeaderParsed(request_id=11),
        ObjectParsed(
            group=2,
            subgroup=1,
            object_id=4,
            publisher_priority=7,
            extensions=(),
            status=ObjectStatus.NORMAL,
            payload=b"x" * 5000,
        ),
        ObjectParsed(
            group=2,
            subgroup=1,
            object_id=5,
            publisher_priority=7,
            extensions=((0x3C, 2), (0x0B, b"imm")),
            status=ObjectStatus.END_OF_TRACK,
            payload=b"",
        ),
        StreamFinished(end_of_group=False, end_of_track=True, last_object_id=5),
    ]


def test_fin_rules() -> None:
    header = encode_subgroup_header(track_alias=1, group=1)
    events = DataStreamParser().feed(header, fin=True)
    assert events[-1] == StreamFinished(end_of_group=False, end_of_track=False, last_object_id=None)
    parser = DataStreamParser()
    parser.feed(header + b"\x00\x05abc")
    assert parser.buffered == 3
    with pytest.raises(ProtocolViolation):
        parser.feed(b"", fin=True)
    done = DataStreamParser()
    done.feed(header, fin=True)
    with pytest.raises(LocalProtocolError):
        done.feed(b"x")


def test_object_cap_is_inclusive_and_checked_before_allocation() -> None:
    header = encode_subgroup_header(track_alias=1, group=1)
    ok = header + encode_subgroup_object(None, 0, b"z" * 1024)  # type: ignore[operator]
    assert DataStreamParser(max_object_size=1024).feed(ok, fin=True)[1].payload == b"z" * 1024  # type: ignore[union-attr]
    parser = DataStreamParser(max_object_size=1024)
    with pytest.raises(ObjectTooLarge):
        parser.feed(header + b"\x00" + b"\xc0\x00\x00\x00\x40\x00\x00\x00")  # 1 GiB declared
    assert parser.buffered == 0


DATAGRAMS = [
    ObjectDatagram(track_alias=1, group=2, object_id=3, payload=b"p"),
    ObjectDatagram(track_alias=1, group=2, object_id=3, payload=b"p", extensions=((2, 1),)),
    ObjectDatagram(track_alias=1, group=2, object_id=3, payload=b"p", end_of_group=True),
    ObjectDatagram(
        track_alias=1, group=2, object_id=3, payload=b"", extensions=((3, b"x"),), end_of_group=True
    ),
    ObjectDatagram(track_alias=1, group=2, object_id=0, payload=b"p"),
    ObjectDatagram(track_alias=1, group=2, object_id=0, payload=b"p", extensions=((2, 1),)),
    ObjectDatagram(track_alias=1, group=2, object_id=0, payload=b"p", end_of_group=True),
    ObjectDatagram(
        track_alias=1, group=2, object_id=0, payload=b"p", extensions=((2, 1),), end_of_group=True
    ),
    ObjectDatagram(track_alias=1, group=2, object_id=0, status=ObjectStatus.END_OF_TRACK),
    ObjectDatagram(
        track_alias=1, group=2, object_id=9, status=ObjectStatus.NORMAL, extensions=((2, 1),)
    ),
]


@pytest.mark.parametrize("dgram", DATAGRAMS, ids=[f"{d.datagram_type:#04x}" for d in DATAGRAMS])
def test_every_datagram_type(dgram: ObjectDatagram) -> None:
    wire = encode_datagram(dgram)
    assert decode_datagram(memoryview(wire), version=DRAFT_14) == dgram


def test_all_datagram_types_covered() -> None:
    assert {d.datagram_type for d in DATAGRAMS} == set(DatagramType)


@pytest.mark.parametrize(
    "dgram",
    [
        ObjectDatagram(
            track_alias=1, group=1, object_id=1, status=ObjectStatus.NORMAL, payload=b"x"
        ),
        ObjectDatagram(
            track_alias=1, group=1, object_id=1, status=ObjectStatus.END_OF_GROUP, end_of_group=True
        ),
        ObjectDatagram(
            track_alias=1,
            group=1,
            object_id=1,
            status=ObjectStatus.DOES_NOT_EXIST,
            extensions=((2, 1),),
        ),
        ObjectDatagram(track_alias=1, group=1, object_id=1, publisher_priority=-1),
    ],
)
def test_datagram_misuse_is_local_error(dgram: ObjectDatagram) -> None:
    with pytest.raises(LocalProtocolError):
        encode_datagram(dgram)
