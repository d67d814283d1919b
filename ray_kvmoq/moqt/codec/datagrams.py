"""OBJECT_DATAGRAM encoding and decoding (d14 §10.3.1; draft-16's layout, d16 §10.3.1, at the end).

A datagram is always complete, so truncation is a :class:`ProtocolViolation`, never
:class:`NeedMoreData`. Types 0x00-0x07 carry a payload running to the end of the datagram (bit 0
extensions, bit 1 end of group, bit 2 Object ID omitted = 0); types 0x20/0x21 carry an Object
Status instead (bit 0 extensions). An Extensions-Present type with an empty extension block is
a PROTOCOL_VIOLATION.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import LocalProtocolError, NeedMoreData, ProtocolViolation, UnknownStreamType
from .types import DRAFT_14, DRAFT_16, DatagramType, ObjectStatus
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
    default_priority: bool = False
    """Draft-16: no Publisher Priority on the wire, the subscription's applies (type bit 0x08;
    ``publisher_priority`` is then only a placeholder)."""

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
    if version == DRAFT_16:
        return _encode_16(dgram)
    if version != DRAFT_14:
        raise LocalProtocolError(f"unsupported MoQT version {version:#x}")
    if dgram.default_priority:
        raise LocalProtocolError("draft-14 datagrams always carry a publisher priority")
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
    if version == DRAFT_16:
        return _decode_16(data)
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


# ---------------------------------------------------------------- draft-16 (d16 §10.3.1)
# Type 0b00X0XXXX: 0x01 extensions, 0x02 end of group, 0x04 Object ID omitted (0), 0x08 no
# Publisher Priority (the subscription's applies), 0x20 status instead of payload; status with
# end of group (0x22, 0x23, 0x26, 0x27, 0x2A, 0x2B, 0x2E, 0x2F) is invalid. Extension types are
# delta-encoded. Statuses are Normal, End of Group and End of Track (d16 §10.2.1.1); only Normal
# objects may carry extensions.

_EXT, _EOG, _NO_ID, _DEFAULT_PRIO, _STATUS = 0x01, 0x02, 0x04, 0x08, 0x20
_STATUSES_16 = {
    int(s): s for s in (ObjectStatus.NORMAL, ObjectStatus.END_OF_GROUP, ObjectStatus.END_OF_TRACK)
}


def _encode_16(dgram: ObjectDatagram) -> bytes:
    if not dgram.default_priority and not 0 <= dgram.publisher_priority <= 255:
        raise LocalProtocolError(f"publisher priority out of range: {dgram.publisher_priority}")
    dtype = (_EXT if dgram.extensions else 0) | (_DEFAULT_PRIO if dgram.default_priority else 0)
    if dgram.object_id == 0:
        dtype |= _NO_ID
    if dgram.status is not None:
        if int(dgram.status) not in _STATUSES_16:
            raise LocalProtocolError(f"object status {dgram.status!r} does not exist in draft-16")
        if dgram.payload or dgram.end_of_group:
            raise LocalProtocolError("status datagrams carry no payload and no end-of-group bit")
        if dgram.extensions and dgram.status is not ObjectStatus.NORMAL:
            raise LocalProtocolError("only Normal objects carry extensions (d16 §10.2.1.2)")
        dtype |= _STATUS
    elif dgram.end_of_group:
        dtype |= _EOG
    out = bytearray(encode_varint(dtype))
    out += encode_varint(dgram.track_alias)
    out += encode_varint(dgram.group)
    if not dtype & _NO_ID:
        out += encode_varint(dgram.object_id)
    if not dtype & _DEFAULT_PRIO:
        out.append(dgram.publisher_priority)
    if dtype & _EXT:
        block = encode_kvps(dgram.extensions, delta=True)
        out += encode_varint(len(block))
        out += block
    if dgram.status is not None:
        out += encode_varint(int(dgram.status))
    else:
        out += dgram.payload
    return bytes(out)


def _decode_16(data: bytes | bytearray | memoryview) -> ObjectDatagram:
    r = Reader(data)
    try:
        dtype = r.varint()
        if dtype & ~0x2F or (dtype & _STATUS and dtype & _EOG):
            raise UnknownStreamType(f"invalid draft-16 datagram type {dtype:#x}")
        track_alias = r.varint()
        group = r.varint()
        object_id = 0 if dtype & _NO_ID else r.varint()
        priority = 128 if dtype & _DEFAULT_PRIO else r.uint8()
        extensions: KeyValuePairs = ()
        if dtype & _EXT:
            ext_len = r.varint()
            if ext_len == 0:
                raise ProtocolViolation("extensions bit set with an empty extension block")
            if ext_len > r.remaining:
                raise NeedMoreData
            block_end = r.pos + ext_len
            extensions = Reader(r.data, r.pos, block_end).kvps_until_end(delta=True)
            r.pos = block_end
        status = None
        payload = b""
        if dtype & _STATUS:
            raw_status = r.varint()
            status = _STATUSES_16.get(raw_status)
            if status is None:
                raise ProtocolViolation(f"invalid object status {raw_status}")
            if not r.at_end():
                raise ProtocolViolation("trailing bytes after a status datagram")
            if extensions and status is not ObjectStatus.NORMAL:
                raise ProtocolViolation("extensions on an object that is not Normal")
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
        end_of_group=bool(dtype & _EOG),
        default_priority=bool(dtype & _DEFAULT_PRIO),
    )
