"""Relay-to-relay pulls over MoQT through a network you can break (issue 12, row 1).

Relay A, the impairment proxy and relay B each run in their own network namespace, joined by
veth pairs with MTU 1500 (``ray_kvmoq.bench.impair_netns``); B reaches A only through the
proxy. Every pull must be bit-exact (SHA-256 of B's sealed groups == what A published) at
0/1/5/10 % loss × 0/10/50 ms added RTT, end before its timeout, and stay within the path MTU;
the proxy's counters prove the impairment was applied. Blackouts: a short one mid-transfer is
survived; one longer than the QUIC idle timeout fails the pull with a RelayError well before
the pull's own timeout (never a hang). A bottleneck (``rate_mbit``) throttles a real pull, and
the speed measured from it makes the connector and the router recompute instead of pulling.
Skips with the reason when ``ip netns`` is not allowed.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterator

import pytest

from ray_kvmoq.bench.impair import PathRun
from ray_kvmoq.bench.impair_netns import netns_path, netns_unavailable, remove_stale
from ray_kvmoq.bench.impair_proxy import Impairment
from ray_kvmoq.connector.figures import Figures
from ray_kvmoq.serving.costmodel import Candidate, RequestView
from ray_kvmoq.serving.router import rank
from tests.connector.test_pull_decision import BPT, _remote_req, _side

WHY = netns_unavailable()
pytestmark = [pytest.mark.skipif(WHY is not None, reason=WHY or ""), pytest.mark.slow]

GROUPS, GROUP_BYTES, OBJECT_BYTES = 2, 64 << 10, 8 << 10
PULL_TIMEOUT = 45.0
IP_UDP_HEADERS = 28


@pytest.fixture(scope="module")
def run() -> Iterator[PathRun]:
    remove_stale()
    with (
        netns_path() as path,
        PathRun(path, groups=GROUPS, group_bytes=GROUP_BYTES, object_bytes=OBJECT_BYTES) as r,
    ):
        assert path.mtu == 1500
        yield r


@pytest.mark.timeout(120)
@pytest.mark.parametrize("rtt_ms", [0, 10, 50])
@pytest.mark.parametrize("loss_pct", [0, 1, 5, 10])
def test_pull_is_bit_exact_under_loss_and_delay(run: PathRun, loss_pct: int, rtt_ms: int) -> None:
    res = run.pull(
        Impairment(loss=loss_pct / 100, rtt_ms=rtt_ms, seed=loss_pct + rtt_ms), timeout=PULL_TIMEOUT
    )
    assert res.ok, res.error
    assert res.bit_exact
    assert res.result["objects"] == GROUPS * GROUP_BYTES // OBJECT_BYTES
    assert res.seconds < PULL_TIMEOUT and res.wall_s < PULL_TIMEOUT + 10
    # what crossed the path: every datagram through the proxy, none over the MTU
    px = res.proxy
    assert px["clients"] == 1 and px["bytes_received"]["down"] >= run.total_bytes
    assert 1200 <= px["max_datagram"] <= 1500 - IP_UDP_HEADERS
    if loss_pct:  # the draw runs on every datagram (its rate: test_impair_proxy); 1 % of a
        # 128 KiB pull's ~150 datagrams may be none
        n = px["received"]["up"] + px["received"]["down"]
        assert px["dropped_loss"] > 0 or n * loss_pct / 100 < 3, (px["dropped_loss"], n)
    else:
        assert px["dropped_loss"] == 0
    if rtt_ms:  # at least one round trip of added delay per pull (handshake + FETCH)
        assert res.seconds >= 2 * rtt_ms / 1000
    relay = res.result["relay"]
    assert relay["upstream_bytes"] == run.total_bytes  # nothing fetched twice
    assert relay["upstream_fetches"] == 1  # one range FETCH for both groups (fetch_chunk 8)


@pytest.mark.timeout(90)
def test_short_blackout_mid_transfer_is_survived(run: PathRun) -> None:
    third = run.total_bytes // 3
    res = run.pull(Impairment(blackout_after_bytes=third, blackout_s=2.0), timeout=PULL_TIMEOUT)
    assert res.proxy["blackouts"] == 1 and res.proxy["dropped_blackout"] > 0
    assert res.ok and res.bit_exact, res.error
    assert 2.0 <= res.seconds < PULL_TIMEOUT


@pytest.mark.timeout(90)
def test_blackout_longer_than_idle_timeout_fails_the_pull_not_hangs(run: PathRun) -> None:
    third = run.total_bytes // 3
    res = run.pull(Impairment(blackout_after_bytes=third, blackout_s=60.0), timeout=30.0)
    assert not res.ok and not res.bit_exact
    assert res.error is not None and res.error.startswith("RelayError")
    assert "Idle timeout" in res.error
    # the puller's QUIC idle timeout is 5 s: it fails at ~5-7 s, far inside its 30 s budget
    assert 4.0 <= res.seconds < 15.0
    assert res.proxy["dropped_blackout"] > 0
    assert res.proxy["sent"]["down"] > 0 and res.result["bytes"] < run.total_bytes  # mid-transfer
    assert res.result["relay"]["groups_in_flight"] == 0  # every waiter was woken with the error


@pytest.mark.timeout(120)
def test_a_throttled_pull_is_measured_slower_than_recompute_so_connector_and_router_recompute(
    run: PathRun,
) -> None:
    """The same track pulled through an open path and through a 2 Mbit/s bottleneck. The pull
    speeds measured from the two real pulls (seconds per byte, as the relay probe and the
    connector measure them) go on a figures board next to a prefill speed between them: with
    the open path's figure the connector loads the remote groups and the router plans a pull;
    with the throttled figure the connector declines (after its one probe per period) and the
    router plans recompute on that replica."""
    fast = run.pull(Impairment(), timeout=PULL_TIMEOUT)
    slow = run.pull(Impairment(rate_mbit=2.0), timeout=PULL_TIMEOUT)
    assert fast.ok and fast.bit_exact and slow.ok and slow.bit_exact, (fast.error, slow.error)
    assert slow.mb_s <= 2.0 / 8 * 1.05, slow.mb_s  # the bottleneck held (0.25 MB/s)
    fast_spb, slow_spb = fast.seconds / run.total_bytes, slow.seconds / run.total_bytes
    assert slow_spb > 4 * fast_spb, (fast.mb_s, slow.mb_s)
    prefill = (
        math.sqrt(fast_spb * slow_spb) * BPT
    )  # s/token: slower than one pull, faster than the other

    decisions = {}
    for name, spb in (("fast", fast_spb), ("slow", slow_spb)):
        side = _side(spb, prefill)
        st = _remote_req(3)
        first = side._worth_loading(st, known=3, num_computed=0)
        second = side._worth_loading(st, known=3, num_computed=0)
        f = Figures()
        for node in ("A", "B"):
            f.report("prefill_s_per_token", node, prefill)
            f.report("pull_s_per_byte", node, spb)
            f.report("local_s_per_byte", node, 1e-11)
        req = RequestView(
            prompt_tokens=8 * 128 + 40, chunk_size=128, bytes_per_token=BPT,
            holders=[frozenset({"A"})] * 8, hashes=[f"h{k}" for k in range(8)],
        )  # fmt: skip
        busy_a = Candidate(key="rA", node_id="A", queue_len=6)
        order, _, best = rank(req, [busy_a, Candidate(key="rB", node_id="B")], f.snapshot(),
                              random.Random(0))  # fmt: skip
        assert order[0] == "rB" and best is not None
        decisions[name] = (first, second, best.remote_chunks, side.counters.totals())
    assert decisions["fast"][:3] == (3, 3, 8), decisions
    assert decisions["slow"][:3] == (3, 0, 0), decisions  # probe, then declined; router: recompute
    assert decisions["slow"][3]["pulls_declined"] == 1 and decisions["slow"][3]["pulls_probed"] == 1
