"""Values and objects of the asyncio MoQT API (:mod:`ray_kvmoq.moqt.api`): objects, errors, the
per-session handler, the peer's requests, our writers and our iterators.

Split from :mod:`.api` for size only; import everything from ``ray_kvmoq.moqt.api``. Each class
here talks to its :class:`~ray_kvmoq.moqt.api.MoqtConnection` through ``_cmd`` (one session
command, transmit at the end of the loop turn) and the connection's registries.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from . import events as ev
from .codec import AuthToken, Location
from .codec.types import (
    FetchErrorCode,
    FilterType,
    GroupOrder,
    ObjectStatus,
    PublishDoneCode,
    PublishNamespaceErrorCode,
    SubscribeErrorCode,
    SubscribeNamespaceErrorCode,
)
from .objects import Extensions, Group, MoqtObject

if TYPE_CHECKING:
    from .connection import MoqtConnection

__all__ = [
    "Cancelled",
    "FetchRequest",
    "FetchStream",
    "FetchWriter",
    "FullTrackName",
    "Group",
    "GroupWriter",
    "MoqtApiError",
    "MoqtObject",
    "NamespaceRequest",
    "Publication",
    "RequestError",
    "SessionClosed",
    "SessionHandler",
    "SubscribeRequest",
    "Subscription",
]

_WRITE_BATCH = 1 << 20
"""Bytes of objects handed to the session per write call in ``write_group``."""

_INLINE_MAX = 16 << 10
"""Payloads up to this size are framed together with their neighbours into one write."""


@dataclass(frozen=True, slots=True)
class FullTrackName:
    """Track namespace tuple plus track name (d14 §2.4)."""

    namespace: tuple[bytes, ...]
    """Namespace fields."""
    name: bytes
    """Track name."""

    @classmethod
    def parse(cls, namespace: str, name: str) -> FullTrackName:
        """``"a/b/c"``, ``"track"`` -> ``((b"a", b"b", b"c"), b"track")``."""
        return cls(tuple(p.encode() for p in namespace.split("/") if p), name.encode())


class MoqtApiError(Exception):
    """Base of this module's errors; ``error_code`` is the wire code involved."""

    error_code: int = 0

    def __init__(self, error_code: int = 0, reason: str = "") -> None:
        super().__init__(f"{reason or type(self).__name__} (code {error_code:#x})")
        self.error_code = error_code
        self.reason = reason


class SessionClosed(MoqtApiError):
    """The session ended (peer close, idle timeout, protocol error, or our close)."""


class RequestError(MoqtApiError):
    """A request was refused: raised to callers when the peer refuses (SUBSCRIBE_ERROR, ...),
    and raised by handlers to refuse the peer's request with ``error_code``."""


class Cancelled(MoqtApiError):
    """The peer cancelled what we were writing (UNSUBSCRIBE, FETCH_CANCEL)."""


# ------------------------------------------------------------------------------ handler


class SessionHandler:
    """What one session does when the peer asks something of it (override what you serve).

    Control-plane methods run as tasks, one per request, so they may await freely. Each
    request object carries ``auth_tokens``: refuse with ``request.reject(UNAUTHORIZED)`` or by
    raising :class:`RequestError`. Defaults: accept the setup, refuse everything else.
    """

    async def on_setup(self, session: MoqtConnection, setup: ev.SetupCompleted) -> None:
        """Setup finished; raise :class:`RequestError` to close the session (e.g. bad token)."""

    async def on_publish_namespace(
        self, session: MoqtConnection, request: NamespaceRequest
    ) -> None:
        """PUBLISH_NAMESPACE: return to accept, raise :class:`RequestError` to refuse."""
        raise RequestError(PublishNamespaceErrorCode.NOT_SUPPORTED, "not a relay")

    async def on_publish_namespace_done(
        self, session: MoqtConnection, namespace: tuple[bytes, ...]
    ) -> None:
        """The peer withdrew a namespace (PUBLISH_NAMESPACE_DONE)."""

    async def on_subscribe_namespace(
        self, session: MoqtConnection, request: NamespaceRequest
    ) -> None:
        """SUBSCRIBE_NAMESPACE: return to accept, raise :class:`RequestError` to refuse."""
        raise RequestError(SubscribeNamespaceErrorCode.NOT_SUPPORTED, "not supported")

    async def on_subscribe(self, session: MoqtConnection, request: SubscribeRequest) -> None:
        """SUBSCRIBE: ``request.accept(largest=...)`` then write, or ``request.reject(code)``."""
        request.reject(SubscribeErrorCode.TRACK_DOES_NOT_EXIST, "no such track")

    async def on_fetch(self, session: MoqtConnection, request: FetchRequest) -> None:
        """FETCH: ``request.accept(end=...)`` then write, or ``request.reject(code)``."""
        request.reject(FetchErrorCode.TRACK_DOES_NOT_EXIST, "no such track")

    async def on_closed(self, session: MoqtConnection, error: SessionClosed) -> None:
        """The session ended."""


# ------------------------------------------------------------------------------ requests in


class _Answerable:
    def __init__(self, session: MoqtConnection, request_id: int) -> None:
        self.session = session
        self.request_id = request_id
        self.answered = False

    def _answer(self) -> None:
        if self.answered:
            raise RuntimeError(f"request {self.request_id} was already answered")
        self.answered = True


class NamespaceRequest(_Answerable):
    """The peer's PUBLISH_NAMESPACE or SUBSCRIBE_NAMESPACE (answered by the handler's return)."""

    def __init__(
        self,
        session: MoqtConnection,
        event: ev.PublishNamespaceRequested | ev.SubscribeNamespaceRequested,
    ) -> None:
        super().__init__(session, event.request_id)
        self.event = event
        self.namespace: tuple[bytes, ...] = (
            event.track_namespace
            if isinstance(event, ev.PublishNamespaceRequested)
            else event.track_namespace_prefix
        )
        self.auth_tokens: tuple[AuthToken, ...] = event.auth_tokens

    def accept(self) -> None:
        """PUBLISH_NAMESPACE_OK / SUBSCRIBE_NAMESPACE_OK (what returning from the handler does)."""
        self._answer()
        rid = self.request_id
        if isinstance(self.event, ev.PublishNamespaceRequested):
            self.session._cmd(lambda s: s.accept_publish_namespace(rid))
        else:
            self.session._cmd(lambda s: s.accept_subscribe_namespace(rid))

    def reject(self, error_code: int = 0x0, reason: str = "") -> None:
        """PUBLISH_NAMESPACE_ERROR / SUBSCRIBE_NAMESPACE_ERROR."""
        self._answer()
        rid = self.request_id
        if isinstance(self.event, ev.PublishNamespaceRequested):
            self.session._cmd(lambda s: s.reject_publish_namespace(rid, error_code, reason))
        else:
            self.session._cmd(lambda s: s.reject_subscribe_namespace(rid, error_code, reason))


class SubscribeRequest(_Answerable):
    """The peer's SUBSCRIBE; answer with :meth:`accept` or :meth:`reject`."""

    def __init__(self, session: MoqtConnection, event: ev.SubscribeRequested) -> None:
        super().__init__(session, event.request_id)
        self.event = event
        self.track = FullTrackName(event.track_namespace, event.track_name)
        self.auth_tokens = event.auth_tokens
        self.filter_type = event.filter_type
        self.start = event.start
        self.end_group = event.end_group
        self.forward = event.forward

    def accept(
        self,
        *,
        largest: Location | None = None,
        group_order: GroupOrder = GroupOrder.ASCENDING,
        expires: int = 0,
    ) -> Publication:
        """SUBSCRIBE_OK; returns the writer for this subscription's groups."""
        self._answer()
        alias = self.session._cmd(
            lambda s: s.accept_subscribe(
                self.request_id, largest=largest, group_order=group_order, expires=expires
            )
        )
        pub = Publication(self, alias, largest)
        self.session._publications[self.request_id] = pub
        return pub

    def reject(
        self, error_code: int = SubscribeErrorCode.TRACK_DOES_NOT_EXIST, reason: str = ""
    ) -> None:
        """SUBSCRIBE_ERROR."""
        self._answer()
        self.session._cmd(lambda s: s.reject_subscribe(self.request_id, error_code, reason))


class FetchRequest(_Answerable):
    """The peer's FETCH; ``start``/``end`` (end = last location plus one object, object 0 =
    whole group) are resolved for joining fetches when the session knows the subscription."""

    def __init__(self, session: MoqtConnection, event: ev.FetchRequested) -> None:
        super().__init__(session, event.request_id)
        self.event = event
        self.track = FullTrackName(event.track_namespace, event.track_name)
        self.auth_tokens = event.auth_tokens
        self.start = event.start
        self.end = event.end

    def accept(
        self,
        *,
        end: Location,
        end_of_track: bool = False,
        group_order: GroupOrder = GroupOrder.ASCENDING,
    ) -> FetchWriter:
        """FETCH_OK (``end`` = last location delivered plus one object); returns the writer."""
        self._answer()
        self.session._cmd(
            lambda s: s.accept_fetch(
                self.request_id, end=end, end_of_track=end_of_track, group_order=group_order
            )
        )
        stream_id = self.session._cmd(lambda s: s.open_fetch_stream(self.request_id))
        writer = FetchWriter(self, stream_id)
        self.session._fetch_writers[self.request_id] = writer
        return writer

    def reject(
        self, error_code: int = FetchErrorCode.TRACK_DOES_NOT_EXIST, reason: str = ""
    ) -> None:
        """FETCH_ERROR."""
        self._answer()
        self.session._cmd(lambda s: s.reject_fetch(self.request_id, error_code, reason))


# ------------------------------------------------------------------------------ writers


class _Writer:
    def __init__(self, session: MoqtConnection) -> None:
        self.session = session
        self.cancelled = False

    def _check(self) -> None:
        self.session._raise_if_closed()
        if self.cancelled:
            raise Cancelled(0, "the peer cancelled")

    async def drain(self, limit: int | None = None) -> None:
        """Wait until the connection's unacknowledged send buffer is below ``limit``."""
        self._check()
        try:
            await self.session._protocol.drain(self.session.send_buffer if limit is None else limit)
        except ConnectionError:
            self.session._raise_if_closed()
            raise


class Publication(_Writer):
    """Our side of one accepted subscription: write groups (one subgroup stream each)."""

    def __init__(
        self, request: SubscribeRequest, track_alias: int, largest: Location | None
    ) -> None:
        super().__init__(request.session)
        self.request = request
        self.request_id = request.request_id
        self.track_alias = track_alias
        self.largest = largest
        self.finished = False

    def wants(self, group: int) -> bool:
        """Whether the subscription's filter covers ``group`` (d14 §9.7)."""
        req = self.request
        if self.largest is not None and req.filter_type in (
            FilterType.NEXT_GROUP_START,
            FilterType.LARGEST_OBJECT,
        ):
            first = self.largest.group + (
                1 if req.filter_type == FilterType.NEXT_GROUP_START else 0
            )
            if group < first:
                return False
        if req.start is not None and group < req.start.group:
            return False
        return not (req.end_group is not None and group > req.end_group)

    def past_end(self, group: int) -> bool:
        """Whether ``group`` lies beyond an AbsoluteRange end (time to :meth:`done`)."""
        return self.request.end_group is not None and group > self.request.end_group

    def open_group(
        self,
        group: int,
        *,
        subgroup: int = 0,
        priority: int = 128,
        with_extensions: bool = False,
        end_of_group: bool = True,
    ) -> GroupWriter:
        """Open the subgroup stream of ``group`` (``with_extensions`` if any object has some)."""
        self._check()
        sid = self.session._cmd(
            lambda s: s.open_subgroup(
                self.request_id,
                group,
                subgroup,
                priority=priority,
                with_extensions=with_extensions,
                end_of_group=end_of_group,
            )
        )
        return GroupWriter(self, sid, group, subgroup, priority)

    async def write_group(
        self, group: int, objects: Sequence[MoqtObject | bytes], *, priority: int = 128
    ) -> None:
        """Write a whole group on its own stream (FIN after the last object), with backpressure.

        ``bytes`` items become objects 0, 1, 2, ... of the group; :class:`MoqtObject` items are
        written as they are (their ``subgroup`` must match the first one's).
        """
        objs = [
            o if isinstance(o, MoqtObject) else MoqtObject(group=group, object_id=i, payload=o)
            for i, o in enumerate(objects)
        ]
        first = objs[0] if objs else MoqtObject(group=group, object_id=0, priority=priority)
        writer = self.open_group(
            group,
            subgroup=first.subgroup,
            priority=first.priority if objs else priority,
            with_extensions=any(o.extensions for o in objs),
        )
        batch: list[MoqtObject] = []
        size = 0
        for obj in objs:
            batch.append(obj)
            size += len(obj.payload)
            if size >= _WRITE_BATCH:
                writer.write_many(batch)
                batch, size = [], 0
                await self.drain()
        writer.write_many(batch)
        writer.end()
        await self.drain()

    async def done(self, status: int = PublishDoneCode.TRACK_ENDED, reason: str = "") -> None:
        """PUBLISH_DONE (after our streams are written; the peer counts them)."""
        if self.finished or self.cancelled or self.session.closed:
            return
        self.finished = True
        # d14 §9.12: PUBLISH_DONE follows the data. Waiting until the peer has acknowledged it
        # also keeps relays (moq-dev) from ending the track while our streams are in flight.
        with contextlib.suppress(ConnectionError, MoqtApiError):
            await self.drain(0)
        if self.session.closed:
            return
        self.session._cmd(lambda s: s.publish_done(self.request_id, status, reason))
        self.session._publications.pop(self.request_id, None)


class GroupWriter:
    """One open subgroup stream; objects must be written in increasing object id."""

    def __init__(
        self, pub: Publication, stream_id: int, group: int, subgroup: int, priority: int
    ) -> None:
        self.publication = pub
        self.stream_id = stream_id
        self.group = group
        self.subgroup = subgroup
        self.priority = priority

    def write(self, obj: MoqtObject) -> None:
        """Queue one object on the stream (no await: the caller drains)."""
        self.write_many([obj])

    def write_many(self, objects: Sequence[MoqtObject]) -> None:
        """Queue objects with as few transport writes as their sizes allow: small ones are
        framed together into one write; a large payload goes to the transport as the view it
        is (its only copy is into the QUIC send buffer); status objects one by one."""
        self.publication._check()
        run: list[tuple[int, bytes, Extensions]] = []
        session = self.publication.session
        sid = self.stream_id
        for obj in objects:
            if obj.status == ObjectStatus.NORMAL and len(obj.payload) <= _INLINE_MAX:
                run.append((obj.object_id, obj.payload, obj.extensions))  # type: ignore[arg-type]
                continue
            if run:
                session._cmd(lambda s, r=run: s.write_objects(sid, r))  # type: ignore[misc]
                run = []
            session._cmd(
                lambda s, o=obj: s.write_object(  # type: ignore[misc]
                    sid, o.object_id, o.payload, extensions=o.extensions, status=o.status
                )
            )
        if run:
            session._cmd(lambda s: s.write_objects(sid, run))

    def write_group(self, group: Group) -> None:
        """Queue every object of a :class:`~ray_kvmoq.moqt.objects.Group` (payloads are views
        of its buffer, copied once into the QUIC send buffer)."""
        self.write_many(group.objects())

    def end(self) -> None:
        """FIN the stream."""
        self.publication.session._cmd(lambda s: s.end_subgroup(self.stream_id))

    def reset(self, error_code: int = 0x1) -> None:
        """Abandon the stream (RESET_STREAM)."""
        self.publication.session._cmd(lambda s: s.reset_subgroup(self.stream_id, error_code))


class FetchWriter(_Writer):
    """Our side of one accepted FETCH: write objects in order, then :meth:`end`."""

    def __init__(self, request: FetchRequest, stream_id: int) -> None:
        super().__init__(request.session)
        self.request_id = request.request_id
        self.stream_id = stream_id

    def write(self, obj: MoqtObject) -> None:
        """Queue one object on the fetch stream (group order, ascending object ids)."""
        self._check()
        self.session._cmd(
            lambda s: s.write_fetch_object(
                self.stream_id,
                group=obj.group,
                subgroup=obj.subgroup,
                object_id=obj.object_id,
                payload=obj.payload,
                priority=obj.priority,
                extensions=obj.extensions,
                status=obj.status,
            )
        )

    def write_group(self, group: Group) -> None:
        """Queue every object of a :class:`~ray_kvmoq.moqt.objects.Group` (payload views)."""
        for obj in group.objects():
            self.write(obj)

    def end(self) -> None:
        """FIN the fetch stream."""
        if not self.cancelled and not self.session.closed:
            self.session._cmd(lambda s: s.end_fetch_stream(self.stream_id))
        self.session._fetch_writers.pop(self.request_id, None)


# ------------------------------------------------------------------------------ iterators


class _ObjectQueue:
    """Objects for one subscription or fetch; ends with a sentinel or an exception."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[MoqtObject | BaseException | None] = asyncio.Queue()
        self.ended = False

    def put(self, item: MoqtObject) -> None:
        if not self.ended:
            self._queue.put_nowait(item)

    def finish(self, error: BaseException | None = None) -> None:
        if not self.ended:
            self.ended = True
            self._queue.put_nowait(error)

    async def get(self) -> MoqtObject:
        item = await self._queue.get()
        if item is None:
            self._queue.put_nowait(None)  # later calls end too
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            self._queue.put_nowait(item)
            raise item
        return item


class Subscription:
    """Our SUBSCRIBE once accepted: ``async for obj in subscription`` yields objects in arrival
    order and stops after PUBLISH_DONE once every announced stream has ended."""

    def __init__(
        self, session: MoqtConnection, request_id: int, accepted: ev.SubscribeAccepted
    ) -> None:
        self.session = session
        self.request_id = request_id
        self.track_alias = accepted.track_alias
        self.largest = accepted.largest
        self.group_order = accepted.group_order
        self.done: ev.PublishDoneReceived | None = None
        self.group_ends = False
        """Whether end-of-group streams also yield an END_OF_GROUP object (``subscribe``)."""
        self._queue = _ObjectQueue()
        self._streams_ended = 0

    def __aiter__(self) -> Subscription:
        return self

    async def __anext__(self) -> MoqtObject:
        return await self._queue.get()

    async def unsubscribe(self) -> None:
        """UNSUBSCRIBE; iteration ends."""
        if not self._queue.ended and not self.session.closed:
            self.session._cmd(lambda s: s.unsubscribe(self.request_id))
        self._end()

    def _stream_ended(self) -> None:
        self._streams_ended += 1
        self._maybe_end()

    def _publish_done(self, event: ev.PublishDoneReceived) -> None:
        self.done = event
        self._maybe_end()
        if not self._queue.ended:  # streams still in flight: give them a bounded time
            self.session._later(self.session.publish_done_linger, self._end)

    def _maybe_end(self) -> None:
        if self.done is not None and self._streams_ended >= min(self.done.stream_count, 1 << 40):
            self._end()

    def _end(self, error: BaseException | None = None) -> None:
        self._queue.finish(error)
        self.session._subscriptions.pop(self.request_id, None)


class FetchStream:
    """Our FETCH once accepted: ``async for obj in fetch`` until the fetch stream ends."""

    def __init__(self, session: MoqtConnection, request_id: int, queue: _ObjectQueue) -> None:
        self.session = session
        self.request_id = request_id
        self.end: Location | None = None
        self.end_of_track = False
        self._queue = queue
        self._on_end: Callable[[], None] | None = None

    def __aiter__(self) -> FetchStream:
        return self

    async def __anext__(self) -> MoqtObject:
        try:
            return await self._queue.get()
        except BaseException:
            self._ended()
            raise

    def _ended(self) -> None:
        if self._on_end is not None:
            on_end, self._on_end = self._on_end, None
            on_end()

    async def groups(self) -> AsyncIterator[Group]:
        """The fetched objects as one :class:`~ray_kvmoq.moqt.objects.Group` per group, each
        yielded once the next group starts or the stream ends (FETCH delivers in group order).
        End of Group / End of Track status objects only delimit; they are not kept."""
        objs: list[MoqtObject] = []
        gid: int | None = None
        async for obj in self:
            if gid is not None and obj.group != gid:
                if objs:
                    yield Group.pack(gid, objs)
                objs = []
            gid = obj.group
            if obj.status not in (ObjectStatus.END_OF_GROUP, ObjectStatus.END_OF_TRACK):
                objs.append(obj)
        if gid is not None and objs:
            yield Group.pack(gid, objs)

    async def cancel(self) -> None:
        """FETCH_CANCEL; iteration ends."""
        if not self._queue.ended and not self.session.closed:
            self.session._cmd(lambda s: s.fetch_cancel(self.request_id))
        self._queue.finish()
        self.session._fetch_queues.pop(self.request_id, None)
        self._ended()
