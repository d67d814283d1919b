"""Live-track state and one downstream subscription of the relay core.

:class:`TrackSubscription` (what :meth:`~.relay.Relay.open_subscription` returns) iterates a
snapshot of the cached groups, then the live queue the relay fans objects out to, then
:class:`~.events.TrackEnded`; ``close()`` leaves the track, and the relay stops the upstream
subscription when its last subscriber leaves. ``_Live`` is the relay's per-track state.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from .events import RelayError, TrackEnded, TrackEvent

if TYPE_CHECKING:
    from .relay import Relay

__all__ = ["TrackSubscription"]

Namespace = tuple[bytes, ...]


@dataclass
class _Live:
    queues: set[asyncio.Queue[TrackEvent | RelayError]] = field(default_factory=set)
    upstream: asyncio.Task[None] | None = None
    ready: asyncio.Future[None] | None = None
    local: bool = False
    ended: bool = False


class TrackSubscription:
    """One downstream subscription (from :meth:`Relay.open_subscription`): an async iterator
    of :class:`TrackEvent`; raises :class:`RelayError` if the upstream fails."""

    def __init__(
        self,
        relay: Relay,
        key: tuple[Namespace, bytes],
        live: _Live | None,
        queue: asyncio.Queue[TrackEvent | RelayError],
        snapshot: list[TrackEvent],
        start_group: int,
        largest: tuple[int, int] | None,
    ) -> None:
        self._relay = relay
        self._key = key
        self._live = live
        self._queue = queue
        self._pending = list(reversed(snapshot))
        self._start_group = start_group
        self._done = False
        self.largest = largest
        """Largest location cached when the subscription opened (for SUBSCRIBE_OK)."""

    def __aiter__(self) -> TrackSubscription:
        return self

    async def __anext__(self) -> TrackEvent:
        if self._pending:
            ev = self._pending.pop()
        elif self._done or self._live is None:
            raise StopAsyncIteration
        else:
            while True:
                item = await self._queue.get()
                if isinstance(item, RelayError):
                    self.close()
                    raise item
                gid = item.group_id if not isinstance(item, TrackEnded) else self._start_group
                if gid >= self._start_group:
                    ev = item
                    break
        self._relay._count(ev)
        if isinstance(ev, TrackEnded):
            self.close()
            self._pending.clear()
            self._done = True
        return ev

    def close(self) -> None:
        """Leave the track (the upstream stops when its last subscriber leaves)."""
        self._done = True
        if self._live is not None:
            self._live.queues.discard(self._queue)
            self._relay._maybe_stop_upstream(self._key, self._live)
            self._live = None
