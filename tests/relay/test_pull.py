"""Pipelined pulls between two relays over real MoQT sessions (no Ray): bit-exact at every
datagram size with either QUIC library, and many groups in flight per pull (the relay's and
the MoQT session's own counters, not timings)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from ray_kvmoq.moqt.api import Group
from ray_kvmoq.relay.cache import RelayCache
from ray_kvmoq.relay.directory import Directory, NodeInfo
from ray_kvmoq.relay.downstream import RelayNetwork
from ray_kvmoq.relay.events import LocalDirectoryClient
from ray_kvmoq.relay.relay import Relay
from ray_kvmoq.relay.security import ClusterSecurity

NS = (b"moq://kvcache.moq.arpa/v1/", b"m", b"pull")
TR = b"FP16"
SECURITY = ClusterSecurity.from_secret(b"pull test secret" * 2)


@asynccontextmanager
async def relay_pair(
    transport: dict[str, object],
) -> AsyncIterator[tuple[Relay, Relay, RelayNetwork]]:
    directory = LocalDirectoryClient(Directory())
    nets = [
        RelayNetwork(
            node_id=n, host="127.0.0.1", security=SECURITY, transport_options=dict(transport)
        )
        for n in ("A", "B")
    ]
    a = Relay(node_id="A", cache=RelayCache(1 << 30), directory=directory)
    b = Relay(node_id="B", cache=RelayCache(1 << 30), directory=directory, connect=nets[1].connect)
    port = await nets[0].start(a)
    await directory.register_node(NodeInfo(node_id="A", host="127.0.0.1", port=port))
    try:
        yield a, b, nets[1]
    finally:
        for net in nets:
            await net.close()
        await a.close()
        await b.close()


async def _pull(transport: dict[str, object], groups: int, sizes: list[int]) -> tuple[str, str]:
    rng = os.urandom(max(sizes) + groups)
    async with relay_pair(transport) as (a, b, _):
        want = hashlib.sha256()
        for g in range(groups):
            payloads = [rng[g : g + n] for n in sizes]
            want.update(b"".join(payloads))
            await a.publish_group(
                NS, TR, g, Group.from_payloads(g, payloads), end_of_track=g == groups - 1
            )
        await a.flush_directory()
        await asyncio.wait_for(b.ensure_groups(NS, TR, range(groups)), 120)
        got = hashlib.sha256()
        for g in range(groups):
            packed = b.cache.get_packed(NS, TR, g, 0.0)
            assert packed is not None and packed.group_id == g
            got.update(packed.buffer)
        return got.hexdigest(), want.hexdigest()


@pytest.mark.parametrize("backend", ["aioquic", "qh3"])
@pytest.mark.parametrize("datagram", [1452, 9000, 60000])
async def test_pull_is_bit_exact_at_every_datagram_size(backend: str, datagram: int) -> None:
    transport = {"backend": backend, "max_datagram_size": datagram}
    got, want = await _pull(transport, groups=12, sizes=[100_000, 1, 23_000, 0, 300_000])
    assert got == want


async def test_a_pull_of_1000_groups_keeps_8_or_more_in_flight_over_moqt() -> None:
    async with relay_pair({"max_datagram_size": 9000}) as (a, b, b_net):
        for g in range(1000):
            await a.publish_group(NS, TR, g, Group.from_payloads(g, [bytes([g % 256]) * 512]))
        a.end_track(NS, TR, 999)
        await a.flush_directory()
        await asyncio.wait_for(b.ensure_groups(NS, TR, range(1000)), 120)
        st = b.stats()
        assert st["max_groups_in_flight"] >= 8
        assert st["upstream_fetches"] <= 1000 // 8  # range FETCHes, no request per group
        (session,) = b_net.pool.sessions()  # B's one session to A
        c = session.counters
        assert c["fetches_sent"] == st["upstream_fetches"]
        assert c["max_fetches_open"] >= 2 and c["fetches_open"] == 0
        assert c["objects_received"] == 1000
