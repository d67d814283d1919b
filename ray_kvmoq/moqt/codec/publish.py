"""PUBLISH family (d14 §9.12-§9.15): PUBLISH, PUBLISH_OK, PUBLISH_ERROR and PUBLISH_DONE (which
ends a subscription started by SUBSCRIBE or PUBLISH) — dataclasses, payload codecs, ``CODECS``.

Same conventions as :mod:`.subscribe`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from .fields import (
    Codecs,
    DecodeOptions,
    Location,
    MessageParameters,
    check_group_order,
    dec_error,
    enc_error,
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
from .types import FilterType, GroupOrder, MessageType
from .wire import Reader, Writer

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

PublishMessage = PublishDone | Publish | PublishOk | PublishError
"""Any message of this family."""
