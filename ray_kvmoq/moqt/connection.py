"""The MoQT session object of the asyncio API: :class:`MoqtConnection` (see :mod:`.api`).

It owns one sans-I/O :class:`~ray_kvmoq.moqt.session.MoqtSession` on one
:class:`~ray_kvmoq.moqt.aio.FastQuicProtocol`: QUIC events go in through ``_on_quic_event``, MoQT
events come out through the ``_DISPATCH`` table into futures (our requests), queues
(subscriptions and fetches) and handler tasks (the peer's requests); commands go back through
``_cmd``, which transmits at the end of the loop turn and re-arms the session timer.

Invariants: every registry (``_pending``, ``_subscriptions``, ``_fetch_queues``,
``_publications``, ``_fetch_writers``) is emptied or failed by ``_fail`` exactly once, when the
session ends; handler tasks are cancelled then; objects that arrive in the same batch as
SUBSCRIBE_OK / FETCH_OK are never lost, because the iterator's queue exists before the
awaiting caller resumes.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from . import events as ev
from .aio import QuicEndpoint
from .api_types import (
    Cancelled,
    FetchRequest,
    FetchStream,
    FetchWriter,
    MoqtObject,
    NamespaceRequest,
    Publication,
    RequestError,
    SessionClosed,
    SessionHandler,
    SubscribeRequest,
    Subscription,
    _Answerable,
    _ObjectQueue,
)
from .codec import AuthToken, Location
from .codec.types import (
    DRAFT_14,
    FilterType,
    GroupOrder,
    ObjectStatus,
    SessionError,
    SubscribeErrorCode,
)
from .session import MoqtSession, SessionConfig

__all__ = ["MoqtConnection"]

_T = TypeVar("_T")


def _ns(namespace: tuple[bytes, ...] | str) -> tuple[bytes, ...]:
    if isinstance(namespace, str):
        return tuple(p.encode() for p in namespace.split("/") if p)
    return tuple(namespace)


def _name(name: bytes | str) -> bytes:
    return name.encode() if isinstance(name, str) else name


class MoqtConnection:
    """One MoQT session on one QUIC connection, client or server side (see the module doc)."""

    def __init__(
        self,
        protocol: QuicEndpoint,
        *,
        is_client: bool,
        session_config: SessionConfig | None = None,
        handler: SessionHandler | None = None,
        send_buffer: int = 4 << 20,
        request_timeout: float = 10.0,
        publish_done_linger: float = 5.0,
    ) -> None:
        self._protocol = protocol
        self._loop = asyncio.get_running_loop()
        self._session = MoqtSession(
            protocol.quic,
            is_client=is_client,
            config=session_config or SessionConfig(),
            alpn=protocol.alpn,  # a client connects first; a server's session reads it later
        )
        self.is_client = is_client
        self.handler = handler or SessionHandler()
        self.send_buffer = send_buffer
        """Unacknowledged bytes a writer may queue before it waits (backpressure)."""
        self.request_timeout = request_timeout
        """Seconds to wait for the peer's answer to one of our requests."""
        self.publish_done_linger = publish_done_linger
        """Seconds after PUBLISH_DONE that late data streams are still awaited."""
        self.setup: ev.SetupCompleted | None = None
        """The peer's setup (parameters, AUTHORIZATION_TOKENs), once exchanged."""
        self._pending: dict[int, asyncio.Future[Any]] = {}
        self._subscriptions: dict[int, Subscription] = {}
        self._fetch_queues: dict[int, _ObjectQueue] = {}
        self._publications: dict[int, Publication] = {}
        self._fetch_writers: dict[int, FetchWriter] = {}
        self._group_end_requests: set[int] = set()
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ready: asyncio.Future[ev.SetupCompleted] = self._loop.create_future()
        self._error: SessionClosed | None = None
        self._closed = asyncio.Event()
        self._closed_callbacks: list[Callable[[], None]] = []
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self.counters: dict[str, int] = {
            "fetches_sent": 0,
            "fetches_open": 0,
            "max_fetches_open": 0,
            "objects_received": 0,
        }
        """Our FETCH requests (sent, open now, most open at once) and objects received."""
        protocol.on_event = self._on_quic_event

    # -- state -----------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the session has ended."""
        return self._error is not None

    @property
    def session(self) -> MoqtSession:
        """The sans-I/O session (for what this API does not wrap)."""
        return self._session

    @property
    def protocol(self) -> QuicEndpoint:
        """The QUIC endpoint."""
        return self._protocol

    async def wait_ready(self, timeout: float | None = None) -> ev.SetupCompleted:
        """Wait for CLIENT_SETUP / SERVER_SETUP; raises :class:`SessionClosed` if it fails."""
        return await asyncio.wait_for(asyncio.shield(self._ready), timeout or self.request_timeout)

    async def wait_closed(self) -> SessionClosed:
        """Wait for the session to end; returns why."""
        await self._closed.wait()
        assert self._error is not None
        return self._error

    async def close(self, error_code: int = SessionError.NO_ERROR, reason: str = "") -> None:
        """Close the session and its QUIC connection; wait (bounded) for the close to finish."""
        if not self.closed:
            self._session.close(error_code, reason)
            self._protocol.close(error_code=error_code, reason_phrase=reason)
            self._fail(SessionClosed(error_code, reason or "closed by us"))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._protocol.wait_closed(), 2.0)

    # -- requests we send --------------------------------------------------------------------

    async def publish_namespace(
        self, namespace: tuple[bytes, ...] | str, *, auth_tokens: tuple[AuthToken, ...] = ()
    ) -> None:
        """PUBLISH_NAMESPACE; returns on OK, raises :class:`RequestError` on ERROR."""
        ns = _ns(namespace)
        rid = self._cmd(lambda s: s.publish_namespace(ns, auth_tokens=auth_tokens))
        await self._await(rid)

    async def announce_namespace(self, namespace: tuple[bytes, ...] | str) -> None:
        """Tell a peer that subscribed to namespaces about ``namespace``: on draft-16 a
        NAMESPACE on each of its SUBSCRIBE_NAMESPACE streams whose prefix covers it (d16
        §9.21); on draft-14 a PUBLISH_NAMESPACE (returns on OK, d14 §9.28)."""
        ns = _ns(namespace)
        if self._session.version == DRAFT_14:
            await self.publish_namespace(ns)
            return
        for rid in self._session.namespace_subscriptions(ns):
            self._cmd(lambda s, rid=rid: s.namespace(rid, ns))  # type: ignore[misc]

    def publish_namespace_done(self, namespace: tuple[bytes, ...] | str) -> None:
        """PUBLISH_NAMESPACE_DONE (withdraw a namespace we published)."""
        ns = _ns(namespace)
        self._cmd(lambda s: s.publish_namespace_done(ns))

    async def subscribe_namespace(
        self, prefix: tuple[bytes, ...] | str, *, auth_tokens: tuple[AuthToken, ...] = ()
    ) -> None:
        """SUBSCRIBE_NAMESPACE; returns on OK, raises :class:`RequestError` on ERROR."""
        ns = _ns(prefix)
        rid = self._cmd(lambda s: s.subscribe_namespace(ns, auth_tokens=auth_tokens))
        await self._await(rid)

    async def subscribe(
        self,
        namespace: tuple[bytes, ...] | str,
        name: bytes | str,
        *,
        filter_type: FilterType = FilterType.LARGEST_OBJECT,
        start: Location | None = None,
        end_group: int | None = None,
        priority: int = 128,
        group_order: GroupOrder = GroupOrder.PUBLISHER_DEFAULT,
        auth_tokens: tuple[AuthToken, ...] = (),
        group_ends: bool = False,
    ) -> Subscription:
        """SUBSCRIBE (any of the four filters); returns the accepted :class:`Subscription`.

        ``start`` for AbsoluteStart/AbsoluteRange; ``end_group`` (inclusive) for AbsoluteRange.
        ``group_ends``: also yield an END_OF_GROUP status object (object id 0, the stream's
        group and subgroup) when a subgroup stream whose header carries the end-of-group bit
        ends with FIN, so a consumer learns that the subgroup is complete even from publishers
        that send no End of Group object (moq-dev). Raises :class:`RequestError` with the
        SUBSCRIBE_ERROR code if refused.
        """
        ns, nm = _ns(namespace), _name(name)
        rid = self._cmd(
            lambda s: s.subscribe(
                ns,
                nm,
                filter_type=filter_type,
                start=start,
                end_group=end_group,
                subscriber_priority=priority,
                group_order=group_order,
                auth_tokens=auth_tokens,
            )
        )
        if group_ends:
            self._group_end_requests.add(rid)
        try:
            result: Subscription = await self._await(rid)
        finally:
            self._group_end_requests.discard(rid)
        return result

    async def fetch(
        self,
        namespace: tuple[bytes, ...] | str,
        name: bytes | str,
        *,
        start: Location,
        end: Location,
        priority: int = 128,
        group_order: GroupOrder = GroupOrder.ASCENDING,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> FetchStream:
        """Standalone FETCH of ``[start, end)``; ``end`` is the last location plus one object,
        and ``Location(g, 0)`` means "through the whole of group g" (d14 §9.16).

        Returns the :class:`FetchStream` once FETCH_OK arrived; raises :class:`RequestError`.
        """
        ns, nm = _ns(namespace), _name(name)
        rid = self._cmd(
            lambda s: s.fetch(
                ns,
                nm,
                start=start,
                end=end,
                subscriber_priority=priority,
                group_order=group_order,
                auth_tokens=auth_tokens,
            )
        )
        self._fetch_queues[rid] = _ObjectQueue()
        self._note_fetch(+1)
        try:
            result: FetchStream = await self._await(rid)
        except BaseException:
            self._note_fetch(-1)
            raise
        result._on_end = lambda: self._note_fetch(-1)
        return result

    def _note_fetch(self, delta: int) -> None:
        c = self.counters
        if delta > 0:
            c["fetches_sent"] += 1
        c["fetches_open"] += delta
        c["max_fetches_open"] = max(c["max_fetches_open"], c["fetches_open"])

    async def joining_fetch(
        self,
        subscription: Subscription,
        *,
        preceding_groups: int = 0,
        absolute: bool = False,
        priority: int = 128,
    ) -> FetchStream:
        """Joining FETCH for a LargestObject ``subscription`` (d14 §9.16.2): the history from
        ``preceding_groups`` groups before the Largest Location (or from group
        ``preceding_groups`` when ``absolute``) up to where the subscription starts."""
        rid = self._cmd(
            lambda s: s.joining_fetch(
                subscription.request_id,
                preceding_groups,
                absolute=absolute,
                subscriber_priority=priority,
            )
        )
        self._fetch_queues[rid] = _ObjectQueue()
        result: FetchStream = await self._await(rid)
        return result

    # -- plumbing ----------------------------------------------------------------------------

    def _cmd(self, fn: Callable[[MoqtSession], _T]) -> _T:
        """Run one session command, then transmit at the end of this loop turn."""
        self._raise_if_closed()
        result = fn(self._session)
        self._protocol.transmit_soon()
        self._arm_timer()
        return result

    def _arm_timer(self) -> None:
        when = self._session.get_timer()
        if when == self._timer_at:
            return
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._timer_at = when
        if when is not None:
            self._timer = self._loop.call_at(when, self._on_timer)

    def _on_timer(self) -> None:
        self._timer, self._timer_at = None, None
        for moqt_event in self._session.handle_timer(self._loop.time()):
            self._dispatch(moqt_event)
        self._protocol.transmit_soon()
        self._arm_timer()

    def _raise_if_closed(self) -> None:
        if self._error is not None:
            raise self._error

    async def _await(self, rid: int) -> Any:
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._pending[rid] = fut
        try:
            return await asyncio.wait_for(fut, self.request_timeout)
        finally:
            self._pending.pop(rid, None)

    def _resolve(self, rid: int, value: Any = None, error: BaseException | None = None) -> None:
        fut = self._pending.pop(rid, None)
        if fut is None or fut.done():
            return
        if error is not None:
            fut.set_exception(error)
        else:
            fut.set_result(value)

    def _spawn(self, coro: Awaitable[Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _later(self, delay: float, fn: Callable[[], Any]) -> None:
        self._loop.call_later(delay, fn)

    def _fail(self, error: SessionClosed) -> None:
        if self._error is not None:
            return
        self._error = error
        if self._timer is not None:
            self._timer.cancel()
        if not self._ready.done():
            self._ready.set_exception(error)
            self._ready.exception()  # mark retrieved
        for fut in list(self._pending.values()):
            if not fut.done():
                fut.set_exception(error)
        self._pending.clear()
        for sub in list(self._subscriptions.values()):
            sub._end(error)
        for queue in self._fetch_queues.values():
            queue.finish(error)
        self._fetch_queues.clear()
        for writer in [*self._publications.values(), *self._fetch_writers.values()]:
            writer.cancelled = True
        self._closed.set()
        current = asyncio.current_task()
        for task in list(self._tasks):  # handler tasks serve requests of a session now gone
            if task is not current:
                task.cancel()
        for callback in self._closed_callbacks:
            callback()
        self._spawn(self.handler.on_closed(self, error))

    def _on_quic_event(self, event: Any) -> None:
        from aioquic.quic.events import ConnectionTerminated

        try:
            out = self._session.handle_event(event, self._loop.time())
        except Exception as exc:  # the session catches protocol errors itself: this is our bug
            self._protocol.close(error_code=SessionError.INTERNAL_ERROR, reason_phrase=repr(exc))
            self._fail(SessionClosed(SessionError.INTERNAL_ERROR, f"internal error: {exc!r}"))
            return
        for moqt_event in out:
            self._dispatch(moqt_event)
        self._arm_timer()
        if isinstance(event, ConnectionTerminated):
            self._fail(SessionClosed(event.error_code, event.reason_phrase or "connection closed"))

    # -- events from the session ------------------------------------------------------------

    def _dispatch(self, event: ev.MoqtEvent) -> None:
        handler = _DISPATCH.get(type(event))
        if handler is not None:
            handler(self, event)

    def _on_setup(self, event: ev.SetupCompleted) -> None:
        self.setup = event
        if self.is_client:
            if not self._ready.done():
                self._ready.set_result(event)
            return
        self._spawn(self._run_setup(event))

    async def _run_setup(self, event: ev.SetupCompleted) -> None:
        try:
            await self.handler.on_setup(self, event)
        except RequestError as exc:
            await self.close(SessionError.UNAUTHORIZED, exc.reason or "refused")
            return
        except Exception as exc:  # a handler bug: refuse rather than leave requests hanging
            await self.close(SessionError.INTERNAL_ERROR, f"setup handler failed: {exc!r}")
            return
        if not self._ready.done():
            self._ready.set_result(event)

    def _on_terminated(self, event: ev.SessionTerminated) -> None:
        self._fail(SessionClosed(event.error_code, event.reason))

    def _on_subscribe_accepted(self, event: ev.SubscribeAccepted) -> None:
        sub = Subscription(self, event.request_id, event)
        sub.group_ends = event.request_id in self._group_end_requests
        self._subscriptions[event.request_id] = sub
        self._resolve(event.request_id, sub)

    def _on_rejected(
        self,
        event: ev.SubscribeRejected
        | ev.FetchRejected
        | ev.PublishNamespaceRejected
        | ev.SubscribeNamespaceRejected,
    ) -> None:
        error = RequestError(event.error_code, event.reason or "refused by the peer")
        queue = self._fetch_queues.pop(event.request_id, None)
        if queue is not None:
            queue.finish(error)
        self._resolve(event.request_id, error=error)

    def _on_accepted(
        self, event: ev.PublishNamespaceAccepted | ev.SubscribeNamespaceAccepted
    ) -> None:
        self._resolve(event.request_id, None)

    def _on_fetch_accepted(self, event: ev.FetchAccepted) -> None:
        queue = self._fetch_queues.get(event.request_id) or _ObjectQueue()
        if queue.ended:  # the whole fetch stream arrived before FETCH_OK
            self._fetch_queues.pop(event.request_id, None)
        stream = FetchStream(self, event.request_id, queue)
        stream.end, stream.end_of_track = event.end, event.end_of_track
        self._resolve(event.request_id, stream)

    def _on_object(self, event: ev.ObjectReceived) -> None:
        self.counters["objects_received"] += 1
        obj = MoqtObject(
            group=event.group,
            object_id=event.object_id,
            payload=event.payload,
            subgroup=event.subgroup,
            priority=event.publisher_priority,
            extensions=event.extensions,
            status=event.status,
        )
        sub = self._subscriptions.get(event.request_id)
        if sub is not None:
            sub._queue.put(obj)
            return
        queue = self._fetch_queues.get(event.request_id)
        if queue is not None:
            queue.put(obj)

    def _on_subgroup_ended(self, event: ev.SubgroupStreamEnded) -> None:
        sub = self._subscriptions.get(event.request_id)
        if sub is not None:
            if sub.group_ends and event.end_of_group:
                sub._queue.put(
                    MoqtObject(
                        group=event.group,
                        object_id=0,
                        subgroup=event.subgroup,
                        status=ObjectStatus.END_OF_GROUP,
                    )
                )
            sub._stream_ended()

    def _on_stream_reset(self, event: ev.DataStreamReset) -> None:
        if event.request_id is None:
            return
        sub = self._subscriptions.get(event.request_id)
        if sub is not None:
            sub._stream_ended()
        queue = self._fetch_queues.pop(event.request_id, None)
        if queue is not None:
            queue.finish(RequestError(event.error_code, "the fetch stream was reset"))

    def _on_fetch_ended(self, event: ev.FetchStreamEnded) -> None:
        queue = self._fetch_queues.get(event.request_id)
        if queue is not None:
            queue.finish()
            if event.request_id not in self._pending:  # else FETCH_OK still has to find it
                del self._fetch_queues[event.request_id]

    def _on_publish_done(self, event: ev.PublishDoneReceived) -> None:
        sub = self._subscriptions.get(event.request_id)
        if sub is not None:
            sub._publish_done(event)

    def _on_unsubscribed(self, event: ev.Unsubscribed) -> None:
        pub = self._publications.pop(event.request_id, None)
        if pub is not None:
            pub.cancelled = True

    def _on_fetch_cancelled(self, event: ev.FetchCancelled) -> None:
        writer = self._fetch_writers.pop(event.request_id, None)
        if writer is not None:
            writer.cancelled = True

    def _on_subscribe_requested(self, event: ev.SubscribeRequested) -> None:
        req = SubscribeRequest(self, event)
        self._spawn(self._answer(req, self.handler.on_subscribe(self, req), req.reject))

    def _on_fetch_requested(self, event: ev.FetchRequested) -> None:
        req = FetchRequest(self, event)
        self._spawn(self._answer(req, self.handler.on_fetch(self, req), req.reject))

    def _on_namespace_requested(
        self, event: ev.PublishNamespaceRequested | ev.SubscribeNamespaceRequested
    ) -> None:
        req = NamespaceRequest(self, event)
        if isinstance(event, ev.PublishNamespaceRequested):
            coro = self.handler.on_publish_namespace(self, req)
        else:
            coro = self.handler.on_subscribe_namespace(self, req)
        self._spawn(self._answer(req, coro, req.reject, accept=req.accept))

    def _on_namespace_done(self, event: ev.PublishNamespaceDone) -> None:
        self._spawn(self.handler.on_publish_namespace_done(self, event.track_namespace))

    def _on_track_status(self, event: ev.TrackStatusRequested) -> None:
        rid = event.request_id
        self._cmd(lambda s: s.track_status_error(rid, SubscribeErrorCode.NOT_SUPPORTED, "no"))

    def _on_publish_requested(self, event: ev.PublishRequested) -> None:
        rid = event.request_id
        self._cmd(lambda s: s.publish_error(rid, 0x3, "PUBLISH not supported; announce instead"))

    async def _answer(
        self,
        req: _Answerable,
        coro: Awaitable[None],
        reject: Callable[[int, str], Any],
        *,
        accept: Callable[[], Any] | None = None,
    ) -> None:
        """Run one handler method; answer what it left unanswered."""
        code, reason = 0, "the handler did not answer"
        try:
            # The peer's requests reach the handler only once on_setup accepted the session
            # (its AUTHORIZATION_TOKENs), even if they arrive in the same flight as the setup.
            await asyncio.shield(self._ready)
        except BaseException:
            if asyncio.iscoroutine(coro):
                coro.close()
            return
        try:
            await coro
            if accept is not None and not req.answered and not self.closed:
                accept()
                return
        except RequestError as exc:
            code, reason = exc.error_code, exc.reason
        except (SessionClosed, Cancelled):
            return
        except Exception as exc:  # a handler bug must not kill the session
            reason = f"handler failed: {exc!r}"
        if not req.answered and not self.closed:
            reject(code, reason)


_DISPATCH: dict[type, Callable[[MoqtConnection, Any], None]] = {
    ev.SetupCompleted: MoqtConnection._on_setup,
    ev.SessionTerminated: MoqtConnection._on_terminated,
    ev.SubscribeAccepted: MoqtConnection._on_subscribe_accepted,
    ev.SubscribeRejected: MoqtConnection._on_rejected,
    ev.FetchRejected: MoqtConnection._on_rejected,
    ev.PublishNamespaceRejected: MoqtConnection._on_rejected,
    ev.SubscribeNamespaceRejected: MoqtConnection._on_rejected,
    ev.PublishNamespaceAccepted: MoqtConnection._on_accepted,
    ev.SubscribeNamespaceAccepted: MoqtConnection._on_accepted,
    ev.FetchAccepted: MoqtConnection._on_fetch_accepted,
    ev.ObjectReceived: MoqtConnection._on_object,
    ev.SubgroupStreamEnded: MoqtConnection._on_subgroup_ended,
    ev.DataStreamReset: MoqtConnection._on_stream_reset,
    ev.FetchStreamEnded: MoqtConnection._on_fetch_ended,
    ev.PublishDoneReceived: MoqtConnection._on_publish_done,
    ev.Unsubscribed: MoqtConnection._on_unsubscribed,
    ev.FetchCancelled: MoqtConnection._on_fetch_cancelled,
    ev.SubscribeRequested: MoqtConnection._on_subscribe_requested,
    ev.FetchRequested: MoqtConnection._on_fetch_requested,
    ev.PublishNamespaceRequested: MoqtConnection._on_namespace_requested,
    ev.SubscribeNamespaceRequested: MoqtConnection._on_namespace_requested,
    ev.PublishNamespaceDone: MoqtConnection._on_namespace_done,
    ev.TrackStatusRequested: MoqtConnection._on_track_status,
    ev.PublishRequested: MoqtConnection._on_publish_requested,
}
