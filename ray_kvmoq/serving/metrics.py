"""Prometheus metrics of the serving layer's own parts (the engines' are vLLM's).

One :class:`ServingMetrics` per process, on its own ``CollectorRegistry`` (never the global
one, so tests and several apps in one process do not collide). The KV router runs on the
caller's side of a Serve handle — the ingress for LLM and decode deployments — and records its
decisions here; the ingress's ``GET /metrics`` renders them. The connector's counters are
vLLM connector stats (``vllm:kvmoq_*``, exported by vLLM's stat loggers) and are also kept on
the figures board (``kvmoq inspect``).

Names follow Prometheus conventions: ``kvmoq_`` prefix, ``_seconds`` / ``_total`` suffixes,
low-cardinality labels only (no prompt ids, no tenants).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

__all__ = ["CONTENT_TYPE", "ServingMetrics", "process_metrics"]

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The ``Content-Type`` of :meth:`ServingMetrics.render`."""

_COST_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
_DECISION_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0)


class ServingMetrics:
    """The serving metrics, registered on a private registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.router_decisions = Counter(
            "kvmoq_router_decisions", "KV router decisions by deployment, policy and outcome.",
            ["deployment", "policy", "outcome"], registry=r,
        )  # fmt: skip
        self.router_cost = Histogram(
            "kvmoq_router_chosen_cost_seconds",
            "Estimated seconds to the last token of the request on the chosen replica.",
            ["deployment"], buckets=_COST_BUCKETS, registry=r,
        )  # fmt: skip
        self.router_decision_seconds = Histogram(
            "kvmoq_router_decision_seconds",
            "Time the KV router took to rank the replicas for one request (tokenizing, the KV "
            "directory lookup, the cost model): what routing adds to time to first token.",
            ["deployment"], buckets=_DECISION_BUCKETS, registry=r,
        )  # fmt: skip

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)


_PROCESS: ServingMetrics | None = None


def process_metrics() -> ServingMetrics:
    """The metrics object of this process (created on first use)."""
    global _PROCESS
    if _PROCESS is None:
        _PROCESS = ServingMetrics()
    return _PROCESS
