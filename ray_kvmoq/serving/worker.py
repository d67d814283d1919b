"""The replica logic, without Ray: prefill with prefix reuse and live publishing, and decode.

STYLE rule 9: the Serve deployments (``deployments.py``) only wrap :class:`ReplicaCore`, which is
tested directly with an engine and a :class:`~.kvplane.KVPlane`.

Prefill (:meth:`ReplicaCore.prefill_kv`):
1. plan with the cost model which leading chunks to take from this node, which to pull from
   another node, and how many tokens to compute (at least the last one);
2. fetch them (a fetch that fails, is late or corrupt returns fewer chunks: recompute the rest);
3. compute the rest one chunk at a time on 128-token boundaries, publishing each group the
   moment it is done, so a decode replica subscribed to the live track overlaps its transfer
   with the remaining prefill. Full chunks are indexed by their chained hash for later prompts.

Computing chunk by chunk is also what makes reuse exact: chunk k is always computed from the KV
of chunks 0..k-1 with the same shapes, whether that KV was just computed or fetched (BF16/FP16
tracks are lossless for a bf16/fp16 engine), so greedy outputs with and without reuse agree.

Decode (:meth:`ReplicaCore.decode_tokens`): hand the prompt and its whole KV to the engine, which
recomputes only the last prompt token and then generates; tokens stream out as they come. In PD
mode (:meth:`ReplicaCore.pull_kv`) decode gets that KV through its own node's relay: the groups
prefill reused by chunk hash from wherever earlier prompts left them (often already on the
decode node: the relays act as a cache), and the newly computed groups by following the
prompt's live track, which prefill ends after its last group. Engine
calls run in worker threads (the engine serialises forward passes with its own lock), so the
replica's event loop keeps serving other requests and routing-stats polls.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ray_kvmoq.engine.aio import AsyncEngine
from ray_kvmoq.engine.engine import Engine
from ray_kvmoq.engine.kv import KVCache
from ray_kvmoq.engine.sampling import SamplingParams
from ray_kvmoq.kvcache.naming import kv_namespace

from .costmodel import CostFigures, load_figures, plan_prefix, reusable_chunks
from .jobs import DoneEvent, Event, Job, KVStats, StartedEvent, TokenEvent
from .kvplane import KVPlane, Namespace


@dataclass(frozen=True, kw_only=True)
class PrefillOutcome:
    """The whole prompt's KV after prefill, and how it was obtained."""

    kv: KVCache
    """KV of every prompt token (positions 0..T-1)."""
    stats: KVStats
    """Reuse and transfer accounting."""


class ReplicaCore:
    """Prefill and decode for one replica (one engine, one node's KV plane)."""

    def __init__(
        self,
        engine: AsyncEngine,
        kv: KVPlane,
        *,
        node_id: str = "local",
        kv_timeout_s: float = 10.0,
        figures: CostFigures | None = None,
    ) -> None:
        self.aengine = engine
        self.engine: Engine = engine.engine
        self.kv = kv
        self.node_id = node_id
        self.kv_timeout_s = kv_timeout_s
        self.figures = figures or load_figures()
        self.chunk = engine.engine.config.chunk_size
        self.ongoing = 0
        """Requests in progress on this replica (reported to the router)."""
        self._inflight: dict[bytes, asyncio.Event] = {}
        self._first_published: dict[Namespace, asyncio.Event] = {}
        self._reused_groups: dict[Namespace, int] = {}

    # ---- naming ------------------------------------------------------------------------------

    def namespace(self, job: Job) -> Namespace:
        """The KV track namespace of ``job``'s prompt."""
        return kv_namespace(self.engine.model_name, job.prompt_id)

    def routing_stats(self, limit: int) -> dict[str, Any]:
        """What the router reads: node, queue length, chunk hashes held on this node."""
        return {
            "node_id": self.node_id,
            "queue_len": self.ongoing,
            "held": self.kv.held_hashes(limit),
        }

    # ---- prefill -----------------------------------------------------------------------------

    async def prefill_kv(
        self, job: Job, *, publish: bool, full_track: bool = True
    ) -> PrefillOutcome:
        """Run prefill for ``job`` (see the module docstring); publish groups if ``publish``.

        ``full_track``: end the prompt's track after its last group (PD decode follows it live;
        reused leading groups stay where they are and are read by chunk hash).
        """
        mine: list[bytes] = []
        try:
            if job.reuse and job.hashes:
                mine = await self._claim(job)
            return await self._prefill(job, publish=publish, full=full_track, claimed=mine)
        finally:
            for h in mine:
                self._inflight.pop(h).set()

    async def _claim(self, job: Job) -> list[bytes]:
        """Wait for chunks of this prompt that another request on this replica is computing
        right now (recomputing them in parallel would only race it for the same cores), then
        claim the ones nobody is computing. Returns the claimed hashes."""
        reusable = job.hashes[: reusable_chunks(len(job.tokens), self.chunk)]
        for h in reusable:
            ev = self._inflight.get(h)
            if ev is not None:
                try:
                    await asyncio.wait_for(ev.wait(), self.kv_timeout_s)
                except TimeoutError:
                    break
        mine = [h for h in reusable if h not in self._inflight]
        for h in mine:
            self._inflight[h] = asyncio.Event()
        return mine

    def _release(self, h: bytes | None, claimed: list[bytes]) -> None:
        if h is not None and h in claimed and h in self._inflight:
            self._inflight[h].set()

    async def _prefill(
        self, job: Job, *, publish: bool, full: bool, claimed: list[bytes]
    ) -> PrefillOutcome:
        tokens = list(job.tokens)
        ns = self.namespace(job)
        stats = KVStats(prefill_node=self.node_id)
        prefix: KVCache | None = None
        if job.reuse and job.hashes:
            prefix, stats = await self._fetch_prefix(job, stats)
            if prefix is not None:
                for got in job.hashes[: len(prefix.tensors())]:
                    self._release(got, claimed)
            if prefix is not None:
                # Decode reads the reused groups where they already are (by chunk hash) and
                # this prompt's track only from here on: nothing is re-published.
                self._reused_groups[ns] = len(prefix.tensors())
        start = prefix.length if prefix is not None else 0
        parts = [prefix] if prefix is not None else []
        done = prefix
        for s in range(start, len(tokens), self.chunk):
            end = min(s + self.chunk, len(tokens))
            res = await self.aengine.prefill(tokens[:end], done)
            part = res.kv
            parts.append(part)
            done = KVCache.cat(parts) if len(parts) > 1 else part
            parts = [done]
            if publish:
                g = s // self.chunk
                h = job.hashes[g] if job.reuse and g < len(job.hashes) else None
                publish = await self._publish(ns, g, part.chunks(), h)
                if not publish:
                    stats = stats.merged(KVStats(fallbacks=("publish",)))
                self._release(h, claimed)
        assert done is not None  # a prompt has at least one token
        if publish and full:
            await self.kv.end_track(ns, (len(tokens) - 1) // self.chunk)
        return PrefillOutcome(kv=done, stats=stats)

    async def _publish(
        self, ns: Namespace, g: int, chunks: list[np.ndarray], h: bytes | None
    ) -> bool:
        """Publish a group; False (and no exception) if the KV plane failed: the answer does
        not depend on publishing, only later reuse does."""
        try:
            for arr in chunks:
                await self.kv.publish(ns, g, arr, h)
        except Exception:
            return False
        waiter = self._first_published.pop(ns, None)
        if waiter is not None:
            waiter.set()
        return True

    async def prefill_stream(self, job: Job) -> AsyncIterator[Event]:
        """PD prefill as events: :class:`StartedEvent` once the first group of the prompt's
        track is on this node's relay (so decode's clock for "late" starts when data can
        flow, not while this request waits behind others), then the :class:`DoneEvent`."""
        ns = self.namespace(job)
        first = self._first_published[ns] = asyncio.Event()
        self.ongoing += 1
        task = asyncio.create_task(self.prefill_kv(job, publish=True))
        try:
            waiter = asyncio.create_task(first.wait())
            await asyncio.wait({task, waiter}, return_when=asyncio.FIRST_COMPLETED)
            waiter.cancel()
            yield StartedEvent(node_id=self.node_id, reused_groups=self._reused_groups.pop(ns, 0))
            try:
                out = await task
                yield DoneEvent(finish_reason="stop", stats=out.stats)
            except Exception as exc:
                yield DoneEvent(finish_reason="error", error=f"prefill failed: {exc}")
        finally:
            self._first_published.pop(ns, None)
            self._reused_groups.pop(ns, None)
            if not task.done():
                task.cancel()
            self.ongoing -= 1

    async def _fetch_prefix(self, job: Job, stats: KVStats) -> tuple[KVCache | None, KVStats]:
        limit = reusable_chunks(len(job.tokens), self.chunk)
        hashes = list(job.hashes[:limit])
        if not hashes:
            return None, stats
        local, avail = await self.kv.locate(hashes)
        plan = plan_prefix(
            self.figures,
            prompt_tokens=len(job.tokens),
            local_chunks=local,
            available_chunks=avail,
            chunk_tokens=self.chunk,
            allow_remote=self.kv.supports_remote,
        )
        if not plan.reused_chunks:
            return None, stats
        got = await self.kv.fetch_prefix(hashes, plan.reused_chunks, timeout_s=self.kv_timeout_s)
        fallbacks = tuple(got.fallbacks)
        if len(got.chunks) < plan.reused_chunks and not fallbacks:
            fallbacks = ("evicted",)
        chunks = self._valid(got.chunks)
        if len(chunks) < len(got.chunks):
            fallbacks += ("shape",)
        n_local = min(got.local, len(chunks))
        stats = KVStats(
            reused_local=n_local * self.chunk,
            reused_remote=(len(chunks) - n_local) * self.chunk,
            bytes_zero_copy=got.bytes_zero_copy,
            bytes_moqt=got.bytes_moqt,
            fallbacks=fallbacks,
            prefill_node=self.node_id,
        )
        if not chunks:
            return None, stats
        return KVCache.from_chunks(chunks, chunk_size=self.chunk), stats

    def _valid(self, chunks: Sequence[np.ndarray], *, short_last: bool = False) -> list[np.ndarray]:
        """The leading chunks whose geometry matches the engine (anything else is recomputed).

        Every chunk must hold ``chunk`` tokens, except the last one when ``short_last``.
        """
        c = self.engine.config
        want = (c.num_layers, 2, c.num_kv_heads, c.head_dim)
        out = []
        for i, arr in enumerate(chunks):
            if arr.ndim != 5 or (*arr.shape[:3], arr.shape[4]) != want:
                break
            n = arr.shape[3]
            if n != self.chunk and not (short_last and i == len(chunks) - 1 and 0 < n < self.chunk):
                break
            out.append(arr)
        return out

    # ---- decode ------------------------------------------------------------------------------

    async def decode_tokens(self, job: Job, kv: KVCache | None) -> AsyncIterator[Event]:
        """Generate after the prompt whose KV is ``kv`` (None: compute it all); stream events.

        The engine batches this request with the replica's other active ones.
        """
        params = SamplingParams(
            max_tokens=job.max_tokens,
            temperature=job.temperature,
            top_p=job.top_p,
            seed=job.seed,
            ignore_eos=job.ignore_eos,
        )
        reason = "length"
        error: str | None = None
        stream = self.aengine.stream(
            list(job.tokens), params, request_id=job.request_id, prefix_kv=kv
        )
        try:
            async for out in stream:
                if out.token_id is not None:
                    yield TokenEvent(ids=(out.token_id,))
                if out.finished:
                    reason = out.finish_reason or "stop"
                    error = out.error
        finally:
            await stream.aclose()
        yield DoneEvent(finish_reason=reason, error=error)

    async def pull_kv(
        self, job: Job, kv_node: str, reused_groups: int = 0
    ) -> tuple[KVCache | None, KVStats]:
        """The prompt's KV through this node's relay: its first ``reused_groups`` groups by
        chunk hash (wherever earlier prompts left them), the rest from the prompt's own
        (possibly live) track on ``kv_node``.

        Returns the leading groups that arrived in time (None if none did); what is missing
        is recomputed by decode, and the reason is in the stats' ``fallbacks``.
        """
        n_groups = -(-len(job.tokens) // self.chunk)
        got: list[np.ndarray] = []
        fallbacks: tuple[str, ...] = ()
        zero_copy = moqt = 0
        if reused_groups:
            pre = await self.kv.fetch_prefix(job.hashes, reused_groups, timeout_s=self.kv_timeout_s)
            got, zero_copy, moqt = list(pre.chunks), pre.bytes_zero_copy, pre.bytes_moqt
            fallbacks = tuple(pre.fallbacks)
        remote = kv_node != self.node_id
        if len(got) == reused_groups:
            try:
                async for g, arr in self.kv.track(
                    self.namespace(job),
                    n_groups,
                    source_node=kv_node,
                    timeout_s=self.kv_timeout_s,
                    start_group=reused_groups,
                ):
                    if g != len(got):
                        break
                    got.append(arr)
                    moqt += arr.nbytes if remote else 0
                    zero_copy += 0 if remote else arr.nbytes
            except Exception as exc:  # relay gone, session reset, corrupt payload: recompute
                fallbacks += (_reason(exc),)
        valid = self._valid(got, short_last=len(got) == n_groups)
        if len(valid) < n_groups and not fallbacks:
            fallbacks = ("timeout",) if len(got) == len(valid) else ("shape",)
        stats = KVStats(
            bytes_moqt=moqt,
            bytes_zero_copy=zero_copy,
            fallbacks=fallbacks,
            decode_node=self.node_id,
        )
        if not valid:
            return None, stats
        return KVCache.from_chunks(valid, chunk_size=self.chunk), stats

    async def pull_and_decode(
        self, job: Job, kv_node: str, reused_groups: int = 0
    ) -> AsyncIterator[Event]:
        """PD decode: pull the prompt's KV through this node's relay, then generate."""
        self.ongoing += 1
        try:
            if kv_node:
                kv, stats = await self.pull_kv(job, kv_node, reused_groups)
            else:  # prefill could not start: compute the whole prompt here
                kv, stats = None, KVStats(fallbacks=("prefill",), decode_node=self.node_id)
            async for ev in self.decode_tokens(job, kv):
                if isinstance(ev, DoneEvent):
                    ev = DoneEvent(finish_reason=ev.finish_reason, stats=stats, error=ev.error)
                yield ev
        finally:
            self.ongoing -= 1

    # ---- combined mode -----------------------------------------------------------------------

    async def generate(self, job: Job) -> AsyncIterator[Event]:
        """Prefill (with local reuse, publishing to this node) then decode, in one replica."""
        self.ongoing += 1
        t0 = time.perf_counter()
        try:
            pre = await self.prefill_kv(job, publish=job.reuse, full_track=False)
            stats = pre.stats
            async for ev in self.decode_tokens(job, pre.kv):
                if isinstance(ev, DoneEvent):
                    ev = DoneEvent(
                        finish_reason=ev.finish_reason,
                        stats=stats.merged(KVStats(decode_node=self.node_id)),
                    )
                yield ev
        finally:
            self.ongoing -= 1
            self.last_request_s = time.perf_counter() - t0


def _reason(exc: BaseException) -> str:
    """A short fallback reason for metrics (``digest``, ``timeout`` or ``error``)."""
    name = type(exc).__name__.lower()
    if "digest" in name or "integrity" in name or "payload" in name:
        return "digest"
    if isinstance(exc, TimeoutError) or "timeout" in name:
        return "timeout"
    return "error"
