"""OBJECT_DATAGRAM encoding and decoding (d14 §10.3.1).

A datagram is always complete, so truncation is a :class:`ProtocolViolation`, never
:class:`NeedMoreData`. Types 0x00-0x07 carry a payload running to the end of the datagram (bit 0
extensions, bit 1 end of group, bit 2 Object ID omitted = 0); types 0x20/0x21 carry an Object
Status instead (bit 0 extensions). An Extensions-Present type with an empty extension block is
a PROTOCOL_VIOLATION.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import LocalProtocolError, NeedMoreData, ProtocolViolation, UnknownStreamType
from .types import DRAFT_14, DatagramType, ObjectStatus
from .wire import KeyValuePairs, Reader, encode_kvps, encode_varint

__all__ = ["ObjectDatagram", "decode_datagram", "encode_datagram"]

_STATUS_BY_VALUE = {int(s): s for s in ObjectStatus}
_DATAGRAM_TYPES = {int(t): t for t in DatagramType}


@dataclass(frozen=True, kw_only=True, slots=True)
class ObjectDatagram:
    """One object carried in a QUIC DATAGRAM."""

    track_alias: int
    """Track Alias of the subscription."""
    group: int
    """Group ID."""
    object_id: int
    """Object ID (0 when the type omits it)."""
    publisher_priority: int = 128
    """Publisher priority."""
    extensions: KeyValuePairs = ()
    """Extension headers in wire order."""
    status: ObjectStatus | None = None
    """Object status for status datagrams (0x20/0x21); None for payload datagrams."""
    payload: bytes = b""
    """Object payload (payload datagrams only)."""
    end_of_group: bool = False
    """The object is the last one of its group (payload datagrams only)."""

    @property
    def datagram_type(self) -> DatagramType:
        """The type this datagram encodes to."""
        if self.status is not None:
            return DatagramType.STATUS_EXT if self.extensions else DatagramType.STATUS
        return DatagramType.for_object(
            extensions=bool(self.extensions),
            end_of_group=self.end_of_group,
            object_id=self.object_id,
        )


def encode_datagram(dgram: ObjectDatagram, *, version: int = DRAFT_14) -> bytes:
    """Serialize an OBJECT_DATAGRAM; Object ID 0 uses the ID-less types.

    Raises:
        LocalProtocolError: a status datagram with a payload or end_of_group, an invalid
            status, a priority outside 0..255, or a bad version.
    """
    if version != DRAFT_14:
        raise LocalProtocolError(f"unsupported MoQT version {version:#x}")
    if not 0 <= dgram.publisher_priority <= 255:
        raise LocalProtocolError(f"publisher priority out of range: {dgram.publisher_priority}")
    if dgram.status is not None:
        if dgram.status not in _STATUS_BY_VALUE:
            raise LocalProtocolError(f"invalid object status {dgram.status}")
        if dgram.payload or dgram.end_of_group:
            raise LocalProtocolError("status datagrams carry no payload and no end-of-group bit")
        if dgram.status is ObjectStatus.DOES_NOT_EXIST and dgram.extensions:
            raise LocalProtocolError("Does-Not-Exist objects cannot carry extensions")
    dtype = dgram.datagram_type
    out = bytearray(encode_varint(dtype))
    out += encode_varint(dgram.track_alias)
    out += encode_varint(dgram.group)
    if dtype.has_object_id:
        out += encode_varint(dgram.object_id)
    out.append(dgram.publisher_priority)
    if dtype.has_extensions:
        block = encode_kvps(dgram.extensions)
        out += encode_varint(len(block))
        out += block
    if dgram.status is not None:
        out += encode_varint(int(dgram.status))
    else:
        out += dgram.payload
    return bytes(out)


def decode_datagram(data: bytes | bytearray | memoryview, *, version: int) -> ObjectDatagram:
    """Parse one OBJECT_DATAGRAM.

    Raises:
        UnknownStreamType: unknown datagram type.
        ProtocolViolation: truncated, trailing bytes after a status, invalid status, empty
            extension block with the extensions bit, or extensions on Does-Not-Exist.
    """
    if version != DRAFT_14:
        raise LocalProtocolError(f"unsupported MoQT version {version:#x}")
    r = Reader(data)
    try:
        raw_type = r.varint()
        dtype = _DATAGRAM_TYPES.get(raw_type)
        if dtype is None:
            raise UnknownStreamType(f"unknown datagram type {raw_type:#x}")
        track_alias = r.varint()
        group = r.varint()
        object_id = r.varint() if dtype.has_object_id else 0
        priority = r.uint8()
        extensions: KeyValuePairs = ()
        if dtype.has_extensions:
            ext_len = r.varint()
            if ext_len == 0:
                raise ProtocolViolation("extensions bit set with an empty extension block")
            if ext_len > r.remaining:
                raise NeedMoreData
            block_end = r.pos + ext_len
            extensions = Reader(r.data, r.pos, block_end).kvps_until_end()
            r.pos = block_end
        status = None
        payload = b""
        if dtype.is_status:
            raw_status = r.varint()
            status = _STATUS_BY_VALUE.get(raw_status)
            if status is None:
                raise ProtocolViolation(f"invalid object status {raw_status}")
            if not r.at_end():
                raise ProtocolViolation("trailing bytes after a status datagram")
            if status is ObjectStatus.DOES_NOT_EXIST and extensions:
                raise ProtocolViolation("Does-Not-Exist object carries extensions")
        else:
            payload = r.rest()
    except NeedMoreData:
        raise ProtocolViolation("truncated datagram") from None
    return ObjectDatagram(
        track_alias=track_alias,
        group=group,
        object_id=object_id,
        publisher_priority=priority,
        extensions=extensions,
        status=status,
        payload=payload,
        end_of_group=dtype.end_of_group,
    )
