"""The Ray shell on the shared multi-node cluster: in-node API, zero-copy reads, directory
upkeep when a relay dies. Cross-node MoQT transfers live in test_ray_moqt.py."""

from __future__ import annotations

import sys
import time
from typing import Any

import pytest

pytestmark = pytest.mark.ray

NS = ["moq://kvcache.moq.arpa/v1/", "m", "shell"]


def _reader_cls() -> Any:
    import ray
    from ray import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])

    @ray.remote(num_cpus=0)
    class Reader:
        """A same-node consumer: reads a group through the relay's ref, reports zero-copy."""

        async def read(
            self, relay: Any, namespace: list[str], track: str, gid: int
        ) -> dict[str, Any]:
            from ray_kvmoq.relay.packed import unpack_group

            ref = await relay.get_group_ref.remote(namespace, track, gid)
            packed = await ref
            objs = unpack_group(packed)
            return {
                "writeable": not packed.payload.readonly,
                "payloads": [bytes(o.payload) for o in objs],
                "node": ray.get_runtime_context().get_node_id(),
            }

        async def follow(self, relay: Any, namespace: list[str], track: str) -> list[Any]:
            out: list[Any] = []
            async for ref in relay.subscribe_groups.remote(namespace, track, wait_s=10.0):
                item = await ref
                out.append(item["group_id"] if "ref" in item else "end")
            return out

    return Reader


def _pinned(cls: Any, node_id: str) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return cls.options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    ).remote()


def test_in_node_publish_zero_copy_read_live_follow_and_death(ray_cluster: Any) -> None:
    import ray

    from ray_kvmoq.relay.actor import RelayActor, get_directory

    directory = get_directory()
    node = ray_cluster.node_ids["127.0.0.2"]
    relay = RelayActor.options(  # type: ignore[attr-defined]
        num_cpus=0,
        scheduling_strategy=__import__(
            "ray.util.scheduling_strategies", fromlist=["x"]
        ).NodeAffinitySchedulingStrategy(node, soft=False),
    ).remote(budget_bytes=8 << 20, network={"listen": False}, directory=directory)
    reader = _pinned(_reader_cls(), node)
    try:
        info = ray.get(relay.start.remote(), timeout=60)
        assert info.node_id == node
        big = [bytes([i]) * (1 << 20) for i in range(2)]  # 2 MiB: lives in plasma, not inline
        follow = reader.follow.remote(relay, NS, "FP16")  # before the track exists: waits
        time.sleep(0.5)
        ray.get(relay.publish_group.remote(NS, "FP16", 0, big, chunk_hash=b"h0"), timeout=30)
        got = ray.get(reader.read.remote(relay, NS, "FP16", 0), timeout=30)
        assert got["payloads"] == big and got["node"] == node
        assert got["writeable"] is False  # a read-only view of the shared buffer: no copy
        ray.get(relay.publish_group.remote(NS, "FP16", 1, [b"x"], end_of_track=True), timeout=30)
        assert ray.get(follow, timeout=30) == [0, 1, "end"]
        look = ray.get(relay.lookup.remote(NS, "FP16"), timeout=30)
        assert look["sealed"] == [0, 1] and look["end_of_track"] == (1, 1)
        ray.get(relay.flush_directory.remote(), timeout=30)
        locs = ray.get(relay.lookup_hash.remote(b"h0"), timeout=30)
        assert [(loc.node_id, loc.group_id) for loc in locs] == [(node, 0)]
        with pytest.raises(ray.exceptions.RayTaskError) as ei:  # not published anywhere
            ray.get(relay.get_group_ref.remote(NS, "missing", 0, wait_s=0.2), timeout=30)
        assert "0x4" in str(ei.value)
        ray.kill(relay)
        deadline = time.monotonic() + 20
        while ray.get(directory.lookup_hash.remote(b"h0"), timeout=10):
            assert time.monotonic() < deadline, "directory kept a dead relay's groups"
            time.sleep(0.2)
        assert node not in [n.node_id for n in ray.get(directory.nodes.remote(), timeout=10)]
    finally:
        ray.kill(reader)
        ray.kill(relay)
