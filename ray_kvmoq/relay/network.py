"""The relay's MoQT side: a server for downstream sessions and a pool of sessions to peers.

Built on :mod:`ray_kvmoq.moqt.api`. Downstream, every session gets a :class:`RelayHandler`:

* SUBSCRIBE → :meth:`Relay.open_subscription` (which establishes the upstream subscription
  first), SUBSCRIBE_OK with the relay's Largest, then one subgroup stream per (group, subgroup);
  a completed group ends with an END_OF_GROUP status object and FIN, the track with
  PUBLISH_DONE(TRACK_ENDED). An upstream failure resets the open streams and sends
  PUBLISH_DONE(INTERNAL_ERROR), so a subscriber never hangs on a dead peer.
* FETCH → :meth:`Relay.fetch` (cache first, missing groups pulled upstream once), FETCH_OK
  with the resolved end, one fetch stream.
* PUBLISH_NAMESPACE → the session becomes an :class:`Upstream` for that prefix.

Upstream, :class:`PeerPool` keeps one session per peer relay (reused, keep-alive PINGs so a
dead peer is noticed within the QUIC idle timeout) and wraps it as a :class:`SessionUpstream`.

Security (:class:`ClusterSecurity`): relays share a cluster CA (leaf certificates per host via
``ray_kvmoq.moqt.certs``; clients verify peers against the CA) and HMAC token keys. A relay
presents a short-lived cluster token in CLIENT_SETUP and in every request; the server checks
the setup token (session closed with UNAUTHORIZED / EXPIRED_AUTH_TOKEN / MALFORMED_AUTH_TOKEN
on failure) and authorises each request against its namespace with the request's own token,
falling back to the setup token (refused with the request-level code).
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from ray_kvmoq.moqt import api
from ray_kvmoq.moqt.aio import TransportConfig
from ray_kvmoq.moqt.certs import (
    CertificateAuthority,
    LeafCertificate,
    generate_ca,
    issue_certificate,
)
from ray_kvmoq.moqt.messages import AuthToken, Location
from ray_kvmoq.moqt.session_core import SessionConfig
from ray_kvmoq.moqt.types import (
    FilterType,
    ObjectStatus,
    PublishDoneCode,
    SubscribeErrorCode,
    TokenAliasType,
)

from .auth import Action, AuthError, TokenSigner, TokenVerifier
from .cache import OBJECT_END_OF_GROUP, OBJECT_END_OF_TRACK, CachedObject, RelayCache
from .directory import NodeInfo
from .relay import (
    GroupEnded,
    ObjectReceived,
    Relay,
    RelayError,
    TrackEnded,
    TrackEvent,
    TrackSubscription,
)

__all__ = [
    "ClusterSecurity",
    "NamespaceHub",
    "PeerPool",
    "RelayHandler",
    "RelayNetwork",
    "SessionUpstream",
    "serve_plain_relay",
]

IMPLEMENTATION = b"ray_kvmoq"
"""MOQT_IMPLEMENTATION prefix of our own endpoints (``SessionConfig.implementation``)."""

CLUSTER_TENANT = "kvmoq-cluster"
"""Tenant name of relay-to-relay tokens (subscribe to everything, publish nothing)."""


@dataclass(frozen=True, kw_only=True)
class ClusterSecurity:
    """One cluster's trust material, made by the driver and handed to every relay."""

    ca_cert_pem: bytes
    """The cluster CA certificate (every relay verifies peers against it)."""
    ca_key_pem: bytes
    """The CA key; relays issue their own leaf for their node's address."""
    keys: dict[str, bytes]
    """HMAC token keys by key id (all accepted)."""
    signing_key_id: str
    """Key id relays sign their peer tokens with."""
    token_ttl_s: float = 600.0
    """Lifetime of a relay's peer token."""

    @classmethod
    def generate(cls) -> ClusterSecurity:
        """Fresh CA and one random 32-byte token key."""
        ca = generate_ca("ray_kvmoq cluster CA")
        kid = secrets.token_hex(4)
        return cls(
            ca_cert_pem=ca.cert_pem,
            ca_key_pem=ca.key_pem,
            keys={kid: secrets.token_bytes(32)},
            signing_key_id=kid,
        )

    def leaf_for(self, host: str) -> LeafCertificate:
        """A certificate for a relay listening on ``host``."""
        ca = CertificateAuthority(cert_pem=self.ca_cert_pem, key_pem=self.ca_key_pem)
        return issue_certificate(ca, (host, "localhost"))

    def verifier(self) -> TokenVerifier:
        """Verifier accepting every cluster key."""
        return TokenVerifier(self.keys)

    def signer(self) -> TokenSigner:
        """Signer with the cluster's signing key (issue tenant tokens with it)."""
        return TokenSigner(self.signing_key_id, self.keys[self.signing_key_id])

    def peer_token(self, now: float) -> bytes:
        """A relay-to-relay token: may subscribe to any namespace."""
        return self.signer().issue(CLUSTER_TENANT, subscribe=[[]], now=now, ttl_s=self.token_ttl_s)


def _use_value(token: bytes) -> AuthToken:
    return AuthToken(alias_type=TokenAliasType.USE_VALUE, token_type=0, value=token)


def _token_value(tokens: tuple[AuthToken, ...]) -> bytes | None:
    for t in tokens:
        if t.alias_type == TokenAliasType.USE_VALUE:
            return t.value
    return None


def _to_cached(obj: api.MoqtObject) -> CachedObject:
    return CachedObject(
        object_id=obj.object_id,
        payload=obj.payload,
        status=int(obj.status),
        extensions=obj.extensions,
        priority=obj.priority,
        subgroup_id=obj.subgroup,
    )


def _to_wire(group: int, obj: CachedObject) -> api.MoqtObject:
    return api.MoqtObject(
        group=group,
        object_id=obj.object_id,
        payload=bytes(obj.payload),
        subgroup=obj.subgroup_id,
        priority=obj.priority,
        extensions=obj.extensions,
        status=ObjectStatus(obj.status),
    )


# ------------------------------------------------------------------------------ upstream


class SessionUpstream:
    """An :class:`~.relay.Upstream` over one MoQT session (a peer relay, or a publisher that
    announced a namespace to us). ``token`` (a callable returning bytes) rides every request."""

    def __init__(self, conn: api.MoqtConnection, token: Any = None) -> None:
        self.conn = conn
        self._token = token

    def _auth(self) -> tuple[AuthToken, ...]:
        return () if self._token is None else (_use_value(self._token()),)

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
            )
        except api.MoqtApiError as exc:
            raise RelayError(exc.error_code, f"upstream refused SUBSCRIBE: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise RelayError(0x2, f"upstream SUBSCRIBE failed: {exc!r}") from None
        return self._events(sub)

    async def _events(self, sub: api.Subscription) -> AsyncIterator[TrackEvent]:
        try:
            async for obj in sub:
                if obj.status == ObjectStatus.END_OF_GROUP:
                    yield GroupEnded(group_id=obj.group)
                elif obj.status == ObjectStatus.END_OF_TRACK:
                    yield TrackEnded()
                    return
                else:
                    yield ObjectReceived(group_id=obj.group, obj=_to_cached(obj))
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

    async def fetch(
        self,
        namespace: tuple[bytes, ...],
        track: bytes,
        start: tuple[int, int],
        end: tuple[int, int],
    ) -> AsyncIterator[tuple[int, CachedObject]]:
        try:
            stream = await self.conn.fetch(
                namespace,
                track,
                start=Location(*start),
                end=Location(*end),
                auth_tokens=self._auth(),
            )
        except api.MoqtApiError as exc:
            raise RelayError(exc.error_code, f"upstream refused FETCH: {exc.reason}") from None
        except (TimeoutError, ConnectionError) as exc:
            raise RelayError(0x2, f"upstream FETCH failed: {exc!r}") from None
        return self._objects(stream)

    @staticmethod
    async def _objects(stream: api.FetchStream) -> AsyncIterator[tuple[int, CachedObject]]:
        try:
            async for obj in stream:
                if obj.status in (ObjectStatus.END_OF_GROUP, ObjectStatus.END_OF_TRACK):
                    continue
                yield obj.group, _to_cached(obj)
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
        tokens = () if self._token is None else (_use_value(self._token()),)
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

    async def close(self) -> None:
        """Close every peer session."""
        for key in list(self._peers):
            await self._drop(key)


# ------------------------------------------------------------------------------ downstream


def _is_prefix(prefix: tuple[bytes, ...], namespace: tuple[bytes, ...]) -> bool:
    return namespace[: len(prefix)] == prefix


class NamespaceHub:
    """Announcements between sessions: a SUBSCRIBE_NAMESPACE sees every matching namespace a
    publisher announced (now and later) as a PUBLISH_NAMESPACE (draft-14 §8 routing)."""

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
                await session.publish_namespace(namespace)

        task = asyncio.get_running_loop().create_task(send())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class RelayHandler(api.SessionHandler):
    """Answers one downstream session's requests from the relay."""

    def __init__(
        self, relay: Relay, verifier: TokenVerifier | None, hub: NamespaceHub | None = None
    ) -> None:
        self.relay = relay
        self.verifier = verifier
        self.hub = hub if hub is not None else NamespaceHub()
        self.setup_token: bytes | None = None
        self.upstream: SessionUpstream | None = None
        self.group_markers = False
        """End each group with an END_OF_GROUP status object: only for peers that are ours
        (MOQT_IMPLEMENTATION ``ray_kvmoq``), whose subscriptions surface them as group ends;
        moq-dev refuses status objects after a subgroup's objects."""

    async def on_setup(self, session: api.MoqtConnection, setup: Any) -> None:
        self.setup_token = _token_value(setup.auth_tokens)
        self.group_markers = (setup.implementation or b"").startswith(IMPLEMENTATION)
        if self.verifier is not None and self.setup_token is not None:
            try:
                self.verifier.verify(self.setup_token, time.time())
            except AuthError as exc:
                await session.close(exc.error_code, str(exc))
                raise api.RequestError(exc.error_code, str(exc)) from None

    def _authorize(
        self, tokens: tuple[AuthToken, ...], action: Action, ns: tuple[bytes, ...]
    ) -> None:
        if self.verifier is None:
            return
        token = _token_value(tokens)
        try:
            self.verifier.authorize(
                token if token is not None else self.setup_token, action, ns, time.time()
            )
        except AuthError as exc:
            raise api.RequestError(exc.request_code, str(exc)) from None

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
        self._authorize(request.auth_tokens, "subscribe", ns)
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
            await _forward(session, sub, pub, floor, self.group_markers)
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
            writer.write(_to_wire(gid, obj))
            if session.protocol.send_buffered() > session.send_buffer:
                await writer.drain()
        writer.end()


async def _forward(
    session: api.MoqtConnection,
    sub: TrackSubscription,
    pub: api.Publication,
    floor: tuple[int, float] | None,
    markers: bool,
) -> None:
    writers: dict[tuple[int, int], api.GroupWriter] = {}
    last: dict[tuple[int, int], CachedObject] = {}
    try:
        async for ev in sub:
            if pub.cancelled:
                break
            if isinstance(ev, ObjectReceived):
                g, obj = ev.group_id, ev.obj
                if (floor is not None and (g, obj.object_id) <= floor) or not pub.wants(g):
                    if pub.past_end(g):
                        break
                    continue
                key = (g, obj.subgroup_id)
                w = writers.get(key)
                if w is None:
                    w = writers[key] = pub.open_group(
                        g, subgroup=obj.subgroup_id, priority=obj.priority, with_extensions=True
                    )
                w.write(_to_wire(g, obj))
                last[key] = obj
                if session.protocol.send_buffered() > session.send_buffer:
                    await pub.drain()
            elif isinstance(ev, GroupEnded):
                for key in [k for k in writers if k[0] == ev.group_id]:
                    w, obj = writers.pop(key), last.pop(key)
                    if markers and obj.status not in (OBJECT_END_OF_GROUP, OBJECT_END_OF_TRACK):
                        w.write(
                            api.MoqtObject(
                                group=key[0],
                                object_id=obj.object_id + 1,
                                subgroup=key[1],
                                priority=obj.priority,
                                status=ObjectStatus.END_OF_GROUP,
                            )
                        )
                    w.end()
            else:
                for w in writers.values():
                    w.end()
                writers.clear()
                await pub.done(PublishDoneCode.TRACK_ENDED)
                return
    except RelayError as exc:
        for w in writers.values():
            with contextlib.suppress(api.MoqtApiError):
                w.reset(0x0)
        writers.clear()
        with contextlib.suppress(api.MoqtApiError):
            await pub.done(PublishDoneCode.INTERNAL_ERROR, exc.reason[:200])
    except (api.Cancelled, api.SessionClosed):
        return
    finally:
        for w in writers.values():
            with contextlib.suppress(api.MoqtApiError):
                w.reset(0x1)


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
        idle_timeout_s: float = 5.0,
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
                from ray_kvmoq.moqt.certs import self_signed

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
        """Listen; returns the bound UDP port."""
        verifier, hub = self.verifier, self.hub
        self._server = await api.serve(
            self.host,
            self.port,
            transport=self._server_tc,
            handler_factory=lambda: RelayHandler(relay, verifier, hub),
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
) -> AsyncIterator[tuple[Relay, int]]:
    """A standalone relay (no Ray, no directory): yields (relay, bound port)."""
    net = RelayNetwork(
        host=host,
        port=port,
        verifier=verifier,
        certfile=certfile,
        keyfile=keyfile,
        idle_timeout_s=30.0,
    )
    relay = Relay(node_id="plain", cache=RelayCache(budget_bytes))
    bound = await net.start(relay)
    try:
        yield relay, bound
    finally:
        await net.close()
        await relay.close()
