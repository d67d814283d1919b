"""SUBSCRIBE family (d14 §9.7-§9.11): SUBSCRIBE, SUBSCRIBE_OK, SUBSCRIBE_ERROR, SUBSCRIBE_UPDATE,
UNSUBSCRIBE — dataclasses, payload codecs and registry entries (``CODECS``).

Messages are frozen, kw_only, slotted dataclasses holding values only; each has a ``TYPE``. The
SUBSCRIBE and SUBSCRIBE_OK bodies are shared with TRACK_STATUS / TRACK_STATUS_OK (d14 §9.20-§9.21),
so :mod:`.track_status` reuses :func:`enc_subscribe` / :func:`dec_subscribe` and the OK pair.
Conventions: namespaces are ``tuple[bytes, ...]``, track names ``bytes``; optional wire fields
are ``None`` when absent; 0/1 wire flags are ``bool``; error codes stay ``int`` (receivers must
tolerate codes outside the registry).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, ClassVar, TypeVar

from .errors import LocalProtocolError, NeedMoreData, ProtocolViolation
from .fields import (
    Codecs,
    DecodeOptions,
    Location,
    MessageParameters,
    check_group_order,
    dec_error,
    dec_request_id,
    decode_location,
    enc_error,
    enc_request_id,
    encode_location,
    int_param,
    params_with_fields,
    read_bool,
    read_filter,
    read_full_track_name,
    read_group_order,
    read_location,
    read_params,
    write_bool,
    write_filter,
    write_full_track_name,
    write_location,
    write_params,
)
from .types import (
    DRAFT_16,
    FilterType,
    GroupOrder,
    MessageParameterD16,
    MessageType,
    MessageTypeD16,
)
from .wire import KeyValuePairs, Reader, Writer

__all__ = [
    "Subscribe",
    "SubscribeError",
    "SubscribeMessage",
    "SubscribeOk",
    "SubscribeUpdate",
    "Unsubscribe",
]

_NO_PARAMS = MessageParameters()
T = TypeVar("T")


@dataclass(frozen=True, kw_only=True, slots=True)
class Subscribe:
    """SUBSCRIBE (0x03, d14 §9.7): ask for a track's objects from now on."""

    TYPE: ClassVar[MessageType] = MessageType.SUBSCRIBE
    request_id: int
    """New request ID (client even, server odd)."""
    track_namespace: tuple[bytes, ...]
    """Track Namespace tuple (1..32 fields)."""
    track_name: bytes
    """Track Name."""
    subscriber_priority: int = 128
    """Subscriber priority 0 (highest) .. 255."""
    group_order: GroupOrder = GroupOrder.PUBLISHER_DEFAULT
    """Requested group order (0 = publisher's choice)."""
    forward: bool = True
    """Whether the publisher should send objects right away."""
    filter_type: FilterType = FilterType.LARGEST_OBJECT
    """Subscription filter."""
    start: Location | None = None
    """Start Location (AbsoluteStart and AbsoluteRange only)."""
    end_group: int | None = None
    """Inclusive end group (AbsoluteRange only)."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeOk:
    """SUBSCRIBE_OK (0x04, d14 §9.8): the subscription is established."""

    TYPE: ClassVar[MessageType] = MessageType.SUBSCRIBE_OK
    request_id: int
    """Request ID of the SUBSCRIBE."""
    track_alias: int
    """Alias used in data stream and datagram headers of this subscription."""
    expires: int = 0
    """Milliseconds until the subscription expires; 0 = never."""
    group_order: GroupOrder = GroupOrder.ASCENDING
    """Group order the publisher will use (1 or 2)."""
    largest: Location | None = None
    """Largest Location published so far; None when Content Exists is 0."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""
    track_extensions: KeyValuePairs = ()
    """Track extension headers (draft-16 only; d16 §9.10)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeError:
    """SUBSCRIBE_ERROR (0x05, d14 §9.9): the subscription was refused."""

    TYPE: ClassVar[MessageType] = MessageType.SUBSCRIBE_ERROR
    request_id: int
    """Request ID of the SUBSCRIBE."""
    error_code: int
    """A SubscribeErrorCode (unknown codes are kept as int)."""
    reason: str = ""
    """Reason Phrase (at most 1024 UTF-8 bytes)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class SubscribeUpdate:
    """SUBSCRIBE_UPDATE (0x02, d14 §9.10): narrow an existing subscription."""

    TYPE: ClassVar[MessageType] = MessageType.SUBSCRIBE_UPDATE
    request_id: int
    """New request ID consumed by this update."""
    subscription_request_id: int
    """Request ID of the subscription being updated."""
    start: Location
    """New Start Location (must not decrease)."""
    end_group: int = 0
    """New end group plus one; 0 = open-ended."""
    subscriber_priority: int = 128
    """New subscriber priority."""
    forward: bool = True
    """New forward state."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Unsubscribe:
    """UNSUBSCRIBE (0x0A, d14 §9.11): end a subscription."""

    TYPE: ClassVar[MessageType] = MessageType.UNSUBSCRIBE
    request_id: int
    """Request ID of the subscription."""


def enc_subscribe(w: Writer, m: Any) -> None:
    """SUBSCRIBE / TRACK_STATUS payload."""
    w.varint(m.request_id)
    write_full_track_name(w, m.track_namespace, m.track_name)
    w.uint8(m.subscriber_priority)
    w.uint8(check_group_order(m.group_order, allow_default=True))
    write_bool(w, m.forward)
    write_filter(w, m.filter_type, m.start, m.end_group)
    write_params(w, m.parameters)


def dec_subscribe(cls: type[T], r: Reader, opts: DecodeOptions) -> T:
    """SUBSCRIBE / TRACK_STATUS payload."""
    request_id = r.varint()
    namespace, name = read_full_track_name(r)
    priority = r.uint8()
    group_order = read_group_order(r, allow_default=True)
    forward = read_bool(r, "forward")
    filter_type, start, end_group = read_filter(r)
    return cls(  # type: ignore[call-arg]
        request_id=request_id,
        track_namespace=namespace,
        track_name=name,
        subscriber_priority=priority,
        group_order=group_order,
        forward=forward,
        filter_type=filter_type,
        start=start,
        end_group=end_group,
        parameters=read_params(r, MessageParameters),
    )


def enc_subscribe_ok(w: Writer, m: Any) -> None:
    """SUBSCRIBE_OK / TRACK_STATUS_OK payload."""
    if getattr(m, "track_extensions", ()):
        raise LocalProtocolError("draft-14 SUBSCRIBE_OK carries no track extensions")
    w.varint(m.request_id).varint(m.track_alias).varint(m.expires)
    w.uint8(check_group_order(m.group_order, allow_default=False))
    write_bool(w, m.largest is not None)
    if m.largest is not None:
        write_location(w, m.largest)
    write_params(w, m.parameters)


def dec_subscribe_ok(cls: type[T], r: Reader, opts: DecodeOptions) -> T:
    """SUBSCRIBE_OK / TRACK_STATUS_OK payload."""
    request_id = r.varint()
    track_alias = r.varint()
    expires = r.varint()
    group_order = read_group_order(r, allow_default=False)
    largest = read_location(r) if read_bool(r, "content exists") else None
    return cls(  # type: ignore[call-arg]
        request_id=request_id,
        track_alias=track_alias,
        expires=expires,
        group_order=group_order,
        largest=largest,
        parameters=read_params(r, MessageParameters),
    )


def enc_subscribe_update(w: Writer, m: SubscribeUpdate) -> None:
    """SUBSCRIBE_UPDATE payload."""
    w.varint(m.request_id).varint(m.subscription_request_id)
    write_location(w, m.start)
    w.varint(m.end_group).uint8(m.subscriber_priority)
    write_bool(w, m.forward)
    write_params(w, m.parameters)


def dec_subscribe_update(r: Reader, opts: DecodeOptions) -> SubscribeUpdate:
    """SUBSCRIBE_UPDATE payload."""
    request_id = r.varint()
    subscription_request_id = r.varint()
    start = read_location(r)
    end_group = r.varint()
    priority = r.uint8()
    forward = read_bool(r, "forward")
    return SubscribeUpdate(
        request_id=request_id,
        subscription_request_id=subscription_request_id,
        start=start,
        end_group=end_group,
        subscriber_priority=priority,
        forward=forward,
        parameters=read_params(r, MessageParameters),
    )


CODECS: Codecs = {
    MessageType.SUBSCRIBE: (Subscribe, enc_subscribe, partial(dec_subscribe, Subscribe)),
    MessageType.SUBSCRIBE_OK: (
        SubscribeOk,
        enc_subscribe_ok,
        partial(dec_subscribe_ok, SubscribeOk),
    ),
    MessageType.SUBSCRIBE_ERROR: (SubscribeError, enc_error, partial(dec_error, SubscribeError)),
    MessageType.SUBSCRIBE_UPDATE: (SubscribeUpdate, enc_subscribe_update, dec_subscribe_update),
    MessageType.UNSUBSCRIBE: (Unsubscribe, enc_request_id, partial(dec_request_id, Unsubscribe)),
}
"""Registry entries of the SUBSCRIBE family."""


# ---------------------------------------------------------------- draft-16 (d16 §9.9-§9.12)
# SUBSCRIBE keeps only Request ID and the full track name; priority, group order, forward and
# the filter are parameters. SUBSCRIBE_OK keeps Request ID and Track Alias; expires and the
# largest location are parameters, followed by the track's extension headers. SUBSCRIBE_ERROR
# is REQUEST_ERROR (:mod:`.request`) and SUBSCRIBE_UPDATE is REQUEST_UPDATE (not implemented).

_P16 = MessageParameterD16


def filter_bytes(filter_type: FilterType, start: Location | None, end_group: int | None) -> bytes:
    """A Subscription Filter as the bytes of the SUBSCRIPTION_FILTER parameter (d16 §9.2.2.5)."""
    w = Writer()
    write_filter(w, filter_type, start, end_group)
    return bytes(w.buf)


def read_filter_param(data: bytes) -> tuple[FilterType, Location | None, int | None]:
    """Parse a SUBSCRIPTION_FILTER value, which must hold exactly one Subscription Filter."""
    r = Reader(data)
    try:
        out = read_filter(r)
    except NeedMoreData:
        raise ProtocolViolation("SUBSCRIPTION_FILTER shorter than its fields") from None
    if not r.at_end():
        raise ProtocolViolation(f"SUBSCRIPTION_FILTER has {r.remaining} trailing bytes")
    return out


def enc_subscribe_16(w: Writer, m: Any) -> None:
    """SUBSCRIBE payload of draft-16."""
    w.varint(m.request_id)
    write_full_track_name(w, m.track_namespace, m.track_name)
    unfiltered = (FilterType.LARGEST_OBJECT, None, None)
    filt = (m.filter_type, m.start, m.end_group)
    params = params_with_fields(
        m.parameters,
        {
            _P16.FORWARD: (int(m.forward), 1),
            _P16.SUBSCRIBER_PRIORITY: (m.subscriber_priority, 128),
            _P16.SUBSCRIPTION_FILTER: (
                filter_bytes(*filt),
                None if filt != unfiltered else filter_bytes(*unfiltered),
            ),
            _P16.GROUP_ORDER: (check_group_order(m.group_order, allow_default=True), 0),
        },
    )
    if not 0 <= m.subscriber_priority <= 255:
        raise LocalProtocolError(f"subscriber priority {m.subscriber_priority} not in 0..255")
    write_params(w, params, version=DRAFT_16)


def dec_subscribe_16(cls: type[T], r: Reader, opts: DecodeOptions) -> T:
    """SUBSCRIBE payload of draft-16 (d16 §9.9); fields come from their parameters."""
    request_id = r.varint()
    namespace, name = read_full_track_name(r)
    params = read_params(r, MessageParameters, version=opts.version)
    order = int_param(params, _P16.GROUP_ORDER, 0, 2, "GROUP_ORDER")
    if order == 0 and params.get(_P16.GROUP_ORDER) is not None:
        raise ProtocolViolation("GROUP_ORDER parameter must be 1 or 2")
    raw_filter = params.get(_P16.SUBSCRIPTION_FILTER)
    if raw_filter is None:
        filter_type, start, end_group = FilterType.LARGEST_OBJECT, None, None
    elif isinstance(raw_filter, bytes):
        filter_type, start, end_group = read_filter_param(raw_filter)
    else:
        raise ProtocolViolation("SUBSCRIPTION_FILTER parameter must be length-prefixed")
    return cls(  # type: ignore[call-arg]
        request_id=request_id,
        track_namespace=namespace,
        track_name=name,
        subscriber_priority=int_param(params, _P16.SUBSCRIBER_PRIORITY, 128, 255, "PRIORITY"),
        group_order=GroupOrder(order),
        forward=bool(int_param(params, _P16.FORWARD, 1, 1, "FORWARD")),
        filter_type=filter_type,
        start=start,
        end_group=end_group,
        parameters=params,
    )


def enc_subscribe_ok_16(w: Writer, m: SubscribeOk) -> None:
    """SUBSCRIBE_OK payload of draft-16."""
    w.varint(m.request_id).varint(m.track_alias)
    fields: dict[int, tuple[int | bytes, int | bytes | None]] = {_P16.EXPIRES: (m.expires, 0)}
    if m.largest is not None:
        fields[_P16.LARGEST_OBJECT] = (encode_location(m.largest), None)
    params = m.parameters
    if m.largest is None and params.get(_P16.LARGEST_OBJECT) is not None:
        params = MessageParameters(
            items=tuple(kv for kv in params.items if kv[0] != _P16.LARGEST_OBJECT)
        )
    write_params(w, params_with_fields(params, fields), version=DRAFT_16)
    w.kvps(m.track_extensions, with_count=False, delta=True)


def dec_subscribe_ok_16(r: Reader, opts: DecodeOptions) -> SubscribeOk:
    """SUBSCRIBE_OK payload of draft-16 (d16 §9.10); extensions run to the end."""
    request_id = r.varint()
    track_alias = r.varint()
    params = read_params(r, MessageParameters, version=opts.version)
    raw_largest = params.get(_P16.LARGEST_OBJECT)
    if raw_largest is not None and not isinstance(raw_largest, bytes):
        raise ProtocolViolation("LARGEST_OBJECT parameter must be length-prefixed")
    expires = params.get(_P16.EXPIRES)
    if expires is not None and not isinstance(expires, int):
        raise ProtocolViolation("EXPIRES parameter must be a varint")
    return SubscribeOk(
        request_id=request_id,
        track_alias=track_alias,
        expires=expires or 0,
        largest=None if raw_largest is None else decode_location(raw_largest, "LARGEST_OBJECT"),
        parameters=params,
        track_extensions=r.kvps_until_end(delta=True),
    )


CODECS_16: Codecs = {
    MessageTypeD16.SUBSCRIBE: (Subscribe, enc_subscribe_16, partial(dec_subscribe_16, Subscribe)),
    MessageTypeD16.SUBSCRIBE_OK: (SubscribeOk, enc_subscribe_ok_16, dec_subscribe_ok_16),
    MessageTypeD16.UNSUBSCRIBE: (Unsubscribe, enc_request_id, partial(dec_request_id, Unsubscribe)),
}
"""Draft-16 registry entries of the SUBSCRIBE family."""

SubscribeMessage = Subscribe | SubscribeOk | SubscribeError | SubscribeUpdate | Unsubscribe
"""Any message of this family."""
