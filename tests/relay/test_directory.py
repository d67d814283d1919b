"""Directory core: placement by track group and by chunk hash, removal on eviction and death."""

from __future__ import annotations

from ray_kvmoq.relay.directory import Directory, Location, NodeInfo

NS = (b"kv", b"m", b"p1")
NS2 = (b"kv", b"m", b"p2")


def test_groups_and_hashes_are_found_and_forgotten_on_eviction() -> None:
    d = Directory()
    d.register_node(NodeInfo(node_id="A", host="127.0.0.2", port=4433))
    d.add_groups("A", NS, b"FP16", [0, 1, 2], hashes={0: b"h0", 1: b"h1", 2: b"h2"})
    d.add_groups("B", NS, b"FP16", [0], hashes={0: b"h0"})
    assert d.nodes_for(NS, b"FP16", 0) == ["A", "B"]
    assert d.nodes_for(NS, b"FP16") == ["A", "B"]
    assert d.lookup_hash(b"h1") == [Location(node_id="A", namespace=NS, track=b"FP16", group_id=1)]
    assert [len(x) for x in d.longest_prefix([b"h0", b"h1", b"h9", b"h2"])] == [2, 1]
    d.remove_groups("A", NS, b"FP16", [0, 1])
    assert d.nodes_for(NS, b"FP16", 0) == ["B"]
    assert d.lookup_hash(b"h1") == []
    assert d.groups_on("A", NS, b"FP16") == [2]
    assert d.node("A") == NodeInfo(node_id="A", host="127.0.0.2", port=4433)


def test_node_death_removes_every_trace() -> None:
    d = Directory()
    d.register_node(NodeInfo(node_id="A", host="h", port=1))
    d.add_groups("A", NS, b"FP16", [0, 1], hashes={0: b"h0", 1: b"h1"})
    d.add_groups("A", NS2, b"Int8", [0], hashes={0: b"x0"})
    d.add_groups("B", NS, b"FP16", [1], hashes={1: b"h1"})
    d.remove_node("A")
    assert d.nodes() == []
    assert d.nodes_for(NS, b"FP16") == ["B"]
    assert d.nodes_for(NS2, b"Int8") == []
    assert d.lookup_hash(b"h0") == [] and d.lookup_hash(b"x0") == []
    assert [loc.node_id for loc in d.lookup_hash(b"h1")] == ["B"]
    assert d.stats() == {"nodes": 1, "hashes": 1, "tracks": 1}
    d.remove_node("A")  # idempotent


def test_a_group_relabelled_with_a_new_hash_drops_the_old_one() -> None:
    d = Directory()
    d.add_groups("A", NS, b"FP16", [0], hashes={0: b"old"})
    d.add_groups("A", NS, b"FP16", [0], hashes={0: b"new"})
    assert d.lookup_hash(b"old") == []
    assert len(d.lookup_hash(b"new")) == 1


def test_a_puller_inherits_the_publishers_hash() -> None:
    d = Directory()
    d.add_groups("A", NS, b"FP16", [0], hashes={0: b"h0"})
    d.add_groups("B", NS, b"FP16", [0])
    assert [loc.node_id for loc in d.lookup_hash(b"h0")] == ["A", "B"]
    d.remove_node("A")
    assert [loc.node_id for loc in d.lookup_hash(b"h0")] == ["B"]
