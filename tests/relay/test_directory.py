"""Directory core: placement by track group and by chunk hash, removal on eviction and death, and
the change journal that keeps a reader's :class:`HashView` current."""

from __future__ import annotations

import pytest

from ray_kvmoq.relay.directory import Directory, HashView, Location, NodeInfo

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


def _view_of(d: Directory) -> HashView:
    v = HashView()
    v.reset("e", d.version, d.hash_entries())
    return v


def _chains(src: Directory | HashView, hashes: list[bytes]) -> list[list[Location]]:
    return [sorted(locs) for locs in src.longest_prefix(hashes)]


def test_a_hash_view_fed_by_the_change_journal_answers_as_the_directory_after_every_change() -> (
    None
):
    """Adds, a relabel, an inherited hash, evictions, a fresh registration and a node's death,
    one at a time: after each, the view that applied ``changes_since`` its version answers every
    prefix as the directory does."""
    d = Directory()
    v = _view_of(d)
    hashes = [b"h0", b"h1", b"h2", b"x0", b"old", b"new"]
    steps = [
        lambda: d.add_groups("A", NS, b"FP16", [0, 1, 2], hashes={0: b"h0", 1: b"h1", 2: b"h2"}),
        lambda: d.add_groups("B", NS, b"FP16", [0, 1]),  # inherits h0, h1
        lambda: d.add_groups("B", NS2, b"Int8", [0], hashes={0: b"x0"}),
        lambda: d.add_groups("A", NS2, b"FP16", [5], hashes={5: b"old"}),
        lambda: d.add_groups("A", NS2, b"FP16", [5], hashes={5: b"new"}),
        lambda: d.remove_groups("A", NS, b"FP16", [1]),
        lambda: d.register_node(NodeInfo(node_id="B", host="h", port=1), fresh=True),
        lambda: d.remove_node("A"),
    ]
    for i, step in enumerate(steps):
        before = d.version
        step()
        changes = d.changes_since(v.version)
        assert changes is not None and len(changes) == d.version - before, i
        v.apply(d.version, changes)
        assert v.version == d.version
        for k in range(len(hashes)):
            assert _chains(v, hashes[k:]) == _chains(d, hashes[k:]), (i, k)
    assert len(v) == 0 and d.stats()["hashes"] == 0


def test_changes_since_answers_none_for_a_version_the_journal_cannot_bring_up_to_date(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Further behind than the journal reaches, or ahead of the directory (another incarnation's
    version): None, and a snapshot brings a view up to date instead."""
    import ray_kvmoq.relay.directory as directory_mod

    monkeypatch.setattr(directory_mod, "JOURNAL_KEPT", 4)
    d = Directory()
    d.add_groups("A", NS, b"FP16", [0, 1], hashes={0: b"h0", 1: b"h1"})
    assert d.changes_since(d.version) == []
    assert d.changes_since(0) == [
        (True, b"h0", Location(node_id="A", namespace=NS, track=b"FP16", group_id=0)),
        (True, b"h1", Location(node_id="A", namespace=NS, track=b"FP16", group_id=1)),
    ]
    d.add_groups("A", NS, b"FP16", [2, 3, 4], hashes={2: b"h2", 3: b"h3", 4: b"h4"})
    assert d.version == 5
    assert d.changes_since(0) is None  # 5 changes, 4 kept
    assert d.changes_since(1) is not None and len(d.changes_since(1) or []) == 4
    assert d.changes_since(6) is None
    assert _chains(_view_of(d), [b"h0", b"h1", b"h2"]) == _chains(d, [b"h0", b"h1", b"h2"])


def test_a_group_announced_twice_by_one_node_is_one_change() -> None:
    d = Directory()
    d.add_groups("A", NS, b"FP16", [0], hashes={0: b"h0"})
    d.add_groups("A", NS, b"FP16", [0], hashes={0: b"h0"})
    d.remove_groups("A", NS, b"FP16", [0])
    d.remove_groups("A", NS, b"FP16", [0])
    assert d.version == 2
