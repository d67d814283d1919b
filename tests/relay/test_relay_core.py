"""Relay core over an in-memory upstream: fan-out, live tracks, merged pulls, directory upkeep.

The network is replaced by :class:`DirectUpstream`, which calls the other relay's own
subscribe/fetch — the same calls the MoQT server makes for a remote peer.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from ray_kvmoq.moqt.api import Group
from ray_kvmoq.moqt.codec import ObjectStatus
from ray_kvmoq.relay.cache import CachedObject, RelayCache
from ray_kvmoq.relay.directory import Directory, NodeInfo
from ray_kvmoq.relay.packed import pack_group, unpack_group
from ray_kvmoq.relay.relay import (
    GroupEnded,
    LocalDirectoryClient,
    ObjectReceived,
    Relay,
    RelayError,
    TrackEnded,
    TrackEvent,
    Upstream,
)

NS = (b"moq://kvcache.moq.arpa/v1/", b"m", b"p1")
TR = b"FP16"


class DirectUpstream:
    """An Upstream that reads another in-process relay and counts what crosses."""

    def __init__(self, peer: Relay) -> None:
        self.peer = peer
        self.subscribes = 0
        self.fetches = 0

    async def subscribe(
        self, namespace: tuple[bytes, ...], track: bytes
    ) -> AsyncIterator[TrackEvent]:
        self.subscribes += 1
        sub = await self.peer.open_subscription(namespace, track)

        async def events() -> AsyncIterator[TrackEvent]:
            try:
                async for ev in sub:
                    yield ev
            finally:
                sub.close()

        return events()

    async def fetch_groups(
        self, namespace: tuple[bytes, ...], track: bytes, first: int, last: int
    ) -> AsyncIterator[Group]:
        self.fetches += 1
        items = await self.peer.fetch(namespace, track, (first, 0), (last, 0))

        async def gen() -> AsyncIterator[Group]:
            gids = sorted({g for g, _ in items})
            for gid in gids:
                yield Group.pack(gid, [o for g, o in items if g == gid])

        return gen()


def group(gid: int, n: int = 3, size: int = 1000) -> list[CachedObject]:
    return [
        CachedObject(group=gid, object_id=i, payload=bytes([gid % 256, i]) * (size // 2))
        for i in range(n)
    ]


def two_relays(budget: int = 1 << 24) -> tuple[Relay, Relay, DirectUpstream, Directory]:
    directory = Directory()
    client = LocalDirectoryClient(directory)
    a = Relay(node_id="A", cache=RelayCache(budget), directory=client)
    up = DirectUpstream(a)
    directory.register_node(NodeInfo(node_id="A", host="127.0.0.2", port=1))

    async def connect(info: NodeInfo) -> Upstream:
        assert info.node_id == "A"
        return up

    b = Relay(node_id="B", cache=RelayCache(budget), directory=client, connect=connect)
    return a, b, up, directory


async def collect(it: AsyncIterator[TrackEvent]) -> list[TrackEvent]:
    return [ev async for ev in it]


async def test_eight_subscribers_one_upstream_transfer() -> None:
    a, b, up, directory = two_relays()
    for g in range(3):
        await a.publish_group(NS, TR, g, group(g), chunk_hash=bytes([g]) * 4)
    await a.flush_directory()
    assert directory.lookup_hash(b"\x01" * 4)[0].node_id == "A"
    subs = [asyncio.create_task(collect(b.subscribe(NS, TR))) for _ in range(8)]
    await asyncio.sleep(0.05)
    await a.publish_group(NS, TR, 3, group(3), end_of_track=True)
    results = await asyncio.wait_for(asyncio.gather(*subs), 5)
    track_bytes = sum(sum(o.size for o in group(g)) for g in range(4))
    for evs in results:
        objs = [(e.group_id, e.obj) for e in evs if isinstance(e, ObjectReceived)]
        assert [(g, o.object_id) for g, o in objs] == [(g, i) for g in range(4) for i in range(3)]
        assert b"".join(bytes(o.payload) for _, o in objs) == b"".join(
            bytes(o.payload) for g in range(4) for o in group(g)
        )
        assert [e.group_id for e in evs if isinstance(e, GroupEnded)] == [0, 1, 2, 3]
        assert isinstance(evs[-1], TrackEnded)
    assert up.subscribes == 1
    assert b.stats()["upstream_bytes"] == track_bytes
    assert b.stats()["delivered_bytes"] == 8 * track_bytes
    # A late subscriber on B is served from B's cache alone.
    late = await collect(b.subscribe(NS, TR))
    assert isinstance(late[-1], TrackEnded) and up.subscribes == 1
    await b.flush_directory()
    assert directory.nodes_for(NS, TR, 2) == ["A", "B"]


async def test_concurrent_pulls_of_one_group_merge_into_one_fetch() -> None:
    a, b, up, _ = two_relays()
    await a.publish_group(NS, TR, 0, group(0))
    await a.publish_group(NS, TR, 1, group(1), end_of_track=True)
    await a.flush_directory()
    got = await asyncio.gather(*(b.get_group(NS, TR, 1) for _ in range(5)))
    assert all(g == group(1) for g in got)
    assert up.fetches == 1 and b.stats()["upstream_bytes"] == sum(o.size for o in group(1))
    objs = await b.fetch(NS, TR, (0, 0), (1, 0))
    assert [(g, o.object_id) for g, o in objs] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert up.fetches == 2  # group 0 was not cached on B yet


async def test_unknown_track_is_refused_not_hung() -> None:
    _, b, _, _ = two_relays()
    with pytest.raises(RelayError) as ei:
        await asyncio.wait_for(collect(b.subscribe(NS, b"nope")), 5)
    assert ei.value.error_code == 0x4
    with pytest.raises(RelayError):
        await asyncio.wait_for(b.get_group(NS, b"nope", 0), 5)


async def test_upstream_failure_reaches_every_subscriber() -> None:
    a, b, _, _ = two_relays()
    await a.publish_group(NS, TR, 0, group(0))
    await a.flush_directory()
    subs = [asyncio.create_task(collect(b.subscribe(NS, TR))) for _ in range(3)]
    await asyncio.sleep(0.05)
    await a.close()  # the peer goes away mid-track
    for t in subs:
        with pytest.raises(RelayError):
            await asyncio.wait_for(t, 5)
    assert b.lookup(NS, TR)["live"] is False


async def test_eviction_is_reported_to_the_directory() -> None:
    directory = Directory()
    a = Relay(node_id="A", cache=RelayCache(3500), directory=LocalDirectoryClient(directory))
    for g in range(4):
        await a.publish_group(NS, TR, g, group(g), chunk_hash=bytes([g]))
    await a.flush_directory()
    assert a.cache.cached_groups(NS, TR) == [3]
    assert directory.groups_on("A", NS, TR) == [3]
    assert directory.lookup_hash(b"\x00") == [] and len(directory.lookup_hash(b"\x03")) == 1
    assert a.stats()["evictions"] == 3


async def test_live_subscriber_joins_mid_track_and_sees_open_group() -> None:
    a = Relay(node_id="A", cache=RelayCache(1 << 20))
    await a.publish_group(NS, TR, 0, group(0))
    a.publish_object(NS, TR, 1, CachedObject(object_id=0, payload=b"x"))
    it = a.subscribe(NS, TR, start_group=1)
    first = await it.__anext__()
    assert first == ObjectReceived(group_id=1, obj=CachedObject(object_id=0, payload=b"x"))
    # objects published one by one keep the group field they were given (the event says 1)
    a.publish_object(NS, TR, 1, CachedObject(object_id=1, payload=b"y"))
    a.end_group(NS, TR, 1)
    a.end_track(NS, TR, 1)
    rest = [ev async for ev in it]
    assert rest == [
        ObjectReceived(group_id=1, obj=CachedObject(object_id=1, payload=b"y")),
        GroupEnded(group_id=1),
        TrackEnded(),
    ]


def test_packed_group_round_trip_is_exact_and_zero_copy() -> None:
    objs = [
        CachedObject(group=4, object_id=0, payload=b"abc", extensions=((0x3C, 2),), priority=3),
        CachedObject(group=4, object_id=2, status=ObjectStatus.DOES_NOT_EXIST),
        CachedObject(group=4, object_id=3, payload=bytes(range(256)), subgroup=1),
    ]
    packed = pack_group(objs)
    back = unpack_group(packed)
    assert back == objs
    assert isinstance(back[2].payload, memoryview) and back[2].payload.obj is not None
    assert back[2].payload.obj is packed.buffer.obj  # a view of the group's one buffer
    assert packed.group_id == 4 and packed.nbytes == 3 + 256


async def test_an_evicted_group_of_a_live_track_is_pulled_again_not_awaited() -> None:
    directory = Directory()
    client = LocalDirectoryClient(directory)
    a = Relay(node_id="A", cache=RelayCache(1 << 20), directory=client)
    up = DirectUpstream(a)
    directory.register_node(NodeInfo(node_id="A", host="h", port=1))

    async def connect(info: NodeInfo) -> Upstream:
        return up

    b = Relay(node_id="B", cache=RelayCache(7000), directory=client, connect=connect)
    await a.publish_group(NS, TR, 0, group(0))
    await a.flush_directory()
    sub = await b.open_subscription(NS, TR)
    for g in range(1, 3):
        await a.publish_group(NS, TR, g, group(g))
    seen: set[int] = set()
    while len(seen) < 3:
        ev = await asyncio.wait_for(sub.__anext__(), 5)
        if isinstance(ev, GroupEnded):
            seen.add(ev.group_id)
    assert 0 not in b.cache.cached_groups(NS, TR)  # evicted on B, the track still live
    assert await asyncio.wait_for(b.get_group(NS, TR, 0), 5) == group(0)
    assert up.fetches == 1
    sub.close()


async def test_groups_evicted_from_an_ended_track_can_be_published_again_and_are_listed_again() -> (
    None
):
    """What an engine does when its copy of the directory says a relay evicted its chunks
    (``Sightings.held``): it publishes them again, the last one still ending the track."""
    directory = Directory()
    a = Relay(node_id="A", cache=RelayCache(1 << 20), directory=LocalDirectoryClient(directory))
    for g in range(3):
        await a.publish_group(NS, TR, g, group(g), chunk_hash=bytes([g]), end_of_track=g == 2)
    a.set_budget(3500)  # room for one group: 0 and 1 go
    a.set_budget(1 << 20)
    await a.flush_directory()
    assert directory.longest_prefix([b"\x00", b"\x01", b"\x02"]) == []
    for g in range(3):
        await a.publish_group(NS, TR, g, group(g), chunk_hash=bytes([g]), end_of_track=g == 2)
    await a.flush_directory()
    assert len(directory.longest_prefix([b"\x00", b"\x01", b"\x02"])) == 3
    assert a.cache.cached_groups(NS, TR) == [0, 1, 2]
    evs = await asyncio.wait_for(collect(a.subscribe(NS, TR)), 5)
    assert [e.group_id for e in evs if isinstance(e, GroupEnded)] == [0, 1, 2]
    assert isinstance(evs[-1], TrackEnded)


async def test_an_ended_track_with_an_evicted_middle_group_still_ends() -> None:
    a = Relay(node_id="A", cache=RelayCache(9500))  # room for three 3000-byte groups
    for g in range(3):
        await a.publish_group(NS, TR, g, group(g))
    await a.get_group(NS, TR, 0)  # group 0 is now more recently used than group 1
    await a.publish_group(NS, TR, 3, group(3), end_of_track=True)
    assert a.cache.cached_groups(NS, TR) == [0, 2, 3]
    evs = await asyncio.wait_for(collect(a.subscribe(NS, TR)), 5)
    assert [e.group_id for e in evs if isinstance(e, GroupEnded)] == [0, 2, 3]
    assert isinstance(evs[-1], TrackEnded)


async def test_a_pull_of_1000_groups_keeps_8_or_more_in_flight_with_range_fetches() -> None:
    a, b, up, _ = two_relays()
    for g in range(1000):
        await a.publish_group(NS, TR, g, group(g, n=1, size=64), end_of_track=g == 999)
    await a.flush_directory()
    await asyncio.wait_for(b.ensure_groups(NS, TR, range(1000)), 30)
    st = b.stats()
    assert st["max_groups_in_flight"] >= 8  # requested and not yet received, at once
    assert up.fetches == st["upstream_fetches"] <= 1000 // 8  # ranges, not a FETCH per group
    assert st["groups_in_flight"] == 0
    assert all(b.cache.is_sealed(NS, TR, g) for g in range(1000))
    assert await b.get_group(NS, TR, 777) == group(777, n=1, size=64)


async def test_upstream_bytes_count_every_byte_received_duplicates_included() -> None:
    a, b, up, _ = two_relays()
    await a.publish_group(NS, TR, 0, group(0))
    await a.flush_directory()
    await b.get_group(NS, TR, 0)
    before = b.stats()["upstream_bytes"]

    async def twice(
        namespace: tuple[bytes, ...], track: bytes, first: int, last: int
    ) -> AsyncIterator[Group]:
        async def gen() -> AsyncIterator[Group]:
            yield Group.pack(0, group(0))  # already cached on B: a duplicate
            yield Group.pack(1, group(1))

        return gen()

    await a.publish_group(NS, TR, 1, group(1))
    up.fetch_groups = twice  # type: ignore[method-assign]
    await b.ensure_groups(NS, TR, [1])
    assert b.stats()["upstream_bytes"] - before == 2 * sum(o.size for o in group(0))


async def test_finished_prompts_leave_no_live_entries_and_directory_rows_drop() -> None:
    directory = Directory()
    a = Relay(node_id="A", cache=RelayCache(20_000), directory=LocalDirectoryClient(directory))
    for p in range(2000):
        ns = (b"kv", b"m", b"p%d" % p)
        for g in range(2):
            await a.publish_group(ns, TR, g, group(g), chunk_hash=b"%d/%d" % (p, g))
            assert a.cache.bytes_cached <= 20_000
        if p % 3:
            a.end_track(ns, TR, 1)  # finished prompt
    await a.flush_directory()
    st = a.stats()
    held = sum(1 for _ in a.cache.sealed_groups())
    assert held <= 20_000 // 3000 and st["live_tracks"] <= st["cached_tracks"] <= held
    assert directory.stats()["hashes"] == held
    assert sum(len(directory.groups_on("A", ns, tr)) for ns, tr in a.cache.tracks()) == held
