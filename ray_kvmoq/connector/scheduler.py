"""Scheduler side of the MoQT KV connector: what to load, what to publish, step by step.

Runs in vLLM's EngineCore process, inside the scheduler loop, so nothing here may block: the
directory lookup a new request needs is started on the first call of
``get_num_new_matched_tokens`` and polled on later calls (vLLM retries a request whose answer
is ``None`` on the next step); after ``lookup_timeout_s`` without an answer the request is
counted as a miss and computed.

Per request (:class:`_Req`):

1. *Lookup.* The prompt's chained chunk hashes (tenant salt = the request's ``cache_salt``,
   else the configured default; model = name + weights fingerprint) go to the directory, which
   answers with the longest prefix of chunks held anywhere. Whole groups only, on the
   request's own codec's track, leaving at least the prompt's last token to compute. A PD
   consumer whose request carries a producer's ``kv_transfer_params`` loads the groups named
   there instead (through its own node's relay, which pulls them over MoQT).
2. *Load plan.* If every group to load is on this node the load is synchronous (zero-copy
   from the object store, done before the forward pass); otherwise it is asynchronous (the
   request waits in ``WAITING_FOR_REMOTE_KVS`` while the worker pulls).
3. *Saves.* Each step, every full chunk of the prompt that this step completes (or that vLLM's
   prefix cache already held), that the cluster does not already hold, and that this engine has
   now seen ``publish_threshold`` times (:mod:`.sightings`: by default a chunk is published on
   its second sight, so a prompt seen once costs no publishing; on its first while vLLM's
   prefix cache is evicting chunks before they come back, ``publish_when_evicting``) becomes a
   :class:`~.metadata.SaveSpec`, published by the worker as soon as the step ends (live tracks:
   subscribers get groups while prefill goes on). A producer publishes every chunk, the
   prompt's partial last chunk included, and ends the track.
4. *Finish.* ``request_finished`` returns ``kv_transfer_params["kvmoq"]`` naming, per group,
   the track that holds it — what a PD consumer loads.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ray_kvmoq.kvcache.naming import chunk_hashes, kv_namespace, prompt_id

from .bridge import RelayBridge
from .config import ConnectorConfig, check_codec
from .metadata import (
    PARAMS_KEY,
    GroupSource,
    LoadSpec,
    MoqtConnectorMetadata,
    SaveSpec,
    TransferParams,
)
from .sightings import Sightings
from .stats import ConnectorCounters

if TYPE_CHECKING:
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.request import Request

__all__ = ["SchedulerSide"]

_PULL_PROBE_S = 30.0
"""At most one pull per this many seconds against a figure that says recompute (re-measuring)."""

log = logging.getLogger(__name__)

Namespace = tuple[bytes, ...]


@dataclass(kw_only=True)
class _Req:
    """What the scheduler side knows about one request."""

    req_id: str
    tokens: Sequence[int]
    salt: bytes
    codec: bytes
    namespace: Namespace
    hashes: list[bytes]
    load_allowed: bool
    publish_allowed: bool
    producer: bool
    remote: TransferParams | None
    always_pull: bool = False
    """Load remote groups even where the measured pull is slower (benchmarks of the raw path)."""
    follow: bool = False
    """PD decode started together with its prefill: the prompt's own track is being published
    right now; load what the directory knows by hash and wait for the rest on the track."""
    handoff: str = ""
    """The PD hand-off id decode's serving layer gave this request (see ``LoadSpec.handoff``)."""
    probe: bool = False
    """A start-up prefill probe: it times itself, and the step clock skips its steps (the
    engine's first steps pay one-time warm-up, seconds that say nothing of its speed)."""
    lookup_ref: Any = None
    lookup_deadline: float = 0.0
    sources: list[GroupSource | None] = field(default_factory=list)
    """Per leading group: where the cluster holds it (None past the known prefix)."""
    plan: tuple[int, int, int, list[GroupSource], bool] | None = None
    """(start token, end token, first group, sources, async) once matched."""
    pending_load: LoadSpec | None = None
    load_issued: bool = False
    """A load went to the workers: if vLLM asks again (it retries a failed asynchronous load
    from scratch, or a preempted request), the answer is "compute it", never the same load."""
    block_ids: list[int] = field(default_factory=list)
    next_save: int = 0
    """First group index this request still has to publish."""
    tail_done: bool = False
    published: set[int] = field(default_factory=set)
    publish_upto: int = 0
    """Leading whole chunks this engine may publish (the admission rule: seen often enough)."""
    cached_upto: int = 0
    """Leading whole chunks vLLM's prefix cache holds for this request (computed, loaded or hit
    by the steps so far): the sightings mark them, to tell an evicted repeat later."""


class SchedulerSide:
    """The scheduler-side half of :class:`~.connector.MoqtKVConnector`."""

    def __init__(
        self,
        conf: ConnectorConfig,
        *,
        bridge: RelayBridge,
        model: str,
        block_size: int,
        kv_dtype: str,
        producer: bool,
        consumer_only: bool,
        bytes_per_token: dict[bytes, float] | None = None,
    ) -> None:
        self.conf = conf
        self.bridge = bridge
        self.model = model
        self.block_size = block_size
        self.default_codec = conf.track_codec(kv_dtype).encode()
        self.producer = producer
        self.consumer_only = consumer_only
        self.bytes_per_token = dict(bytes_per_token or {})
        """Encoded KV bytes per token of each track compression (for the pull-vs-recompute rule)."""
        self.counters = ConnectorCounters()
        self._sightings = Sightings(
            conf.publish_threshold, when_evicting=conf.publish_when_evicting
        )
        self._reqs: dict[str, _Req] = {}
        self._clock = _StepClock()
        self._last_probe = -_PULL_PROBE_S
        """When this side last pulled against the figures (monotonic s): see ``_worth_loading``."""

    # ---- lookup ----------------------------------------------------------------------------

    def _state(self, request: Request, local_tokens: int) -> _Req:
        st = self._reqs.get(request.request_id)
        if st is not None:
            return st
        params = request.kv_transfer_params or {}
        ours = params.get(PARAMS_KEY) if isinstance(params, dict) else None
        ours = ours if isinstance(ours, dict) else {}
        codec = self.default_codec
        if isinstance(ours.get("codec"), str):
            codec = check_codec(ours["codec"]).encode()
        salt = (request.cache_salt or self.conf.tenant_salt).encode()
        tokens = list(request.prompt_token_ids or [])
        producer = self.producer or bool(params.get("do_remote_decode"))
        st = _Req(
            req_id=request.request_id,
            tokens=tokens,
            salt=salt,
            codec=codec,
            namespace=kv_namespace(self.model, prompt_id(salt, tokens)),
            hashes=chunk_hashes(salt, self.model, tokens, self.conf.chunk_size),
            load_allowed=self.conf.load and ours.get("load", True) is not False,
            publish_allowed=self.conf.publish and ours.get("publish", True) is not False,
            producer=producer and not self.consumer_only,
            remote=TransferParams.from_json(ours) if "groups" in ours else None,
            follow=ours.get("follow") is True,
            handoff=ours["handoff"] if isinstance(ours.get("handoff"), str) else "",
            always_pull=ours.get("pull") == "always",
            probe=ours.get("probe") is True,
        )
        if st.publish_allowed:
            st.publish_upto = len(st.hashes) if st.producer else self._sight(st, local_tokens)
        self._reqs[st.req_id] = st
        return st

    def _sight(self, st: _Req, local_tokens: int) -> int:
        """Count a new request's sighting of its chunks (``local_tokens``: what vLLM's prefix
        cache holds of its prompt); the leading chunks this engine may publish."""
        now = time.monotonic()
        first_missing = local_tokens // self.conf.chunk_size
        evicted = self._sightings.note_evicted(st.hashes[first_missing : self._usable(st)], now)
        early = self._sightings.threshold_at(now) < self._sightings.threshold  # what sight uses
        admitted = self._sightings.sight(st.hashes, now=now)
        # a prompt shorter than a chunk has nothing to admit, on first sight or any other
        self.counters.add(
            chunks_evicted_seen=evicted, requests_first_sight=int(early and admitted > 0)
        )
        return admitted

    def _usable(self, st: _Req) -> int:
        """Leading whole chunks of ``st``'s prompt that a cache hit or a load can cover: vLLM
        computes at least the prompt's last token itself."""
        return min(len(st.hashes), (len(st.tokens) - 1) // self.conf.chunk_size)

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        """Tokens loadable beyond ``num_computed_tokens`` (None: ask again next step)."""
        st = self._state(request, num_computed_tokens)
        if st.load_issued:
            return 0, False
        if st.plan is not None:
            return self._answer(st, num_computed_tokens)
        if not st.load_allowed:
            return self._no_plan(st)
        c = self.conf.chunk_size
        if st.remote is not None:
            return self._plan_remote(st, num_computed_tokens)
        usable = self._usable(st)
        if usable == 0 and not st.follow:
            return self._no_plan(st, known=0)
        if usable * c <= num_computed_tokens and not (st.follow or st.producer):
            # vLLM's own prefix cache holds every whole chunk of the prompt: nothing to load,
            # so no directory round trip (it would hold the request back a step or more). What
            # this engine published or loaded is not published again; chunks it computed but
            # had not yet admitted are published now, from its cache. A producer still looks
            # them up, as its kv_transfer_params must name where each group lives.
            self.counters.add(lookups_skipped=1)
            return self._no_plan(st, known=self._known_held(st.hashes[:usable]))
        started = st.lookup_ref is None
        if started:
            try:
                st.lookup_ref = self.bridge.start_lookup(st.hashes[:usable] if usable else [])
            except Exception as exc:
                log.warning("KV directory unreachable (%s); computing request %s", exc, st.req_id)
                self.counters.add(lookup_errors=1)
                return self._no_plan(st)
            st.lookup_deadline = time.monotonic() + self.conf.lookup_timeout_s
        try:
            chain = self.bridge.poll_lookup(st.lookup_ref)
        except Exception as exc:
            log.warning("KV directory lookup failed (%s); computing request %s", exc, st.req_id)
            self.counters.add(lookup_errors=1)
            return self._no_plan(st)
        if chain is None:
            if time.monotonic() < st.lookup_deadline:
                return None, False
            self.counters.add(lookup_timeouts=1)
            return self._no_plan(st)
        if started:
            self.counters.add(lookups_answered_at_once=1)
        st.sources = self._sources(st, chain)
        known = next((k for k, s in enumerate(st.sources) if s is None), len(st.sources))
        self._sightings.mark_held(st.hashes[:known], time.monotonic())
        if st.follow:
            return self._plan_follow(st, num_computed_tokens, known)
        known = self._worth_loading(st, known, num_computed_tokens)
        if known * c <= num_computed_tokens or known * c < self.conf.min_tokens:
            return self._no_plan(st, known=known)
        first = num_computed_tokens // c
        srcs = [s for s in st.sources[first:known] if s is not None]
        is_async = not all(s.local for s in srcs)
        st.plan = (num_computed_tokens, known * c, first, srcs, is_async)
        st.next_save = known
        return self._answer(st, num_computed_tokens)

    def _sources(self, st: _Req, chain: Sequence[Sequence[Any]]) -> list[GroupSource | None]:
        """The best location of each leading chunk on the request's track (local first)."""
        out: list[GroupSource | None] = []
        for locs in chain:
            mine = [loc for loc in locs if bytes(loc.track) == st.codec]
            if not mine:
                break
            here = [loc for loc in mine if loc.node_id == self.bridge.node_id]
            loc = (here or mine)[0]
            out.append(
                GroupSource(
                    namespace=tuple(bytes(f) for f in loc.namespace),
                    track=bytes(loc.track),
                    group_id=int(loc.group_id),
                    local=bool(here),
                )
            )
        return out

    def _worth_loading(self, st: _Req, known: int, num_computed: int) -> int:
        """How many leading groups to load: pulls from other nodes only while the measured pull
        costs less than recomputing those tokens here (so reuse is never slower than none)."""
        c = self.conf.chunk_size
        first = num_computed // c
        remote_at = next(
            (k for k in range(first, known) if not getattr(st.sources[k], "local", True)), known
        )
        if remote_at == known or st.always_pull:
            return known
        fig = self.bridge.figures()
        pull = fig.get("pull_s_per_byte", self.bridge.node_id)
        prefill = fig.get("prefill_s_per_token", self.bridge.node_id)
        bpt = self.bytes_per_token.get(st.codec)
        if pull is None or prefill is None or bpt is None:
            return known  # nothing measured yet: the first pull measures it
        tokens = (known - remote_at) * c
        if tokens * bpt * pull < tokens * prefill:
            return known
        now = time.monotonic()
        if now - self._last_probe >= _PULL_PROBE_S:
            # a declined pull is never measured, so a figure that got slow (one pull that
            # crossed a relay restart, a busy moment) would stay slow for good: once every
            # _PULL_PROBE_S this side pulls anyway, and the board learns what pulls cost now
            self._last_probe = now
            self.counters.add(pulls_probed=1)
            return known
        self.counters.add(pulls_declined=1)
        return remote_at

    def _plan_follow(self, st: _Req, num_computed: int, known: int) -> tuple[int, bool]:
        """PD decode running beside its prefill: known groups by hash, the rest (tail
        included) from the prompt's own track as the producer publishes it."""
        c = self.conf.chunk_size
        n_groups = -(-len(st.tokens) // c)
        own = [
            GroupSource(
                namespace=st.namespace, track=st.codec, group_id=k, local=False, awaited=True
            )
            for k in range(known, n_groups)
        ]
        st.sources = list(st.sources[:known]) + list(own)
        first = num_computed // c
        srcs = [s for s in st.sources[first:] if s is not None]
        if not srcs or len(st.tokens) <= num_computed:
            return self._no_plan(st)
        st.plan = (num_computed, len(st.tokens), first, srcs, True)
        st.next_save = len(st.hashes)  # a consumer publishes nothing of this prompt
        st.tail_done = True
        return self._answer(st, num_computed)

    def _plan_remote(self, st: _Req, num_computed: int) -> tuple[int | None, bool]:
        """PD consumer: load the groups a producer's ``kv_transfer_params`` name."""
        p = st.remote
        assert p is not None
        c = self.conf.chunk_size
        if p.chunk_size != c or p.model != self.model:
            log.warning("kv_transfer_params from another model or chunk size; computing")
            return self._no_plan(st)
        end = min(p.tokens, len(st.tokens))
        first = num_computed // c
        srcs = [
            GroupSource(
                namespace=kv_namespace(p.model, pid),
                track=track.encode(),
                group_id=gid,
                local=False,
            )
            for pid, track, gid in p.groups[first : -(-end // c)]
        ]
        if end <= num_computed or not srcs:
            return self._no_plan(st)
        st.plan = (num_computed, end, first, srcs, True)
        st.sources = [None] * first + list(srcs)
        st.next_save = len(st.hashes)  # a consumer publishes nothing of this prompt
        st.tail_done = True
        return self._answer(st, num_computed)

    def _known_held(self, hashes: list[bytes]) -> int:
        """How many leading chunks of ``hashes`` the cluster holds, as far as this engine knows
        without a round trip: by the engine process's copy of the directory where it is
        current (so chunks a relay evicted are published again), else by its own marks."""
        view = self.bridge.directory_view()
        listed = view.holds if view is not None and view.live else None
        return self._sightings.first_not_held(hashes, listed=listed, now=time.monotonic())

    def _no_plan(self, st: _Req, known: int = 0) -> tuple[int, bool]:
        st.plan = (0, 0, 0, [], False)
        st.next_save = max(st.next_save, known)
        return 0, False

    def _answer(self, st: _Req, num_computed: int) -> tuple[int, bool]:
        assert st.plan is not None
        start, end, _, _, is_async = st.plan
        if end <= start or start != num_computed:
            return 0, False
        if not is_async:
            end = min(end, len(st.tokens) - 1)  # a sync load must leave a token to compute
        return max(0, end - start), is_async and end > start

    # ---- allocation and metadata -------------------------------------------------------------

    def update_state_after_alloc(self, request: Request, blocks: Any, num_external: int) -> None:
        """Record the blocks a planned load writes into."""
        st = self._reqs.get(request.request_id)
        if st is None:
            return
        st.block_ids = list(blocks.get_block_ids()[0]) if blocks is not None else st.block_ids
        if num_external <= 0 or st.plan is None:
            return
        start, end, first, srcs, is_async = st.plan
        end = start + num_external
        st.pending_load = LoadSpec(
            req_id=st.req_id,
            block_ids=tuple(st.block_ids),
            start=start,
            end=end,
            first_group=first,
            sources=tuple(srcs),
            is_async=is_async,
            follows_producer=st.follow or st.remote is not None,
            handoff=st.handoff,
        )
        self.counters.count_match(num_external, remote=is_async)

    def build_connector_meta(self, out: SchedulerOutput) -> MoqtConnectorMetadata:
        """This step's loads (planned since the last step) and saves (groups it completes)."""
        meta = MoqtConnectorMetadata()
        self._time_step(out)
        self.bridge.figures()  # keeps the figures fresh (a non-blocking refresh at most every 5 s)
        self.bridge.directory_view()  # from the first step on, before the first lookup
        for pending in self._reqs.values():
            if pending.pending_load is not None:
                meta.loads.append(pending.pending_load)
                pending.pending_load = None
                pending.load_issued = True
        for new in out.scheduled_new_reqs:
            fresh = self._reqs.get(new.req_id)
            if fresh is not None:
                fresh.block_ids = list(new.block_ids[0])
                self._saves(fresh, new.num_computed_tokens, out, meta)
        cached = out.scheduled_cached_reqs
        for i, req_id in enumerate(cached.req_ids):
            st = self._reqs.get(req_id)
            if st is None:
                continue
            new_ids = cached.new_block_ids[i]
            if new_ids is not None:
                if req_id in cached.resumed_req_ids:
                    st.block_ids = list(new_ids[0])
                else:
                    st.block_ids.extend(new_ids[0])
            self._saves(st, cached.num_computed_tokens[i], out, meta)
        return meta

    def _time_step(self, out: SchedulerOutput) -> None:
        """Feed the step clock; report this node's prefill and decode figures now and then."""
        prefill = 0
        total = 0
        for req_id, n in out.num_scheduled_tokens.items():
            st = self._reqs.get(req_id)
            if st is not None and st.probe:
                prefill = total = 0  # an untimed step (the clock skips it)
                break
            if st is not None and n > 1:
                prefill += n
            total += n
        for kind, value, steps in self._clock.step(time.monotonic(), total, prefill):
            self.bridge.report(kind, value, steps)

    def _saves(
        self, st: _Req, computed: int, out: SchedulerOutput, meta: MoqtConnectorMetadata
    ) -> None:
        """Groups of ``st``'s prompt that this step completes."""
        if self.consumer_only or not st.publish_allowed:
            return
        c = self.conf.chunk_size
        done = min(computed + out.num_scheduled_tokens.get(st.req_id, 0), len(st.tokens))
        n_full = len(st.hashes)
        cached = min(n_full, done // c)
        if st.cached_upto < cached:
            self._sightings.mark_cached(st.hashes[st.cached_upto : cached])
            st.cached_upto = cached
        publish_tail = st.producer if self.conf.publish_tail is None else self.conf.publish_tail
        tail = publish_tail and len(st.tokens) % c != 0
        last = n_full if tail else n_full - 1
        while st.next_save < n_full and (st.next_save + 1) * c <= done:
            k = st.next_save
            if k < st.publish_upto:
                meta.saves.append(self._save(st, k, k * c, (k + 1) * c, last == k))
            else:
                self.counters.add(groups_not_admitted=1)
            st.next_save += 1
        if tail and not st.tail_done and done >= len(st.tokens) and st.next_save >= n_full:
            meta.saves.append(self._save(st, n_full, n_full * c, len(st.tokens), True))
            st.tail_done = True

    def _save(self, st: _Req, k: int, start: int, end: int, last: bool) -> SaveSpec:
        st.published.add(k)
        self._sightings.mark_held(st.hashes[k : k + 1], time.monotonic())
        if k >= len(st.sources):
            st.sources.extend([None] * (k + 1 - len(st.sources)))
        st.sources[k] = GroupSource(namespace=st.namespace, track=st.codec, group_id=k, local=True)
        return SaveSpec(
            req_id=st.req_id,
            namespace=st.namespace,
            track=st.codec,
            group_id=k,
            block_ids=tuple(st.block_ids),
            start=start,
            end=end,
            chunk_hash=st.hashes[k] if k < len(st.hashes) else None,
            end_of_track=last,
        )

    def update_connector_output(self, failed_recving: Iterable[str]) -> None:
        """Loads the workers gave up on: those requests are computed from here on."""
        for req_id in failed_recving:
            st = self._reqs.get(req_id)
            if st is not None:
                st.plan = (0, 0, 0, [], False)
                st.load_issued = True

    # ---- finish ----------------------------------------------------------------------------

    def request_finished(self, request: Request) -> tuple[bool, dict[str, Any] | None]:
        """Forget the request; a producer returns where each of its prompt's groups lives."""
        self._count_finish(request)
        st = self._reqs.pop(request.request_id, None)
        if st is None or not st.producer:
            return False, None
        groups = []
        for s in st.sources:
            if s is None:
                break
            groups.append((s.namespace[2].decode(), s.track.decode(), s.group_id))
        covered = min(len(groups) * self.conf.chunk_size, len(st.tokens))
        if not groups:
            return False, None
        params = TransferParams(
            model=self.model, tokens=covered, chunk_size=self.conf.chunk_size, groups=tuple(groups)
        )
        return False, {PARAMS_KEY: params.to_json()}

    def _count_finish(self, request: Request) -> None:
        from vllm.v1.request import RequestStatus

        if request.status != RequestStatus.FINISHED_ABORTED:
            self.counters.add(requests_finished=1)
            return
        params = request.sampling_params
        allowed = getattr(params, "max_tokens", None) or 0
        self.counters.add(
            requests_finished=1,
            requests_aborted=1,
            tokens_not_generated=max(0, allowed - request.num_output_tokens),
        )

    def forget(self, req_ids: Iterable[str]) -> None:
        """Drop state of requests vLLM no longer tracks."""
        for r in req_ids:
            self._reqs.pop(r, None)


_DECODE_STEPS_KEPT = 4096


class _StepClock:
    """Prefill seconds per token and the marginal decode cost per sequence, from the engine's
    own steps.

    ``build_connector_meta`` runs once per step, right after the previous step's forward pass
    when the engine is busy, so the time between two calls is the previous step's cost:

    * steps that were mostly prefill (≥ 90 % of ≥ 128 tokens) give ``prefill_s_per_token``;
    * pure decode steps (one token per running sequence) that another pure decode step follows
      give ``decode_s_per_token``: the seconds one more sequence adds to a decode step, the
      slope of a least-squares line through (sequences, seconds) of the period's steps. A
      decode step costs a fixed part (weights read, Python) plus a part per sequence; on
      vLLM's CPU backend the fixed part dominates, so step time over sequences overstates
      what a request adds to its replica's steps many times over. A period whose decode steps
      all had the same number of sequences cannot tell the two parts apart and reports
      nothing (the board keeps its last figure). A decode step followed by anything else is
      skipped: the engine may have sat idle before that next step, until a new request came.

    Each is reported every ``period_s`` as (kind, value, number of steps).
    """

    def __init__(self, period_s: float = 5.0) -> None:
        self.period_s = period_s
        self._prev: tuple[float, int, int] | None = None
        self._prefill_s = 0.0
        self._prefill_tokens = 0
        self._prefill_steps = 0
        # (sequences, seconds) per step: the latest ones while no period has varied in size
        self._decode: deque[tuple[int, float]] = deque(maxlen=_DECODE_STEPS_KEPT)
        self._last_report = 0.0

    def step(self, now: float, tokens: int, prefill_tokens: int) -> list[tuple[str, float, int]]:
        """Record a step that starts at ``now`` (``tokens`` scheduled, ``prefill_tokens`` of them
        prompt tokens); return the samples due for reporting."""
        if self._prev is not None:
            at, n, pre = self._prev
            if n >= 128 and pre >= 0.9 * n:
                self._prefill_s += now - at
                self._prefill_tokens += n
                self._prefill_steps += 1
            elif pre == 0 and tokens and prefill_tokens == 0:
                self._decode.append((n, now - at))
        self._prev = (now, tokens, prefill_tokens) if tokens else None
        if now - self._last_report < self.period_s:
            return []
        out: list[tuple[str, float, int]] = []
        if self._prefill_tokens:
            per_token = self._prefill_s / self._prefill_tokens
            out.append(("prefill_s_per_token", per_token, self._prefill_steps))
            self._prefill_s, self._prefill_tokens, self._prefill_steps = 0.0, 0, 0
        slope = marginal_seconds(self._decode)
        if slope is not None:
            out.append(("decode_s_per_token", slope, len(self._decode)))
            self._decode.clear()
        if out:
            self._last_report = now
        return out


def marginal_seconds(steps: Sequence[tuple[int, float]]) -> float | None:
    """The least-squares slope of seconds over sequences (clamped at 0), or None when the
    steps do not vary in size."""
    k = len(steps)
    if k < 2:
        return None
    mean_n = sum(n for n, _ in steps) / k
    mean_t = sum(t for _, t in steps) / k
    var = sum((n - mean_n) ** 2 for n, _ in steps)
    if var == 0:
        return None
    cov = sum((n - mean_n) * (t - mean_t) for n, t in steps)
    return max(0.0, cov / var)
