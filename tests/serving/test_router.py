"""The router's pure ranking (the Serve shell is exercised by the end-to-end tests)."""

from __future__ import annotations

import random
from dataclasses import replace

from ray_kvmoq.serving.costmodel import DEFAULT_FIGURES
from ray_kvmoq.serving.router import ReplicaStats, RoutingHint, rank_replicas, score_replicas

HASHES = [f"h{i}" for i in range(8)]


def _replicas() -> list[ReplicaStats]:
    return [
        ReplicaStats(key="a", node_id="n1", queue_len=0, held=frozenset()),
        ReplicaStats(key="b", node_id="n2", queue_len=0, held=frozenset(HASHES[:6])),
        ReplicaStats(key="c", node_id="n3", queue_len=1, held=frozenset(HASHES[:2])),
    ]


def _flat(ranks: list[list[str]]) -> list[str]:
    return [k for rank in ranks for k in rank]


def test_prefers_the_replica_holding_the_prefix() -> None:
    hint = RoutingHint(hashes=HASHES, prompt_tokens=8 * 128 + 5)
    ranks, outcome, best = rank_replicas(DEFAULT_FIGURES, hint, _replicas())
    assert outcome == "cost" and best is not None
    assert _flat(ranks)[0] == "b" and best.local_chunks == 6
    assert sorted(_flat(ranks)) == ["a", "b", "c"]


def test_a_long_queue_outweighs_the_cache() -> None:
    reps = _replicas()
    reps[1] = replace(reps[1], queue_len=50)
    hint = RoutingHint(hashes=HASHES, prompt_tokens=8 * 128 + 5)
    ranks, _, _ = rank_replicas(DEFAULT_FIGURES, hint, reps)
    assert _flat(ranks)[0] != "b"


def test_remote_chunks_count_when_transfer_is_cheap() -> None:
    fig = replace(DEFAULT_FIGURES, moqt_s_per_byte=1e-13)
    hint = RoutingHint(hashes=HASHES, prompt_tokens=8 * 128 + 5)
    scores = {s.key: s for s in score_replicas(fig, hint, _replicas())}
    assert scores["a"].remote_chunks == 6 and scores["c"].local_chunks == 2
    assert scores["c"].remote_chunks == 4


def test_nothing_cached_falls_back_to_power_of_two() -> None:
    hint = RoutingHint(hashes=["zz"], prompt_tokens=300)
    reps = [replace(r, queue_len=q) for r, q in zip(_replicas(), (5, 1, 3), strict=True)]
    for seed in range(20):
        ranks, outcome, best = rank_replicas(DEFAULT_FIGURES, hint, reps, rng=random.Random(seed))
        assert outcome == "pow2" and best is None
        assert sorted(_flat(ranks)) == ["a", "b", "c"]
        first, second = ranks[0][0], ranks[1][0]
        q = {r.key: r.queue_len for r in reps}
        assert q[first] <= q[second]


def test_reuse_disabled_ignores_the_cache() -> None:
    hint = RoutingHint(hashes=HASHES, prompt_tokens=2000, reuse=False)
    _, outcome, _ = rank_replicas(DEFAULT_FIGURES, hint, _replicas())
    assert outcome == "pow2"


def test_decode_prefers_the_kv_node_unless_busy() -> None:
    hint = RoutingHint(prompt_tokens=2000, kv_node="n2")
    ranks, outcome, _ = rank_replicas(DEFAULT_FIGURES, hint, _replicas(), decode=True)
    assert outcome == "cost" and _flat(ranks)[0] == "b"
    reps = _replicas()
    reps[1] = replace(reps[1], queue_len=100)
    ranks, _, _ = rank_replicas(DEFAULT_FIGURES, hint, reps, decode=True)
    assert _flat(ranks)[0] != "b"


def test_hint_round_trips_through_a_dict() -> None:
    hint = RoutingHint(hashes=["a"], prompt_tokens=3, policy="pow2", kv_node="n", reuse=False)
    assert RoutingHint.from_obj(hint.to_dict()) == hint
    assert RoutingHint.from_obj(None) is None


def test_stats_from_routing_stats() -> None:
    r = ReplicaStats.from_routing_stats("k", {"node_id": "n", "queue_len": 3, "held": ["x"]}, None)
    assert r.queue_len == 3 and r.held == frozenset({"x"})
    assert ReplicaStats.from_routing_stats("k", None, 7).queue_len == 7
