"""The relay-backed KV plane on the shared cluster: chunks published on one node's relay are
found through the directory and pulled over MoQT by another node's relay; corrupt payloads and
missing tracks fall back instead of raising; live tracks are read while they grow. No model."""

from __future__ import annotations

import asyncio
from typing import Any

import numpy as np
import pytest

pytestmark = pytest.mark.ray

GEOM = (4, 2, 3, 128, 16)  # L, 2, H, T, D


def _chunk(seed: int, tokens: int = 128) -> np.ndarray:
    rng = np.random.default_rng(seed)
    shape = (*GEOM[:3], tokens, GEOM[4])
    import torch

    return (
        torch.from_numpy(rng.standard_normal(shape, dtype=np.float32))
        .to(torch.bfloat16)
        .view(torch.uint16)
        .numpy()
    )


@pytest.fixture(scope="module")
def planes(ray_cluster: Any) -> tuple[Any, Any]:
    from ray_kvmoq.serving.relayplane import RelayKVPlane, start_node_relay

    a, b = ray_cluster.node_ids["127.0.0.2"], ray_cluster.node_ids["127.0.0.3"]
    pa = RelayKVPlane(start_node_relay(a, 64 << 20), a, codec="BF16")
    pb = RelayKVPlane(start_node_relay(b, 64 << 20), b, codec="BF16")
    return pa, pb


def _ns(tag: str) -> tuple[bytes, ...]:
    from ray_kvmoq.kvcache.naming import kv_namespace, prompt_id

    return kv_namespace("test-model", prompt_id(tag.encode(), [1, 2, 3]))


async def test_prefix_found_and_pulled_over_moqt(planes: tuple[Any, Any]) -> None:
    pa, pb = planes
    ns = _ns("pull")
    chunks = [_chunk(1), _chunk(2)]
    hashes = [b"h-pull-0" * 4, b"h-pull-1" * 4]
    for g, (c, h) in enumerate(zip(chunks, hashes, strict=True)):
        await pa.publish(ns, g, c, h)
    await pa.relay.flush_directory.remote()
    assert await pa.locate(hashes) == (2, 2)
    assert await pb.locate(hashes) == (0, 2)
    before = await pb.relay.stats.remote()
    got = await pb.fetch_prefix(hashes, 2, timeout_s=30)
    assert got.remote == 2 and got.local == 0 and not got.fallbacks
    assert got.bytes_moqt > 0 and got.bytes_zero_copy == 0
    for a, b in zip(got.chunks, chunks, strict=True):
        assert np.array_equal(a, b)
    after = await pb.relay.stats.remote()
    assert after["upstream_bytes"] > before["upstream_bytes"]
    local = await pa.fetch_prefix(hashes, 2, timeout_s=30)
    assert local.local == 2 and local.bytes_zero_copy > 0 and local.bytes_moqt == 0


async def test_live_track_is_read_while_it_grows(planes: tuple[Any, Any]) -> None:
    pa, pb = planes
    ns = _ns("live")
    chunks = [_chunk(3), _chunk(4), _chunk(5, tokens=7)]

    async def read() -> list[np.ndarray]:
        return [arr async for _, arr in pb.track(ns, 3, source_node=pa.node_id, timeout_s=30)]

    reader = asyncio.create_task(read())
    for g, c in enumerate(chunks):
        await asyncio.sleep(0.2)
        await pa.publish(ns, g, c, None)
    await pa.end_track(ns, 2)
    got = await asyncio.wait_for(reader, 60)
    assert len(got) == 3 and all(np.array_equal(a, b) for a, b in zip(got, chunks, strict=True))


async def test_missing_track_times_out_without_raising(planes: tuple[Any, Any]) -> None:
    _, pb = planes
    got = [g async for g, _ in pb.track(_ns("never"), 2, source_node=None, timeout_s=1.0)]
    assert got == []
    res = await pb.fetch_prefix([b"unknown-hash" * 3], 1, timeout_s=5)
    assert res.chunks == []


async def test_corrupt_payload_is_a_fallback(planes: tuple[Any, Any]) -> None:
    from ray_kvmoq.kvcache.integrity import attach_digest
    from ray_kvmoq.relay.cache import CachedObject

    pa, pb = planes
    ns = _ns("corrupt")
    payloads = pa.codec.encode_chunk(_chunk(6))
    objs = [
        CachedObject(object_id=i, payload=p, extensions=(attach_digest(p),))
        for i, p in enumerate(payloads)
    ]
    bad = bytearray(payloads[5])
    bad[-1] ^= 0xFF
    objs[5] = CachedObject(object_id=5, payload=bytes(bad), extensions=objs[5].extensions)
    h = b"h-corrupt" * 4
    await pa.relay.publish_group.remote(ns, pa.track_name, 0, objs, chunk_hash=h)
    await pa.relay.flush_directory.remote()
    res = await pb.fetch_prefix([h], 1, timeout_s=30)
    assert res.chunks == [] and res.fallbacks == ["digest"]
