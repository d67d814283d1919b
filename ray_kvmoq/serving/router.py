"""The KV router: a Ray Serve request router for Ray Serve LLM's ``LLMServer`` replicas.

Per request it works out where the prompt's KV is and what each candidate replica would pay for
it (:mod:`.costmodel`), then ranks the candidates cheapest first:

* *where the KV is*: the prompt is tokenized as vLLM will (:mod:`.prompts`), its chained chunk
  hashes are looked up in this process's copy of the cluster's KV directory (a
  :class:`~ray_kvmoq.relay.actor.DirectoryFollower`: which nodes' relays hold each leading
  chunk, no round trip; the directory itself is asked only while that copy is not current),
  and the router remembers which prefixes it recently sent to which replica (they sit in that
  engine's own prefix cache);
* *what it costs*: prefill and pull speed per node as measured on the running cluster (the
  figures board), one decode figure for all candidates (:func:`shared_decode_figure`), the
  track's real bytes per token, and the work ahead on each replica: the planned prefill seconds
  of the requests this router sent there, draining as time passes, including requests just
  ranked for it and not yet sent (:class:`ReplicaLoad`'s claims), so a burst ranked in one
  instant spreads instead of piling onto the replica holding the prefix.

Outcomes, counted in ``kvmoq_router_decisions_total{outcome}``: ``cost`` (figures known: the
cheapest plan wins — a pull is only planned where it beats recompute), ``pinned`` (figures
known, and the replica whose engine already holds the prefix wins although another plan is
cheaper, because it costs at most :data:`PIN_SLACK` times that plan: stock's prefix pinning
while the holder is not overloaded), ``affinity`` (KV known but
no figures yet: the replica that holds the longest prefix, shorter queue first), ``pow2`` (no KV
anywhere: two random replicas, the cheaper first where their costs differ beyond the figures'
noise, else the shorter queue, then the one used less lately). The time each ranking took is in
``kvmoq_router_decision_seconds``. Every candidate appears in the ranking exactly once, so Serve
falls through when the best one is full. Lookups are bounded (a slow directory means routing
without KV information, never a stuck request).

``request_router_kwargs``: ``kv_model``, ``model_dir``, ``chunk_size``, ``bytes_per_token``,
``codec``, ``tenant_salt``, ``deployment`` (metrics label), ``ray_namespace``,
``directory_view`` (keep the local copy of the directory; default on), and what the engines can
reuse: ``engine_prefix_cache`` (vLLM's prefix cache is on: a replica holds what it
was sent) and ``kv_reuse`` (the connector loads from the relays: the directory matters). With
both off every ranking is ``pow2``: remembering where a prefix went would only pile every repeat
of it onto one replica that cannot reuse it.
"""

from __future__ import annotations

import asyncio
import logging
import random
import statistics
import threading
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ray.serve.request_router import PendingRequest, RequestRouter, RunningReplica

from ray_kvmoq.connector.figures import FiguresSnapshot
from ray_kvmoq.relay.actor import DIRECTORY_NAME, DirectoryFollower, follow_directory
from ray_kvmoq.relay.directory import Location

from .costmodel import Candidate, NodeFigures, Plan, RequestView, plan
from .metrics import process_metrics
from .prompts import prompt_keys, warm_tokenizer

__all__ = [
    "COLD_TIE",
    "DEFAULT_MAX_TOKENS",
    "PIN_SLACK",
    "PROBE_TIE",
    "KVRouter",
    "ReplicaLoad",
    "max_tokens",
    "rank",
    "shared_decode_figure",
    "warm_up",
]

log = logging.getLogger(__name__)

_LOOKUP_TIMEOUT_S = 0.25
_FIGURES_MAX_AGE_S = 2.0
_CHAIN_TTL_S = 1.0
"""While the local copy of the directory is not current: how long a complete answer from the
directory (every usable chunk has a holder) is reused for the same prefix, so the hot prefixes
of a shared-prefix workload are asked for once a second, not once per request. A stale answer
only misses a holder that appeared since (the connector makes its own lookup before it loads
anything)."""
_WARM_DIRECTORY_S = 10.0
_CHAINS_KEPT = 1024
_RECENT_PER_REPLICA = 4096
_CLAIM_TTL_S = 5.0
_SENT_TTL_S = 60.0
_USE_HALF_LIFE_S = 30.0
"""Half-life of a replica's recent-use count (:meth:`ReplicaLoad.recent_use`)."""
PIN_SLACK = 2.0
"""A prefix stays on the replica whose engine holds it until that replica's plan costs more
than this many times the cheapest plan. Moving a request is not free beyond what the plan
prices: the other engine then holds the prefix too, so both engines' caches split between the
prefixes, and the decode-batch term the cost rests on is a noisy per-sequence figure. Measured
on the 2-prefix workload of ``kvmoq bench serve`` (docs/benchmarks.md): ranking by cost alone
split the requests 23/25 to 28/20 and trailed stock's pinning on TTFT."""
COLD_TIE = 1.25
"""Two plans for a prompt nobody holds whose estimated costs are within this factor of each
other are a tie. A cold prompt costs the same prefill wherever it runs, so what tells the two
apart is the per-node prefill figures (two identical nodes read 1.46 and 1.63 ms a token in one
bench run) and, once measured, the decode batch. Taken at face value, that noise put both of
the bench's prefixes on one node, and pinning kept them there (docs/benchmarks.md)."""
PROBE_TIE = 2.0
""":data:`COLD_TIE` while a candidate node's prefill figure is still its start-up probe's. A probe
is one short prefill timed beside the other engines' start: on two identical nodes the probes
read 0.93 and 1.23 ms a token (1.32x) in one bench run and 1.09-1.19x apart in three others,
and that run's first prompts of both prefixes all went to the node that probed faster
(docs/benchmarks.md). Nodes twice as fast still win from the first prompt; within the factor,
the queues decide until real work has measured the nodes (seconds into serving)."""
DEFAULT_MAX_TOKENS = 16
"""Tokens assumed for a request that sets no limit: OpenAI's default ``max_tokens`` for text
completions (a chat request without one may run longer; the router cannot know)."""


def _short(h: bytes) -> str:
    return h.hex()[:16]


def shared_decode_figure(figures: FiguresSnapshot, nodes: set[str]) -> float | None:
    """The one decode figure every candidate's batch term is priced with: the median of the
    candidates' nodes' figures (None: none measured).

    A node's ``decode_s_per_token`` is a least-squares slope over its own decode steps, and a
    node that gets little work runs steps of one or two sequences, whose slope is noise: on
    the 2-node bench the idle node read 31 ms a sequence and the busy one 11 ms. Priced each
    with its own node's figure, the idle node looked dear, got less work and kept its noisy
    figure: a loop that put ~75 % of the prompt tokens on one node (docs/benchmarks.md). With
    one figure for all, the batch term compares queue lengths, as stock's balance does; nodes
    still differ by their measured prefill and pull speeds."""
    vals = [v for n in nodes if (v := figures.get("decode_s_per_token", n)) is not None]
    return statistics.median(vals) if vals else None


def rank(
    req: RequestView | None,
    candidates: list[Candidate],
    figures: FiguresSnapshot,
    rng: random.Random,
) -> tuple[list[str], str, Plan | None]:
    """Candidate keys best first, the outcome, and the first candidate's plan (None without a
    request view; pure; see the module docstring)."""
    if not candidates:
        return [], "empty", None
    plans: dict[str, Plan] = {}
    if req is not None:
        decode = shared_decode_figure(figures, {c.node_id for c in candidates})
        for c in candidates:
            nf = NodeFigures(
                prefill_s_per_token=figures.get("prefill_s_per_token", c.node_id),
                pull_s_per_byte=figures.get("pull_s_per_byte", c.node_id),
                local_s_per_byte=figures.get("local_s_per_byte", c.node_id),
                decode_s_per_token=decode,
            )
            plans[c.key] = plan(req, c, nf)
    if not any(p.reused_chunks for p in plans.values()):
        probed = any(figures.is_provisional("prefill_s_per_token", c.node_id) for c in candidates)
        order = _pow2(candidates, plans, rng, PROBE_TIE if probed else COLD_TIE)
        return order, "pow2", plans.get(order[0])
    if all(p.cost_s is not None for p in plans.values()):
        ranked = sorted(candidates, key=lambda c: (plans[c.key].cost_s, c.queue_len, rng.random()))
        pinned = _pinned(ranked, plans)
        if pinned is not None and pinned is not ranked[0]:
            ranked.remove(pinned)
            return [pinned.key, *(c.key for c in ranked)], "pinned", plans[pinned.key]
        return [c.key for c in ranked], "cost", plans[ranked[0].key]
    ranked = sorted(
        candidates, key=lambda c: (-plans[c.key].reused_chunks, c.queue_len, rng.random())
    )
    return [c.key for c in ranked], "affinity", plans[ranked[0].key]


def _pinned(ranked: list[Candidate], plans: dict[str, Plan]) -> Candidate | None:
    """The replica whose engine holds the longest part of the prompt (the cheapest of them),
    if it costs at most :data:`PIN_SLACK` times the cheapest plan; None when no engine holds
    any of it."""
    most = max(plans[c.key].engine_chunks for c in ranked)
    if most == 0:
        return None
    holder = next(c for c in ranked if plans[c.key].engine_chunks == most)
    cost, cheapest = plans[holder.key].cost_s, plans[ranked[0].key].cost_s
    if cost is None or cheapest is None or cost > PIN_SLACK * cheapest:
        return None
    return holder


def _pow2(
    candidates: list[Candidate], plans: dict[str, Plan], rng: random.Random, tie: float
) -> list[str]:
    """Two random candidates, the cheaper first, then the rest in random order.

    The cheaper by estimated cost where the two differ by more than ``tie`` (:data:`COLD_TIE`,
    or :data:`PROBE_TIE` while a start-up probe's figure is in play); else the
    shorter queue, then the replica used less lately, then the engine holding fewer recent
    chunks (stock's "smallest tenant"): where the prompt goes, its prefix will live and its
    repeats will follow, so a new prefix goes where the fewest others are in use. Recent use,
    not chunks held, decides first: an engine's cache also holds prefixes nobody asks for any
    more (vLLM's bench client opens with a test prompt whose prefix never comes back), and
    once a request has finished the queues alone no longer show where a live prefix is."""
    if len(candidates) == 1:
        return [candidates[0].key]

    pair = rng.sample(candidates, 2)
    costs = {c.key: p.cost_s if (p := plans.get(c.key)) is not None else None for c in pair}
    a, b = costs.values()
    if a is not None and b is not None and max(a, b) > tie * min(a, b):
        pair.sort(key=lambda c: costs[c.key] or 0.0)
    else:
        pair.sort(key=lambda c: (c.queue_len, c.recent_use, len(c.recent), costs[c.key] or 0.0))
    rest = [c.key for c in candidates if c not in pair]
    rng.shuffle(rest)
    return [pair[0].key, pair[1].key, *rest]


class ReplicaLoad:
    """Requests each replica is about to get or is serving, and the work they bring, as this
    router knows them.

    *Claims.* Serve ranks several pending requests at once (up to two routing tasks per replica)
    and counts a request against a replica only once it is sent. Without claims, a burst ranked
    in the same instant sees the same queues and lands on one replica. So each ranking claims a
    slot on its first choice. The slot ends when Serve sends a request to that replica
    (``sent``: Serve's queue-length cache counts it from then), when the request is routed
    (``routed``), or after ``ttl_s``, for a request that fell through or was cancelled.

    *Work.* Each claim carries the request's planned seconds of prefill work (its plan's
    ``work_s``). A replica's work ahead is a virtual finish time: each request's work is added
    when it is claimed (and moved when it is claimed again or routed elsewhere), and it drains
    at one second per second. It never exceeds the sum of the work of the requests still claimed
    or in flight there, so a finished request takes its work with it. A request that hit the
    engine's prefix cache brings almost none, so a replica full of cache hits is not "busy"; one
    computing a cold prefix is.

    *Use.* Each routed request adds one to its replica's use count, which halves every
    ``half_life_s``: where the prefixes in use live (:meth:`recent_use`).

    Pure: no Serve, no clock of its own.
    """

    def __init__(
        self,
        ttl_s: float = _CLAIM_TTL_S,
        sent_ttl_s: float = _SENT_TTL_S,
        half_life_s: float = _USE_HALF_LIFE_S,
    ) -> None:
        self._ttl = ttl_s
        self._sent_ttl = sent_ttl_s
        self._half_life = half_life_s
        self._claims: OrderedDict[int, _Claim] = OrderedDict()
        self._inflight: dict[str, dict[str, float]] = {}
        self._finish: dict[str, float] = {}
        self._use: dict[str, tuple[float, float]] = {}

    def claim(self, token: int, replica: str, now: float, work_s: float = 0.0) -> None:
        """The request ``token`` was ranked with ``replica`` first, planned at ``work_s`` seconds
        (replaces its earlier claim)."""
        old = self._claims.pop(token, None)
        if old is not None:
            self._add_work(old.replica, now, -old.work_s)
        self._claims[token] = _Claim(replica=replica, at=now, work_s=work_s)
        self._add_work(replica, now, work_s)

    def sent(self, replica: str) -> None:
        """Serve sent a request to ``replica``: its oldest unsent claim there is now counted by
        Serve's queue-length cache; its work stays until it is ``routed`` (or, where Serve
        never reports that, for ``sent_ttl_s``)."""
        for c in self._claims.values():
            if c.replica == replica and not c.sent:
                c.sent = True
                return

    def routed(self, token: int, replica: str, request_id: str, now: float) -> None:
        """The replica accepted the request: it counts (with its work) until ``completed``."""
        c = self._claims.pop(token, None)
        work = c.work_s if c is not None else 0.0
        if c is not None and c.replica != replica:
            self._add_work(c.replica, now, -work)
            self._add_work(replica, now, work)
        self._inflight.setdefault(replica, {})[request_id] = work
        self._use[replica] = (self.recent_use(replica, now) + 1.0, now)

    def recent_use(self, replica: str, now: float) -> float:
        """Requests routed to ``replica``, each counted at one half per ``half_life_s`` since."""
        count, at = self._use.get(replica, (0.0, now))
        return count * 0.5 ** (max(0.0, now - at) / self._half_life)

    def completed(self, replica: str, request_id: str) -> None:
        """The request no longer occupies the replica."""
        self._inflight.get(replica, {}).pop(request_id, None)

    def forget(self, replica: str) -> None:
        """A replica died."""
        self._inflight.pop(replica, None)
        self._finish.pop(replica, None)
        self._use.pop(replica, None)
        for token in [t for t, c in self._claims.items() if c.replica == replica]:
            del self._claims[token]

    def queue_len(self, replica: str, reported: int, now: float) -> int:
        """Requests ahead of a new one: those it serves (the larger of this router's count and
        Serve's queue-length cache, ``reported``) plus the claims not yet sent."""
        self._expire(now)
        slots = sum(1 for c in self._claims.values() if c.replica == replica and not c.sent)
        return max(len(self._inflight.get(replica, {})), reported) + slots

    def work_ahead(self, replica: str, now: float) -> tuple[float, int]:
        """Seconds of planned work still ahead on ``replica`` and how many requests it covers
        (those this router claimed or routed there and that have not completed)."""
        self._expire(now)
        works = list(self._inflight.get(replica, {}).values())
        works += [c.work_s for c in self._claims.values() if c.replica == replica]
        left = max(0.0, self._finish.get(replica, now) - now)
        return min(left, sum(works)), len(works)

    def _add_work(self, replica: str, now: float, work_s: float) -> None:
        """Move ``replica``'s virtual finish time by ``work_s`` (negative: work taken back)."""
        self._finish[replica] = max(now, max(self._finish.get(replica, now), now) + work_s)

    def _expire(self, now: float) -> None:
        gone = [
            t
            for t, c in self._claims.items()
            if c.at + (self._sent_ttl if c.sent else self._ttl) <= now
        ]
        for token in gone:
            del self._claims[token]


@dataclass(kw_only=True)
class _Claim:
    """A ranked request's first choice, when it was ranked, its planned work, and whether Serve
    has sent it there (then Serve's queue-length cache counts it, not the claim)."""

    replica: str
    at: float
    work_s: float
    sent: bool = False


class KVRouter(RequestRouter):
    """Serve request router ranking ``LLMServer`` replicas by where the prompt's KV is."""

    def initialize_state(self, **kwargs: Any) -> None:
        """Settings from ``request_router_kwargs`` (see the module docstring)."""
        self._kv_model = str(kwargs["kv_model"])
        self._model_dir = str(kwargs["model_dir"])
        self._chunk = int(kwargs.get("chunk_size", 128))
        self._bpt = float(kwargs["bytes_per_token"])
        self._codec = str(kwargs.get("codec", "BF16")).encode()
        self._salt = str(kwargs.get("tenant_salt", "public"))
        self._label = str(kwargs.get("deployment", "llm"))
        self._ns = str(kwargs.get("ray_namespace", "kvmoq"))
        self._engine_cache = bool(kwargs.get("engine_prefix_cache", True))
        self._kv_reuse = bool(kwargs.get("kv_reuse", True))
        self._follower = _directory_view(kwargs)
        self._rng = random.Random()
        self._recent: dict[str, OrderedDict[str, None]] = {}
        self._pending: OrderedDict[int, list[str]] = OrderedDict()
        self._load = ReplicaLoad()
        self._directory: Any = None
        self._board: Any = None
        self._figures = FiguresSnapshot()
        self._figures_at = 0.0
        self._figures_task: asyncio.Task[None] | None = None
        self._chains: OrderedDict[bytes, tuple[float, list[frozenset[str]]]] = OrderedDict()
        # loading the tokenizer takes seconds: not on the first request's path
        threading.Thread(
            target=warm_tokenizer, args=(self._model_dir,), name="kvmoq-tokenizer", daemon=True
        ).start()

    async def choose_replicas(
        self,
        candidate_replicas: list[RunningReplica],
        pending_request: PendingRequest | None = None,
    ) -> list[list[RunningReplica]]:
        """Ranks of candidates, cheapest first (one replica per rank)."""
        if not candidate_replicas:
            return []
        started = time.perf_counter()
        by_key = {str(r.replica_id): r for r in candidate_replicas}
        request = _openai_request(pending_request)
        view = await self._view(request) if request is not None else None
        if view is not None and pending_request is not None:
            self._pending[id(pending_request)] = list(view.hashes)
            while len(self._pending) > 1024:
                self._pending.popitem(last=False)
        self._refresh_figures()
        # no await from here to the claim: concurrent rankings see each other's choices
        now = time.monotonic()
        cands = [self._candidate(r, now) for r in candidate_replicas]
        order, outcome, best = rank(view, cands, self._figures, self._rng)
        if order and pending_request is not None:
            work = best.work_s if best is not None and best.work_s is not None else 0.0
            self._load.claim(id(pending_request), order[0], now, work)
        m = process_metrics()
        m.router_decisions.labels(self._label, "kv", outcome).inc()
        if best is not None and best.cost_s is not None:
            m.router_cost.labels(self._label).observe(best.cost_s)
        m.router_decision_seconds.labels(self._label).observe(time.perf_counter() - started)
        return [[by_key[k]] for k in order]

    def on_request_routed(
        self, pending_request: PendingRequest, replica_id: Any, result: Any
    ) -> None:
        """Count the request against the replica; remember the prefix it is now computing
        (its engine will hold it)."""
        rid = getattr(pending_request.metadata, "internal_request_id", None)
        self._load.routed(
            id(pending_request), str(replica_id), str(rid or id(pending_request)), time.monotonic()
        )
        hashes = self._pending.pop(id(pending_request), None)
        if not hashes:
            return
        seen = self._recent.setdefault(str(replica_id), OrderedDict())
        for h in hashes:
            seen[h] = None
            seen.move_to_end(h)
        while len(seen) > _RECENT_PER_REPLICA:
            seen.popitem(last=False)

    def on_send_request(self, replica_id: Any) -> None:
        """Serve sent a request: it now shows in the queue-length cache, not as a claim."""
        super().on_send_request(replica_id)
        self._load.sent(str(replica_id))

    def on_request_completed(self, replica_id: Any, internal_request_id: str) -> None:
        """The request no longer occupies the replica."""
        self._load.completed(str(replica_id), str(internal_request_id))

    def on_replica_actor_died(self, replica_id: Any) -> None:
        """Forget what a dead replica held or was doing."""
        super().on_replica_actor_died(replica_id)
        self._load.forget(str(replica_id))
        self._recent.pop(str(replica_id), None)

    # ---- internals ---------------------------------------------------------------------------

    def _candidate(self, r: RunningReplica, now: float) -> Candidate:
        key = str(r.replica_id)
        cached = self.replica_queue_len_cache.get(r.replica_id)
        work, planned = self._load.work_ahead(key, now)
        return Candidate(
            key=key,
            node_id=str(r.node_id or ""),  # Serve's own record of where the replica runs
            queue_len=self._load.queue_len(key, int(cached or 0), now),
            planned=planned,
            work_ahead_s=work,
            recent=frozenset(self._recent.get(key, ())),
            recent_use=self._load.recent_use(key, now),
        )

    async def _view(self, request: Any) -> RequestView | None:
        keys = prompt_keys(
            request,
            model_dir=self._model_dir,
            kv_model=self._kv_model,
            salt=self._salt,
            chunk_size=self._chunk,
        )
        if keys is None:
            return None
        short = [_short(h) for h in keys.hashes] if self._engine_cache else []
        usable = max(0, (keys.tokens - 1) // self._chunk) if self._kv_reuse else 0
        holders = await self._holders(keys.hashes[:usable]) if usable else []
        return RequestView(
            prompt_tokens=keys.tokens,
            chunk_size=self._chunk,
            bytes_per_token=self._bpt,
            holders=holders,
            hashes=short,
            max_tokens=max_tokens(request),
        )

    async def _holders(self, hashes: list[bytes]) -> list[frozenset[str]]:
        """Per leading chunk, the nodes whose relays hold it on the router's track: from the
        local copy of the directory while it is current, else asked of the directory."""
        follower = self._follower
        if follower is not None and follower.live:
            return self._on_track(follower.longest_prefix(hashes))
        return await self._asked_holders(hashes)

    def _on_track(self, chain: list[list[Location]]) -> list[frozenset[str]]:
        return [
            frozenset(loc.node_id for loc in locs if bytes(loc.track) == self._codec)
            for locs in chain
        ]

    async def _asked_holders(self, hashes: list[bytes]) -> list[frozenset[str]]:
        """:meth:`_holders` from the directory's ``longest_prefix`` (a complete answer is
        reused for ``_CHAIN_TTL_S``)."""
        now = time.monotonic()
        key = hashes[-1]  # chained: the last hash names the whole prefix
        hit = self._chains.get(key)
        if hit is not None and now - hit[0] < _CHAIN_TTL_S:
            return hit[1]
        try:
            chain = await asyncio.wait_for(
                self._dir().longest_prefix.remote(hashes), _LOOKUP_TIMEOUT_S
            )
        except Exception as exc:  # route without KV information
            log.debug("KV directory lookup failed for routing: %s", exc)
            self._directory = None
            return []
        holders = self._on_track(chain)
        if len(holders) == len(hashes) and all(holders):
            self._chains[key] = (now, holders)
            self._chains.move_to_end(key)
            while len(self._chains) > _CHAINS_KEPT:
                self._chains.popitem(last=False)
        return holders

    def _dir(self) -> Any:
        if self._directory is None:
            import ray

            self._directory = ray.get_actor(DIRECTORY_NAME, namespace=self._ns)
        return self._directory

    def _refresh_figures(self) -> None:
        """Start reading the figures board when the last read is older than
        ``_FIGURES_MAX_AGE_S``; rankings use the last figures meanwhile (never wait for it)."""
        if time.monotonic() - self._figures_at < _FIGURES_MAX_AGE_S:
            return
        if self._figures_task is not None and not self._figures_task.done():
            return
        self._figures_at = time.monotonic()
        self._figures_task = asyncio.get_running_loop().create_task(self._read_figures())

    async def _read_figures(self) -> None:
        try:
            if self._board is None:
                from ray_kvmoq.connector.figures import figures_board

                self._board = figures_board(self._ns)
            snap = await asyncio.wait_for(self._board.snapshot.remote(), _LOOKUP_TIMEOUT_S)
            self._figures = FiguresSnapshot.from_dict(snap)
        except Exception as exc:
            log.debug("cannot read the figures board: %s", exc)
            self._board = None


def _directory_view(router_kwargs: Mapping[str, Any]) -> DirectoryFollower | None:
    """This process's copy of the directory that a router with these ``request_router_kwargs``
    reads. None (the router asks the directory) when reuse or ``directory_view`` is off, and
    outside a Ray actor: a driver holding a ``DeploymentHandle`` (a script, a test session) may
    call ``ray.shutdown()`` while the copy's thread has a call in flight, and Ray ends a process
    (exit code 1) that releases an object ref after its shutdown."""
    if not (router_kwargs.get("kv_reuse", True) and router_kwargs.get("directory_view", True)):
        return None
    import ray

    if ray.get_runtime_context().get_actor_id() is None:
        return None
    return follow_directory(str(router_kwargs.get("ray_namespace", "kvmoq")))


def warm_up(router_kwargs: Mapping[str, Any]) -> None:
    """What a :class:`KVRouter` with these ``request_router_kwargs`` needs before its first
    ranking in this process, done now (the ingress calls it while it starts): the tokenizer
    loaded and its chat template compiled, and the local copy of the directory current. Serve
    creates the router only on the first request, which otherwise waited for both (measured:
    0.7 s, 14 ms of a 48-request bench's mean TTFT). Waits at most ``_WARM_DIRECTORY_S`` for
    the directory; the router asks it directly until its copy is current."""
    warm_tokenizer(str(router_kwargs["model_dir"]))
    view = _directory_view(router_kwargs)
    if view is not None and not view.wait_live(_WARM_DIRECTORY_S):
        log.warning("KV directory not reachable yet: routing asks it per request until it is")


def max_tokens(request: Any) -> int:
    """The tokens a chat or text completion request may generate: its ``max_completion_tokens``
    or ``max_tokens``, else :data:`DEFAULT_MAX_TOKENS`."""
    for name in ("max_completion_tokens", "max_tokens"):
        v = getattr(request, name, None)
        if isinstance(v, int) and not isinstance(v, bool) and v > 0:
            return v
    return DEFAULT_MAX_TOKENS


def _openai_request(pending: PendingRequest | None) -> Any:
    """The chat/completion request among a pending call's arguments (Ray Serve LLM passes
    ``(request, raw_request_info)``)."""
    if pending is None:
        return None
    for a in list(pending.args or ()) + list((pending.kwargs or {}).values()):
        if hasattr(a, "messages") or hasattr(a, "prompt"):
            return a
    return None
