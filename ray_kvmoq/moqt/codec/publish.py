"""PUBLISH family (d14 §9.12-§9.15): PUBLISH, PUBLISH_OK, PUBLISH_ERROR and PUBLISH_DONE (which
ends a subscription started by SUBSCRIBE or PUBLISH) — dataclasses, payload codecs, ``CODECS``.

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
    decode_location,
    enc_error,
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
from .subscribe import filter_bytes, read_filter_param
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
    "Publish",
    "PublishDone",
    "PublishError",
    "PublishMessage",
    "PublishOk",
]

_NO_PARAMS = MessageParameters()


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishDone:
    """PUBLISH_DONE (0x0B, d14 §9.12): the publisher ends a subscription."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_DONE
    request_id: int
    """Request ID of the subscription."""
    status_code: int
    """A PublishDoneCode (unknown codes are kept as int)."""
    stream_count: int
    """Number of data streams opened for the subscription (2**62 - 1 = unknown)."""
    reason: str = ""
    """Reason Phrase."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Publish:
    """PUBLISH (0x1D, d14 §9.13): the publisher starts a subscription itself."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH
    request_id: int
    """New request ID."""
    track_namespace: tuple[bytes, ...]
    """Track Namespace tuple."""
    track_name: bytes
    """Track Name."""
    track_alias: int
    """Alias the publisher will use on data streams."""
    group_order: GroupOrder = GroupOrder.ASCENDING
    """Group order of the track (1 or 2)."""
    largest: Location | None = None
    """Largest Location published so far; None when Content Exists is 0."""
    forward: bool = True
    """Whether objects are sent before PUBLISH_OK."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""
    track_extensions: KeyValuePairs = ()
    """Track extension headers (draft-16 only; d16 §9.13)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishOk:
    """PUBLISH_OK (0x1E, d14 §9.14): the subscriber accepts a PUBLISH."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_OK
    request_id: int
    """Request ID of the PUBLISH."""
    forward: bool = True
    """Forward state requested by the subscriber."""
    subscriber_priority: int = 128
    """Subscriber priority."""
    group_order: GroupOrder = GroupOrder.PUBLISHER_DEFAULT
    """Requested group order (0 = publisher's)."""
    filter_type: FilterType = FilterType.LARGEST_OBJECT
    """Subscription filter."""
    start: Location | None = None
    """Start Location (AbsoluteStart and AbsoluteRange only)."""
    end_group: int | None = None
    """Inclusive end group (AbsoluteRange only)."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class PublishError:
    """PUBLISH_ERROR (0x1F, d14 §9.15): the subscriber refuses a PUBLISH."""

    TYPE: ClassVar[MessageType] = MessageType.PUBLISH_ERROR
    request_id: int
    """Request ID of the PUBLISH."""
    error_code: int
    """A PublishErrorCode (unknown codes are kept as int)."""
    reason: str = ""
    """Reason Phrase."""


def enc_publish_done(w: Writer, m: PublishDone) -> None:
    """PUBLISH_DONE payload."""
    w.varint(m.request_id).varint(m.status_code).varint(m.stream_count).reason(m.reason)


def dec_publish_done(r: Reader, opts: DecodeOptions) -> PublishDone:
    """PUBLISH_DONE payload."""
    request_id = r.varint()
    status_code = r.varint()
    stream_count = r.varint()
    return PublishDone(
        request_id=request_id,
        status_code=status_code,
        stream_count=stream_count,
        reason=r.reason(),
    )


def enc_publish(w: Writer, m: Publish) -> None:
    """PUBLISH payload."""
    if m.track_extensions:
        raise LocalProtocolError("draft-14 PUBLISH carries no track extensions")
    w.varint(m.request_id)
    write_full_track_name(w, m.track_namespace, m.track_name)
    w.varint(m.track_alias).uint8(check_group_order(m.group_order, allow_default=False))
    write_bool(w, m.largest is not None)
    if m.largest is not None:
        write_location(w, m.largest)
    write_bool(w, m.forward)
    write_params(w, m.parameters)


def dec_publish(r: Reader, opts: DecodeOptions) -> Publish:
    """PUBLISH payload."""
    request_id = r.varint()
    namespace, name = read_full_track_name(r)
    track_alias = r.varint()
    group_order = read_group_order(r, allow_default=False)
    largest = read_location(r) if read_bool(r, "content exists") else None
    forward = read_bool(r, "forward")
    return Publish(
        request_id=request_id,
        track_namespace=namespace,
        track_name=name,
        track_alias=track_alias,
        group_order=group_order,
        largest=largest,
        forward=forward,
        parameters=read_params(r, MessageParameters),
    )


def enc_publish_ok(w: Writer, m: PublishOk) -> None:
    """PUBLISH_OK payload."""
    w.varint(m.request_id)
    write_bool(w, m.forward)
    w.uint8(m.subscriber_priority).uint8(check_group_order(m.group_order, allow_default=False))
    write_filter(w, m.filter_type, m.start, m.end_group)
    write_params(w, m.parameters)


def dec_publish_ok(r: Reader, opts: DecodeOptions) -> PublishOk:
    """PUBLISH_OK payload (group order must be 1 or 2, d14 §9.14)."""
    request_id = r.varint()
    forward = read_bool(r, "forward")
    priority = r.uint8()
    group_order = read_group_order(r, allow_default=False)
    filter_type, start, end_group = read_filter(r)
    return PublishOk(
        request_id=request_id,
        forward=forward,
        subscriber_priority=priority,
        group_order=group_order,
        filter_type=filter_type,
        start=start,
        end_group=end_group,
        parameters=read_params(r, MessageParameters),
    )


CODECS: Codecs = {
    MessageType.PUBLISH_DONE: (PublishDone, enc_publish_done, dec_publish_done),
    MessageType.PUBLISH: (Publish, enc_publish, dec_publish),
    MessageType.PUBLISH_OK: (PublishOk, enc_publish_ok, dec_publish_ok),
    MessageType.PUBLISH_ERROR: (PublishError, enc_error, partial(dec_error, PublishError)),
}
"""Registry entries of the PUBLISH family."""

# ---------------------------------------------------------------- draft-16 (d16 §9.13-§9.15)
# PUBLISH keeps Request ID, the full track name and Track Alias; forward and the largest
# location are parameters, then the track's extensions. PUBLISH_OK is parameters only (the
# SUBSCRIBE ones). PUBLISH_DONE is unchanged; PUBLISH_ERROR is REQUEST_ERROR.

_P16 = MessageParameterD16


def enc_publish_16(w: Writer, m: Publish) -> None:
    """PUBLISH payload of draft-16."""
    w.varint(m.request_id)
    write_full_track_name(w, m.track_namespace, m.track_name)
    w.varint(m.track_alias)
    fields: dict[int, tuple[int | bytes, int | bytes | None]] = {_P16.FORWARD: (int(m.forward), 1)}
    params = m.parameters
    if m.largest is not None:
        fields[_P16.LARGEST_OBJECT] = (encode_location(m.largest), None)
    elif params.get(_P16.LARGEST_OBJECT) is not None:
        params = MessageParameters(
            items=tuple(kv for kv in params.items if kv[0] != _P16.LARGEST_OBJECT)
        )
    write_params(w, params_with_fields(params, fields), version=DRAFT_16)
    w.kvps(m.track_extensions, with_count=False, delta=True)


def dec_publish_16(r: Reader, opts: DecodeOptions) -> Publish:
    """PUBLISH payload of draft-16 (d16 §9.13)."""
    request_id = r.varint()
    namespace, name = read_full_track_name(r)
    track_alias = r.varint()
    params = read_params(r, MessageParameters, version=opts.version)
    raw_largest = params.get(_P16.LARGEST_OBJECT)
    if raw_largest is not None and not isinstance(raw_largest, bytes):
        raise ProtocolViolation("LARGEST_OBJECT parameter must be length-prefixed")
    return Publish(
        request_id=request_id,
        track_namespace=namespace,
        track_name=name,
        track_alias=track_alias,
        largest=None if raw_largest is None else decode_location(raw_largest, "LARGEST_OBJECT"),
        forward=bool(int_param(params, _P16.FORWARD, 1, 1, "FORWARD")),
        parameters=params,
        track_extensions=r.kvps_until_end(delta=True),
    )


def enc_publish_ok_16(w: Writer, m: PublishOk) -> None:
    """PUBLISH_OK payload of draft-16: parameters only."""
    if not 0 <= m.subscriber_priority <= 255:
        raise LocalProtocolError(f"subscriber priority {m.subscriber_priority} not in 0..255")
    w.varint(m.request_id)
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
    write_params(w, params, version=DRAFT_16)


def dec_publish_ok_16(r: Reader, opts: DecodeOptions) -> PublishOk:
    """PUBLISH_OK payload of draft-16 (d16 §9.14)."""
    request_id = r.varint()
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
    return PublishOk(
        request_id=request_id,
        forward=bool(int_param(params, _P16.FORWARD, 1, 1, "FORWARD")),
        subscriber_priority=int_param(params, _P16.SUBSCRIBER_PRIORITY, 128, 255, "PRIORITY"),
        group_order=GroupOrder(order),
        filter_type=filter_type,
        start=start,
        end_group=end_group,
        parameters=params,
    )


CODECS_16: Codecs = {
    MessageTypeD16.PUBLISH_DONE: (PublishDone, enc_publish_done, dec_publish_done),
    MessageTypeD16.PUBLISH: (Publish, enc_publish_16, dec_publish_16),
    MessageTypeD16.PUBLISH_OK: (PublishOk, enc_publish_ok_16, dec_publish_ok_16),
}
"""Draft-16 registry entries of the PUBLISH family."""


PublishMessage = PublishDone | Publish | PublishOk | PublishError
"""Any message of this family."""
