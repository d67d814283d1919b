"""Prometheus metrics of the serving layer.

Design: one :class:`ServingMetrics` per process, on its own ``CollectorRegistry`` (never the
global one, so tests and several apps in one process do not collide). The ingress owns the one
that ``GET /metrics`` renders; prefill and decode replicas report what they did (reused tokens,
KV bytes moved, fallbacks) in their replies and the ingress records it, so one scrape of the
ingress shows the whole request path. The router runs in the ingress process (Serve routes on
the caller's side) and records its decisions into the same registry through :func:`process_metrics`.

Names follow Prometheus conventions: ``kvmoq_`` prefix, ``_seconds`` / ``_bytes`` / ``_total``
suffixes, low-cardinality labels only (no prompt ids, no tenants' keys).
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The ``Content-Type`` of :meth:`ServingMetrics.render`."""

_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0)
_ITL_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56)


class ServingMetrics:
    """The serving metrics, registered on a private registry."""

    def __init__(self) -> None:
        r = self.registry = CollectorRegistry(auto_describe=True)
        self.requests = Counter(
            "kvmoq_requests", "HTTP requests by endpoint and status.", ["endpoint", "status"],
            registry=r,
        )  # fmt: skip
        self.ttft = Histogram(
            "kvmoq_time_to_first_token_seconds", "Request arrival to first token.",
            buckets=_TTFT_BUCKETS, registry=r,
        )  # fmt: skip
        self.itl = Histogram(
            "kvmoq_inter_token_latency_seconds", "Gap between consecutive streamed tokens.",
            buckets=_ITL_BUCKETS, registry=r,
        )  # fmt: skip
        self.prompt_tokens = Counter("kvmoq_prompt_tokens", "Prompt tokens.", registry=r)
        self.completion_tokens = Counter("kvmoq_completion_tokens", "Generated tokens.", registry=r)
        self.reused_tokens = Counter(
            "kvmoq_reused_tokens", "Prompt tokens whose KV was reused, by where it came from.",
            ["source"], registry=r,
        )  # fmt: skip
        self.kv_bytes = Counter(
            "kvmoq_kv_bytes_moved", "KV bytes moved to a consumer, by path.", ["path"], registry=r
        )
        self.fallbacks = Counter(
            "kvmoq_kv_fallbacks", "KV fetches that fell back to recomputing, by reason.",
            ["reason"], registry=r,
        )  # fmt: skip
        self.router_decisions = Counter(
            "kvmoq_router_decisions", "Routing decisions by deployment, policy and outcome.",
            ["deployment", "policy", "outcome"], registry=r,
        )  # fmt: skip
        self.router_cost = Histogram(
            "kvmoq_router_chosen_cost_seconds", "Estimated cost of the chosen replica.",
            ["deployment"], buckets=_TTFT_BUCKETS, registry=r,
        )  # fmt: skip

    # ---- recording helpers ------------------------------------------------------------------

    def record_reuse(self, *, local: int, remote: int) -> None:
        """Count reused prompt tokens (``local``: same node; ``remote``: pulled over MoQT)."""
        if local:
            self.reused_tokens.labels(source="local").inc(local)
        if remote:
            self.reused_tokens.labels(source="remote").inc(remote)

    def record_kv_bytes(self, *, zero_copy: int = 0, moqt: int = 0) -> None:
        """Count KV bytes read from the same node's object store or pulled over MoQT."""
        if zero_copy:
            self.kv_bytes.labels(path="zero_copy").inc(zero_copy)
        if moqt:
            self.kv_bytes.labels(path="moqt").inc(moqt)

    def record_fallbacks(self, reasons: list[str]) -> None:
        """Count one fallback to recomputing per reason (``timeout``, ``digest``, ``error``...)."""
        for reason in reasons:
            self.fallbacks.labels(reason=reason).inc()

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
