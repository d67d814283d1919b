"""Track-level control messages of draft-14: SUBSCRIBE*, PUBLISH*, FETCH*, TRACK_STATUS*.

Plain frozen, kw_only, slotted dataclasses; each has a ``TYPE`` class attribute with its
:class:`MessageType`. They hold values only: wire validation lives in :mod:`.framer`.
Conventions: namespaces are ``tuple[bytes, ...]``, track names ``bytes``; optional wire fields
(Start Location, Largest Location, ...) are ``None`` when absent; flags that are 0/1 on the
wire (Forward, Content Exists, End Of Track) are ``bool``; error and status codes are plain
``int`` because receivers must tolerate codes outside the registry.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .messages_base import Location, MessageParameters
from .types import FetchType, FilterType, GroupOrder, MessageType

__all__ = [
    "Fetch",
    "FetchCancel",
    "FetchError",
    "FetchOk",
    "Publish",
    "PublishDone",
    "PublishError",
    "PublishOk",
    "Subscribe",
    "SubscribeError",
    "SubscribeOk",
    "SubscribeUpdate",
    "TrackStatus",
    "TrackStatusError",
    "TrackStatusOk",
    "Unsubscribe",
]

_NO_PARAMS = MessageParameters()


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


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackStatus:
    """TRACK_STATUS (0x0D, d14 §9.20): SUBSCRIBE's body, asking only for the track's status."""

    TYPE: ClassVar[MessageType] = MessageType.TRACK_STATUS
    request_id: int
    """New request ID."""
    track_namespace: tuple[bytes, ...]
    """Track Namespace tuple."""
    track_name: bytes
    """Track Name."""
    subscriber_priority: int = 128
    """Subscriber priority (unused by the status request)."""
    group_order: GroupOrder = GroupOrder.PUBLISHER_DEFAULT
    """Group order (unused by the status request)."""
    forward: bool = True
    """Forward flag (unused by the status request)."""
    filter_type: FilterType = FilterType.LARGEST_OBJECT
    """Filter (unused by the status request)."""
    start: Location | None = None
    """Start Location (AbsoluteStart and AbsoluteRange only)."""
    end_group: int | None = None
    """Inclusive end group (AbsoluteRange only)."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackStatusOk:
    """TRACK_STATUS_OK (0x0E, d14 §9.21): SUBSCRIBE_OK's body; Track Alias is 0."""

    TYPE: ClassVar[MessageType] = MessageType.TRACK_STATUS_OK
    request_id: int
    """Request ID of the TRACK_STATUS."""
    track_alias: int = 0
    """Always 0 when sent; ignored when received."""
    expires: int = 0
    """Milliseconds the status stays valid; 0 = unknown."""
    group_order: GroupOrder = GroupOrder.ASCENDING
    """Group order of the track (1 or 2)."""
    largest: Location | None = None
    """Largest Location; None when Content Exists is 0."""
    parameters: MessageParameters = _NO_PARAMS
    """Version-specific parameters."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackStatusError:
    """TRACK_STATUS_ERROR (0x0F, d14 §9.22): SUBSCRIBE_ERROR's body."""

    TYPE: ClassVar[MessageType] = MessageType.TRACK_STATUS_ERROR
    request_id: int
    """Request ID of the TRACK_STATUS."""
    error_code: int
    """A SubscribeErrorCode (unknown codes are kept as int)."""
    reason: str = ""
    """Reason Phrase."""
