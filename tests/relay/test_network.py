"""The relay over real MoQT sessions on loopback (no Ray): routing to an announcing publisher,
live fan-out with one upstream subscription, FETCH from cache, tokens."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

from ray_kvmoq.moqt import api
from ray_kvmoq.moqt.api import MemoryTrack, SessionConfig, TrackServer, TransportConfig
from ray_kvmoq.moqt.codec import (
    DRAFT_16,
    AuthToken,
    FilterType,
    Location,
    ObjectStatus,
    TokenAliasType,
)
from ray_kvmoq.relay.auth import TokenSigner, TokenVerifier
from ray_kvmoq.relay.downstream import serve_plain_relay

NS = (b"kv", b"tenant-a", b"p1")
TR = b"FP16"
CLIENT = TransportConfig(verify_peer=False)


def payload(g: int, o: int, size: int = 3000) -> bytes:
    return bytes([(g * 31 + o) % 251]) * size


def token_param(tok: bytes) -> tuple[AuthToken, ...]:
    return (AuthToken(alias_type=TokenAliasType.USE_VALUE, token_type=0, value=tok),)


@asynccontextmanager
async def client(
    port: int, token: bytes | None = None, handler: Any = None
) -> AsyncIterator[api.MoqtConnection]:
    cfg = SessionConfig(auth_tokens=token_param(token) if token else ())
    async with api.connect(
        f"moqt://127.0.0.1:{port}", transport=CLIENT, session_config=cfg, handler=handler, timeout=5
    ) as conn:
        yield conn


async def read_track(sub: api.Subscription) -> list[api.MoqtObject]:
    return [o async for o in sub]


async def test_publisher_relay_subscribers_live_fanout_and_fetch() -> None:
    async with serve_plain_relay("127.0.0.1", 0) as (relay, port):
        track = MemoryTrack()
        server = TrackServer({api.FullTrackName(NS, TR): track})
        async with client(port, handler=server) as pub_conn:
            await pub_conn.publish_namespace(NS[:2])
            await track.publish_group(0, [payload(0, o) for o in range(3)])
            async with client(port) as s1, client(port) as s2:
                subs = [
                    await c.subscribe(
                        NS, TR, filter_type=FilterType.ABSOLUTE_START, start=Location(0, 0)
                    )
                    for c in (s1, s2)
                ]
                reads = [asyncio.create_task(read_track(s)) for s in subs]
                await track.wait_subscribers(1, timeout=5)
                for g in range(1, 4):
                    await track.publish_group(g, [payload(g, o) for o in range(3)])
                await track.finish()
                got = await asyncio.wait_for(asyncio.gather(*reads), 10)
            for objs in got:
                # streams of different groups interleave: compare in (group, object) order
                normal = sorted(
                    (o.group, o.object_id, o.payload)
                    for o in objs
                    if o.status == ObjectStatus.NORMAL
                )
                assert normal == [(g, o, payload(g, o)) for g in range(1, 4) for o in range(3)]
            assert track.subscriber_count == 0
            st = relay.stats()
            assert st["upstream_subscriptions"] == 1
            async with client(port) as f:
                stream = await f.fetch(NS, TR, start=Location(1, 1), end=Location(2, 0))
                fetched = [(o.group, o.object_id, o.payload) async for o in stream]
            assert fetched == [(1, 1, payload(1, 1)), (1, 2, payload(1, 2))] + [
                (2, o, payload(2, o)) for o in range(3)
            ]


async def test_unknown_track_is_refused() -> None:
    async with serve_plain_relay("127.0.0.1", 0) as (_, port), client(port) as c:
        with pytest.raises(api.RequestError) as ei:
            await c.subscribe((b"nonexistent", b"namespace"), b"test-track")
        assert ei.value.error_code == 0x4


async def test_tokens_scope_tenants_and_expire() -> None:
    key = b"s" * 32
    signer = TokenSigner("k1", key)
    now = time.time()
    good_a = signer.issue(
        "a", publish=[["kv", "tenant-a"]], subscribe=[["kv", "tenant-a"]], now=now
    )
    good_b = signer.issue("b", subscribe=[["kv", "tenant-b"]], now=now)
    expired = signer.issue("a", subscribe=[["kv"]], now=now - 7200, ttl_s=60)
    wrong_key = TokenSigner("k1", b"x" * 32).issue("a", subscribe=[["kv"]], now=now)
    async with serve_plain_relay("127.0.0.1", 0, verifier=TokenVerifier({"k1": key})) as (_, port):
        track = MemoryTrack()
        async with client(port, good_a, TrackServer({api.FullTrackName(NS, TR): track})) as p:
            await p.publish_namespace(NS[:2])
            await track.publish_group(0, [b"secret"])
            async with client(port, good_b) as b:
                with pytest.raises(api.RequestError) as ei:
                    await b.subscribe(NS, TR)
                assert ei.value.error_code == 0x1  # UNAUTHORIZED: another tenant's namespace
                with pytest.raises(api.RequestError) as ei:
                    await b.fetch(NS, TR, start=Location(0, 0), end=Location(1, 0))
                assert ei.value.error_code == 0x1
                with pytest.raises(api.RequestError) as ei:
                    await b.subscribe(NS, TR, auth_tokens=token_param(expired))
                assert ei.value.error_code == 0x12  # EXPIRED_AUTH_TOKEN (request level)
            async with client(port) as anon:
                with pytest.raises(api.RequestError) as ei:
                    await anon.subscribe(NS, TR, auth_tokens=token_param(b"garbage"))
                assert ei.value.error_code == 0x10  # MALFORMED_AUTH_TOKEN
                with pytest.raises(api.RequestError) as ei:
                    await anon.subscribe(NS, TR)  # no token at all
                assert ei.value.error_code == 0x1
                with pytest.raises(api.RequestError) as ei:
                    await anon.publish_namespace((b"kv", b"tenant-a"))
                assert ei.value.error_code == 0x1
            for bad, code in ((expired, 0x18), (wrong_key, 0x2), (b"junk", 0x16)):
                async with client(port, bad) as c:
                    closed = await asyncio.wait_for(c.wait_closed(), 5)
                assert closed.error_code == code
            async with client(port, good_a) as a2:  # the owner reads it (pulled by FETCH)
                stream = await a2.fetch(NS, TR, start=Location(0, 0), end=Location(0, 0))
                assert [o.payload async for o in stream] == [b"secret"]


async def test_relays_sharing_a_secret_trust_each_other_and_strangers_do_not() -> None:
    from ray_kvmoq.relay.cache import CachedObject, RelayCache
    from ray_kvmoq.relay.directory import NodeInfo
    from ray_kvmoq.relay.downstream import RelayNetwork
    from ray_kvmoq.relay.events import LocalDirectoryClient, RelayError
    from ray_kvmoq.relay.relay import Relay
    from ray_kvmoq.relay.security import ClusterSecurity

    secret = b"cluster secret!!" * 2
    d = LocalDirectoryClient()
    na = RelayNetwork(node_id="A", security=ClusterSecurity.from_secret(secret))
    a = Relay(node_id="A", cache=RelayCache(1 << 20), directory=d, connect=na.connect)
    await d.register_node(NodeInfo(node_id="A", host="127.0.0.1", port=await na.start(a)))
    await a.publish_group(NS, TR, 0, [CachedObject(object_id=0, payload=b"kv")])
    await a.flush_directory()
    nets = []
    try:
        for sec, ok in (
            (ClusterSecurity.from_secret(secret), True),
            (ClusterSecurity.generate(), False),
        ):
            nb = RelayNetwork(node_id="B", security=sec, idle_timeout_s=2.0)
            nets.append(nb)
            b = Relay(node_id="B", cache=RelayCache(1 << 20), directory=d, connect=nb.connect)
            nb.pool.attempts = 1
            if ok:  # same secret: B verifies A's leaf against its own copy of the CA
                got = await asyncio.wait_for(b.get_group(NS, TR, 0), 10)
                assert [bytes(o.payload) for o in got] == [b"kv"]
                # Both relays offer moqt-16 before moq-00: they speak draft-16.
                assert {p.conn.session.version for p in nb.pool._peers.values()} == {DRAFT_16}
            else:  # another cluster's CA: the TLS handshake fails, nothing is served
                with pytest.raises(RelayError):
                    await asyncio.wait_for(b.get_group(NS, TR, 0), 20)
    finally:
        for n in [na, *nets]:
            await n.close()
    with pytest.raises(ValueError):
        ClusterSecurity.from_secret(b"short")


@pytest.mark.parametrize(
    ("options", "largest"), [(None, 1452), ({"max_datagram_size": 9000}, 9000)]
)
async def test_plain_relay_transport_options_set_its_datagram_size(
    options: dict[str, Any] | None, largest: int
) -> None:
    from ray_kvmoq.relay.cache import CachedObject

    big = TransportConfig(verify_peer=False, max_datagram_size=60000)
    async with serve_plain_relay("127.0.0.1", 0, transport_options=options) as (relay, port):
        await relay.publish_group(NS, TR, 0, [CachedObject(object_id=0, payload=b"d" * 300_000)])
        async with api.connect(f"moqt://127.0.0.1:{port}", transport=big, timeout=5) as c:
            quic = c.protocol.quic
            sizes: list[int] = []
            receive = quic.receive_datagram

            def spy(data: bytes, addr: Any, now: float) -> None:
                sizes.append(len(data))
                receive(data, addr, now)

            quic.receive_datagram = spy  # type: ignore[method-assign]
            stream = await c.fetch(NS, TR, start=Location(0, 0), end=Location(0, 0))
            got = [o.payload async for o in stream]
    assert got == [b"d" * 300_000]
    assert max(sizes) == largest


async def test_groups_from_a_publisher_without_end_markers_seal_as_their_streams_end() -> None:
    async with serve_plain_relay("127.0.0.1", 0) as (relay, port):
        track = MemoryTrack()
        server = TrackServer({api.FullTrackName(NS, TR): track})
        async with client(port, handler=server) as pub_conn, client(port) as sub_conn:
            await pub_conn.publish_namespace(NS[:2])
            sub = await sub_conn.subscribe(NS, TR)
            await track.wait_subscribers(1, timeout=5)
            for g in range(2):
                await track.publish_group(g, [payload(g, o) for o in range(3)])
            deadline = time.monotonic() + 10
            while relay.lookup(NS, TR)["sealed"] != [0, 1]:  # the track has not ended
                assert time.monotonic() < deadline, relay.lookup(NS, TR)
                await asyncio.sleep(0.02)
            await sub.unsubscribe()
