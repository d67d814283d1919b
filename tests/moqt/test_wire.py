"""Primitive encodings (d14 §1.4): varints, Reader/Writer, tuples, reason phrases, KVPs."""

from __future__ import annotations

import pytest

from ray_kvmoq.moqt.codec.errors import LocalProtocolError, NeedMoreData, ProtocolViolation
from ray_kvmoq.moqt.codec.types import MAX_VARINT
from ray_kvmoq.moqt.codec.wire import (
    Reader,
    Writer,
    decode_varint,
    encode_kvps,
    encode_varint,
    varint_size,
)

BOUNDARIES = [0, 1, 63, 64, 16383, 16384, (1 << 30) - 1, 1 << 30, MAX_VARINT]


@pytest.mark.parametrize("value", BOUNDARIES)
def test_varint_boundaries(value: int) -> None:
    wire = encode_varint(value)
    assert len(wire) == varint_size(value)
    assert decode_varint(wire) == (value, len(wire))
    assert Reader(wire).varint() == value
    for cut in range(len(wire)):
        with pytest.raises(NeedMoreData):
            decode_varint(wire[:cut])
        with pytest.raises(NeedMoreData):
            Reader(wire[:cut]).varint()


def test_varint_at_offset_and_over_memoryview() -> None:
    data = memoryview(b"\xff" + encode_varint(15293) + b"\x25")
    assert decode_varint(data, 1) == (15293, 3)
    r = Reader(data, 1)
    assert r.varint() == 15293
    assert r.varint() == 37
    assert r.at_end()


@pytest.mark.parametrize("value", [-1, MAX_VARINT + 1, 1 << 64])
def test_varint_out_of_range_is_local_error(value: int) -> None:
    with pytest.raises(LocalProtocolError):
        encode_varint(value)


def test_reader_respects_end() -> None:
    r = Reader(b"\x01\x02\x03\x04", 0, 2)
    assert r.remaining == 2
    assert r.uint8() == 1
    with pytest.raises(NeedMoreData):
        r.uint16()
    assert r.uint8() == 2
    with pytest.raises(NeedMoreData):
        r.uint8()
    with pytest.raises(NeedMoreData):
        r.raw(1)
    assert r.rest() == b""


def test_reader_fixed_and_prefixed() -> None:
    r = Reader(b"\x12\x34\x03abcxyz")
    assert r.uint16() == 0x1234
    assert r.length_prefixed() == b"abc"
    assert r.rest() == b"xyz"
    with pytest.raises(ProtocolViolation):
        Reader(b"\x03abc").length_prefixed(2, "thing")


def test_tuple_limits() -> None:
    w = Writer().tuple_field((b"a", b"bc"))
    assert w.getvalue() == b"\x02\x01a\x02bc"
    assert Reader(w.getvalue()).tuple_field() == (b"a", b"bc")
    with pytest.raises(ProtocolViolation):
        Reader(b"\x00").tuple_field()
    assert Reader(b"\x00").tuple_field(allow_empty=True) == ()
    with pytest.raises(ProtocolViolation):
        Reader(b"\x21" + b"\x00" * 33).tuple_field()
    assert len(Reader(b"\x20" + b"\x00" * 32).tuple_field()) == 32
    with pytest.raises(LocalProtocolError):
        Writer().tuple_field(())
    with pytest.raises(LocalProtocolError):
        Writer().tuple_field((b"x",) * 33)
    with pytest.raises(LocalProtocolError):
        Writer().tuple_field(("text",))  # type: ignore[arg-type]


def test_reason_phrase() -> None:
    assert Writer().reason("héllo").getvalue() == b"\x06h\xc3\xa9llo"
    assert Reader(b"\x06h\xc3\xa9llo").reason() == "héllo"
    assert Reader(b"\x02\xff\xfe").reason() == "\ufffd\ufffd"  # invalid UTF-8 is tolerated
    ok = "r" * 1024
    assert Reader(Writer().reason(ok).getvalue()).reason() == ok
    with pytest.raises(LocalProtocolError):
        Writer().reason(ok + "r")
    with pytest.raises(ProtocolViolation):
        Reader(encode_varint(1025) + b"r" * 1025).reason()


def test_kvps_even_odd() -> None:
    items = ((2, 10000), (3, b"tok"), (0x40B5A, 1), (0x21, b""))
    wire = encode_kvps(items)
    assert wire == b"\x02\x67\x10\x03\x03tok\x80\x04\x0b\x5a\x01\x21\x00"
    assert Reader(wire).kvps(4) == items
    assert Reader(wire).kvps_until_end() == items
    counted = Writer().kvps(items).getvalue()
    assert counted == b"\x04" + wire


def test_kvp_value_limit() -> None:
    big = b"v" * 65535
    assert Reader(encode_kvps([(1, big)])).kvps(1) == ((1, big),)
    with pytest.raises(LocalProtocolError):
        encode_kvps([(1, big + b"v")])
    with pytest.raises(ProtocolViolation):
        Reader(b"\x01" + encode_varint(65536)).kvps(1)


@pytest.mark.parametrize(
    "item",
    [(1, 5), (2, b"x"), (4, True), (3, "text")],
    ids=["odd-int", "even-bytes", "bool", "str"],
)
def test_kvp_shape_mismatch_is_local_error(item: tuple) -> None:
    with pytest.raises(LocalProtocolError):
        encode_kvps([item])


def test_writer_ranges() -> None:
    w = Writer()
    w.uint8(255).uint16(65535).raw(b"!").length_prefixed(b"ab")
    assert w.getvalue() == b"\xff\xff\xff!\x02ab"
    for bad in (-1, 256):
        with pytest.raises(LocalProtocolError):
            Writer().uint8(bad)
    with pytest.raises(LocalProtocolError):
        Writer().uint16(65536)
    with pytest.raises(LocalProtocolError):
        Writer().length_prefixed(b"abc", 2)
    shared = bytearray(b"pre")
    Writer(shared).varint(64)
    assert shared == b"pre\x40\x40"
