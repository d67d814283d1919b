"""Worker side of the MoQT KV connector: groups in and out of vLLM's paged blocks.

Runs in each vLLM worker process, next to the model runner. Per engine step it receives the
scheduler's :class:`~.metadata.MoqtConnectorMetadata` and

* **loads** (``start_load_kv``): synchronous loads — every group on this node — are read from
  the node relay (object-store buffers mapped zero-copy), verified, decoded and scattered into
  the request's blocks before the forward pass; asynchronous ones (some group on another node:
  the relay pulls it over MoQT) run on a loader thread and are reported through
  ``get_finished`` when done. The loader first asks the relay to prefetch every remote group
  of the load (one pipelined batch of range FETCHes per track), then reads the groups in order:
  each read waits only for its own group, so decoding overlaps the rest of the pull (one
  round trip per group otherwise: 1.6-1.7x slower in ``kvmoq bench relay --reader``). The
  request's blocks are reserved for it while it waits, so the loader writes into them while
  other requests' forward passes run.
* **saves** (``wait_for_save``): each group the step completed is gathered from the blocks (one
  copy, in the step, so the blocks may be reused at once) and handed to the publisher thread,
  which encodes it with the track's codec, attaches digests and publishes it on the node relay
  — in group order, so live subscribers see the track grow while prefill continues.

On CUDA the gathered chunk goes to a pinned host buffer with an asynchronous copy whose event
the publisher thread waits on (the forward pass never waits for the device-to-host transfer),
and loaded chunks go back through pinned memory; codecs run on the host. (CI has no GPU: the
CPU path is what the tests run.)

Failure rule: any error while loading a group (missing, late, evicted, corrupt, foreign
geometry) stops that request's load there; the blocks from that group on are reported by
``get_block_ids_with_load_errors`` (and an asynchronous load as failed), so vLLM recomputes
them (``kv_load_failure_policy="recompute"``). Nothing half-written is ever used: the scheduler
truncates the request to the first bad block. A failed save is counted and dropped — it is
only a future cache miss.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

from ray_kvmoq.kvcache.errors import KVCacheError
from ray_kvmoq.kvcache.integrity import verify
from ray_kvmoq.kvcache.layout import KVGeometry
from ray_kvmoq.kvcache.naming import CODEBOOK_TRACK_SUFFIX, DEFAULT_CHUNK_SIZE

from .bridge import HandoffLost, RelayBridge
from .chunks import CODEBOOK_GROUP, Codebooks, decode_group, encode_chunk
from .cores import pin_thread, spare_cores
from .metadata import LoadSpec, MoqtConnectorMetadata, SaveSpec
from .paged import LayerCaches, PagedLayout, gather_chunk, order_layers, scatter_chunk, slot_index
from .stats import ConnectorCounters

LayoutFactory = Callable[[int, torch.dtype], PagedLayout]
"""(head size, KV dtype) → the engine's paged layout (made once the caches are registered)."""

__all__ = ["WorkerSide"]

log = logging.getLogger(__name__)

_AC = b"AC"
_JOIN_TIMEOUT_S = 120.0
_ABANDONED_KEPT = 4096


@dataclass(frozen=True, kw_only=True)
class _Gathered:
    """A group gathered from the blocks, waiting to be encoded and published."""

    spec: SaveSpec
    chunk: torch.Tensor
    """On the host (pinned when it came from a GPU)."""
    ready: Any = None
    """CUDA event the device-to-host copy completes at (None: already complete)."""

    def host(self) -> torch.Tensor:
        """The chunk once its copy is done (the publisher waits here, not the forward pass)."""
        if self.ready is not None:
            self.ready.synchronize()
        return self.chunk


def _to_host(chunk: torch.Tensor) -> tuple[torch.Tensor, Any]:
    """``chunk`` on the host: a pinned buffer filled asynchronously (plus the event that marks
    the end of the copy) for CUDA tensors, so the step does not wait for the transfer."""
    if chunk.device.type != "cuda":
        return chunk.contiguous(), None
    host = torch.empty(chunk.shape, dtype=chunk.dtype, pin_memory=True)
    host.copy_(chunk, non_blocking=True)
    event = torch.cuda.Event()
    event.record()
    return host, event


def _to_device(chunk: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A decoded (host) chunk on the cache's device (through pinned memory for CUDA)."""
    if device.type != "cuda":
        return chunk
    return chunk.pin_memory().to(device, non_blocking=True)


class WorkerSide:
    """The worker-side half of :class:`~.connector.MoqtKVConnector`."""

    def __init__(
        self,
        *,
        bridge: RelayBridge,
        make_layout: LayoutFactory,
        block_size: int,
        chunk_size: int = DEFAULT_CHUNK_SIZE,
        load_timeout_s: float = 10.0,
    ) -> None:
        self.bridge = bridge
        self._make_layout = make_layout
        self.layout: PagedLayout | None = None
        self.block_size = block_size
        self.chunk_size = chunk_size
        self.load_timeout_s = load_timeout_s
        self.counters = ConnectorCounters()
        self.on_count: Callable[[], None] | None = None
        """Called after every count (on the thread that counted): publishes and loads end on
        this side's own threads, after the step that asked for them."""
        self.codebooks = Codebooks()
        self.caches: dict[str, torch.Tensor] = {}
        self.layers: list[str] = []
        self.geometry: KVGeometry | None = None
        self.dtype: torch.dtype = torch.bfloat16
        self._spare: frozenset[int] = frozenset()
        """Cores no engine thread is bound to: where this side's threads run (``cores.py``)."""
        self._loader = ThreadPoolExecutor(
            max_workers=2, thread_name_prefix="kvmoq-load", initializer=self._pin
        )
        self._publisher = ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="kvmoq-publish", initializer=self._pin
        )
        self._lock = threading.Lock()
        self._loading: dict[str, Future[bool]] = {}
        self._bad_blocks: set[int] = set()
        self._finished_recving: set[str] = set()
        self._failed_recving: set[str] = set()
        self._abandoned: OrderedDict[str, None] = OrderedDict()
        """PD hand-offs whose prefill failed (the last ``_ABANDONED_KEPT``)."""

    # ---- registration ----------------------------------------------------------------------

    def register_kv_caches(self, kv_caches: LayerCaches) -> None:
        """Remember the engine's per-layer KV tensors (in model order), their geometry and
        their paged layout."""
        self.caches = dict(kv_caches)
        self.layers = order_layers(list(self.caches))
        first = self.caches[self.layers[0]]
        if first.dim() != 4 or first.shape[-1] % 2:
            raise ValueError(f"unexpected KV cache tensor shape {tuple(first.shape)}")
        n_h, d = int(first.shape[1]), int(first.shape[-1]) // 2
        self.geometry = KVGeometry(num_layers=len(self.layers), num_kv_heads=n_h, head_dim=d)
        self.dtype = first.dtype
        self.layout = self._make_layout(d, first.dtype)
        # vLLM has bound its threads by now: this side's threads (started from here on) run on
        # the cores it left spare, and Ray's threads too, as the bridge joins Ray from one. This
        # thread waits for the join: ``join_ray`` keeps Ray's GCS subscriber ids off vLLM's
        # seeded ``random`` only while nothing else draws from or seeds it, and vLLM's start-up
        # does both on this thread (joining beside it, two engines' workers drew the same ids:
        # the GCS busy loop, 0.3 of a core, came back; docs/benchmarks.md)
        self._spare = spare_cores()
        try:
            self._publisher.submit(self._join_ray).result(timeout=_JOIN_TIMEOUT_S)
        except TimeoutError:
            log.warning("joining Ray took over %.0f s; going on without waiting", _JOIN_TIMEOUT_S)
        log.info(
            "MoQT KV connector: %d layers, %d KV heads x %d, %s, block size %d, %r, "
            "threads on cores %s",
            len(self.layers),
            n_h,
            d,
            first.dtype,
            self.block_size,
            self.layout,
            sorted(self._spare) or "of the engine (none spare)",
        )

    def _pin(self) -> None:
        pin_thread(self._spare)

    def _join_ray(self) -> None:
        try:
            self.bridge.relay()
        except Exception as exc:  # the first load or save tries again, and says why
            log.warning("cannot reach the node relay yet: %s", exc)

    # ---- loads -----------------------------------------------------------------------------

    def start_load_kv(self, meta: MoqtConnectorMetadata) -> None:
        """Run synchronous loads now; start asynchronous ones on the loader thread."""
        for spec in meta.loads:
            if spec.is_async:
                with self._lock:
                    if spec.req_id in self._loading:
                        continue
                    self._loading[spec.req_id] = self._loader.submit(self._load_async, spec)
            else:
                self._load(spec)

    def _load_async(self, spec: LoadSpec) -> bool:
        ok = False
        try:
            ok = self._load(spec)
        finally:
            with self._lock:
                self._loading.pop(spec.req_id, None)
                self._finished_recving.add(spec.req_id)
                if not ok:
                    self._failed_recving.add(spec.req_id)
        return ok

    def _load(self, spec: LoadSpec) -> bool:
        """Load ``spec``; on the first failing group, mark its blocks (and later ones) bad."""
        if self.geometry is None or self.layout is None:
            self._fail(spec, spec.start, "KV caches not registered")
            return False
        c = self.chunk_size
        deadline = time.monotonic() + self.load_timeout_s
        spent = {True: [0.0, 0.0, 0.0], False: [0.0, 0.0, 0.0]}  # local? -> [s, bytes, groups]
        if not spec.follows_producer:  # a producer's live track already streams its groups
            self._prefetch(spec)
        given_up = (lambda: spec.handoff in self._abandoned) if spec.handoff else None
        for i, src in enumerate(spec.sources):
            k = spec.first_group + i
            lo, hi = max(spec.start, k * c), min(spec.end, (k + 1) * c)
            if lo >= hi:
                continue
            try:
                t0 = time.perf_counter()
                objects = self.bridge.get_group(
                    src.namespace,
                    src.track,
                    src.group_id,
                    timeout_s=max(0.05, deadline - time.monotonic()),
                    wait_s=max(0.0, deadline - time.monotonic()) if not src.local else 0.0,
                    given_up=given_up if src.awaited else None,
                )
                nbytes = sum(len(o.payload) for o in objects)
                codebook = self._codebook_for(src.namespace, src.track, deadline)
                chunk = decode_group(
                    src.track,
                    objects,
                    self.geometry,
                    self.dtype,
                    codebook=codebook,
                    key=self.bridge.digest_key(),
                )
                if chunk.shape[3] < hi - k * c:
                    raise KVCacheError(f"group {src.group_id} has {chunk.shape[3]} tokens")
                device = self.caches[self.layers[0]].device
                blocks, offsets = slot_index(spec.block_ids, lo, hi, self.block_size, device)
                part = _to_device(chunk[:, :, :, lo - k * c : hi - k * c], device)
                scatter_chunk(self.layout, self.caches, self.layers, blocks, offsets, part)
                if device.type == "cuda":
                    torch.cuda.current_stream(device).synchronize()  # written before "loaded"
            except Exception as exc:
                digest = isinstance(exc, KVCacheError)
                self._fail(spec, lo, f"{type(exc).__name__}: {exc}", digest=digest)
                if isinstance(exc, HandoffLost):
                    self._count(handoffs_abandoned=1)
                return False
            took = time.perf_counter() - t0
            acc = spent[src.local]
            acc[0], acc[1], acc[2] = acc[0] + took, acc[1] + nbytes, acc[2] + 1
            self._count(
                tokens_loaded=hi - lo,
                groups_loaded=1,
                bytes_loaded=nbytes,
                decode_us=int(took * 1e6),
            )
        if not spec.follows_producer:  # waiting for a producer is not pull time
            for local, (secs, moved, groups) in spent.items():
                if moved:
                    kind = "local_s_per_byte" if local else "pull_s_per_byte"
                    self.bridge.report(kind, secs / moved, int(groups))
        return True

    def _prefetch(self, spec: LoadSpec) -> None:
        """Ask the node relay to pull every group of ``spec`` that lives on another node, one
        pipelined batch per track, before reading them in order: each read then waits only
        for its own group, and decoding one group overlaps the pull of the next."""
        c = self.chunk_size
        remote: dict[tuple[Any, bytes], list[int]] = {}
        for i, src in enumerate(spec.sources):
            k = spec.first_group + i
            if not src.local and max(spec.start, k * c) < min(spec.end, (k + 1) * c):
                remote.setdefault((src.namespace, src.track), []).append(src.group_id)
        for (namespace, track), group_ids in remote.items():
            self.bridge.prefetch(namespace, track, group_ids, timeout_s=self.load_timeout_s)

    def _codebook_for(self, namespace: Any, track: bytes, deadline: float) -> bytes | None:
        if track != _AC:
            return None

        def fetch() -> bytes:
            objs = self.bridge.get_group(
                namespace,
                _AC + CODEBOOK_TRACK_SUFFIX,
                CODEBOOK_GROUP,
                timeout_s=max(0.05, deadline - time.monotonic()),
                wait_s=max(0.0, deadline - time.monotonic()),
            )
            o = objs[0]
            verify(o.payload, list(o.extensions), self.bridge.digest_key())
            return bytes(o.payload)

        return self.codebooks.get(namespace, fetch)

    def _fail(self, spec: LoadSpec, from_token: int, why: str, *, digest: bool = False) -> None:
        bs = self.block_size
        first, last = from_token // bs, (spec.end - 1) // bs
        bad = {spec.block_ids[b] for b in range(first, min(last + 1, len(spec.block_ids)))}
        log.warning(
            "KV load for %s failed at token %d (%s): recomputing %d block(s)",
            spec.req_id,
            from_token,
            why,
            len(bad),
        )
        with self._lock:
            self._bad_blocks |= bad
        self._count(load_errors=1, digest_errors=int(digest))

    def abandon_handoff(self, handoff: str) -> None:
        """The serving layer lost the prefill of PD hand-off ``handoff``: loads following its
        track stop waiting for the groups that were not published when they were planned (vLLM
        recomputes from the first of them), now or when they start. Groups the directory knew
        load as usual."""
        with self._lock:
            self._abandoned[handoff] = None
            while len(self._abandoned) > _ABANDONED_KEPT:
                self._abandoned.popitem(last=False)

    def take_bad_blocks(self) -> set[int]:
        """Blocks whose load failed since the last call."""
        with self._lock:
            bad, self._bad_blocks = self._bad_blocks, set()
        return bad

    def take_finished(self) -> tuple[set[str], set[str]]:
        """(asynchronous loads finished since the last call, of which failed)."""
        with self._lock:
            done, self._finished_recving = self._finished_recving, set()
            failed, self._failed_recving = self._failed_recving, set()
        return done, failed

    # ---- saves -----------------------------------------------------------------------------

    def save_kv_layer(self, layer_name: str, kv_layer: torch.Tensor) -> None:
        """Nothing per layer: a group needs every layer, so saves gather at the step's end
        from the tensors registered at start-up (checked to be this one)."""
        if self.caches.get(layer_name) is not kv_layer and layer_name in self.caches:
            self.caches[layer_name] = kv_layer

    def wait_for_save(self, meta: MoqtConnectorMetadata) -> None:
        """Gather every group this step completed and queue it for publishing."""
        if not meta.saves or not self.layers or self.layout is None:
            return
        device = self.caches[self.layers[0]].device
        for spec in meta.saves:
            try:
                blocks, offsets = slot_index(
                    spec.block_ids, spec.start, spec.end, self.block_size, device
                )
                chunk = gather_chunk(self.layout, self.caches, self.layers, blocks, offsets)
                host, ready = _to_host(chunk)
            except Exception as exc:
                log.warning("cannot gather group %d of %s: %s", spec.group_id, spec.req_id, exc)
                self._count(save_errors=1)
                continue
            self._publisher.submit(self._publish, _Gathered(spec=spec, chunk=host, ready=ready))

    def _publish(self, g: _Gathered) -> None:
        spec = g.spec
        try:
            chunk = g.host()
            t0 = time.perf_counter()
            codebook = None
            if spec.track == _AC:
                codebook, new = self.codebooks.make(spec.namespace, chunk)
                if new:
                    self.bridge.publish_group(
                        spec.namespace,
                        _AC + CODEBOOK_TRACK_SUFFIX,
                        CODEBOOK_GROUP,
                        encode_codebook_objects(codebook, self.bridge.digest_key()),
                        chunk_hash=None,
                    )
            objects = encode_chunk(
                spec.track, chunk, spec.group_id, codebook=codebook, key=self.bridge.digest_key()
            )
            encode_us = int((time.perf_counter() - t0) * 1e6)
            self.bridge.publish_group(
                spec.namespace,
                spec.track,
                spec.group_id,
                objects,
                chunk_hash=spec.chunk_hash,
                end_of_track=spec.end_of_track,
            )
        except Exception as exc:
            log.warning("cannot publish group %d of %s: %s", spec.group_id, spec.req_id, exc)
            self._count(save_errors=1)
            return
        self._count(
            groups_saved=1, bytes_saved=sum(len(o.payload) for o in objects), encode_us=encode_us
        )

    def flush(self, timeout_s: float = 30.0) -> None:
        """Wait until every queued publish has run (tests, shutdown)."""
        self._publisher.submit(lambda: None).result(timeout=timeout_s)

    # ---- misc ------------------------------------------------------------------------------

    def _count(self, **deltas: int) -> None:
        self.counters.add(**deltas)
        if self.on_count is not None:
            self.on_count()

    def shutdown(self) -> None:
        """Stop the threads (queued publishes finish first)."""
        self._publisher.shutdown(wait=True, cancel_futures=False)
        self._loader.shutdown(wait=False, cancel_futures=True)


def encode_codebook_objects(codebook: bytes, key: bytes | None) -> list[Any]:
    """The codebook group: one object holding the blob, with its digest."""
    from ray_kvmoq.kvcache.integrity import attach_digest
    from ray_kvmoq.relay.cache import CachedObject

    return [CachedObject(object_id=0, payload=codebook, extensions=(attach_digest(codebook, key),))]
