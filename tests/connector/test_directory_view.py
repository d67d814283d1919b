"""The scheduler's lookups through a real :class:`RelayBridge`, node relay and directory on the
shared Ray cluster: once the bridge's copy of the directory is current, a lookup is answered in
the call that makes it, with what the directory itself answers; with ``directory_view`` off it
is a round trip to poll."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

NS = ["moq://kvcache.moq.arpa/v1/", "m", "view"]


@dataclass
class _Node:
    namespace: str
    relay: Any
    directory: Any
    bridge: Any
    """A :class:`RelayBridge` to ``relay`` (its copy of the directory not started yet)."""


@pytest.fixture
def node(ray_cluster: Any) -> Iterator[_Node]:
    """A node relay and directory of their own (a fresh Ray namespace), and a bridge to them."""
    import ray

    from ray_kvmoq.connector.bridge import RelayBridge
    from ray_kvmoq.connector.config import ConnectorConfig
    from ray_kvmoq.relay.actor import get_directory, start_relays

    namespace = f"view-{uuid.uuid4().hex[:8]}"
    here = ray.get_runtime_context().get_node_id()
    relay = start_relays(
        node_ids=[here], namespace=namespace, detached=False, network={"listen": False}
    )[here]
    directory = get_directory(namespace=namespace, create=False)
    bridge = RelayBridge(ConnectorConfig(ray_namespace=namespace))
    try:
        yield _Node(namespace, relay, directory, bridge)
    finally:
        if bridge._follower is not None:
            bridge._follower.stop()
        ray.get(relay.shutdown.remote())
        ray.kill(relay)
        ray.kill(directory)


def test_a_current_directory_copy_answers_lookups_in_the_call_that_makes_them(node: _Node) -> None:
    import ray

    from ray_kvmoq.connector.bridge import RelayBridge
    from ray_kvmoq.connector.config import ConnectorConfig

    for g in range(3):
        ray.get(node.relay.publish_group.remote(NS, "BF16", g, [b"x"], chunk_hash=b"v%d" % g))
    ray.get(node.relay.flush_directory.remote())
    hashes = [b"v0", b"v1", b"v2", b"nowhere"]
    truth = ray.get(node.directory.longest_prefix.remote(hashes))
    assert len(truth) == 3

    follower = node.bridge.directory_view()
    assert follower is not None and follower.wait_live(30.0)
    assert node.bridge.poll_lookup(node.bridge.start_lookup(hashes)) == truth

    asked = RelayBridge(ConnectorConfig(ray_namespace=node.namespace, directory_view=False))
    assert asked.directory_view() is None
    ref = asked.start_lookup(hashes)
    deadline = time.monotonic() + 30
    chain = asked.poll_lookup(ref)
    while chain is None and time.monotonic() < deadline:
        time.sleep(0.01)
        chain = asked.poll_lookup(ref)
    assert chain == truth


def test_an_unreachable_relay_is_tried_again_for_the_directory_copy_at_most_every_5_s(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The scheduler asks for the copy every step; a relay that cannot be reached must not
    cost every step a join attempt."""
    from ray_kvmoq.connector import bridge as bridge_mod
    from ray_kvmoq.connector.bridge import RelayBridge
    from ray_kvmoq.connector.config import ConnectorConfig

    now = [1000.0]
    monkeypatch.setattr(bridge_mod.time, "monotonic", lambda: now[0])
    b = RelayBridge(ConnectorConfig())
    tries: list[float] = []

    def unreachable() -> Any:
        tries.append(now[0])
        raise RuntimeError("no Ray here")

    monkeypatch.setattr(b, "relay", unreachable)
    for _ in range(3):
        assert b.directory_view() is None
    now[0] += bridge_mod._VIEW_RETRY_S
    assert b.directory_view() is None
    assert tries == [1000.0, 1000.0 + bridge_mod._VIEW_RETRY_S]
    assert RelayBridge(ConnectorConfig(load=False)).directory_view() is None


def test_a_group_the_relay_evicts_leaves_the_engines_directory_copy(node: _Node) -> None:
    """What lets an engine publish an evicted chunk again (``Sightings.held``): the relay's
    eviction reaches the directory, and from there the engine process's copy."""
    import ray

    hashes = [b"e%d" % g for g in range(3)]
    for g, h in enumerate(hashes):
        ray.get(node.relay.publish_group.remote(NS, "BF16", g, [b"x" * 1000], chunk_hash=h))
    ray.get(node.relay.flush_directory.remote())
    follower = node.bridge.directory_view()
    assert follower is not None and follower.wait_live(30.0)
    deadline = time.monotonic() + 10
    while not all(map(follower.holds, hashes)) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert all(map(follower.holds, hashes))

    ray.get(node.relay.set_budget.remote(1500))  # room for one group: 0 and 1 go, LRU first
    ray.get(node.relay.flush_directory.remote())
    deadline = time.monotonic() + 10
    while follower.holds(b"e1") and time.monotonic() < deadline:
        time.sleep(0.02)
    assert [follower.holds(h) for h in hashes] == [False, False, True]
    assert ray.get(node.directory.longest_prefix.remote(hashes)) == []
    assert ray.get(node.relay.stats.remote())["evictions"] == 2
