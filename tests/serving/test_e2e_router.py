"""The KV-placement router inside Serve: two combined replicas on two nodes of the shared cluster.

A prompt sharing a prefix with an earlier one goes to the replica that computed it (in-flight
affinity, then routing stats); round-robin placement sends it to the other node, whose prefill
then pulls the prefix from the first node's relay over MoQT (the default cost figures make a
pull cheaper than recomputing). Decisions and reuse show in ``/metrics``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ray_kvmoq.serving.app import AppArgs, ReplicaArgs, build

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.ray]

MODEL = "SmolLM2-135M-Instruct"
DOC = (
    "A lighthouse keeper kept a log of every ship, storm and repair for forty years, and the "
    "log became the best record of the coast that anyone had. "
) * 9


@pytest.fixture(scope="module")
def two_replicas(serve_http: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    from ray import serve

    args = AppArgs(
        mode="combined",
        server=ReplicaArgs(num_replicas=2, num_cpus=1, max_replicas_per_node=1),
        ingress=ReplicaArgs(num_cpus=0),
        routing_stats_period_s=0.5,
        # No figures file: the documented measured defaults, whatever this machine has cached.
        costs_path=str(tmp_path_factory.mktemp("costs") / "absent.json"),
    )
    serve.run(build(args), name="router", route_prefix="/router")
    try:
        yield serve_http + "/router"
    finally:
        serve.delete("router")


def _ask(c: httpx.Client, q: str, **extra: Any) -> httpx.Response:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": DOC + q}],
        "max_tokens": 4,
        "temperature": 0,
        **extra,
    }
    r = c.post("/v1/chat/completions", json=body)
    assert r.status_code == 200, r.text
    return r


def _cached(r: httpx.Response) -> int:
    return int(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"])


def test_router_follows_the_kv_and_round_robin_pulls_it(two_replicas: str) -> None:
    with httpx.Client(base_url=two_replicas, timeout=300) as c:
        first = _ask(c, "Who kept the log?")
        home = first.headers["x-kvmoq-prefill-node"]
        follow = _ask(c, "How long did he keep it?")
        assert follow.headers["x-kvmoq-prefill-node"] == home
        assert _cached(follow) >= 256
        rr = [_ask(c, f"Question {i}?", routing="round_robin") for i in range(2)]
        nodes = {r.headers["x-kvmoq-prefill-node"] for r in rr}
        assert len(nodes) == 2 and home in nodes
        assert all(_cached(r) >= 256 for r in rr)
        metrics = c.get("/metrics").text
    assert 'kvmoq_router_decisions_total{deployment="server",outcome="cost",policy="kv"}' in metrics
    assert 'outcome="rr",policy="round_robin"' in metrics
    # The replica on the other node reused the prefix by pulling it over MoQT.
    assert 'kvmoq_reused_tokens_total{source="remote"}' in metrics
    assert 'kvmoq_kv_bytes_moved_total{path="moqt"}' in metrics
