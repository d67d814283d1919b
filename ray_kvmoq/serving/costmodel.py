"""The router's cost model: estimated seconds until a request on a candidate replica is done.

For a candidate on node ``n``, the prompt's leading chunks fall into four kinds, in order:

1. in the replica's own engine (vLLM's prefix cache: this router sent it that prefix recently)
   — free;
2. held by ``n``'s relay — read zero-copy: ``bytes × local_s_per_byte(n)``;
3. held by another node's relay — pulled over MoQT *only if that beats recomputing them*:
   ``bytes × pull_s_per_byte(n)`` vs ``tokens × prefill_s_per_token(n)`` (the connector applies
   the same rule, so the estimate matches what the replica will do);
4. the rest — recomputed: ``tokens × prefill_s_per_token(n)``;

plus the work ahead of it on that replica: the seconds still to run of the requests this router
sent there (each priced by its own plan when it was routed, draining at one second per second;
see :class:`ray_kvmoq.serving.router.ReplicaLoad`), and, for requests in the replica's queue that
this router did not plan (another router sent them), ``the request's own recompute time`` each —
a conservative proxy. Requests that hit an engine's cache are nearly free and count so: a
replica full of cache hits is not "busy", and one computing a long cold prefix is.

Every request on the replica also adds its decode token to each engine step, and the new
request sits through those steps: 1.5 of them before its first token (half the step under way,
on average, and the step its prefill shares with them), then one per token it generates after
the first. So the decode batch costs ``(1.5 + max_tokens - 1) × queue_len × decode_s_per_token``,
where ``decode_s_per_token`` is the *marginal* seconds one more sequence adds to a step (a
step's fixed part is paid whichever replica the request joins). The router passes every
candidate the same decode figure (the median over their nodes), so this term compares queue
lengths; a per-node slope measured on a node that runs one or two sequences is noise, and
pricing that node with it starved it (``ray_kvmoq.serving.router.shared_decode_figure``).
Pricing the whole request, not only its first token, is what makes the router spread a hot
prefix: a pull is paid once, while a bigger batch slows every token of the request (and, on a
saturated engine, every request's throughput). Pricing only the first token, one of two nodes
computed 58–64 % of a 2-prefix workload's prompt tokens (docs/benchmarks.md).

All figures are measured on the running cluster (``ray_kvmoq.connector.figures``): nothing
here is a constant. With no figures yet, :func:`plan` returns ``cost_s=None`` and the router
falls back to prefix affinity / power of two choices. Pure functions, no Ray, no I/O.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["Candidate", "NodeFigures", "Plan", "RequestView", "plan"]


@dataclass(frozen=True, kw_only=True)
class RequestView:
    """What the router knows about one request."""

    prompt_tokens: int
    """Prompt length."""
    chunk_size: int
    """Tokens per group."""
    bytes_per_token: float
    """Encoded KV bytes per token of the request's track."""
    holders: Sequence[frozenset[str]]
    """Per leading chunk, the nodes whose relays hold it (the directory's longest prefix)."""
    hashes: Sequence[str] = ()
    """The prompt's short chunk hashes (for engine-cache affinity)."""
    max_tokens: int = 1
    """Tokens it may generate (its ``max_tokens``): the decode steps it will share."""


@dataclass(frozen=True, kw_only=True)
class Candidate:
    """One replica as the router sees it."""

    key: str
    """Replica id."""
    node_id: str
    """Its Ray node."""
    queue_len: int = 0
    """Requests ongoing or queued on it."""
    planned: int = 0
    """How many of those this router planned (their cost is in ``work_ahead_s``); the other
    ``queue_len - planned`` are priced as a full recompute of the new request each."""
    work_ahead_s: float = 0.0
    """Seconds of planned work still ahead on it."""
    recent: frozenset[str] = frozenset()
    """Short chunk hashes of prefixes recently sent to it (likely in its engine's cache)."""
    recent_use: float = 0.0
    """Requests routed to it lately: a count that halves every 30 s (where the prefixes in
    use live; a cold prompt goes where they are fewest)."""


@dataclass(frozen=True, kw_only=True)
class NodeFigures:
    """Measured figures of one node (None: not measured yet)."""

    prefill_s_per_token: float | None
    pull_s_per_byte: float | None
    local_s_per_byte: float | None
    decode_s_per_token: float | None = None


@dataclass(frozen=True, kw_only=True)
class Plan:
    """What a candidate would do with the request, and what it would cost."""

    key: str
    engine_chunks: int
    """Leading chunks in the replica's engine cache."""
    local_chunks: int
    """Then chunks read from its node's relay."""
    remote_chunks: int
    """Then chunks pulled from other nodes."""
    recompute_tokens: int
    """Tokens it computes."""
    work_s: float | None
    """Estimated seconds of the request's own prefill work: recompute plus loads (None: figures
    missing)."""
    cost_s: float | None
    """Estimated seconds to its last token: ``work_s``, the work ahead and the decode steps it
    shares with the batch (None: figures missing)."""

    @property
    def reused_chunks(self) -> int:
        """Chunks it does not compute."""
        return self.engine_chunks + self.local_chunks + self.remote_chunks


_STEPS_SHARED = 1.5
"""Decode steps of the running requests a new request sits through before its first token: half
the step under way, on average, and the one its prefill shares with them. Each token after the
first adds one more."""


def _leading(flags: Sequence[bool]) -> int:
    n = 0
    for f in flags:
        if not f:
            break
        n += 1
    return n


def plan(req: RequestView, cand: Candidate, fig: NodeFigures) -> Plan:
    """The candidate's plan (see the module docstring)."""
    c = req.chunk_size
    usable = max(0, (req.prompt_tokens - 1) // c)  # the last token is always computed
    holders = list(req.holders[:usable])
    engine = _leading([h in cand.recent for h in req.hashes[:usable]])
    local = _leading([cand.node_id in h for h in holders[engine:]])
    remote = _leading([bool(h) for h in holders[engine + local :]])
    prefill, pull, local_s = fig.prefill_s_per_token, fig.pull_s_per_byte, fig.local_s_per_byte
    if remote and (pull is None or prefill is None or req.bytes_per_token * pull >= prefill):
        remote = 0  # a pull that does not beat recompute is not made
    reused = (engine + local + remote) * c
    recompute = req.prompt_tokens - reused
    work: float | None = None
    cost: float | None = None
    if prefill is not None:
        chunk_bytes = c * req.bytes_per_token
        work = (
            recompute * prefill
            + local * chunk_bytes * (local_s or 0.0)
            + remote * chunk_bytes * (pull or 0.0)
        )
        unplanned = max(0, cand.queue_len - cand.planned)
        steps = _STEPS_SHARED + max(0, req.max_tokens - 1)
        batch = steps * cand.queue_len * (fig.decode_s_per_token or 0.0)
        cost = work + cand.work_ahead_s + unplanned * req.prompt_tokens * prefill + batch
    return Plan(
        key=cand.key,
        engine_chunks=engine,
        local_chunks=local,
        remote_chunks=remote,
        recompute_tokens=recompute,
        work_s=work,
        cost_s=cost,
    )
