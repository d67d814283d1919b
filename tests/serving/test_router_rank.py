"""The KV router's decisions (pure: :func:`rank` over plain views and figures).

The three cases the issue names: prefix affinity when it is cheap, a pull when the prefix lives
elsewhere and the replica holding it is busy, recompute when the measured pull is slower than
recomputing — plus the fallbacks when nothing is cached or nothing is measured yet.
"""

from __future__ import annotations

import random

from ray_kvmoq.connector.figures import Figures, FiguresSnapshot
from ray_kvmoq.serving.costmodel import Candidate, NodeFigures, RequestView, plan
from ray_kvmoq.serving.router import ReplicaLoad, rank

C = 128
BPT = 23_052.0  # SmolLM2 BF16 bytes per token


def _figures(prefill: float | None, pull: float | None, local: float = 1e-11) -> FiguresSnapshot:
    f = Figures()
    for node in ("A", "B"):
        if prefill is not None:
            f.report("prefill_s_per_token", node, prefill)
        if pull is not None:
            f.report("pull_s_per_byte", node, pull)
        f.report("local_s_per_byte", node, local)
    return f.snapshot()


def _req(chunks_on: list[set[str]], prompt: int = 8 * C + 40) -> RequestView:
    return RequestView(
        prompt_tokens=prompt,
        chunk_size=C,
        bytes_per_token=BPT,
        holders=[frozenset(s) for s in chunks_on],
        hashes=[f"h{k}" for k in range(prompt // C)],
    )


A = Candidate(key="rA", node_id="A", queue_len=0)
B = Candidate(key="rB", node_id="B", queue_len=0)


def test_prefix_affinity_when_the_holder_is_idle() -> None:
    order, outcome, best = rank(_req([{"A"}] * 8), [B, A], _figures(1e-3, 1e-8), random.Random(0))
    assert outcome == "cost" and order[0] == "rA"
    assert best is not None and best.local_chunks == 8 and best.remote_chunks == 0


def test_a_pull_when_the_prefix_lives_elsewhere_and_its_holder_is_busy() -> None:
    busy_a = Candidate(key="rA", node_id="A", queue_len=6)
    # pulling 23 KB/token at 100 MB/s (0.23 ms/token) beats recomputing at 1 ms/token
    order, outcome, best = rank(
        _req([{"A"}] * 8), [busy_a, B], _figures(1e-3, 1e-8), random.Random(0)
    )
    assert outcome == "cost" and order[0] == "rB"
    assert best is not None and best.remote_chunks == 8 and best.recompute_tokens == 40


def test_recompute_when_the_measured_pull_is_slower_than_recompute() -> None:
    # 23 KB/token at 5 MB/s is 4.6 ms/token: slower than recomputing at 1 ms/token
    fig = _figures(1e-3, 2e-7)
    p = plan(
        _req([{"A"}] * 8),
        B,
        NodeFigures(
            prefill_s_per_token=fig.get("prefill_s_per_token", "B"),
            pull_s_per_byte=fig.get("pull_s_per_byte", "B"),
            local_s_per_byte=fig.get("local_s_per_byte", "B"),
        ),
    )
    assert p.remote_chunks == 0 and p.recompute_tokens == 8 * C + 40
    busy_a = Candidate(key="rA", node_id="A", queue_len=6)
    order, _, best = rank(_req([{"A"}] * 8), [busy_a, B], fig, random.Random(0))
    assert order[0] == "rB" and best is not None and best.remote_chunks == 0


def test_nothing_cached_anywhere_is_power_of_two_choices_on_queue_length() -> None:
    busy = Candidate(key="rA", node_id="A", queue_len=5)
    for seed in range(10):
        order, outcome, best = rank(_req([]), [busy, B], _figures(1e-3, 1e-8), random.Random(seed))
        assert outcome == "pow2" and best is None and order == ["rB", "rA"]


def test_without_measured_figures_the_longest_local_prefix_wins() -> None:
    order, outcome, _ = rank(_req([{"B"}] * 3), [A, B], FiguresSnapshot(), random.Random(0))
    assert outcome == "affinity" and order[0] == "rB"


def test_the_engines_own_prefix_cache_is_free_and_the_last_token_is_always_computed() -> None:
    req = _req([{"A"}] * 8, prompt=8 * C)  # exactly 8 chunks: only 7 are reusable
    warm = Candidate(key="rA", node_id="A", recent=frozenset(f"h{k}" for k in range(8)))
    p = plan(
        req, warm, NodeFigures(prefill_s_per_token=1e-3, pull_s_per_byte=1e-8, local_s_per_byte=0.0)
    )
    assert p.engine_chunks == 7 and p.local_chunks == 0 and p.recompute_tokens == C


def test_every_candidate_appears_exactly_once() -> None:
    cands = [Candidate(key=f"r{i}", node_id="AB"[i % 2], queue_len=i % 3) for i in range(7)]
    for req in (_req([]), _req([{"A"}] * 4), _req([{"A", "B"}] * 8)):
        order, _, _ = rank(req, cands, _figures(1e-3, 1e-8), random.Random(1))
        assert sorted(order) == sorted(c.key for c in cands)


def test_a_bad_measurement_never_poisons_the_figures() -> None:
    f = Figures()
    f.report("prefill_s_per_token", "A", 1e-3)
    for bad in (0.0, -1.0, float("nan")):
        f.report("prefill_s_per_token", "A", bad)
    assert f.snapshot().get("prefill_s_per_token", "A") == 1e-3
    assert f.snapshot().get("prefill_s_per_token", "unmeasured-node") == 1e-3  # the median


def _ranked_burst(n: int, load: ReplicaLoad, now: float) -> list[str]:
    """``n`` requests for one prefix held on A, ranked in one instant (Serve's concurrent routing
    tasks), each claiming its first choice as the router does."""
    firsts = []
    for token in range(n):
        cands = [
            Candidate(key=c.key, node_id=c.node_id, queue_len=load.queue_len(c.key, 0, now))
            for c in (A, B)
        ]
        order, outcome, _ = rank(_req([{"A"}] * 8), cands, _figures(1e-3, 1e-8), random.Random(0))
        assert outcome == "cost"
        load.claim(token, order[0], now)
        firsts.append(order[0])
    return firsts


def test_a_burst_ranked_in_one_instant_is_spread_by_claims_not_piled_on_the_holder() -> None:
    firsts = _ranked_burst(6, ReplicaLoad(), now=100.0)
    assert firsts[0] == "rA" and "rB" in firsts[1:3], firsts
    assert 2 <= firsts.count("rA") <= 4, firsts  # pulling to B is cheaper than queueing on A


def test_a_claim_ends_when_sent_when_routed_elsewhere_or_when_it_expires() -> None:
    load = ReplicaLoad(ttl_s=5.0)
    load.claim(1, "rA", now=0.0)
    load.claim(2, "rA", now=0.0)
    load.claim(3, "rB", now=0.0)
    assert load.queue_len("rA", 0, now=0.0) == 2 and load.queue_len("rB", 0, now=0.0) == 1
    load.sent("rA")  # now in Serve's queue-length cache (reported=1), no longer a claim
    assert load.queue_len("rA", 1, now=0.0) == 2
    load.routed(2, "rB", "req-2")  # claimed for A, accepted by B
    assert load.queue_len("rA", 1, now=0.0) == 1 and load.queue_len("rB", 0, now=0.0) == 2
    load.claim(3, "rA", now=1.0)  # re-ranked after a fall-through: one claim per request
    assert load.queue_len("rB", 0, now=1.0) == 1 and load.queue_len("rA", 0, now=1.0) == 1
    assert load.queue_len("rA", 0, now=6.5) == 0  # never sent: expired
    load.completed("rB", "req-2")
    assert load.queue_len("rB", 0, now=6.5) == 0
    load.routed(4, "rA", "req-4")
    load.forget("rA")
    assert load.queue_len("rA", 0, now=7.0) == 0
