"""Primitive encodings of MoQT draft-14 (d14 §1.4): varints, fixed ints, byte strings, tuples,
reason phrases and Key-Value-Pair lists.

Design:

* :class:`Reader` walks a ``bytes``/``bytearray``/``memoryview`` with an explicit position and a
  hard end. Running past the end raises :class:`NeedMoreData`, never a protocol error: the caller
  knows whether the buffer was complete (control payload, datagram) and converts, or waits for
  more bytes (stream parsers).
* :class:`Writer` appends to one ``bytearray``; ``getvalue()`` copies once.
* Varints use precomputed ``struct`` paths (one ``unpack_from`` per varint); 1-byte values, by
  far the most common, take a table lookup on encode.
* Limit checks that the draft attaches to the primitive (KVP value ≤ 65535, reason ≤ 1024,
  namespace 1..32 fields) live here and raise :class:`ProtocolViolation`; encoders raise
  :class:`LocalProtocolError` for values that cannot be represented.

Invariants: non-minimal varints are accepted on decode; encoders always write minimal varints.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

from .errors import LocalProtocolError, NeedMoreData, ProtocolViolation
from .types import MAX_KVP_VALUE, MAX_NAMESPACE_FIELDS, MAX_REASON, MAX_VARINT

__all__ = [
    "KeyValuePairs",
    "Reader",
    "Writer",
    "decode_varint",
    "encode_kvps",
    "encode_varint",
    "varint_size",
]

KeyValuePairs = tuple[tuple[int, int | bytes], ...]
"""An ordered Key-Value-Pair list: even types map to ``int``, odd types to ``bytes``."""

_U16 = struct.Struct(">H")
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_ONE_BYTE = tuple(bytes((i,)) for i in range(64))


def varint_size(value: int) -> int:
    """Number of bytes of the minimal varint encoding of ``value``."""
    if value < 0x40:
        return 1
    if value < 0x4000:
        return 2
    if value < 0x40000000:
        return 4
    return 8


def encode_varint(value: int) -> bytes:
    """Minimal QUIC varint encoding of ``value`` (RFC 9000 §16).

    Raises:
        LocalProtocolError: ``value`` is negative or above 2**62 - 1.
    """
    if 0 <= value < 0x40:
        return _ONE_BYTE[value]
    if 0x40 <= value < 0x4000:
        return _U16.pack(value | 0x4000)
    if 0x4000 <= value < 0x40000000:
        return _U32.pack(value | 0x80000000)
    if 0x40000000 <= value <= MAX_VARINT:
        return _U64.pack(value | 0xC000000000000000)
    raise LocalProtocolError(f"varint out of range: {value}")


def decode_varint(data: bytes | bytearray | memoryview, pos: int = 0) -> tuple[int, int]:
    """Decode one varint at ``data[pos]``; returns ``(value, new_pos)``.

    Raises:
        NeedMoreData: the varint is not complete in ``data``.
    """
    try:
        first = data[pos]
    except IndexError:
        raise NeedMoreData from None
    prefix = first >> 6
    if prefix == 0:
        return first, pos + 1
    if prefix == 1:
        if pos + 2 > len(data):
            raise NeedMoreData
        return _U16.unpack_from(data, pos)[0] & 0x3FFF, pos + 2
    if prefix == 2:
        if pos + 4 > len(data):
            raise NeedMoreData
        return _U32.unpack_from(data, pos)[0] & 0x3FFFFFFF, pos + 4
    if pos + 8 > len(data):
        raise NeedMoreData
    return _U64.unpack_from(data, pos)[0] & 0x3FFFFFFFFFFFFFFF, pos + 8


_MAX_KVP_TYPE = (1 << 64) - 1


class Reader:
    """Sequential reader over ``data[pos:end]``; raises :class:`NeedMoreData` past ``end``."""

    __slots__ = ("data", "end", "pos")

    def __init__(
        self, data: bytes | bytearray | memoryview, pos: int = 0, end: int | None = None
    ) -> None:
        self.data = data
        """The underlying buffer (not copied)."""
        self.pos = pos
        """Offset of the next unread byte."""
        self.end = len(data) if end is None else end
        """Offset one past the last readable byte."""

    @property
    def remaining(self) -> int:
        """Bytes left before ``end``."""
        return self.end - self.pos

    def at_end(self) -> bool:
        """True when every byte up to ``end`` has been consumed."""
        return self.pos >= self.end

    def varint(self) -> int:
        """Read one varint."""
        data, pos = self.data, self.pos
        if pos >= self.end:
            raise NeedMoreData
        first = data[pos]
        if first < 0x40:
            self.pos = pos + 1
            return first
        size = 1 << (first >> 6)
        if pos + size > self.end:
            raise NeedMoreData
        self.pos = pos + size
        if size == 2:
            return int(_U16.unpack_from(data, pos)[0]) & 0x3FFF
        if size == 4:
            return int(_U32.unpack_from(data, pos)[0]) & 0x3FFFFFFF
        return int(_U64.unpack_from(data, pos)[0]) & 0x3FFFFFFFFFFFFFFF

    def uint8(self) -> int:
        """Read one byte."""
        if self.pos >= self.end:
            raise NeedMoreData
        value = self.data[self.pos]
        self.pos += 1
        return value

    def uint16(self) -> int:
        """Read a big-endian 16-bit integer."""
        if self.pos + 2 > self.end:
            raise NeedMoreData
        value = int(_U16.unpack_from(self.data, self.pos)[0])
        self.pos += 2
        return value

    def raw(self, length: int) -> bytes:
        """Read exactly ``length`` bytes (copied into a new ``bytes``)."""
        start = self.pos
        stop = start + length
        if stop > self.end:
            raise NeedMoreData
        self.pos = stop
        return bytes(self.data[start:stop])

    def length_prefixed(self, max_length: int | None = None, what: str = "field") -> bytes:
        """Read a ``(b)`` field: varint length, then that many bytes.

        Raises:
            ProtocolViolation: the length exceeds ``max_length``.
        """
        length = self.varint()
        if max_length is not None and length > max_length:
            raise ProtocolViolation(f"{what} length {length} exceeds {max_length}")
        return self.raw(length)

    def rest(self) -> bytes:
        """Read everything up to ``end``."""
        value = bytes(self.data[self.pos : self.end])
        self.pos = self.end
        return value

    def tuple_field(self, *, allow_empty: bool = False) -> tuple[bytes, ...]:
        """Read a Track Namespace ``(tuple)`` of 1..32 fields (0 allowed with ``allow_empty``).

        Raises:
            ProtocolViolation: field count out of range (d14 §2.4.1).
        """
        count = self.varint()
        if count > MAX_NAMESPACE_FIELDS or (count == 0 and not allow_empty):
            raise ProtocolViolation(f"namespace has {count} fields (allowed 1..32)")
        return tuple(self.length_prefixed() for _ in range(count))

    def reason(self) -> str:
        """Read a Reason Phrase (d14 §1.4.3); invalid UTF-8 is replaced, not rejected.

        Raises:
            ProtocolViolation: longer than 1024 bytes.
        """
        return self.length_prefixed(MAX_REASON, "reason phrase").decode("utf-8", "replace")

    def kvps(self, count: int, *, delta: bool = False) -> KeyValuePairs:
        """Read ``count`` Key-Value-Pairs (d14 §1.4.2); with ``delta`` each type is written as
        the difference from the previous one (d16 §1.4.2), and the absolute types come back.

        Raises:
            ProtocolViolation: an odd-typed value longer than 65535 bytes, or a delta type that
                takes the type past 2**64 - 1 (d16 §1.4.2).
        """
        items: list[tuple[int, int | bytes]] = []
        previous = 0
        for _ in range(count):
            kvp_type = self.varint()
            if delta:
                kvp_type += previous
                if kvp_type > _MAX_KVP_TYPE:
                    raise ProtocolViolation(f"key-value pair type {kvp_type:#x} exceeds 2**64 - 1")
                previous = kvp_type
            if kvp_type & 1:
                items.append((kvp_type, self.length_prefixed(MAX_KVP_VALUE, "key-value pair")))
            else:
                items.append((kvp_type, self.varint()))
        return tuple(items)

    def kvps_until_end(self, *, delta: bool = False) -> KeyValuePairs:
        """Read Key-Value-Pairs until ``end`` (extension header blocks); ``delta`` as in
        :meth:`kvps`."""
        items: list[tuple[int, int | bytes]] = []
        previous = 0
        while self.pos < self.end:
            kvp_type = self.varint()
            if delta:
                kvp_type += previous
                if kvp_type > _MAX_KVP_TYPE:
                    raise ProtocolViolation(f"key-value pair type {kvp_type:#x} exceeds 2**64 - 1")
                previous = kvp_type
            if kvp_type & 1:
                items.append((kvp_type, self.length_prefixed(MAX_KVP_VALUE, "key-value pair")))
            else:
                items.append((kvp_type, self.varint()))
        return tuple(items)


class Writer:
    """Append-only encoder over one ``bytearray``."""

    __slots__ = ("buf",)

    def __init__(self, buf: bytearray | None = None) -> None:
        self.buf = bytearray() if buf is None else buf
        """The output buffer (appended to in place)."""

    def getvalue(self) -> bytes:
        """A ``bytes`` copy of everything written."""
        return bytes(self.buf)

    def varint(self, value: int) -> Writer:
        """Append a minimal varint."""
        self.buf += encode_varint(value)
        return self

    def uint8(self, value: int) -> Writer:
        """Append one byte."""
        if not 0 <= value <= 0xFF:
            raise LocalProtocolError(f"8-bit field out of range: {value}")
        self.buf.append(value)
        return self

    def uint16(self, value: int) -> Writer:
        """Append a big-endian 16-bit integer."""
        if not 0 <= value <= 0xFFFF:
            raise LocalProtocolError(f"16-bit field out of range: {value}")
        self.buf += _U16.pack(value)
        return self

    def raw(self, data: bytes | bytearray | memoryview) -> Writer:
        """Append bytes as they are."""
        self.buf += data
        return self

    def length_prefixed(
        self, data: bytes | bytearray | memoryview, max_length: int | None = None
    ) -> Writer:
        """Append a ``(b)`` field."""
        if max_length is not None and len(data) > max_length:
            raise LocalProtocolError(f"field of {len(data)} bytes exceeds {max_length}")
        self.buf += encode_varint(len(data))
        self.buf += data
        return self

    def tuple_field(self, fields: tuple[bytes, ...], *, allow_empty: bool = False) -> Writer:
        """Append a Track Namespace ``(tuple)``."""
        if len(fields) > MAX_NAMESPACE_FIELDS or (not fields and not allow_empty):
            raise LocalProtocolError(f"namespace has {len(fields)} fields (allowed 1..32)")
        self.buf += encode_varint(len(fields))
        for field in fields:
            if not isinstance(field, bytes | bytearray | memoryview):
                raise LocalProtocolError(f"namespace field must be bytes, got {type(field)}")
            self.length_prefixed(field)
        return self

    def reason(self, reason: str) -> Writer:
        """Append a Reason Phrase (at most 1024 UTF-8 bytes)."""
        return self.length_prefixed(reason.encode("utf-8"), MAX_REASON)

    def kvps(
        self,
        items: Iterable[tuple[int, int | bytes]],
        *,
        with_count: bool = True,
        delta: bool = False,
    ) -> Writer:
        """Append Key-Value-Pairs, preceded by their count when ``with_count``."""
        items = tuple(items)
        if with_count:
            self.buf += encode_varint(len(items))
        self.buf += encode_kvps(items, delta=delta)
        return self


def encode_kvps(items: Iterable[tuple[int, int | bytes]], *, delta: bool = False) -> bytes:
    """Encode Key-Value-Pairs back to back, without a count (d14 §1.4.2). With ``delta`` the
    pairs are written in ascending type order, each type as the difference from the previous
    one (d16 §1.4.2); equal types keep their order.

    Raises:
        LocalProtocolError: an even type with a non-int value, an odd type with a non-bytes
            value, or a value longer than 65535 bytes.
    """
    out = bytearray()
    previous = 0
    for kvp_type, value in sorted(items, key=lambda kv: kv[0]) if delta else items:
        out += encode_varint(kvp_type - previous if delta else kvp_type)
        previous = kvp_type
        if kvp_type & 1:
            if not isinstance(value, bytes | bytearray | memoryview):
                raise LocalProtocolError(f"odd KVP type {kvp_type:#x} needs bytes")
            if len(value) > MAX_KVP_VALUE:
                raise LocalProtocolError(f"KVP value of {len(value)} bytes exceeds 65535")
            out += encode_varint(len(value))
            out += value
        else:
            if not isinstance(value, int) or isinstance(value, bool):
                raise LocalProtocolError(f"even KVP type {kvp_type:#x} needs an int")
            out += encode_varint(value)
    return bytes(out)
