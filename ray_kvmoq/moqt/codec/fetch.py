"""FETCH family (d14 §9.16-§9.19): FETCH (standalone or joining), FETCH_OK, FETCH_ERROR and
FETCH_CANCEL — dataclasses, payload codecs, ``CODECS``. The fetch *data stream* (FETCH_HEADER and
its objects, d14 §10.4.4) belongs to the data-stream family, :mod:`.streams`.

Same conventions as :mod:`.subscribe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from .errors import LocalProtocolError, ProtocolViolation
from .fields import (
    Codecs,
    DecodeOptions,
    Location,
    MessageParameters,
    check_group_order,
    dec_error,
    dec_request_id,
    enc_error,
    enc_request_id,
    int_param,
    params_with_fields,
    read_bool,
    read_full_track_name,
    read_group_order,
    read_location,
    read_params,
    write_bool,
    write_full_track_name,
    write_location,
    write_params,
)
from .types import DRAFT_16, FetchType, GroupOrder, MessageParameterD16, MessageType, MessageTypeD16
from .wire import KeyValuePairs, Reader, Writer

__all__ = [
    "Fetch",
    "FetchCancel",
    "FetchError",
    "FetchMessage",
    "FetchOk",
]

_NO_PARAMS = MessageParameters()


@dataclass(frozen=True, kw_only=True, slots=True)
class Fetch:
    """FETCH (0x16, d14 §9.16): ask for past objects, standalone or joining a subscription.

    Standalone (type 1) uses ``track_namespace``, ``track_name``, ``start`` and ``end``; joining
    fetches (types 2 and 3) use ``joining_request_id`` and ``joining_start`` and leave the others
    at their defaults.
    """

    TYPE: ClassVar[MessageType] = MessageType.FETCH
    request_id: int
    """New request ID."""
    fetch_type: FetchType
    """Standalone, relative joining or absolute joining."""
    subscriber_priority: int = 128
    """Subscriber priority."""
    group_order: GroupOrder = GroupOrder.PUBLISHER_DEFAULT
    """Requested group order (0 = publisher's)."""
    track_namespace: tuple[bytes, ...] = ()
    """Standalone: Track Namespace tuple."""
    track_name: bytes = b""
    """Standalone: Track Name."""
    start: Location | None = None
    """Standalone: first location requested."""
    end: Location | None = None
    """Standalone: end location plus one object (Object 0 = whole group)."""
    joining_request_id: int | None = None
    """Joining: request ID of the subscription joined."""
    joining_start: int | None = None
    """Joining: groups before Largest (relative) or the start group (absolute)."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""

    @property
    def is_joining(self) -> bool:
        """True for relative and absolute joining fetches."""
        return self.fetch_type is not FetchType.STANDALONE


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchOk:
    """FETCH_OK (0x18, d14 §9.17): the fetch is accepted."""

    TYPE: ClassVar[MessageType] = MessageType.FETCH_OK
    request_id: int
    """Request ID of the FETCH."""
    group_order: GroupOrder = GroupOrder.ASCENDING
    """Group order of the fetch stream (1 or 2)."""
    end_of_track: bool = False
    """True when every object up to the end of the track is covered."""
    end: Location
    """End Location plus one object of the range that will be delivered."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""
    track_extensions: KeyValuePairs = ()
    """Track extension headers (draft-16 only; d16 §9.17)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchError:
    """FETCH_ERROR (0x19, d14 §9.18): the fetch is refused."""

    TYPE: ClassVar[MessageType] = MessageType.FETCH_ERROR
    request_id: int
    """Request ID of the FETCH."""
    error_code: int
    """A FetchErrorCode (unknown codes, e.g. moq-dev's 500, are kept as int)."""
    reason: str = ""
    """Reason Phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class FetchCancel:
    """FETCH_CANCEL (0x17, d14 §9.19): the subscriber abandons a fetch."""

    TYPE: ClassVar[MessageType] = MessageType.FETCH_CANCEL
    request_id: int
    """Request ID of the FETCH."""


def read_fetch_type(r: Reader) -> FetchType:
    """Read a Fetch Type (1..3)."""
    raw = r.varint()
    try:
        return FetchType(raw)
    except ValueError:
        raise ProtocolViolation(f"invalid fetch type {raw}") from None


def enc_fetch(w: Writer, m: Fetch) -> None:
    """FETCH payload (standalone or joining)."""
    w.varint(m.request_id).uint8(m.subscriber_priority)
    w.uint8(check_group_order(m.group_order, allow_default=True))
    try:
        fetch_type = FetchType(m.fetch_type)
    except ValueError:
        raise LocalProtocolError(f"invalid fetch type {m.fetch_type}") from None
    w.varint(fetch_type)
    if fetch_type is FetchType.STANDALONE:
        if m.start is None or m.end is None:
            raise LocalProtocolError("standalone FETCH needs start and end")
        write_full_track_name(w, m.track_namespace, m.track_name)
        write_location(w, m.start)
        write_location(w, m.end)
    else:
        if m.joining_request_id is None or m.joining_start is None:
            raise LocalProtocolError("joining FETCH needs joining_request_id and joining_start")
        w.varint(m.joining_request_id).varint(m.joining_start)
    write_params(w, m.parameters)


def dec_fetch(r: Reader, opts: DecodeOptions) -> Fetch:
    """FETCH payload (standalone or joining)."""
    request_id = r.varint()
    priority = r.uint8()
    group_order = read_group_order(r, allow_default=True)
    fetch_type = read_fetch_type(r)
    if fetch_type is FetchType.STANDALONE:
        namespace, name = read_full_track_name(r)
        start = read_location(r)
        end = read_location(r)
        return Fetch(
            request_id=request_id,
            fetch_type=fetch_type,
            subscriber_priority=priority,
            group_order=group_order,
            track_namespace=namespace,
            track_name=name,
            start=start,
            end=end,
            parameters=read_params(r, MessageParameters),
        )
    joining_request_id = r.varint()
    joining_start = r.varint()
    return Fetch(
        request_id=request_id,
        fetch_type=fetch_type,
        subscriber_priority=priority,
        group_order=group_order,
        joining_request_id=joining_request_id,
        joining_start=joining_start,
        parameters=read_params(r, MessageParameters),
    )


def enc_fetch_ok(w: Writer, m: FetchOk) -> None:
    """FETCH_OK payload."""
    if m.track_extensions:
        raise LocalProtocolError("draft-14 FETCH_OK carries no track extensions")
    w.varint(m.request_id).uint8(check_group_order(m.group_order, allow_default=False))
    write_bool(w, m.end_of_track)
    write_location(w, m.end)
    write_params(w, m.parameters)


def dec_fetch_ok(r: Reader, opts: DecodeOptions) -> FetchOk:
    """FETCH_OK payload."""
    request_id = r.varint()
    group_order = read_group_order(r, allow_default=False)
    end_of_track = read_bool(r, "end of track")
    end = read_location(r)
    return FetchOk(
        request_id=request_id,
        group_order=group_order,
        end_of_track=end_of_track,
        end=end,
        parameters=read_params(r, MessageParameters),
    )


CODECS: Codecs = {
    MessageType.FETCH: (Fetch, enc_fetch, dec_fetch),
    MessageType.FETCH_OK: (FetchOk, enc_fetch_ok, dec_fetch_ok),
    MessageType.FETCH_ERROR: (FetchError, enc_error, partial(dec_error, FetchError)),
    MessageType.FETCH_CANCEL: (FetchCancel, enc_request_id, partial(dec_request_id, FetchCancel)),
}
"""Registry entries of the FETCH family."""

# ---------------------------------------------------------------- draft-16 (d16 §9.16-§9.18)
# Priority and group order are parameters (SUBSCRIBER_PRIORITY, GROUP_ORDER); FETCH_OK loses
# its group order and gains track extensions; FETCH_ERROR is REQUEST_ERROR.

_P16 = MessageParameterD16


def enc_fetch_16(w: Writer, m: Fetch) -> None:
    """FETCH payload of draft-16."""
    if not 0 <= m.subscriber_priority <= 255:
        raise LocalProtocolError(f"subscriber priority {m.subscriber_priority} not in 0..255")
    try:
        fetch_type = FetchType(m.fetch_type)
    except ValueError:
        raise LocalProtocolError(f"invalid fetch type {m.fetch_type}") from None
    w.varint(m.request_id).varint(fetch_type)
    if fetch_type is FetchType.STANDALONE:
        if m.start is None or m.end is None:
            raise LocalProtocolError("standalone FETCH needs start and end")
        write_full_track_name(w, m.track_namespace, m.track_name)
        write_location(w, m.start)
        write_location(w, m.end)
    else:
        if m.joining_request_id is None or m.joining_start is None:
            raise LocalProtocolError("joining FETCH needs joining_request_id and joining_start")
        w.varint(m.joining_request_id).varint(m.joining_start)
    params = params_with_fields(
        m.parameters,
        {
            _P16.SUBSCRIBER_PRIORITY: (m.subscriber_priority, 128),
            _P16.GROUP_ORDER: (check_group_order(m.group_order, allow_default=True), 0),
        },
    )
    write_params(w, params, version=DRAFT_16)


def dec_fetch_16(r: Reader, opts: DecodeOptions) -> Fetch:
    """FETCH payload of draft-16 (d16 §9.16)."""
    request_id = r.varint()
    fetch_type = read_fetch_type(r)
    namespace: tuple[bytes, ...] = ()
    name = b""
    start = end = None
    joining_request_id = joining_start = None
    if fetch_type is FetchType.STANDALONE:
        namespace, name = read_full_track_name(r)
        start = read_location(r)
        end = read_location(r)
    else:
        joining_request_id = r.varint()
        joining_start = r.varint()
    params = read_params(r, MessageParameters, version=opts.version)
    order = int_param(params, _P16.GROUP_ORDER, 0, 2, "GROUP_ORDER")
    if order == 0 and params.get(_P16.GROUP_ORDER) is not None:
        raise ProtocolViolation("GROUP_ORDER parameter must be 1 or 2")
    return Fetch(
        request_id=request_id,
        fetch_type=fetch_type,
        subscriber_priority=int_param(params, _P16.SUBSCRIBER_PRIORITY, 128, 255, "PRIORITY"),
        group_order=GroupOrder(order),
        track_namespace=namespace,
        track_name=name,
        start=start,
        end=end,
        joining_request_id=joining_request_id,
        joining_start=joining_start,
        parameters=params,
    )


def enc_fetch_ok_16(w: Writer, m: FetchOk) -> None:
    """FETCH_OK payload of draft-16."""
    w.varint(m.request_id)
    write_bool(w, m.end_of_track)
    write_location(w, m.end)
    write_params(w, m.parameters, version=DRAFT_16)
    w.kvps(m.track_extensions, with_count=False, delta=True)


def dec_fetch_ok_16(r: Reader, opts: DecodeOptions) -> FetchOk:
    """FETCH_OK payload of draft-16 (d16 §9.17); extensions run to the end."""
    request_id = r.varint()
    end_of_track = read_bool(r, "end of track")
    end = read_location(r)
    params = read_params(r, MessageParameters, version=opts.version)
    return FetchOk(
        request_id=request_id,
        end_of_track=end_of_track,
        end=end,
        parameters=params,
        track_extensions=r.kvps_until_end(delta=True),
    )


CODECS_16: Codecs = {
    MessageTypeD16.FETCH: (Fetch, enc_fetch_16, dec_fetch_16),
    MessageTypeD16.FETCH_OK: (FetchOk, enc_fetch_ok_16, dec_fetch_ok_16),
    MessageTypeD16.FETCH_CANCEL: (
        FetchCancel,
        enc_request_id,
        partial(dec_request_id, FetchCancel),
    ),
}
"""Draft-16 registry entries of the FETCH family."""


FetchMessage = Fetch | FetchOk | FetchError | FetchCancel
"""Any message of this family."""
