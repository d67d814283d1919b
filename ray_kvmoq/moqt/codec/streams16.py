"""Draft-16 data streams (d16 §10.4): subgroup and fetch streams, encoders and a parser.

What differs from draft-14 (:mod:`.streams`, :mod:`.streams_encode`):

* SUBGROUP_HEADER types are draft-14's (0x10–0x15, 0x18–0x1D) plus the DEFAULT_PRIORITY bit
  0x20 (0x30–0x35, 0x38–0x3D): no Publisher Priority byte, the subscription's applies. Subgroup
  id mode 0b11 (0x16, 0x17, 0x1E, 0x1F, 0x36, 0x37, 0x3E, 0x3F) is invalid.
* Object extension types are delta-encoded (d16 §1.4.2); only Normal objects carry extensions;
  statuses are Normal, End of Group and End of Track (Does-Not-Exist is gone, d16 §10.2.1.1).
* Fetch-stream objects start with Serialization Flags (d16 §10.4.4): the two low bits give the
  subgroup (0, prior, prior + 1, or present), 0x04 Object ID present (else prior + 1), 0x08
  Group ID present (else prior), 0x10 Priority present (else prior), 0x20 Extensions present,
  0x40 a datagram object (no subgroup). 0x8C / 0x10C end a range of non-existent / unknown
  objects and carry a Group ID and an Object ID only. A first object that refers to a prior
  one is a PROTOCOL_VIOLATION. Fetch objects have no Object Status.

Two parsers, same events (those of :mod:`.streams` plus :class:`FetchRangeEnded`), same caps,
same errors, both failed for good after one: :class:`DataStreamParser16` is the one sessions
use, draft-14's zero-copy :class:`~.streams.DataStreamParser` with draft-16's header, object
and fetch-object rules (each payload copied once, only partial object headers buffered);
:class:`StreamParser16` is the plain buffered reference it is checked against.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import (
    LocalProtocolError,
    MoqtError,
    NeedMoreData,
    ObjectTooLarge,
    ProtocolViolation,
    UnknownStreamType,
)
from .streams import (
    DEFAULT_MAX_EXTENSIONS_SIZE,
    DataEvent,
    DataStreamParser,
    FetchHeaderParsed,
    ObjectParsed,
    StreamFinished,
    SubgroupHeaderParsed,
)
from .types import (
    DEFAULT_MAX_OBJECT_SIZE,
    DRAFT_14,
    MAX_VARINT,
    DataStreamType,
    ObjectStatus,
    SubgroupIdMode,
)
from .wire import KeyValuePairs, Reader, decode_varint, encode_kvps, encode_varint

__all__ = [
    "DataEvent16",
    "DataStreamParser16",
    "FetchObjectWriter16",
    "FetchRangeEnded",
    "StreamParser16",
    "encode_subgroup_header_16",
    "encode_subgroup_object_16",
    "encode_subgroup_object_header_16",
]

_DEFAULT_PRIORITY = 0x20
_STATUSES = {
    int(s): s for s in (ObjectStatus.NORMAL, ObjectStatus.END_OF_GROUP, ObjectStatus.END_OF_TRACK)
}
_NON_EXISTENT_RANGE = 0x8C
_UNKNOWN_RANGE = 0x10C


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchRangeEnded:
    """A fetch stream's End of Range marker (d16 §10.4.4.2): every object after the previous
    one up to and including ``(group, object_id)`` does not exist, or is unknown."""

    group: int
    """Group ID of the range's last location."""
    object_id: int
    """Object ID of the range's last location."""
    unknown: bool
    """True for End of Unknown Range (0x10C), False for End of Non-Existent Range (0x8C)."""


DataEvent16 = DataEvent | FetchRangeEnded
"""Anything :meth:`StreamParser16.feed` returns."""


# ---------------------------------------------------------------- encoders


def encode_subgroup_header_16(
    *,
    track_alias: int,
    group: int,
    subgroup: int = 0,
    publisher_priority: int | None = 128,
    extensions: bool = False,
    end_of_group: bool = False,
    mode: SubgroupIdMode | None = None,
) -> bytes:
    """SUBGROUP_HEADER bytes of draft-16; ``publisher_priority=None`` sets DEFAULT_PRIORITY."""
    if mode is None:
        mode = SubgroupIdMode.ZERO if subgroup == 0 else SubgroupIdMode.EXPLICIT
    if mode is SubgroupIdMode.ZERO and subgroup != 0:
        raise LocalProtocolError("subgroup-id mode ZERO needs subgroup 0")
    if publisher_priority is not None and not 0 <= publisher_priority <= 255:
        raise LocalProtocolError(f"publisher priority out of range: {publisher_priority}")
    stream_type = int(
        DataStreamType.subgroup(extensions=extensions, mode=mode, end_of_group=end_of_group)
    )
    if publisher_priority is None:
        stream_type |= _DEFAULT_PRIORITY
    out = bytearray(encode_varint(stream_type))
    out += encode_varint(track_alias)
    out += encode_varint(group)
    if mode is SubgroupIdMode.EXPLICIT:
        out += encode_varint(subgroup)
    if publisher_priority is not None:
        out.append(publisher_priority)
    return bytes(out)


def _extensions_block(extensions: KeyValuePairs) -> bytes:
    block = encode_kvps(extensions, delta=True)
    return encode_varint(len(block)) + block


def encode_subgroup_object_16(
    *,
    previous_id: int | None,
    object_id: int,
    payload: bytes | bytearray | memoryview = b"",
    status: ObjectStatus = ObjectStatus.NORMAL,
    extensions: KeyValuePairs = (),
    with_extensions: bool = False,
) -> bytes:
    """One object of a draft-16 subgroup stream (``previous_id``: the last object's ID on the
    stream, None for the first); ``with_extensions`` mirrors the header's EXTENSIONS bit."""
    header = encode_subgroup_object_header_16(
        previous_id=previous_id,
        object_id=object_id,
        payload_len=len(payload),
        status=status,
        extensions=extensions,
        with_extensions=with_extensions,
    )
    return header + payload


def encode_subgroup_object_header_16(
    *,
    previous_id: int | None,
    object_id: int,
    payload_len: int,
    status: ObjectStatus = ObjectStatus.NORMAL,
    extensions: KeyValuePairs = (),
    with_extensions: bool = False,
) -> bytes:
    """The bytes of a draft-16 subgroup object that precede its payload (a large payload can
    then go to the transport without being copied next to them)."""
    if previous_id is None:
        delta = object_id
    else:
        delta = object_id - previous_id - 1
        if delta < 0:
            raise LocalProtocolError(f"object {object_id} does not follow {previous_id}")
    if int(status) not in _STATUSES:
        raise LocalProtocolError(f"object status {status!r} does not exist in draft-16")
    if status is not ObjectStatus.NORMAL and (payload_len or extensions):
        raise LocalProtocolError("a status object has no payload and no extensions")
    if extensions and not with_extensions:
        raise LocalProtocolError("extensions on a stream whose header has no EXTENSIONS bit")
    out = bytearray(encode_varint(delta))
    if with_extensions:
        out += _extensions_block(extensions)
    out += encode_varint(payload_len)
    if not payload_len:
        out += encode_varint(int(status))
    return bytes(out)


class FetchObjectWriter16:
    """Encodes the objects of one draft-16 fetch stream, in order, with the shortest
    Serialization Flags the prior object allows."""

    __slots__ = ("_group", "_object", "_priority", "_subgroup")

    def __init__(self) -> None:
        self._group: int | None = None
        self._subgroup: int | None = None
        self._object: int | None = None
        self._priority: int | None = None

    def header(self, request_id: int) -> bytes:
        """FETCH_HEADER bytes (unchanged from draft-14)."""
        return encode_varint(int(DataStreamType.FETCH_HEADER)) + encode_varint(request_id)

    def object(
        self,
        *,
        group: int,
        subgroup: int | None,
        object_id: int,
        publisher_priority: int,
        payload: bytes | bytearray | memoryview,
        extensions: KeyValuePairs = (),
    ) -> bytes:
        """One fetch object; ``subgroup=None`` marks a datagram object."""
        header = self.object_header(
            group=group,
            subgroup=subgroup,
            object_id=object_id,
            publisher_priority=publisher_priority,
            payload_len=len(payload),
            extensions=extensions,
        )
        return header + payload

    def object_header(
        self,
        *,
        group: int,
        subgroup: int | None,
        object_id: int,
        publisher_priority: int,
        payload_len: int,
        extensions: KeyValuePairs = (),
    ) -> bytes:
        """The bytes of one fetch object that precede its payload (see :meth:`object`)."""
        if not 0 <= publisher_priority <= 255:
            raise LocalProtocolError(f"publisher priority out of range: {publisher_priority}")
        first = self._group is None
        flags = 0
        fields = bytearray()
        if subgroup is None:
            flags |= 0x40
        elif not first and subgroup == self._subgroup:
            flags |= 0x01
        elif not first and self._subgroup is not None and subgroup == self._subgroup + 1:
            flags |= 0x02
        elif subgroup != 0:
            flags |= 0x03
        if first or group != self._group:
            flags |= 0x08
            fields += encode_varint(group)
        if flags & 0x03 == 0x03 and not flags & 0x40:
            assert subgroup is not None
            fields += encode_varint(subgroup)
        if first or group != self._group or self._object is None or object_id != self._object + 1:
            flags |= 0x04
            fields += encode_varint(object_id)
        if first or publisher_priority != self._priority:
            flags |= 0x10
            fields.append(publisher_priority)
        if extensions:
            flags |= 0x20
            fields += _extensions_block(extensions)
        self._group, self._subgroup, self._object = group, subgroup, object_id
        self._priority = publisher_priority
        return encode_varint(flags) + bytes(fields) + encode_varint(payload_len)

    def range_end(self, *, group: int, object_id: int, unknown: bool) -> bytes:
        """An End of Non-Existent / Unknown Range marker (d16 §10.4.4.2)."""
        self._group, self._object = group, object_id
        flags = _UNKNOWN_RANGE if unknown else _NON_EXISTENT_RANGE
        return encode_varint(flags) + encode_varint(group) + encode_varint(object_id)


# ---------------------------------------------------------------- parser


class StreamParser16:
    """Incremental parser of one draft-16 unidirectional data stream (subgroup or fetch)."""

    __slots__ = (
        "_buf",
        "_ended",
        "_failed",
        "_fetch",
        "_group",
        "_has_ext",
        "_header",
        "_last",
        "_priority",
        "_saw_eog",
        "_saw_eot",
        "_subgroup",
        "max_extensions_size",
        "max_object_size",
    )

    def __init__(
        self,
        *,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        max_extensions_size: int = DEFAULT_MAX_EXTENSIONS_SIZE,
    ) -> None:
        self.max_object_size = max_object_size
        """Largest payload accepted."""
        self.max_extensions_size = max_extensions_size
        """Largest extension block accepted."""
        self._buf = bytearray()
        self._header: SubgroupHeaderParsed | FetchHeaderParsed | None = None
        self._fetch = False
        self._has_ext = False
        self._group: int | None = None
        self._subgroup: int | None = None
        self._priority: int | None = None
        self._last: int | None = None
        self._saw_eog = self._saw_eot = False
        self._ended = False
        self._failed: MoqtError | None = None

    def feed(self, data: bytes | bytearray | memoryview, *, fin: bool = False) -> list[DataEvent16]:
        """Add stream bytes; return the events they complete (StreamFinished at a clean FIN).

        Raises:
            RemoteProtocolError: malformed input; the parser stays failed and re-raises it.
        """
        if self._failed is not None:
            raise self._failed
        if self._ended:
            raise LocalProtocolError("feed() after FIN")
        try:
            return self._feed(bytes(data), fin)
        except MoqtError as exc:
            self._failed = exc
            raise

    def _feed(self, data: bytes, fin: bool) -> list[DataEvent16]:
        self._buf += data
        out: list[DataEvent16] = []
        while self._buf:
            r = Reader(self._buf)
            try:
                event = self._header_event(r) if self._header is None else self._object_event(r)
            except NeedMoreData:
                break
            del self._buf[: r.pos]
            out.append(event)
        if fin:
            self._ended = True
            if self._buf or self._header is None:
                raise ProtocolViolation("stream ended inside a header or an object")
            eog = self._saw_eog or (
                isinstance(self._header, SubgroupHeaderParsed)
                and self._header.stream_type.end_of_group
            )
            out.append(
                StreamFinished(
                    end_of_group=eog, end_of_track=self._saw_eot, last_object_id=self._last
                )
            )
        return out

    def _header_event(self, r: Reader) -> SubgroupHeaderParsed | FetchHeaderParsed:
        raw = r.varint()
        if raw == DataStreamType.FETCH_HEADER:
            header: SubgroupHeaderParsed | FetchHeaderParsed = FetchHeaderParsed(
                request_id=r.varint()
            )
            self._fetch = True
        else:
            base = raw & ~_DEFAULT_PRIORITY
            if raw & ~0x3F or not raw & 0x10 or (base >> 1) & 0x03 == 0x03:
                raise UnknownStreamType(f"invalid draft-16 data stream type {raw:#x}")
            stream_type = DataStreamType(base)
            alias = r.varint()
            group = r.varint()
            mode = stream_type.subgroup_id_mode
            subgroup = r.varint() if mode is SubgroupIdMode.EXPLICIT else None
            if mode is SubgroupIdMode.ZERO:
                subgroup = 0
            default = bool(raw & _DEFAULT_PRIORITY)
            priority = 128 if default else r.uint8()
            header = SubgroupHeaderParsed(
                stream_type=stream_type,
                track_alias=alias,
                group=group,
                subgroup=subgroup,
                publisher_priority=priority,
            )
            self._has_ext = stream_type.has_extensions
            self._group, self._subgroup, self._priority = group, subgroup, priority
        self._header = header
        return header

    def _payload(self, r: Reader) -> bytes:
        length = r.varint()
        if length > self.max_object_size:
            raise ObjectTooLarge(f"object of {length} bytes exceeds {self.max_object_size}")
        return r.raw(length)

    def _extensions(self, r: Reader) -> KeyValuePairs:
        length = r.varint()
        if length > self.max_extensions_size:
            raise ObjectTooLarge(f"extension block of {length} bytes exceeds the cap")
        end = r.pos + length
        if end > r.end:
            raise NeedMoreData
        try:
            items = Reader(r.data, r.pos, end).kvps_until_end(delta=True)
        except NeedMoreData:
            raise ProtocolViolation("extension headers overrun their declared length") from None
        r.pos = end
        return items

    def _object_event(self, r: Reader) -> ObjectParsed | FetchRangeEnded:
        if self._saw_eog or self._saw_eot:
            raise ProtocolViolation("object after an End of Group / End of Track status")
        if self._fetch:
            return self._fetch_object(r)
        delta = r.varint()
        object_id = delta if self._last is None else self._last + delta + 1
        if object_id > (1 << 62) - 1:
            raise ProtocolViolation("object ID overflows 2**62 - 1")
        extensions = self._extensions(r) if self._has_ext else ()
        length = r.varint()
        status = ObjectStatus.NORMAL
        if length == 0:
            status = _STATUSES.get(r.varint())  # type: ignore[assignment]
            if status is None:
                raise ProtocolViolation("invalid draft-16 object status")
            if extensions and status is not ObjectStatus.NORMAL:
                raise ProtocolViolation("extensions on an object that is not Normal")
        elif length > self.max_object_size:
            raise ObjectTooLarge(f"object of {length} bytes exceeds {self.max_object_size}")
        payload = r.raw(length)
        subgroup = self._subgroup if self._subgroup is not None else object_id
        self._subgroup = subgroup
        self._last = object_id
        self._saw_eog = status is ObjectStatus.END_OF_GROUP
        self._saw_eot = status is ObjectStatus.END_OF_TRACK
        assert self._group is not None and self._priority is not None
        return ObjectParsed(
            group=self._group,
            subgroup=subgroup,
            object_id=object_id,
            publisher_priority=self._priority,
            extensions=extensions,
            status=status,
            payload=payload,
        )

    def _fetch_object(self, r: Reader) -> ObjectParsed | FetchRangeEnded:
        flags = r.varint()
        first = self._group is None
        if flags in (_NON_EXISTENT_RANGE, _UNKNOWN_RANGE):
            end_group = r.varint()
            end_object = r.varint()
            self._group, self._last = end_group, end_object
            return FetchRangeEnded(
                group=end_group, object_id=end_object, unknown=flags == _UNKNOWN_RANGE
            )
        if flags >= 0x80:
            raise ProtocolViolation(f"invalid serialization flags {flags:#x}")
        mode = flags & 0x03
        datagram = bool(flags & 0x40)
        if (
            first
            and ((not datagram and mode in (0x01, 0x02)) or not flags & 0x04 or not flags & 0x08)
        ) or (first and not flags & 0x10):
            raise ProtocolViolation("first fetch object refers to a prior object")
        group = r.varint() if flags & 0x08 else self._group
        if datagram:
            subgroup: int | None = None
        elif mode == 0x00:
            subgroup = 0
        elif mode == 0x01:
            subgroup = self._subgroup
        elif mode == 0x02:
            subgroup = None if self._subgroup is None else self._subgroup + 1
        else:
            subgroup = r.varint()
        if not datagram and subgroup is None:
            raise ProtocolViolation("subgroup refers to a prior datagram object")
        if flags & 0x04:
            object_id = r.varint()
        elif self._last is None:
            raise ProtocolViolation("fetch object refers to a prior object that had none")
        else:
            object_id = self._last + 1
        priority = r.uint8() if flags & 0x10 else self._priority
        if priority is None or group is None:
            raise ProtocolViolation("fetch object refers to a prior object that had none")
        extensions = self._extensions(r) if flags & 0x20 else ()
        payload = self._payload(r)
        self._group, self._subgroup, self._last, self._priority = (
            group,
            subgroup,
            object_id,
            priority,
        )
        return ObjectParsed(
            group=group,
            subgroup=subgroup if subgroup is not None else 0,
            object_id=object_id,
            publisher_priority=priority,
            extensions=extensions,
            status=ObjectStatus.NORMAL,
            payload=payload,
        )


# ---------------------------------------------------------------- fast parser

_NORMAL = ObjectStatus.NORMAL
_SUBGROUP_TYPES = frozenset(int(t) for t in DataStreamType if t.is_subgroup)
_Fields = tuple[int, int, int, int, KeyValuePairs]


def _extensions16(src: bytes | bytearray | memoryview, start: int, end: int) -> KeyValuePairs:
    try:
        return Reader(src, start, end).kvps_until_end(delta=True)
    except NeedMoreData:
        raise ProtocolViolation("extension headers overrun their declared length") from None


class DataStreamParser16(DataStreamParser):
    """Incremental parser of one draft-16 data stream on draft-14's zero-copy path.

    Only the stream header, the object headers and the fetch-object compaction differ from
    :class:`~.streams.DataStreamParser` (module docstring); the payload handling is inherited,
    so draft-14 streams keep their own code untouched.
    """

    __slots__ = ("_prior",)

    def __init__(
        self,
        *,
        max_object_size: int = DEFAULT_MAX_OBJECT_SIZE,
        max_extensions_size: int = DEFAULT_MAX_EXTENSIONS_SIZE,
    ) -> None:
        super().__init__(
            version=DRAFT_14,
            max_object_size=max_object_size,
            max_extensions_size=max_extensions_size,
        )
        self._prior = False
        """Fetch streams: an object (or range end) came before, so fields may refer to it."""
        self._priority = -1  # fetch streams: no prior priority until an object carried one

    def feed(self, data: bytes | bytearray | memoryview, *, fin: bool = False) -> list[DataEvent16]:  # type: ignore[override]
        """Add stream bytes (and the FIN); return the events they complete."""
        return super().feed(data, fin=fin)  # type: ignore[return-value]

    def _marker(self, fields: _Fields) -> DataEvent:
        """An End of Non-Existent / Unknown Range marker (``_parse_fetch_object``'s -1)."""
        group, _, object_id, unknown, _ = fields
        ended = FetchRangeEnded(group=group, object_id=object_id, unknown=bool(unknown))
        return ended  # type: ignore[return-value]  # a DataEvent16, which feed() declares

    def _parse_stream_header(self, src: bytes | bytearray | memoryview) -> int:
        raw, pos = decode_varint(src, 0)
        if raw == DataStreamType.FETCH_HEADER:
            request_id, pos = decode_varint(src, pos)
            self._fetch = True
            self._header = FetchHeaderParsed(request_id=request_id)
            return pos
        base = raw & ~_DEFAULT_PRIORITY
        if raw & ~0x3F or base not in _SUBGROUP_TYPES:
            raise UnknownStreamType(f"invalid draft-16 data stream type {raw:#x}")
        st = DataStreamType(base)
        track_alias, pos = decode_varint(src, pos)
        group, pos = decode_varint(src, pos)
        mode = st.subgroup_id_mode
        subgroup: int | None = 0
        if mode is SubgroupIdMode.EXPLICIT:
            subgroup, pos = decode_varint(src, pos)
        elif mode is SubgroupIdMode.FIRST_OBJECT:
            subgroup = None
        if raw & _DEFAULT_PRIORITY:
            priority = 128
        else:
            if pos >= len(src):
                raise NeedMoreData
            priority = src[pos]
            pos += 1
        self._has_ext = st.has_extensions
        self._group, self._subgroup, self._priority = group, subgroup, priority
        self._header = SubgroupHeaderParsed(
            stream_type=st,
            track_alias=track_alias,
            group=group,
            subgroup=subgroup,
            publisher_priority=priority,
        )
        return pos

    def _extension_block(
        self, src: bytes | bytearray | memoryview, pos: int, end: int
    ) -> tuple[KeyValuePairs, int]:
        ext_len, pos = decode_varint(src, pos)
        if ext_len > self.max_extensions_size:
            raise ObjectTooLarge(f"extension block of {ext_len} bytes exceeds the cap")
        if not ext_len:
            return (), pos
        if pos + ext_len > end:
            raise NeedMoreData
        return _extensions16(src, pos, pos + ext_len), pos + ext_len

    def _parse_subgroup_object(
        self, src: bytes | bytearray | memoryview, pos: int, end: int
    ) -> tuple[int, int, _Fields, ObjectStatus]:
        delta, pos = decode_varint(src, pos)
        extensions: KeyValuePairs = ()
        if self._has_ext:
            extensions, pos = self._extension_block(src, pos, end)
        payload_len, pos = decode_varint(src, pos)
        status = _NORMAL
        if payload_len == 0:
            raw, pos = decode_varint(src, pos)
            found = _STATUSES.get(raw)
            if found is None:
                raise ProtocolViolation(f"invalid draft-16 object status {raw}")
            status = found
            if extensions and status is not _NORMAL:
                raise ProtocolViolation("extensions on an object that is not Normal")
        elif payload_len > self.max_object_size:
            raise ObjectTooLarge(f"object of {payload_len} bytes exceeds {self.max_object_size}")
        # Header complete: commit stream state.
        last = self._last_id
        object_id = delta if last is None else last + delta + 1
        if object_id > MAX_VARINT:
            raise ProtocolViolation("object ID overflows 2**62 - 1")
        if self._ended:
            raise ProtocolViolation("object after an End of Group / End of Track status")
        if self._subgroup is None:
            self._subgroup = object_id
        self._last_id = object_id
        self._note_status(status)
        return (
            pos,
            payload_len,
            (self._group, self._subgroup, object_id, self._priority, extensions),
            status,
        )

    def _parse_fetch_object(
        self, src: bytes | bytearray | memoryview, pos: int, end: int
    ) -> tuple[int, int, _Fields, ObjectStatus]:
        flags, pos = decode_varint(src, pos)
        prior = self._prior
        if flags in (_NON_EXISTENT_RANGE, _UNKNOWN_RANGE):
            group, pos = decode_varint(src, pos)
            object_id, pos = decode_varint(src, pos)
            self._group, self._last_id, self._prior = group, object_id, True
            unknown = int(flags == _UNKNOWN_RANGE)
            return pos, -1, (group, 0, object_id, unknown, ()), _NORMAL
        if flags >= 0x80:
            raise ProtocolViolation(f"invalid serialization flags {flags:#x}")
        mode = flags & 0x03
        datagram = bool(flags & 0x40)
        if not prior and ((not datagram and mode in (0x01, 0x02)) or not flags & 0x1C == 0x1C):
            raise ProtocolViolation("first fetch object refers to a prior object")
        group = self._group
        if flags & 0x08:
            group, pos = decode_varint(src, pos)
        subgroup: int | None
        if datagram:
            subgroup = None
        elif mode == 0x00:
            subgroup = 0
        elif mode == 0x01:
            subgroup = self._subgroup
        elif mode == 0x02:
            subgroup = None if self._subgroup is None else self._subgroup + 1
        else:
            subgroup, pos = decode_varint(src, pos)
        if not datagram and subgroup is None:
            raise ProtocolViolation("subgroup refers to a prior datagram object")
        if flags & 0x04:
            object_id, pos = decode_varint(src, pos)
        elif self._last_id is None:
            raise ProtocolViolation("fetch object refers to a prior object that had none")
        else:
            object_id = self._last_id + 1
        priority = self._priority
        if flags & 0x10:
            if pos >= end:
                raise NeedMoreData
            priority = src[pos]
            pos += 1
        elif priority < 0:
            raise ProtocolViolation("fetch object refers to a prior object that had none")
        extensions: KeyValuePairs = ()
        if flags & 0x20:
            extensions, pos = self._extension_block(src, pos, end)
        payload_len, pos = decode_varint(src, pos)
        if payload_len > self.max_object_size:
            raise ObjectTooLarge(f"object of {payload_len} bytes exceeds {self.max_object_size}")
        # Header complete: commit the prior-object state the next object may refer to.
        self._group, self._subgroup, self._last_id, self._priority = (
            group,
            subgroup,
            object_id,
            priority,
        )
        self._prior = True
        fields = (group, subgroup if subgroup is not None else 0, object_id, priority, extensions)
        return pos, payload_len, fields, _NORMAL
