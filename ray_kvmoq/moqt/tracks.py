"""Application-provided track data behind SUBSCRIBE and FETCH: :class:`TrackSource`, an
in-memory implementation (:class:`MemoryTrack`) and a handler serving a set of them
(:class:`TrackServer`).

Semantics (d14 §9.7, §9.16): a SUBSCRIBE receives only groups published after it was accepted,
filtered by its filter (``Publication.wants``); history is served by FETCH from what the source
still holds. FETCH ranges follow the wire: ``end`` is the last location plus one object and
``Location(g, 0)`` means all of group ``g``. A requested end beyond the largest location is
clamped to it; a start beyond it is INVALID_RANGE; an empty range is NO_OBJECTS.

Invariant: ``MemoryTrack`` keeps at most ``max_groups`` groups (oldest dropped first, the latest
always kept) so a long-running publisher holds bounded memory.
"""

from __future__ import annotations

import asyncio
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING

from .api_types import (
    Cancelled,
    FetchRequest,
    FullTrackName,
    MoqtObject,
    NamespaceRequest,
    Publication,
    RequestError,
    SessionClosed,
    SessionHandler,
    SubscribeRequest,
)
from .codec import AuthToken, Location
from .codec.types import FetchErrorCode, PublishDoneCode, SubscribeErrorCode

if TYPE_CHECKING:
    from .api import MoqtConnection

__all__ = ["MemoryTrack", "TrackServer", "TrackSource", "in_fetch_range"]

Authorizer = Callable[[tuple[AuthToken, ...]], bool]


def in_fetch_range(loc: Location, start: Location, end: Location) -> bool:
    """Whether ``loc`` lies in the FETCH range ``[start, end)`` (end object 0 = whole group)."""
    if (loc.group, loc.object) < (start.group, start.object):
        return False
    if end.object == 0:
        return loc.group <= end.group
    return (loc.group, loc.object) < (end.group, end.object)


class TrackSource(ABC):
    """The data of one track, as a publisher serves it.

    Control plane: :meth:`largest` (for SUBSCRIBE_OK / FETCH_OK). Data plane:
    :meth:`attach` hands over an accepted subscription, to be fed live groups until it ends;
    :meth:`read` returns the objects of a FETCH range still available, in order.
    """

    @abstractmethod
    def largest(self) -> Location | None:
        """Largest location published so far (None: nothing yet)."""

    @property
    def finished(self) -> bool:
        """Whether the track has ended (no more groups)."""
        return False

    @abstractmethod
    async def attach(self, publication: Publication) -> None:
        """Feed live groups to ``publication`` (may return at once and feed it later)."""

    @abstractmethod
    def read(self, start: Location, end: Location) -> Iterator[MoqtObject]:
        """Objects in ``[start, end)`` still held, in group then object order."""


class MemoryTrack(TrackSource):
    """A track whose recent groups live in memory; :meth:`publish_group` fans out live."""

    def __init__(self, *, max_groups: int = 64) -> None:
        self.max_groups = max_groups
        self._groups: OrderedDict[int, list[MoqtObject]] = OrderedDict()
        self._subscribers: list[Publication] = []
        self._largest: Location | None = None
        self._finished = False
        self._changed = asyncio.Event()

    def largest(self) -> Location | None:
        return self._largest

    @property
    def finished(self) -> bool:
        return self._finished

    @property
    def subscriber_count(self) -> int:
        """Live subscriptions attached now."""
        self._subscribers = [p for p in self._subscribers if not (p.cancelled or p.finished)]
        return len(self._subscribers)

    async def wait_subscribers(self, count: int = 1, timeout: float | None = None) -> None:
        """Wait until at least ``count`` subscriptions are attached."""

        async def wait() -> None:
            while self.subscriber_count < count:
                self._changed.clear()
                await self._changed.wait()

        await asyncio.wait_for(wait(), timeout)

    async def attach(self, publication: Publication) -> None:
        if self._finished:
            await publication.done(PublishDoneCode.TRACK_ENDED, "track ended")
            return
        self._subscribers.append(publication)
        self._changed.set()

    def read(self, start: Location, end: Location) -> Iterator[MoqtObject]:
        for group, objects in self._groups.items():
            for obj in objects:
                if in_fetch_range(Location(group, obj.object_id), start, end):
                    yield obj

    async def publish_group(self, group: int, objects: Sequence[MoqtObject | bytes]) -> None:
        """Store group ``group`` and write it to every subscription that wants it."""
        if self._finished:
            raise RuntimeError("the track has finished")
        objs = [
            o if isinstance(o, MoqtObject) else MoqtObject(group=group, object_id=i, payload=o)
            for i, o in enumerate(objects)
        ]
        self._groups[group] = objs
        while len(self._groups) > self.max_groups:
            self._groups.popitem(last=False)
        if objs:
            last = Location(group, objs[-1].object_id)
            if self._largest is None or (last.group, last.object) > (
                self._largest.group,
                self._largest.object,
            ):
                self._largest = last
        for pub in list(self._subscribers):
            await self._forward(pub, group, objs)

    async def _forward(self, pub: Publication, group: int, objs: list[MoqtObject]) -> None:
        try:
            if pub.past_end(group):
                await pub.done(PublishDoneCode.SUBSCRIPTION_ENDED, "range complete")
            elif pub.wants(group):
                await pub.write_group(group, objs)
        except (Cancelled, SessionClosed):
            pass
        if pub.cancelled or pub.finished:
            self._subscribers.remove(pub)

    async def finish(self) -> None:
        """End the track: PUBLISH_DONE (TRACK_ENDED) to every subscription."""
        self._finished = True
        for pub in list(self._subscribers):
            try:
                await pub.done(PublishDoneCode.TRACK_ENDED, "track ended")
            except SessionClosed:
                pass
        self._subscribers.clear()


class TrackServer(SessionHandler):
    """A handler serving SUBSCRIBE and FETCH from a dict of :class:`TrackSource`.

    ``authorize`` (optional) sees each request's AUTHORIZATION_TOKENs; False refuses with
    UNAUTHORIZED. ``accept_namespaces`` answers PUBLISH_NAMESPACE / SUBSCRIBE_NAMESPACE with OK
    (a sink for announcements, as interop test servers need).
    """

    def __init__(
        self,
        tracks: dict[FullTrackName, TrackSource] | None = None,
        *,
        authorize: Authorizer | None = None,
        accept_namespaces: bool = False,
    ) -> None:
        self.tracks: dict[FullTrackName, TrackSource] = dict(tracks or {})
        self.authorize = authorize
        self.accept_namespaces = accept_namespaces
        self.announced: list[tuple[bytes, ...]] = []

    def _check(self, tokens: tuple[AuthToken, ...], code: int) -> None:
        if self.authorize is not None and not self.authorize(tokens):
            raise RequestError(code, "unauthorized")

    async def on_publish_namespace(
        self, session: MoqtConnection, request: NamespaceRequest
    ) -> None:
        if not self.accept_namespaces:
            await super().on_publish_namespace(session, request)
        self._check(request.auth_tokens, 0x1)
        self.announced.append(request.namespace)

    async def on_publish_namespace_done(
        self, session: MoqtConnection, namespace: tuple[bytes, ...]
    ) -> None:
        if namespace in self.announced:
            self.announced.remove(namespace)

    async def on_subscribe_namespace(
        self, session: MoqtConnection, request: NamespaceRequest
    ) -> None:
        if not self.accept_namespaces:
            await super().on_subscribe_namespace(session, request)
        self._check(request.auth_tokens, 0x1)

    async def on_subscribe(self, session: MoqtConnection, request: SubscribeRequest) -> None:
        source = self.tracks.get(request.track)
        if source is None:
            raise RequestError(SubscribeErrorCode.TRACK_DOES_NOT_EXIST, "no such track")
        self._check(request.auth_tokens, SubscribeErrorCode.UNAUTHORIZED)
        largest = source.largest()
        end_group = request.end_group
        if end_group is not None and largest is not None and end_group < largest.group:
            raise RequestError(SubscribeErrorCode.INVALID_RANGE, "the range has already passed")
        await source.attach(request.accept(largest=largest))

    async def on_fetch(self, session: MoqtConnection, request: FetchRequest) -> None:
        source = self.tracks.get(request.track)
        if source is None:
            raise RequestError(FetchErrorCode.TRACK_DOES_NOT_EXIST, "no such track")
        self._check(request.auth_tokens, FetchErrorCode.UNAUTHORIZED)
        start, end, largest = request.start, request.end, source.largest()
        if start is None or end is None or largest is None:
            raise RequestError(FetchErrorCode.INVALID_RANGE, "nothing to fetch")
        if (start.group, start.object) > (largest.group, largest.object):
            raise RequestError(FetchErrorCode.INVALID_RANGE, "start beyond the largest object")
        beyond = end.group > largest.group or (
            end.group == largest.group and end.object > largest.object + 1
        )
        if beyond:
            end = largest.next_object()
        objects = list(source.read(start, end))
        if not objects:
            raise RequestError(FetchErrorCode.NO_OBJECTS, "no objects in range")
        writer = request.accept(end=end, end_of_track=source.finished and beyond)
        for obj in objects:
            writer.write(obj)
            await writer.drain()
        writer.end()
