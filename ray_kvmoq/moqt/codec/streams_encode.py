"""Encoders of the data plane (d14 §10.4): subgroup and fetch stream headers and objects.

Each object encoder comes in two forms: ``*_header`` returns the bytes that precede the
payload (so a transport can send a large payload without concatenating it), and the plain form
returns header plus payload, or appends both to a caller's ``bytearray`` (``out=``). Encoders
validate our own values and raise :class:`LocalProtocolError`; they always write minimal
varints. :mod:`.streams` re-exports everything here.
"""

from __future__ import annotations

from .errors import LocalProtocolError
from .types import DRAFT_14, DataStreamType, ObjectStatus, SubgroupIdMode
from .wire import KeyValuePairs, encode_kvps, encode_varint

__all__ = [
    "encode_fetch_header",
    "encode_fetch_object",
    "encode_fetch_object_header",
    "encode_subgroup_header",
    "encode_subgroup_object",
    "encode_subgroup_object_header",
]

_NORMAL = ObjectStatus.NORMAL


def _check_version(version: int) -> None:
    if version != DRAFT_14:
        raise LocalProtocolError(f"unsupported MoQT version {version:#x}")


def encode_subgroup_header(
    *,
    track_alias: int,
    group: int,
    subgroup: int = 0,
    publisher_priority: int = 128,
    extensions: bool = False,
    end_of_group: bool = False,
    mode: SubgroupIdMode | None = None,
    version: int = DRAFT_14,
) -> bytes:
    """SUBGROUP_HEADER bytes (d14 §10.4.2).

    Args:
        extensions: every object on the stream will carry an Extension Headers Length.
        end_of_group: the stream will end with the last object of the group.
        mode: how to convey ``subgroup``; default ZERO when it is 0, else EXPLICIT. With
            FIRST_OBJECT, ``subgroup`` must equal the first object's ID (not written).
    """
    _check_version(version)
    if mode is None:
        mode = SubgroupIdMode.ZERO if subgroup == 0 else SubgroupIdMode.EXPLICIT
    if mode is SubgroupIdMode.ZERO and subgroup != 0:
        raise LocalProtocolError("subgroup-id mode ZERO needs subgroup 0")
    if not 0 <= publisher_priority <= 255:
        raise LocalProtocolError(f"publisher priority out of range: {publisher_priority}")
    stream_type = DataStreamType.subgroup(
        extensions=extensions, mode=mode, end_of_group=end_of_group
    )
    out = bytearray(encode_varint(stream_type))
    out += encode_varint(track_alias)
    out += encode_varint(group)
    if mode is SubgroupIdMode.EXPLICIT:
        out += encode_varint(subgroup)
    out.append(publisher_priority)
    return bytes(out)


def _status_and_length(
    payload_len: int, status: ObjectStatus, extensions: KeyValuePairs
) -> bytearray:
    try:
        status = ObjectStatus(status)
    except ValueError:
        raise LocalProtocolError(f"invalid object status {status}") from None
    if status is not _NORMAL:
        if payload_len:
            raise LocalProtocolError("objects with a status other than NORMAL have no payload")
        if status is ObjectStatus.DOES_NOT_EXIST and extensions:
            raise LocalProtocolError("Does-Not-Exist objects cannot carry extensions")
    out = bytearray(encode_varint(payload_len))
    if payload_len == 0:
        out += encode_varint(status)
    return out


def _extension_block(extensions: KeyValuePairs) -> bytes:
    block = encode_kvps(extensions)
    return encode_varint(len(block)) + block


def encode_subgroup_object_header(
    prev_id: int | None,
    object_id: int,
    payload_len: int,
    *,
    extensions: KeyValuePairs = (),
    with_ext: bool = False,
    status: ObjectStatus = ObjectStatus.NORMAL,
) -> bytes:
    """The bytes of a subgroup object that precede its payload (d14 §10.4.2).

    Args:
        prev_id: ID of the previous object on this stream, None for the first object.
        with_ext: the stream header's extensions bit; False forbids ``extensions``.
    """
    if prev_id is None:
        delta = object_id
    else:
        delta = object_id - prev_id - 1
        if delta < 0:
            raise LocalProtocolError(f"object {object_id} does not follow {prev_id}")
    out = bytearray(encode_varint(delta))
    if with_ext:
        out += _extension_block(extensions)
    elif extensions:
        raise LocalProtocolError("extensions need a subgroup type with the extensions bit")
    out += _status_and_length(payload_len, status, extensions)
    return bytes(out)


def encode_subgroup_object(
    prev_id: int | None,
    object_id: int,
    payload: bytes | bytearray | memoryview = b"",
    *,
    extensions: KeyValuePairs = (),
    with_ext: bool = False,
    status: ObjectStatus = ObjectStatus.NORMAL,
    out: bytearray | None = None,
) -> bytes | None:
    """A whole subgroup object; appended to ``out`` (returns None) or returned as bytes."""
    header = encode_subgroup_object_header(
        prev_id, object_id, len(payload), extensions=extensions, with_ext=with_ext, status=status
    )
    if out is not None:
        out += header
        out += payload
        return None
    return header + bytes(payload)


def encode_fetch_header(request_id: int, *, version: int = DRAFT_14) -> bytes:
    """FETCH_HEADER bytes (d14 §10.4.4)."""
    _check_version(version)
    return encode_varint(DataStreamType.FETCH_HEADER) + encode_varint(request_id)


def encode_fetch_object_header(
    *,
    group: int,
    subgroup: int,
    object_id: int,
    publisher_priority: int,
    payload_len: int,
    extensions: KeyValuePairs = (),
    status: ObjectStatus = ObjectStatus.NORMAL,
) -> bytes:
    """The bytes of a fetch-stream object that precede its payload (d14 §10.4.4)."""
    if not 0 <= publisher_priority <= 255:
        raise LocalProtocolError(f"publisher priority out of range: {publisher_priority}")
    out = bytearray(encode_varint(group))
    out += encode_varint(subgroup)
    out += encode_varint(object_id)
    out.append(publisher_priority)
    out += _extension_block(extensions)
    out += _status_and_length(payload_len, status, extensions)
    return bytes(out)


def encode_fetch_object(
    *,
    group: int,
    subgroup: int,
    object_id: int,
    publisher_priority: int,
    payload: bytes | bytearray | memoryview = b"",
    extensions: KeyValuePairs = (),
    status: ObjectStatus = ObjectStatus.NORMAL,
    out: bytearray | None = None,
) -> bytes | None:
    """A whole fetch-stream object; appended to ``out`` (returns None) or returned as bytes."""
    header = encode_fetch_object_header(
        group=group,
        subgroup=subgroup,
        object_id=object_id,
        publisher_priority=publisher_priority,
        payload_len=len(payload),
        extensions=extensions,
        status=status,
    )
    if out is not None:
        out += header
        out += payload
        return None
    return header + bytes(payload)
