"""Payload codecs of the track-level control messages (d14 §9.7-§9.22).

Each message has an ``enc_*(w, msg)`` writing its payload (no type, no length) and a
``dec_*(r, opts)`` reading it. :mod:`.framer` wires them into tables. SUBSCRIBE/TRACK_STATUS,
SUBSCRIBE_OK/TRACK_STATUS_OK and the *_ERROR messages share bodies (d14 §9.20-§9.22), so one
function pair serves each family.
"""

from __future__ import annotations

from typing import TypeVar

from .errors import LocalProtocolError
from .framer_common import (
    DecodeOptions,
    check_group_order,
    read_bool,
    read_fetch_type,
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
from .messages_base import MessageParameters
from .messages_track import (
    Fetch,
    FetchCancel,
    FetchError,
    FetchOk,
    Publish,
    PublishDone,
    PublishError,
    PublishOk,
    Subscribe,
    SubscribeError,
    SubscribeOk,
    SubscribeUpdate,
    TrackStatus,
    TrackStatusError,
    TrackStatusOk,
    Unsubscribe,
)
from .types import FetchType
from .wire import Reader, Writer

SubscribeLike = TypeVar("SubscribeLike", Subscribe, TrackStatus)
SubscribeOkLike = TypeVar("SubscribeOkLike", SubscribeOk, TrackStatusOk)
ErrorLike = TypeVar("ErrorLike", SubscribeError, TrackStatusError, PublishError, FetchError)
RequestIdOnly = TypeVar("RequestIdOnly", Unsubscribe, FetchCancel)


def enc_subscribe(w: Writer, m: Subscribe | TrackStatus) -> None:
    """SUBSCRIBE / TRACK_STATUS payload."""
    w.varint(m.request_id)
    write_full_track_name(w, m.track_namespace, m.track_name)
    w.uint8(m.subscriber_priority)
    w.uint8(check_group_order(m.group_order, allow_default=True))
    write_bool(w, m.forward)
    write_filter(w, m.filter_type, m.start, m.end_group)
    write_params(w, m.parameters)


def dec_subscribe(cls: type[SubscribeLike], r: Reader, opts: DecodeOptions) -> SubscribeLike:
    """SUBSCRIBE / TRACK_STATUS payload."""
    request_id = r.varint()
    namespace, name = read_full_track_name(r)
    priority = r.uint8()
    group_order = read_group_order(r, allow_default=True)
    forward = read_bool(r, "forward")
    filter_type, start, end_group = read_filter(r)
    return cls(
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


def enc_subscribe_ok(w: Writer, m: SubscribeOk | TrackStatusOk) -> None:
    """SUBSCRIBE_OK / TRACK_STATUS_OK payload."""
    w.varint(m.request_id).varint(m.track_alias).varint(m.expires)
    w.uint8(check_group_order(m.group_order, allow_default=False))
    write_bool(w, m.largest is not None)
    if m.largest is not None:
        write_location(w, m.largest)
    write_params(w, m.parameters)


def dec_subscribe_ok(cls: type[SubscribeOkLike], r: Reader, opts: DecodeOptions) -> SubscribeOkLike:
    """SUBSCRIBE_OK / TRACK_STATUS_OK payload."""
    request_id = r.varint()
    track_alias = r.varint()
    expires = r.varint()
    group_order = read_group_order(r, allow_default=False)
    largest = read_location(r) if read_bool(r, "content exists") else None
    return cls(
        request_id=request_id,
        track_alias=track_alias,
        expires=expires,
        group_order=group_order,
        largest=largest,
        parameters=read_params(r, MessageParameters),
    )


def enc_error(w: Writer, m: SubscribeError | TrackStatusError | PublishError | FetchError) -> None:
    """Request ID, Error Code, Reason Phrase."""
    w.varint(m.request_id).varint(m.error_code).reason(m.reason)


def dec_error(cls: type[ErrorLike], r: Reader, opts: DecodeOptions) -> ErrorLike:
    """Request ID, Error Code, Reason Phrase."""
    request_id = r.varint()
    error_code = r.varint()
    return cls(request_id=request_id, error_code=error_code, reason=r.reason())


def enc_request_id(w: Writer, m: Unsubscribe | FetchCancel) -> None:
    """A payload made of one Request ID."""
    w.varint(m.request_id)


def dec_request_id(cls: type[RequestIdOnly], r: Reader, opts: DecodeOptions) -> RequestIdOnly:
    """A payload made of one Request ID."""
    return cls(request_id=r.varint())


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
