"""TRACK_STATUS family (d14 §9.20-§9.22): TRACK_STATUS, TRACK_STATUS_OK, TRACK_STATUS_ERROR —
dataclasses and ``CODECS``. Their bodies are SUBSCRIBE's, SUBSCRIBE_OK's and SUBSCRIBE_ERROR's,
so the payload codecs come from :mod:`.subscribe` and :mod:`.fields`.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar

from .fields import Codecs, Location, MessageParameters, dec_error, enc_error
from .subscribe import (
    dec_subscribe,
    dec_subscribe_16,
    dec_subscribe_ok,
    enc_subscribe,
    enc_subscribe_16,
    enc_subscribe_ok,
)
from .types import FilterType, GroupOrder, MessageType, MessageTypeD16

__all__ = [
    "TrackStatus",
    "TrackStatusError",
    "TrackStatusMessage",
    "TrackStatusOk",
]

_NO_PARAMS = MessageParameters()


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


CODECS: Codecs = {
    MessageType.TRACK_STATUS: (TrackStatus, enc_subscribe, partial(dec_subscribe, TrackStatus)),
    MessageType.TRACK_STATUS_OK: (
        TrackStatusOk,
        enc_subscribe_ok,
        partial(dec_subscribe_ok, TrackStatusOk),
    ),
    MessageType.TRACK_STATUS_ERROR: (
        TrackStatusError,
        enc_error,
        partial(dec_error, TrackStatusError),
    ),
}
"""Registry entries of the TRACK_STATUS family."""

# Draft-16 (d16 §9.19): TRACK_STATUS has SUBSCRIBE's layout and is answered by REQUEST_OK /
# REQUEST_ERROR (:mod:`.request`).
CODECS_16: Codecs = {
    MessageTypeD16.TRACK_STATUS: (
        TrackStatus,
        enc_subscribe_16,
        partial(dec_subscribe_16, TrackStatus),
    ),
}
"""Draft-16 registry entry of TRACK_STATUS."""


TrackStatusMessage = TrackStatus | TrackStatusOk | TrackStatusError
"""Any message of this family."""
