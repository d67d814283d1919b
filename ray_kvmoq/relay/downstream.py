"""The relay's downstream role: the MoQT server its subscribers and peer relays connect to,
and :class:`RelayNetwork`, which runs it next to the upstream pool (``upstream.py``).

Built on :mod:`ray_kvmoq.moqt.api`. Every downstream session gets a :class:`RelayHandler`:

* SUBSCRIBE → :meth:`Relay.open_subscription` (which establishes the upstream subscription
  first), SUBSCRIBE_OK with the relay's Largest, then one subgroup stream per (group, subgroup);
  a completed group ends with an END_OF_GROUP status object and FIN, the track with
  PUBLISH_DONE(TRACK_ENDED). An upstream failure resets the open streams and sends
  PUBLISH_DONE(INTERNAL_ERROR), so a subscriber never hangs on a dead peer.
* FETCH → :meth:`Relay.fetch` (cache first, missing groups pulled upstream once), FETCH_OK
  with the resolved end, one fetch stream.
* PUBLISH_NAMESPACE → the session becomes an :class:`Upstream` for that prefix.

Upstream, :class:`~.upstream.PeerPool` keeps one session per peer relay.

Security (:class:`~.security.ClusterSecurity`): TLS with the cluster CA; the server checks
the setup token (session closed with UNAUTHORIZED / EXPIRED_AUTH_TOKEN / MALFORMED_AUTH_TOKEN
on failure) and authorises each request against its namespace with the request's own token,
falling back to the setup token (refused with the request-level code). A live subscription
lasts only as long as the token that authorised it: at its ``exp`` the open streams are reset
and PUBLISH_DONE(UNAUTHORIZED) is sent (peer relays' tokens live ``token_ttl_s``).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

from ray_kvmoq.moqt import api
from ray_kvmoq.moqt.api import MoqtObject, TransportConfig
from ray_kvmoq.moqt.codec import (
    AuthToken,
    FilterType,
    Location,
    ObjectStatus,
    PublishDoneCode,
    SubscribeErrorCode,
)

from .auth import Action, AuthError, TokenVerifier
from .cache import OBJECT_END_OF_GROUP, OBJECT_END_OF_TRACK, RelayCache
from .directory import NodeInfo
from .relay import (
    GroupEnded,
    ObjectReceived,
    Relay,
    RelayError,
    TrackSubscription,
)
from .security import ClusterSecurity, token_value
from .upstream import IMPLEMENTATION, PeerPool, SessionUpstream

__all__ = [
    "GuardedHandler",
    "NamespaceHub",
    "RelayHandler",
    "RelayNetwork",
    "serve_plain_relay",
]


def _at(group: int, obj: MoqtObject) -> MoqtObject:
    """``obj`` as an object of ``group`` (objects published one by one may not say)."""
    return obj if obj.group == group else dataclasses.replace(obj, group=group)


def _is_prefix(prefix: tuple[bytes, ...], namespace: tuple[bytes, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


class NamespaceHub:
    """Announcements between sessions: a SUBSCRIBE_NAMESPACE sees every matching namespace a
    publisher announced (now and later): as a PUBLISH_NAMESPACE on draft-14 (d14 §8 routing),
    as a NAMESPACE on the subscription's own stream on draft-16 (d16 §9.21)."""

    def __init__(self) -> None:
        self.announced: dict[tuple[bytes, ...], set[api.MoqtConnection]] = {}
        self.watchers: dict[api.MoqtConnection, set[tuple[bytes, ...]]] = {}
        self._sent: set[tuple[api.MoqtConnection, tuple[bytes, ...]]] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    def announce(self, session: api.MoqtConnection, namespace: tuple[bytes, ...]) -> None:
        """A publisher announced ``namespace``."""
        self.announced.setdefault(namespace, set()).add(session)
        for watcher, prefixes in self.watchers.items():
            if watcher is not session and any(_is_prefix(p, namespace) for p in prefixes):
                self._send(watcher, namespace)

    def withdraw(self, session: api.MoqtConnection, namespace: tuple[bytes, ...]) -> None:
        """A publisher withdrew ``namespace`` (or its session ended)."""
        pubs = self.announced.get(namespace)
        if pubs is not None:
            pubs.discard(session)
            if not pubs:
                del self.announced[namespace]

    def watch(self, session: api.MoqtConnection, prefix: tuple[bytes, ...]) -> None:
        """A session asked for announcements under ``prefix`` (SUBSCRIBE_NAMESPACE)."""
        self.watchers.setdefault(session, set()).add(prefix)
        for namespace, pubs in self.announced.items():
            if _is_prefix(prefix, namespace) and pubs - {session}:
                self._send(session, namespace)

    def forget(self, session: api.MoqtConnection) -> None:
        """The session ended."""
        self.watchers.pop(session, None)
        for namespace in [n for n, p in self.announced.items() if session in p]:
            self.withdraw(session, namespace)
        self._sent = {k for k in self._sent if k[0] is not session}

    def _send(self, session: api.MoqtConnection, namespace: tuple[bytes, ...]) -> None:
        if (session, namespace) in self._sent:
            return
        self._sent.add((session, namespace))

        async def send() -> None:
            await asyncio.sleep(0)  # after the SUBSCRIBE_NAMESPACE_OK goes out
            with contextlib.suppress(api.MoqtApiError, TimeoutError):
                await session.announce_namespace(namespace)

        task = asyncio.get_running_loop().create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class GuardedHandler(api.SessionHandler):
    """The token checks every downstream session gets: the setup token is verified (session
    closed on failure), each request is authorised against its namespace with its own token,
    falling back to the setup token."""

    def __init__(self, verifier: TokenVerifier | None) -> None:
        self.verifier = verifier
        self.setup_token: bytes | None = None
        self.group_markers = False
        """End each group with an END_OF_GROUP status object: only for peers that are ours
        (MOQT_IMPLEMENTATION ``ray_kvmoq``), whose subscriptions surface them as group ends;
        moq-dev refuses status objects after a subgroup's objects."""

    async def on_setup(self, session: api.MoqtConnection, setup: Any) -> None:
        self.setup_token = token_value(setup.auth_tokens)
        self.group_markers = (setup.implementation or b"").startswith(IMPLEMENTATION)
        if self.verifier is not None and self.setup_token is not None:
            try:
                self.verifier.verify(self.setup_token, time.time())
            except AuthError as exc:
                await session.close(exc.error_code, str(exc))
                raise api.RequestError(exc.error_code, str(exc)) from None

    def _authorize(
        self, tokens: tuple[AuthToken, ...], action: Action, ns: tuple[bytes, ...]
    ) -> float | None:
        """Check the request; returns when the token that allowed it expires (None: never)."""
        if self.verifier is None:
            return None
        token = token_value(tokens)
        try:
            claims = self.verifier.authorize(
                token if token is not None else self.setup_token, action, ns, time.time()
            )
        except AuthError as exc:
            raise api.RequestError(exc.request_code, str(exc)) from None
        return claims.exp + self.verifier.leeway_s


class RelayHandler(GuardedHandler):
    """Answers one downstream session's requests from the relay."""

    def __init__(
        self, relay: Relay, verifier: TokenVerifier | None, hub: NamespaceHub | None = None
    ) -> None:
        super().__init__(verifier)
        self.relay = relay
        self.hub = hub if hub is not None else NamespaceHub()
        self.upstream: SessionUpstream | None = None

    async def on_publish_namespace(
        self, session: api.MoqtConnection, request: api.NamespaceRequest
    ) -> None:
        self._authorize(request.auth_tokens, "publish", request.namespace)
        if self.upstream is None:
            self.upstream = SessionUpstream(session)
        self.relay.add_publisher(request.namespace, self.upstream)
        self.hub.announce(session, request.namespace)

    async def on_publish_namespace_done(
        self, session: api.MoqtConnection, namespace: tuple[bytes, ...]
    ) -> None:
        self.relay.remove_publisher(namespace, self.upstream)
        self.hub.withdraw(session, namespace)

    async def on_subscribe_namespace(
        self, session: api.MoqtConnection, request: api.NamespaceRequest
    ) -> None:
        self._authorize(request.auth_tokens, "subscribe", request.namespace)
        self.hub.watch(session, request.namespace)

    async def on_closed(self, session: api.MoqtConnection, error: api.SessionClosed) -> None:
        self.hub.forget(session)
        if self.upstream is not None:
            self.relay.drop_upstream(self.upstream)

    async def on_subscribe(
        self, session: api.MoqtConnection, request: api.SubscribeRequest
    ) -> None:
        ns, name = request.track.namespace, request.track.name
        expires = self._authorize(request.auth_tokens, "subscribe", ns)
        start_group = request.start.group if request.start is not None else 0
        try:
            sub = await self.relay.open_subscription(ns, name, start_group=start_group)
        except RelayError as exc:
            code = exc.error_code if exc.error_code in set(SubscribeErrorCode) else 0
            raise api.RequestError(code, exc.reason) from None
        try:
            largest = sub.largest
            pub = request.accept(largest=Location(*largest) if largest else None)
            floor: tuple[int, float] | None = None
            if largest is not None and request.filter_type == FilterType.LARGEST_OBJECT:
                floor = largest
            elif largest is not None and request.filter_type == FilterType.NEXT_GROUP_START:
                floor = (largest[0], float("inf"))
            await _forward(session, sub, pub, floor, self.group_markers, expires)
        finally:
            sub.close()

    async def on_fetch(self, session: api.MoqtConnection, request: api.FetchRequest) -> None:
        ns, name = request.track.namespace, request.track.name
        self._authorize(request.auth_tokens, "subscribe", ns)
        if request.start is None or request.end is None:
            raise api.RequestError(0x3, "joining FETCH of an unknown subscription")
        start, end = request.start, request.end
        try:
            objs = await self.relay.fetch(
                ns, name, (start.group, start.object), (end.group, end.object)
            )
        except RelayError as exc:
            raise api.RequestError(exc.error_code, exc.reason) from None
        last_g, last_o = objs[-1][0], objs[-1][1].object_id
        _, eot = self.relay.cache.track_info(ns, name)
        end_loc = (
            Location(end.group, 0)
            if end.object == 0 and last_g == end.group
            else Location(last_g, last_o + 1)
        )
        writer = request.accept(end=end_loc, end_of_track=eot is not None and last_g >= eot[0])
        for gid, obj in objs:
            writer.write(_at(gid, obj))
            if session.protocol.send_buffered() > session.send_buffer:
                await writer.drain()
        writer.end()


class _Forwarder:
    """Writes one downstream subscription: a subgroup stream per (group, subgroup)."""

    def __init__(
        self,
        session: api.MoqtConnection,
        pub: api.Publication,
        floor: tuple[int, float] | None,
        markers: bool,
    ) -> None:
        self.session, self.pub, self.floor, self.markers = session, pub, floor, markers
        self.writers: dict[tuple[int, int], api.GroupWriter] = {}
        self.last: dict[tuple[int, int], MoqtObject] = {}

    async def object(self, g: int, obj: MoqtObject) -> bool:
        """Write one object; False once the subscription's range is over."""
        if (self.floor is not None and (g, obj.object_id) <= self.floor) or not self.pub.wants(g):
            return not self.pub.past_end(g)
        key = (g, obj.subgroup_id)
        w = self.writers.get(key)
        if w is None:
            w = self.writers[key] = self.pub.open_group(
                g, subgroup=obj.subgroup_id, priority=obj.priority, with_extensions=True
            )
        w.write(_at(g, obj))
        self.last[key] = obj
        if self.session.protocol.send_buffered() > self.session.send_buffer:
            await self.pub.drain()
        return True

    def group_ended(self, group_id: int) -> None:
        """FIN the group's streams (after an END_OF_GROUP marker for our own peers)."""
        for key in [k for k in self.writers if k[0] == group_id]:
            w, obj = self.writers.pop(key), self.last.pop(key)
            if self.markers and obj.status not in (OBJECT_END_OF_GROUP, OBJECT_END_OF_TRACK):
                marker = api.MoqtObject(
                    group=key[0],
                    object_id=obj.object_id + 1,
                    subgroup=key[1],
                    priority=obj.priority,
                    status=ObjectStatus.END_OF_GROUP,
                )
                w.write(marker)
            w.end()

    async def track_ended(self) -> None:
        """FIN what is open, then PUBLISH_DONE(TRACK_ENDED)."""
        for w in self.writers.values():
            w.end()
        self.writers.clear()
        await self.pub.done(PublishDoneCode.TRACK_ENDED)

    async def failed(self, exc: RelayError) -> None:
        """Reset what is open, then PUBLISH_DONE(INTERNAL_ERROR): the subscriber must not hang."""
        self.reset(0x0)
        with contextlib.suppress(api.MoqtApiError):
            await self.pub.done(PublishDoneCode.INTERNAL_ERROR, exc.reason[:200])

    async def expired(self) -> None:
        """The token that authorised the subscription expired: reset what is open, then
        PUBLISH_DONE(UNAUTHORIZED)."""
        self.reset(0x0)
        with contextlib.suppress(api.MoqtApiError):
            await self.pub.done(PublishDoneCode.UNAUTHORIZED, "authorization token expired")

    def reset(self, code: int) -> None:
        """Abandon every open stream."""
        for w in self.writers.values():
            with contextlib.suppress(api.MoqtApiError):
                w.reset(code)
        self.writers.clear()


async def _forward(
    session: api.MoqtConnection,
    sub: TrackSubscription,
    pub: api.Publication,
    floor: tuple[int, float] | None,
    markers: bool,
    expires: float | None = None,
) -> None:
    """Forward ``sub`` to ``pub`` until the track ends, the subscriber leaves, or ``expires``
    (wall clock: the authorising token's ``exp``) passes; then PUBLISH_DONE(UNAUTHORIZED)."""
    fw = _Forwarder(session, pub, floor, markers)
    deadline = asyncio.timeout(None if expires is None else max(0.0, expires - time.time()))
    try:
        async with deadline:
            async for ev in sub:
                if pub.cancelled:
                    break
                if isinstance(ev, ObjectReceived):
                    if not await fw.object(ev.group_id, ev.obj):
                        break
                elif isinstance(ev, GroupEnded):
                    fw.group_ended(ev.group_id)
                else:
                    await fw.track_ended()
                    return
    except TimeoutError:
        if not deadline.expired():
            raise
        await fw.expired()
    except RelayError as exc:
        await fw.failed(exc)
    except (api.Cancelled, api.SessionClosed):
        return
    finally:
        fw.reset(0x1)


# ------------------------------------------------------------------------------ the network


class RelayNetwork:
    """A relay's MoQT server plus its peer pool (what ``RelayActor`` and ``kvmoq relay`` run)."""

    def __init__(
        self,
        *,
        node_id: str = "relay",
        host: str = "127.0.0.1",
        port: int = 0,
        security: ClusterSecurity | None = None,
        verifier: TokenVerifier | None = None,
        certfile: str | None = None,
        keyfile: str | None = None,
        idle_timeout_s: float = 3.0,
        transport_options: dict[str, Any] | None = None,
    ) -> None:
        self.node_id = node_id
        self.host = host
        self.port = port
        self.security = security
        self.verifier = (
            verifier if verifier is not None else (security.verifier() if security else None)
        )
        opts = {"idle_timeout": idle_timeout_s, **(transport_options or {})}
        if security is not None:
            leaf = security.leaf_for(host)
            self._server_tc = TransportConfig(cert_pem=leaf.cert_pem, key_pem=leaf.key_pem, **opts)
            client_tc = TransportConfig(cadata=security.ca_cert_pem, server_name=None, **opts)
            sec = security
            token: Any = lambda: sec.peer_token(time.time())  # noqa: E731
        else:
            if certfile is None:
                from ray_kvmoq.moqt.api import self_signed

                leaf = self_signed((host, "localhost"))
                self._server_tc = TransportConfig(
                    cert_pem=leaf.cert_pem, key_pem=leaf.key_pem, **opts
                )
            else:
                self._server_tc = TransportConfig(certfile=certfile, keyfile=keyfile, **opts)
            client_tc = TransportConfig(verify_peer=False, **opts)
            token = None
        self.pool = PeerPool(transport=client_tc, token=token)
        self.hub = NamespaceHub()
        self._server: api.MoqtServer | None = None

    async def start(self, relay: Relay) -> int:
        """Listen with a :class:`RelayHandler` per session; returns the bound UDP port."""
        verifier, hub = self.verifier, self.hub
        return await self.serve(lambda: RelayHandler(relay, verifier, hub))

    async def serve(self, handler_factory: Callable[[], api.SessionHandler]) -> int:
        """Listen with ``handler_factory()`` per session; returns the bound UDP port."""
        self._server = await api.serve(
            self.host, self.port, transport=self._server_tc, handler_factory=handler_factory
        )
        self.port = self._server.port
        return self.port

    async def connect(self, info: NodeInfo) -> SessionUpstream:
        """An Upstream to a peer relay (pooled session)."""
        return await self.pool.upstream(info)

    async def close(self) -> None:
        """Stop listening and close every session."""
        await self.pool.close()
        if self._server is not None:
            for conn in list(self._server.sessions):
                with contextlib.suppress(Exception):
                    await conn.close()
            self._server.close()


@contextlib.asynccontextmanager
async def serve_plain_relay(
    host: str,
    port: int,
    *,
    budget_bytes: int = 256 << 20,
    certfile: str | None = None,
    keyfile: str | None = None,
    verifier: TokenVerifier | None = None,
    transport_options: dict[str, Any] | None = None,
) -> AsyncIterator[tuple[Relay, int]]:
    """A standalone relay (no Ray, no directory): yields (relay, bound port).

    ``transport_options``: :class:`~ray_kvmoq.moqt.api.TransportConfig` fields, e.g.
    ``{"max_datagram_size": 9000, "pacing": False}`` on a jumbo-frame LAN.
    """
    net = RelayNetwork(
        host=host,
        port=port,
        verifier=verifier,
        certfile=certfile,
        keyfile=keyfile,
        idle_timeout_s=30.0,
        transport_options=transport_options,
    )
    relay = Relay(node_id="plain", cache=RelayCache(budget_bytes))
    bound = await net.start(relay)
    try:
        yield relay, bound
    finally:
        await net.close()
        await relay.close()
