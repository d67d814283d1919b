"""The relay's client side of MoQT: cluster trust material, sessions to peer relays, and
:class:`SessionUpstream`, the :class:`~.events.Upstream` over one MoQT session.

:class:`ClusterSecurity`: relays share a cluster CA (a leaf certificate per relay host via
``ray_kvmoq.moqt.certs``; clients verify peers against the CA, never ``verify_peer=False``) and
HMAC token keys; a relay presents a short-lived cluster token in CLIENT_SETUP and in every
request, so a long-lived session never outlives its token's authority.

:class:`PeerPool` keeps one session per peer address, reused by every track, with keep-alive
PINGs so a dead peer is noticed within the QUIC idle timeout (and every subscription on it
fails with :class:`~.events.RelayError` instead of hanging).

Our relays end each group with an END_OF_GROUP status object (see ``network.py``);
:class:`SessionUpstream` turns those into :class:`~.events.GroupEnded` and END_OF_TRACK into
:class:`~.events.TrackEnded`, so the cache stores exactly what the publisher published.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import os
import secrets
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any, cast

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

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
    TokenAliasType,
)

from .auth import TokenSigner, TokenVerifier
from .cache import CachedObject
from .directory import NodeInfo
from .relay import (
    GroupEnded,
    ObjectReceived,
    RelayError,
    TrackEnded,
    TrackEvent,
)

__all__ = [
    "CLUSTER_TENANT",
    "IMPLEMENTATION",
    "ClusterSecurity",
    "PeerPool",
    "SessionUpstream",
    "object_to_cache",
    "object_to_wire",
    "token_value",
    "use_value",
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

    @classmethod
    def from_secret(cls, secret: bytes, *, token_ttl_s: float = 600.0) -> ClusterSecurity:
        """The same trust material on every node from one shared secret (no driver step).

        The CA key and the token key are derived with HKDF-SHA256; CA certificates made on two
        nodes differ only in their (randomised) ECDSA signature, so a leaf issued on one node
        verifies against the CA made on another.
        """
        if len(secret) < 16:
            raise ValueError("the cluster secret must have at least 16 bytes")
        scalar = int.from_bytes(_hkdf(secret, b"kvmoq ca key", 48), "big") % (_P256_ORDER - 1) + 1
        key = ec.derive_private_key(scalar, ec.SECP256R1())
        serial = int.from_bytes(_hkdf(secret, b"kvmoq ca serial", 16), "big") >> 1
        kid = _hkdf(secret, b"kvmoq token kid", 4).hex()
        ca = generate_ca("ray_kvmoq cluster CA", key=key, serial=serial, validity=_CA_VALIDITY)
        return cls(
            ca_cert_pem=ca.cert_pem,
            ca_key_pem=ca.key_pem,
            keys={kid: _hkdf(secret, b"kvmoq token key", 32)},
            signing_key_id=kid,
            token_ttl_s=token_ttl_s,
        )

    @classmethod
    def from_env(cls, var: str = "KVMOQ_CLUSTER_SECRET") -> ClusterSecurity | None:
        """:meth:`from_secret` of the hex secret in ``$var`` (None when unset)."""
        value = os.environ.get(var)
        return None if not value else cls.from_secret(bytes.fromhex(value))

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


_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
# Fixed, so the CA derived from one secret is the same on every node and at every restart.
_CA_VALIDITY = (
    datetime.datetime(2024, 1, 1, tzinfo=datetime.UTC),
    datetime.datetime(2100, 1, 1, tzinfo=datetime.UTC),
)


def _hkdf(secret: bytes, label: bytes, length: int) -> bytes:
    return HKDF(algorithm=hashes.SHA256(), length=length, salt=None, info=label).derive(secret)


def use_value(token: bytes) -> AuthToken:
    """An AUTHORIZATION_TOKEN parameter carrying ``token`` by value (Token Type 0)."""
    return AuthToken(alias_type=TokenAliasType.USE_VALUE, token_type=0, value=token)


def token_value(tokens: tuple[AuthToken, ...]) -> bytes | None:
    """The first by-value token of a request or setup, if any."""
    for t in tokens:
        if t.alias_type == TokenAliasType.USE_VALUE:
            return t.value
    return None


def object_to_cache(obj: api.MoqtObject) -> CachedObject:
    """A received object as the cache keeps it (every canonical property)."""
    return CachedObject(
        object_id=obj.object_id,
        payload=obj.payload,
        status=int(obj.status),
        extensions=obj.extensions,
        priority=obj.priority,
        subgroup_id=obj.subgroup,
    )


def object_to_wire(group: int, obj: CachedObject) -> api.MoqtObject:
    """A cached object as the session writes it.

    The payload stays a view of the cached buffer (sealed groups are never written to, and a
    view keeps its buffer alive): the session's write copies it once, into aioquic's send
    buffer, instead of a ``bytes()`` copy first (4 MiB groups: a third of the sender's time).
    """
    return api.MoqtObject(
        group=group,
        object_id=obj.object_id,
        payload=cast(bytes, obj.payload),
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
                    yield ObjectReceived(group_id=obj.group, obj=object_to_cache(obj))
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
                yield obj.group, object_to_cache(obj)
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

    async def close(self) -> None:
        """Close every peer session."""
        for key in list(self._peers):
            await self._drop(key)


# ------------------------------------------------------------------------------ downstream
