"""The relay's upstream role: sessions to peer relays and :class:`SessionUpstream`, the
:class:`~.events.Upstream` over one MoQT session.

:class:`PeerPool` keeps one session per peer address, reused by every track, with keep-alive
PINGs so a dead peer is noticed within the QUIC idle timeout (and every subscription on it
fails with :class:`~.events.RelayError` instead of hanging). A connect is retried once, and a
pooled session that died is replaced, never reused.

Our relays end each group with an END_OF_GROUP status object (see ``downstream.py``);
:class:`SessionUpstream` turns those into :class:`~.events.GroupEnded` and END_OF_TRACK into
:class:`~.events.TrackEnded`, so the cache stores exactly what the publisher published.
:meth:`SessionUpstream.fetch_groups` asks for a whole range of groups with one FETCH and
yields each as one :class:`~ray_kvmoq.moqt.api.Group` as soon as the next one starts.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ray_kvmoq.moqt import api
from ray_kvmoq.moqt.api import Group, MoqtObject, SessionConfig, TransportConfig
from ray_kvmoq.moqt.codec import AuthToken, FilterType, Location, ObjectStatus, PublishDoneCode

from .directory import NodeInfo
from .events import GroupEnded, ObjectReceived, RelayError, TrackEnded, TrackEvent
from .security import use_value

__all__ = ["IMPLEMENTATION", "PeerPool", "SessionUpstream"]

IMPLEMENTATION = b"ray_kvmoq"
"""MOQT_IMPLEMENTATION prefix of our own endpoints (``SessionConfig.implementation``)."""


class SessionUpstream:
    """An :class:`~.relay.Upstream` over one MoQT session (a peer relay, or a publisher that
    announced a namespace to us). ``token`` (a callable returning bytes) rides every request."""

    bounded_groups = True
    """:meth:`fetch_groups` takes ``max_group_bytes`` (the puller's cache budget)."""

    def __init__(self, conn: api.MoqtConnection, token: Any = None) -> None:
        self.conn = conn
        self._token = token

    def _auth(self) -> tuple[AuthToken, ...]:
        return () if self._token is None else (use_value(self._token()),)

    async def subscribe(
        self, namespace: tuple[bytes, ...], track: bytes
    ) -> AsyncIterator[TrackEvent]:
        try:
            sub = await self.conn.subscribe(
                namespace,
                track,
                filter_type=FilterType.ABSOLUTE_START,
                start=Location(0, 0),
                auth_tokens=self._auth(),
                group_ends=True,
            )
        except api.MoqtApiError as exc:
            raise RelayError(exc.error_code, f"upstream refused SUBSCRIBE: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise RelayError(0x2, f"upstream SUBSCRIBE failed: {exc!r}") from None
        return self._events(sub)

    async def _events(self, sub: api.Subscription) -> AsyncIterator[TrackEvent]:
        # A group is complete once every subgroup seen for it has ended: End of Group status
        # objects (our relays) and the end-of-group streams the session reports (any publisher)
        # both end their subgroup.
        open_subgroups: dict[int, set[int]] = {}
        try:
            async for obj in sub:
                if obj.status == ObjectStatus.END_OF_GROUP:
                    left = open_subgroups.get(obj.group, set())
                    left.discard(obj.subgroup)
                    if not left:
                        open_subgroups.pop(obj.group, None)
                        yield GroupEnded(group_id=obj.group)
                elif obj.status == ObjectStatus.END_OF_TRACK:
                    yield TrackEnded()
                    return
                else:
                    open_subgroups.setdefault(obj.group, set()).add(obj.subgroup)
                    yield ObjectReceived(group_id=obj.group, obj=obj)
        except api.MoqtApiError as exc:
            raise RelayError(0x0, f"upstream session failed: {exc.reason or exc!r}") from None
        finally:
            with contextlib.suppress(api.MoqtApiError):
                await sub.unsubscribe()
        done = sub.done
        if done is not None and done.status_code == PublishDoneCode.TRACK_ENDED:
            yield TrackEnded()
            return
        code = done.status_code if done is not None else 0
        raise RelayError(0x0, f"upstream subscription ended (PUBLISH_DONE {code:#x})")

    async def fetch_groups(
        self,
        namespace: tuple[bytes, ...],
        track: bytes,
        first: int,
        last: int,
        *,
        max_group_bytes: int | None = None,
    ) -> AsyncIterator[Group]:
        try:
            stream = await self.conn.fetch(
                namespace,
                track,
                start=Location(first, 0),
                end=Location(last, 0),  # object 0: through the whole of group `last`
                auth_tokens=self._auth(),
            )
        except api.MoqtApiError as exc:
            raise RelayError(exc.error_code, f"upstream refused FETCH: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise RelayError(0x2, f"upstream FETCH failed: {exc!r}") from None
        return self._groups(stream, max_group_bytes)

    @staticmethod
    async def _groups(stream: api.FetchStream, cap: int | None) -> AsyncIterator[Group]:
        """One Group per fetched group (as ``FetchStream.groups``). A group is held whole until
        the next one starts, so one over ``cap`` payload bytes (a group the cache could never
        take) cancels the FETCH instead of growing without bound."""
        objs: list[MoqtObject] = []
        gid: int | None = None
        size = 0
        try:
            async for obj in stream:
                if gid is not None and obj.group != gid:
                    if objs:
                        yield Group.pack(gid, objs)
                    objs, size = [], 0
                gid = obj.group
                if obj.status in (ObjectStatus.END_OF_GROUP, ObjectStatus.END_OF_TRACK):
                    continue
                objs.append(obj)
                size += obj.size
                if cap is not None and size > cap:
                    await stream.cancel()
                    raise RelayError(0x0, f"upstream group {gid} is over {cap} bytes")
            if gid is not None and objs:
                yield Group.pack(gid, objs)
        except api.MoqtApiError as exc:
            raise RelayError(0x0, f"upstream fetch failed: {exc.reason or exc!r}") from None


@dataclass
class _Peer:
    conn: api.MoqtConnection
    stack: contextlib.AsyncExitStack
    keepalive: asyncio.Task[None]


class PeerPool:
    """One reused MoQT session per peer relay address."""

    def __init__(
        self,
        *,
        transport: TransportConfig,
        token: Any = None,
        keepalive_s: float = 1.0,
        connect_timeout_s: float = 5.0,
    ) -> None:
        self._transport = transport
        self._token = token
        self._keepalive_s = keepalive_s
        self._timeout = connect_timeout_s
        self.attempts = 2
        """Handshake attempts per connect (a lost Initial under load costs one timeout)."""
        self._peers: dict[tuple[str, int], _Peer] = {}
        self._locks: dict[tuple[str, int], asyncio.Lock] = {}
        self.connects = 0

    async def upstream(self, info: NodeInfo) -> SessionUpstream:
        """The (possibly new) session to ``info``'s relay, as an Upstream."""
        key = (info.host, info.port)
        async with self._locks.setdefault(key, asyncio.Lock()):
            peer = self._peers.get(key)
            if peer is None or peer.conn.closed:
                if peer is not None:
                    await self._drop(key)
                peer = await self._open(info)
                self._peers[key] = peer
        return SessionUpstream(peer.conn, self._token)

    async def _open(self, info: NodeInfo) -> _Peer:
        for attempt in range(self.attempts):
            try:
                return await self._open_once(info)
            except (TimeoutError, ConnectionError):
                if attempt + 1 == self.attempts:
                    raise
        raise AssertionError("unreachable")

    async def _open_once(self, info: NodeInfo) -> _Peer:
        stack = contextlib.AsyncExitStack()
        tokens = () if self._token is None else (use_value(self._token()),)
        host = f"[{info.host}]" if ":" in info.host else info.host
        try:
            conn = await stack.enter_async_context(
                api.connect(
                    f"moqt://{host}:{info.port}",
                    transport=self._transport,
                    session_config=SessionConfig(auth_tokens=tokens),
                    timeout=self._timeout,
                )
            )
        except BaseException:
            await stack.aclose()
            raise
        self.connects += 1
        return _Peer(conn, stack, asyncio.create_task(self._keepalive(conn)))

    async def _keepalive(self, conn: api.MoqtConnection) -> None:
        uid = 0
        while not conn.closed:
            await asyncio.sleep(self._keepalive_s)
            uid += 1
            with contextlib.suppress(Exception):
                conn.protocol.quic.send_ping(uid)
                conn.protocol.transmit()

    async def _drop(self, key: tuple[str, int]) -> None:
        peer = self._peers.pop(key, None)
        if peer is not None:
            peer.keepalive.cancel()
            with contextlib.suppress(Exception):
                await peer.stack.aclose()

    def sessions(self) -> list[api.MoqtConnection]:
        """The pooled sessions (for counters and tests)."""
        return [p.conn for p in self._peers.values()]

    async def close(self) -> None:
        """Close every peer session."""
        for key in list(self._peers):
            await self._drop(key)
