"""Field-level helpers shared by the control-message codecs (:mod:`.framer_track`,
:mod:`.framer_session`).

Readers validate peer input and raise :class:`RemoteProtocolError` subclasses; writers validate
our own values and raise :class:`LocalProtocolError`. ``NeedMoreData`` from a reader escapes on
purpose: :func:`.framer.decode_control` turns it into a ProtocolViolation because a control
payload is always complete when decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from .errors import LocalProtocolError, ProtocolViolation
from .messages_base import AuthToken, Location, Parameters
from .types import MAX_FULL_TRACK_NAME, FetchType, FilterType, GroupOrder
from .wire import Reader, Writer

__all__ = [
    "DecodeOptions",
    "read_bool",
    "read_filter",
    "read_full_track_name",
    "read_group_order",
    "read_location",
    "read_namespace",
    "read_params",
    "write_bool",
    "write_filter",
    "write_full_track_name",
    "write_location",
    "write_namespace",
    "write_params",
]

P = TypeVar("P", bound=Parameters)


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodeOptions:
    """Knobs of control-message decoding."""

    version: int
    """Negotiated version (only draft-14 is implemented)."""
    allow_empty_namespace_prefix: bool = False
    """Accept a 0-field prefix in SUBSCRIBE_NAMESPACE/UNSUBSCRIBE_NAMESPACE (moq-dev quirk)."""


def _check_ftn_length(namespace: tuple[bytes, ...], name: bytes, local: bool) -> None:
    total = sum(len(f) for f in namespace) + len(name)
    if total > MAX_FULL_TRACK_NAME:
        message = f"full track name of {total} bytes exceeds {MAX_FULL_TRACK_NAME}"
        raise LocalProtocolError(message) if local else ProtocolViolation(message)


def read_namespace(r: Reader, *, allow_empty: bool = False) -> tuple[bytes, ...]:
    """Read a Track Namespace tuple and check its field count and total length."""
    namespace = r.tuple_field(allow_empty=allow_empty)
    _check_ftn_length(namespace, b"", local=False)
    return namespace


def write_namespace(w: Writer, namespace: tuple[bytes, ...], *, allow_empty: bool = False) -> None:
    """Write a Track Namespace tuple after checking it."""
    _check_ftn_length(namespace, b"", local=True)
    w.tuple_field(namespace, allow_empty=allow_empty)


def read_full_track_name(r: Reader) -> tuple[tuple[bytes, ...], bytes]:
    """Read Track Namespace + Track Name; total length at most 4096 bytes (d14 §2.4.1)."""
    namespace = r.tuple_field()
    name = r.length_prefixed(MAX_FULL_TRACK_NAME, "track name")
    _check_ftn_length(namespace, name, local=False)
    return namespace, name


def write_full_track_name(w: Writer, namespace: tuple[bytes, ...], name: bytes) -> None:
    """Write Track Namespace + Track Name after checking the 4096-byte limit."""
    if not isinstance(name, bytes | bytearray):
        raise LocalProtocolError(f"track name must be bytes, got {type(name).__name__}")
    _check_ftn_length(namespace, name, local=True)
    w.tuple_field(namespace)
    w.length_prefixed(name)


def read_bool(r: Reader, what: str) -> bool:
    """Read an 8-bit 0/1 flag; any other value is a PROTOCOL_VIOLATION."""
    value = r.uint8()
    if value > 1:
        raise ProtocolViolation(f"{what} must be 0 or 1, got {value}")
    return value == 1


def write_bool(w: Writer, value: bool) -> None:
    """Write an 8-bit 0/1 flag."""
    w.uint8(1 if value else 0)


def read_group_order(r: Reader, *, allow_default: bool) -> GroupOrder:
    """Read Group Order: 1..2, or 0..2 in requests (``allow_default``)."""
    value = r.uint8()
    if value > 2 or (value == 0 and not allow_default):
        raise ProtocolViolation(f"invalid group order {value}")
    return GroupOrder(value)


def check_group_order(value: int, *, allow_default: bool) -> int:
    """Validate a group order we are about to send."""
    if not 0 <= value <= 2 or (value == 0 and not allow_default):
        raise LocalProtocolError(f"invalid group order {value}")
    return value


def read_location(r: Reader) -> Location:
    """Read a Location {Group (i), Object (i)}."""
    group = r.varint()
    return Location(group, r.varint())


def write_location(w: Writer, loc: Location) -> None:
    """Write a Location."""
    w.varint(loc.group).varint(loc.object)


def read_filter(r: Reader) -> tuple[FilterType, Location | None, int | None]:
    """Read Filter Type with its optional Start Location and End Group (d14 §9.7)."""
    raw = r.varint()
    try:
        filter_type = FilterType(raw)
    except ValueError:
        raise ProtocolViolation(f"invalid filter type {raw}") from None
    start = read_location(r) if filter_type.has_start else None
    end_group = r.varint() if filter_type.has_end_group else None
    if start is not None and end_group is not None and end_group < start.group:
        raise ProtocolViolation(f"end group {end_group} before start group {start.group}")
    return filter_type, start, end_group


def write_filter(
    w: Writer, filter_type: FilterType, start: Location | None, end_group: int | None
) -> None:
    """Write Filter Type, Start Location and End Group, checking presence."""
    try:
        ft = FilterType(filter_type)
    except ValueError:
        raise LocalProtocolError(f"invalid filter type {filter_type}") from None
    if (start is not None) != ft.has_start or (end_group is not None) != ft.has_end_group:
        raise LocalProtocolError(f"{ft.name}: start/end_group presence does not match filter")
    w.varint(ft)
    if start is not None:
        write_location(w, start)
    if end_group is not None:
        if start is not None and end_group < start.group:
            raise LocalProtocolError("end group before start group")
        w.varint(end_group)


def read_fetch_type(r: Reader) -> FetchType:
    """Read a Fetch Type (1..3)."""
    raw = r.varint()
    try:
        return FetchType(raw)
    except ValueError:
        raise ProtocolViolation(f"invalid fetch type {raw}") from None


def read_params(r: Reader, cls: type[P]) -> P:
    """Read Number of Parameters + Key-Value-Pairs into ``cls``.

    Raises:
        ProtocolViolation: a known non-repeatable parameter appears twice (d14 §9.2).
        KeyValueFormattingError: an AUTHORIZATION_TOKEN value does not parse (d14 §9.2.1.1).
    """
    items = r.kvps(r.varint())
    _check_params(items, cls, local=False)
    return cls(items=items)


def write_params(w: Writer, params: Parameters) -> None:
    """Write Number of Parameters + Key-Value-Pairs."""
    _check_params(params.items, type(params), local=True)
    w.kvps(params.items)


def _check_params(
    items: tuple[tuple[int, int | bytes], ...], cls: type[Parameters], *, local: bool
) -> None:
    seen: set[int] = set()
    for kvp_type, value in items:
        if kvp_type not in cls.KNOWN:
            continue
        if kvp_type not in cls.REPEATABLE:
            if kvp_type in seen:
                message = f"duplicate parameter {kvp_type:#x}"
                raise LocalProtocolError(message) if local else ProtocolViolation(message)
            seen.add(kvp_type)
        if kvp_type == 0x03 and isinstance(value, bytes) and not local:
            AuthToken.decode(value)
