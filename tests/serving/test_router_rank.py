"""The KV router's decisions (pure: :func:`rank` over plain views and figures).

The three cases the issue names: prefix affinity when it is cheap, a pull when the prefix lives
elsewhere and the replica holding it is busy, recompute when the measured pull is slower than
recomputing — plus the fallbacks when nothing is cached or nothing is measured yet.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from ray_kvmoq.connector.figures import STALE_S, Figures, FiguresSnapshot
from ray_kvmoq.serving.costmodel import Candidate, NodeFigures, RequestView, plan
from ray_kvmoq.serving.router import (
    COLD_TIE,
    DEFAULT_MAX_TOKENS,
    PIN_SLACK,
    PROBE_TIE,
    ReplicaLoad,
    max_tokens,
    rank,
    shared_decode_figure,
)

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


def _prefill_figures(a: float, b: float, *, provisional: bool = False) -> Figures:
    """Nodes A and B with these prefill figures (start-up probes' if ``provisional``) and
    100 MB/s pulls."""
    f = Figures()
    for node, prefill in (("A", a), ("B", b)):
        f.report("prefill_s_per_token", node, prefill, provisional=provisional)
        f.report("pull_s_per_byte", node, 1e-8)
    return f


def _decode_figures() -> Figures:
    """Both nodes: 1 ms/token prefill, 100 MB/s pulls, 20 ms a decoding sequence."""
    f = Figures()
    for node in ("A", "B"):
        f.report("prefill_s_per_token", node, 1e-3)
        f.report("pull_s_per_byte", node, 1e-8)
        f.report("local_s_per_byte", node, 1e-11)
        f.report("decode_s_per_token", node, 0.02)
    return f


def _req(chunks_on: list[set[str]], prompt: int = 8 * C + 40, max_tokens: int = 1) -> RequestView:
    return RequestView(
        prompt_tokens=prompt,
        chunk_size=C,
        bytes_per_token=BPT,
        holders=[frozenset(s) for s in chunks_on],
        hashes=[f"h{k}" for k in range(prompt // C)],
        max_tokens=max_tokens,
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
        assert outcome == "pow2" and order == ["rB", "rA"]
        assert best is not None and best.key == "rB" and best.recompute_tokens == 8 * C + 40
    for seed in range(10):  # without figures: the shorter queue
        order, outcome, best = rank(_req([]), [busy, B], FiguresSnapshot(), random.Random(seed))
        assert outcome == "pow2" and order == ["rB", "rA"] and best is not None
        assert best.cost_s is None


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


def test_a_node_starved_by_a_bad_figure_is_priced_at_its_peers_figure_once_it_goes_stale() -> None:
    """B's start-up probe ran beside A's engine start (9 ms/token, A measures 1 ms): the cost
    ranking sends B nothing, so B never measures again. After ``STALE_S`` without a report B
    reads as A's fresh figure and gets work; A's own figure, still fresh, is kept."""
    now = [0.0]
    f = Figures(clock=lambda: now[0])
    f.report("prefill_s_per_token", "B", 9e-3)
    for t in range(0, 121, 5):  # A keeps serving and reporting
        now[0] = float(t)
        f.report("prefill_s_per_token", "A", 1e-3)
        snap = FiguresSnapshot.from_dict(f.snapshot().to_dict())  # as the router receives it
        expected_b = 9e-3 if t <= STALE_S else 1e-3
        assert snap.get("prefill_s_per_token", "B") == pytest.approx(expected_b)
        assert snap.get("prefill_s_per_token", "A") == pytest.approx(1e-3)
    now[0] = 1000.0  # nobody fresh: each node keeps its own, however old
    assert f.snapshot().get("prefill_s_per_token", "B") == pytest.approx(9e-3)


def test_a_start_up_probe_stands_in_only_until_real_work_is_measured() -> None:
    """B's probe ran beside A's engine start (10 ms/token; B's real steps take 1.3 ms): while
    only the probe speaks for B it reads no higher than A's measured figure, the first
    measurement of B's real work replaces the probe instead of averaging with it, and a later
    probe (a replica restart) does not overwrite real measurements."""
    f = Figures(clock=lambda: 0.0)
    f.report("prefill_s_per_token", "B", 10e-3, provisional=True)
    assert f.snapshot().get("prefill_s_per_token", "B") == pytest.approx(10e-3)  # no peer yet
    f.report("prefill_s_per_token", "A", 1.2e-3, weight=5)
    snap = FiguresSnapshot.from_dict(f.snapshot().to_dict())
    assert snap.provisional == {"prefill_s_per_token": ["B"]}
    assert snap.get("prefill_s_per_token", "B") == pytest.approx(1.2e-3)
    f.report("prefill_s_per_token", "B", 1.3e-3, weight=1)
    assert f.snapshot().get("prefill_s_per_token", "B") == pytest.approx(1.3e-3)
    assert f.snapshot().provisional == {}
    f.report("prefill_s_per_token", "B", 10e-3, provisional=True)
    assert f.snapshot().get("prefill_s_per_token", "B") == pytest.approx(1.3e-3)
    f.report("prefill_s_per_token", "C", 0.5e-3, provisional=True)  # a fast probe is kept
    assert f.snapshot().get("prefill_s_per_token", "C") == pytest.approx(0.5e-3)


def _ranked_burst(n: int, load: ReplicaLoad, now: float, suffix: int) -> list[str]:
    """``n`` requests for one 8-chunk prefix held on A plus ``suffix`` tokens of their own,
    ranked in one instant (Serve's concurrent routing tasks), each claiming its first choice with
    its planned work, as the router does."""
    firsts = []
    for token in range(n):
        cands = []
        for c in (A, B):
            work, planned = load.work_ahead(c.key, now)
            cands.append(
                Candidate(
                    key=c.key,
                    node_id=c.node_id,
                    queue_len=load.queue_len(c.key, 0, now),
                    planned=planned,
                    work_ahead_s=work,
                )
            )
        req = _req([{"A"}] * 8, prompt=8 * C + suffix)
        order, outcome, best = rank(req, cands, _figures(1e-3, 1e-8), random.Random(0))
        assert outcome == "cost" and best is not None and best.work_s is not None
        load.claim(token, order[0], now, best.work_s)
        firsts.append(order[0])
    return firsts


def test_a_burst_ranked_in_one_instant_is_spread_by_claims_not_piled_on_the_holder() -> None:
    # each request computes 512 tokens of its own: 0.51 s on A, 0.75 s on B (which pulls the
    # prefix first), so the two fill up alternately with A a little ahead
    firsts = _ranked_burst(6, ReplicaLoad(), now=100.0, suffix=512)
    assert firsts == ["rA", "rB", "rA", "rB", "rA", "rA"], firsts


def test_a_burst_of_cache_hits_stays_on_the_holder_while_its_work_is_smaller_than_a_pull() -> None:
    # each request computes 40 tokens (0.04 s) and reads the prefix from A's relay (~0.0 s):
    # six of them ahead (0.24 s) are as dear as one pull to B
    firsts = _ranked_burst(8, ReplicaLoad(), now=100.0, suffix=40)
    assert firsts[:5] == ["rA"] * 5 and "rB" in firsts[5:], firsts


def test_a_replica_busy_with_cache_hits_keeps_its_prefix_and_one_computing_a_cold_prefix_does_not() -> (
    None
):
    """The queue is priced by the work in it, not by its length: three cache hits ahead (0.2 s
    of planned work) cost less than pulling the prefix to an idle replica; one cold 1,064-token
    prefill ahead (1.06 s) costs more."""
    warm = frozenset(f"h{k}" for k in range(8))
    req, fig = _req([{"A"}] * 8), _figures(1e-3, 1e-8)
    hits = Candidate(key="rA", node_id="A", queue_len=3, planned=3, work_ahead_s=0.2, recent=warm)
    order, outcome, best = rank(req, [B, hits], fig, random.Random(0))
    assert outcome == "cost" and order[0] == "rA" and best is not None
    assert best.engine_chunks == 8 and best.recompute_tokens == 40
    cold = Candidate(key="rA", node_id="A", queue_len=1, planned=1, work_ahead_s=1.064, recent=warm)
    order, _, best = rank(req, [cold, B], fig, random.Random(0))
    assert order[0] == "rB" and best is not None and best.remote_chunks == 8


def test_requests_this_router_did_not_plan_are_priced_as_a_full_recompute_each() -> None:
    req, nf = (
        _req([]),
        NodeFigures(prefill_s_per_token=1e-3, pull_s_per_byte=None, local_s_per_byte=None),
    )
    mixed = Candidate(key="rA", node_id="A", queue_len=3, planned=1, work_ahead_s=0.5)
    p = plan(req, mixed, nf)
    assert p.work_s is not None and p.cost_s is not None
    assert abs(p.work_s - 1.064) < 1e-9
    assert abs(p.cost_s - (1.064 + 0.5 + 2 * 1.064)) < 1e-9


def test_work_ahead_drains_with_time_and_leaves_with_a_completed_request() -> None:
    load = ReplicaLoad(ttl_s=5.0)
    load.claim(1, "rA", now=0.0, work_s=2.0)
    load.claim(2, "rA", now=0.0, work_s=1.0)
    assert load.work_ahead("rA", now=0.0) == (3.0, 2)
    assert load.work_ahead("rA", now=1.0) == (2.0, 2)  # one second of it ran
    load.routed(1, "rA", "req-1", now=1.0)
    load.routed(2, "rA", "req-2", now=1.0)
    load.completed("rA", "req-1")  # its 2 s leave with it: 1 s is left at most
    assert load.work_ahead("rA", now=1.0) == (1.0, 1)
    assert load.work_ahead("rA", now=9.0) == (0.0, 1)  # drained, still in flight
    load.claim(3, "rA", now=10.0, work_s=0.5)  # work starts from now, not from the past
    load.routed(3, "rB", "req-3", now=10.0)  # claimed for A, accepted by B: B's work now
    assert load.work_ahead("rB", now=10.0) == (0.5, 1)
    assert load.work_ahead("rA", now=10.0) == (0.0, 1)
    load.sent("rA")  # nothing unsent left on A: a no-op
    assert load.queue_len("rA", 0, now=10.0) == 1


def test_a_sent_request_keeps_its_work_until_routed_or_until_serve_never_says_so() -> None:
    load = ReplicaLoad(ttl_s=5.0, sent_ttl_s=60.0)
    load.claim(1, "rA", now=0.0, work_s=30.0)
    load.sent("rA")
    assert load.queue_len("rA", 1, now=10.0) == 1  # Serve counts it, not as a claimed slot
    assert load.work_ahead("rA", now=10.0) == (20.0, 1)  # past the slot TTL, its work remains
    assert load.work_ahead("rA", now=61.0) == (0.0, 0)  # never routed: gone after sent_ttl_s


def test_a_claim_ends_when_sent_when_routed_elsewhere_or_when_it_expires() -> None:
    load = ReplicaLoad(ttl_s=5.0)
    load.claim(1, "rA", now=0.0)
    load.claim(2, "rA", now=0.0)
    load.claim(3, "rB", now=0.0)
    assert load.queue_len("rA", 0, now=0.0) == 2 and load.queue_len("rB", 0, now=0.0) == 1
    load.sent("rA")  # now in Serve's queue-length cache (reported=1), no longer a claim
    assert load.queue_len("rA", 1, now=0.0) == 2
    load.routed(2, "rB", "req-2", now=0.0)  # claimed for A, accepted by B
    assert load.queue_len("rA", 1, now=0.0) == 1 and load.queue_len("rB", 0, now=0.0) == 2
    load.claim(3, "rA", now=1.0)  # re-ranked after a fall-through: one claim per request
    assert load.queue_len("rB", 0, now=1.0) == 1 and load.queue_len("rA", 0, now=1.0) == 1
    assert load.queue_len("rA", 0, now=6.5) == 0  # never sent: expired
    load.completed("rB", "req-2")
    assert load.queue_len("rB", 0, now=6.5) == 0
    load.routed(4, "rA", "req-4", now=6.5)
    load.forget("rA")
    assert load.queue_len("rA", 0, now=7.0) == 0


def test_a_holder_whose_decode_batch_outweighs_a_pull_loses_the_next_request() -> None:
    """Every running request adds its decode token to each step: with 20 sequences at 20 ms a
    sequence, the holder's next first token is 0.6 s away (1.5 steps), more than pulling the
    prefix to an idle replica (0.24 s); with 4 running (0.12 s) the holder keeps it."""
    warm = frozenset(f"h{k}" for k in range(8))
    f = _decode_figures()
    fig, req = f.snapshot(), _req([{"A"}] * 8)
    big = Candidate(key="rA", node_id="A", queue_len=20, planned=20, recent=warm)
    order, _, best = rank(req, [big, B], fig, random.Random(0))
    assert order[0] == "rB" and best is not None and best.remote_chunks == 8
    assert best.cost_s == pytest.approx(best.work_s)  # B runs nothing: no batch to share
    small = Candidate(key="rA", node_id="A", queue_len=4, planned=4, recent=warm)
    order, _, best = rank(req, [small, B], fig, random.Random(0))
    assert order[0] == "rA" and best is not None and best.cost_s is not None
    assert best.cost_s == pytest.approx(40 * 1e-3 + 1.5 * 4 * 0.02)


def test_a_prefix_stays_on_its_engines_holder_until_it_costs_more_than_pin_slack_times_the_cheapest() -> (
    None
):
    """Stock's prefix pinning while the holder is not overloaded: with 10 sequences running the
    holder's plan (0.34 s) is dearer than pulling the prefix to an idle replica (0.28 s) but
    within PIN_SLACK of it, so the holder keeps the request ("pinned"); with 20 running
    (0.64 s, 2.3x) the idle replica gets it ("cost"). Where both engines hold the prefix, the
    cheaper one wins: nothing to pin."""
    assert PIN_SLACK == 2.0
    warm = frozenset(f"h{k}" for k in range(8))
    fig, req = _decode_figures().snapshot(), _req([{"A"}] * 8)
    held = Candidate(key="rA", node_id="A", queue_len=10, planned=10, recent=warm)
    order, outcome, best = rank(req, [B, held], fig, random.Random(0))
    assert (outcome, order) == ("pinned", ["rA", "rB"]) and best is not None
    assert best.key == "rA" and best.engine_chunks == 8
    assert best.cost_s == pytest.approx(40e-3 + 1.5 * 10 * 0.02)
    over = Candidate(key="rA", node_id="A", queue_len=20, planned=20, recent=warm)
    order, outcome, best = rank(req, [B, over], fig, random.Random(0))
    assert (outcome, order) == ("cost", ["rB", "rA"]) and best is not None
    assert best.remote_chunks == 8
    both = Candidate(key="rB", node_id="B", queue_len=2, planned=2, recent=warm)
    order, outcome, best = rank(req, [held, both], fig, random.Random(0))
    assert (outcome, order) == ("cost", ["rB", "rA"]) and best is not None
    assert best.engine_chunks == 8


def test_a_request_that_decodes_longer_leaves_a_busy_holder_for_a_pull_sooner() -> None:
    """The batch slows every token of a request, not only its first: with 4 sequences running
    at 20 ms a sequence, a 1-token request stays on the prefix's holder (0.16 s against 0.28 s
    for pulling the prefix to an idle replica), while a 32-token request would sit through 32.5
    of the holder's steps (2.64 s) and goes to the idle replica, which pulls the prefix."""
    warm = frozenset(f"h{k}" for k in range(8))
    f = _decode_figures()
    holder = Candidate(key="rA", node_id="A", queue_len=4, planned=4, recent=warm)
    order, _, best = rank(_req([{"A"}] * 8), [holder, B], f.snapshot(), random.Random(0))
    assert order[0] == "rA" and best is not None
    assert best.cost_s == pytest.approx(40e-3 + 1.5 * 4 * 0.02)
    long = _req([{"A"}] * 8, max_tokens=32)
    order, _, best = rank(long, [holder, B], f.snapshot(), random.Random(0))
    assert order[0] == "rB" and best is not None and best.remote_chunks == 8
    assert plan(long, holder, NodeFigures(prefill_s_per_token=1e-3, pull_s_per_byte=1e-8,
                local_s_per_byte=1e-11, decode_s_per_token=0.02)).cost_s == pytest.approx(
        40e-3 + 32.5 * 4 * 0.02
    )  # fmt: skip


def test_max_tokens_is_the_requests_limit_or_openais_completions_default() -> None:
    class Req:
        def __init__(self, **kw: object) -> None:
            self.__dict__.update(kw)

    assert max_tokens(Req(max_completion_tokens=40, max_tokens=8)) == 40
    assert max_tokens(Req(max_completion_tokens=None, max_tokens=8)) == 8
    assert max_tokens(Req(max_tokens=None)) == DEFAULT_MAX_TOKENS == 16
    assert max_tokens(Req(max_tokens=0)) == max_tokens(Req(max_tokens=True)) == 16


def test_every_candidate_is_priced_with_the_median_decode_figure_so_a_shorter_queue_wins() -> None:
    """A node that gets little work measures a noisy, high decode slope (31 ms against the busy
    node's 11 ms on the 2-node bench). Priced with its own figure it would lose to a longer
    queue and stay starved; priced with the candidates' median it wins on its shorter queue."""
    f = Figures()
    for node, decode in (("A", 0.031), ("B", 0.011)):
        f.report("prefill_s_per_token", node, 1e-3)
        f.report("pull_s_per_byte", node, 1e-8)
        f.report("local_s_per_byte", node, 1e-11)
        f.report("decode_s_per_token", node, decode)
    fig = f.snapshot()
    assert shared_decode_figure(fig, {"A", "B"}) == pytest.approx(0.021)
    assert shared_decode_figure(fig, {"A"}) == pytest.approx(0.031)
    assert shared_decode_figure(FiguresSnapshot(), {"A", "B"}) is None
    starved = Candidate(key="rA", node_id="A", queue_len=1, planned=1)
    busy = Candidate(key="rB", node_id="B", queue_len=2, planned=2)
    req = _req([{"A", "B"}] * 8, max_tokens=64)
    order, outcome, best = rank(req, [busy, starved], fig, random.Random(0))
    assert (outcome, order) == ("cost", ["rA", "rB"]) and best is not None
    assert best.cost_s == pytest.approx(best.work_s + 64.5 * 1 * 0.021)
    # with its own 31 ms the starved node would have cost more than the busy one's 2 x 11 ms
    own = NodeFigures(prefill_s_per_token=1e-3, pull_s_per_byte=1e-8, local_s_per_byte=1e-11)
    dear = plan(req, starved, replace(own, decode_s_per_token=0.031))
    cheap = plan(req, busy, replace(own, decode_s_per_token=0.011))
    assert dear.cost_s is not None and cheap.cost_s is not None and dear.cost_s > cheap.cost_s


def test_a_cold_prompt_goes_to_the_shorter_queue_when_the_costs_differ_only_by_figure_noise() -> (
    None
):
    """Both nodes recompute the whole prompt; A's prefill figure reads 10 % faster (noise on
    identical nodes, within COLD_TIE) but A is decoding a request: B gets the new prefix. A
    node really 2x faster wins whatever its queue, and with equal queues the engine holding
    fewer recent chunks gets it."""
    assert COLD_TIE == 1.25
    f = _prefill_figures(1.46e-3, 1.63e-3)
    noisy = f.snapshot()
    decoding = Candidate(key="rA", node_id="A", queue_len=1, planned=1)
    for seed in range(10):
        order, outcome, best = rank(_req([]), [decoding, B], noisy, random.Random(seed))
        assert (outcome, order) == ("pow2", ["rB", "rA"]) and best is not None
        assert best.work_s == pytest.approx((8 * C + 40) * 1.63e-3)
    f.report("prefill_s_per_token", "A", 0.5e-3)
    f.report("prefill_s_per_token", "A", 0.5e-3)
    f.report("prefill_s_per_token", "A", 0.5e-3)
    faster = f.snapshot()
    assert faster.get("prefill_s_per_token", "A") < 1.63e-3 / COLD_TIE
    for seed in range(10):
        order, _, _ = rank(_req([]), [decoding, B], faster, random.Random(seed))
        assert order == ["rA", "rB"]
    holds_one = Candidate(key="rA", node_id="A", recent=frozenset({"x0", "x1"}))
    for seed in range(10):
        order, _, _ = rank(_req([]), [holds_one, B], noisy, random.Random(seed))
        assert order == ["rB", "rA"]


def test_start_up_probes_1_32x_apart_are_a_tie_and_the_shorter_queue_gets_the_cold_prompt() -> None:
    """The bench run where two identical nodes' probes read 0.93 and 1.23 ms a token: while
    both figures are the probes', the 1.32x between them is a tie (within PROBE_TIE), so the
    faster-probing A, busy decoding, does not get the new prefix. Once A's real work has been
    measured at the same figure, COLD_TIE applies and A wins; a probe 2.5x faster wins at
    once."""
    assert (COLD_TIE, PROBE_TIE) == (1.25, 2.0)
    f = _prefill_figures(0.93e-3, 1.23e-3, provisional=True)
    probed = f.snapshot()
    assert probed.is_provisional("prefill_s_per_token", "A")
    decoding = Candidate(key="rA", node_id="A", queue_len=1, planned=1)
    for seed in range(10):
        order, outcome, _ = rank(_req([]), [decoding, B], probed, random.Random(seed))
        assert (outcome, order) == ("pow2", ["rB", "rA"])

    far = _prefill_figures(0.49e-3, 1.23e-3, provisional=True)
    for seed in range(10):
        order, _, _ = rank(_req([]), [decoding, B], far.snapshot(), random.Random(seed))
        assert order == ["rA", "rB"]

    measured = _prefill_figures(0.93e-3, 1.23e-3)
    assert not measured.snapshot().is_provisional("prefill_s_per_token", "A")
    for seed in range(10):
        order, _, _ = rank(_req([]), [decoding, B], measured.snapshot(), random.Random(seed))
        assert order == ["rA", "rB"]


def test_a_cold_prompt_goes_to_the_replica_used_less_lately_before_the_one_holding_less() -> None:
    """Equal queues, costs within COLD_TIE: the replica that served the live prefix lately
    (use 1.9) loses to the one whose engine holds as much but was used less (0.8: the bench's
    opening test prompt, long ago), whichever pair the draw makes."""
    f = _prefill_figures(1.46e-3, 1.63e-3)
    held = frozenset(f"x{k}" for k in range(8))
    busy_lately = Candidate(key="rA", node_id="A", recent=held, recent_use=1.9)
    quiet = Candidate(key="rB", node_id="B", recent=held | {"y"}, recent_use=0.8)
    for seed in range(10):
        order, outcome, _ = rank(_req([]), [busy_lately, quiet], f.snapshot(), random.Random(seed))
        assert (outcome, order) == ("pow2", ["rB", "rA"])


def test_recent_use_counts_routed_requests_and_halves_every_half_life() -> None:
    load = ReplicaLoad(half_life_s=30.0)
    load.routed(1, "r", "a", now=100.0)
    load.routed(2, "r", "b", now=100.0)
    assert load.recent_use("r", 100.0) == pytest.approx(2.0)
    assert load.recent_use("r", 130.0) == pytest.approx(1.0)
    load.routed(3, "r", "c", now=160.0)
    assert load.recent_use("r", 160.0) == pytest.approx(1.5)
    assert load.recent_use("other", 160.0) == 0.0
    load.forget("r")
    assert load.recent_use("r", 160.0) == 0.0
