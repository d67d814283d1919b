"""The relay-backed :class:`~.kvplane.KVPlane`: KV chunks as draft-shi-moq-kvcache tracks on the
node's ``RelayActor``.

This is where KV meaning meets MoQT coordinates (DESIGN.md): a chunk becomes one group of the
prompt's track ``(root, model, prompt id) / <codec>``, one object per token encoded by the
track's codec, each object carrying its payload digest (``kvcache.integrity``); the group is
indexed in the directory by the chunk's chained hash. Reading goes through this node's relay
only: for a group held here the relay hands back an object-store ref (zero-copy), for one held
elsewhere it pulls it once over MoQT from the peer relay and caches it.

Failure rule: any error while locating, pulling, verifying or decoding ends the fetch there
(``fallbacks`` names why); the caller recomputes what is missing. A relay that cannot be started
makes :meth:`RelayKVPlane.for_this_node` fall back to a process-local plane.

Never a blocking ``ray.get`` in ``async def``: every actor call is awaited.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import OrderedDict
from collections.abc import AsyncIterator, Sequence
from typing import Any

import numpy as np
import ray

from ray_kvmoq.kvcache.integrity import KV_DIGEST_EXTENSION, attach_digest, verify
from ray_kvmoq.kvcache.layout import KVGeometry
from ray_kvmoq.kvcache.registry import get_codec
from ray_kvmoq.moqt.types import FetchErrorCode
from ray_kvmoq.relay.actor import relay_name, start_relays
from ray_kvmoq.relay.cache import CachedObject
from ray_kvmoq.relay.packed import unpack_group

from .kvplane import FetchResult, KVPlane, LocalKVPlane, Namespace, newest_short_hashes

log = logging.getLogger(__name__)

RAY_NAMESPACE = "kvmoq"
"""Ray namespace of the relays and the directory, whichever driver deployed the app (Serve
replicas otherwise create named actors in the deploying job's random namespace, where
``kvmoq inspect`` and a second app could not find them)."""
_MAX_TRACKED = 65536


class RelayKVPlane(KVPlane):
    """KV chunks through this node's relay (see the module docstring)."""

    supports_remote = True
    shared_across_processes = True

    def __init__(
        self,
        relay: Any,
        node_id: str,
        *,
        codec: str = "BF16",
        budget_bytes: int = 1 << 30,
        datagram_size: int = 1452,
    ) -> None:
        self._relay = relay
        self.node_id = node_id
        self.budget_bytes = budget_bytes
        self.datagram_size = datagram_size
        self._revive_after = 0.0
        self.codec = get_codec(codec)
        self.track_name = self.codec.track_name
        # Chunk hashes this replica published or pulled (what its node now holds), newest last;
        # the directory is the truth, this is only the routing-stats summary.
        self._held: OrderedDict[bytes, None] = OrderedDict()

    @classmethod
    def for_this_node(
        cls, *, codec: str = "BF16", budget_bytes: int = 1 << 30, datagram_size: int = 1452
    ) -> KVPlane:
        """Find or start this node's relay (and the directory); a local plane if that fails."""
        node_id = str(ray.get_runtime_context().get_node_id())
        try:
            relay = start_node_relay(node_id, budget_bytes, datagram_size=datagram_size)
            return cls(
                relay, node_id, codec=codec, budget_bytes=budget_bytes, datagram_size=datagram_size
            )
        except Exception as exc:  # no relay: keep serving, reuse stays within this process
            log.warning("relay on node %s unavailable (%s); using process-local KV", node_id, exc)
            return LocalKVPlane(budget_bytes=budget_bytes)

    @property
    def relay(self) -> Any:
        """This node's relay actor handle."""
        return self._relay

    async def revive(self) -> bool:
        """After the relay died: start a new one on this node (at most every 5 s)."""
        now = time.monotonic()
        if now < self._revive_after:
            return False
        self._revive_after = now + 5.0
        try:
            self._relay = await asyncio.to_thread(
                start_node_relay, self.node_id, self.budget_bytes, datagram_size=self.datagram_size
            )
        except Exception as exc:
            log.warning("cannot restart the relay on %s: %s", self.node_id, exc)
            return False
        self._held.clear()  # the new relay holds nothing
        return True

    async def _on_error(self, exc: BaseException) -> None:
        if isinstance(exc, ray.exceptions.RayActorError):
            await self.revive()

    # ---- control plane -------------------------------------------------------------------

    def held_hashes(self, limit: int) -> list[str]:
        """Short hashes this replica put on (or pulled to) its node, newest first."""
        return newest_short_hashes(self._held, limit)

    async def snapshot(self) -> dict[str, Any]:
        """The relay's counters plus this replica's view."""
        stats = await self.relay.stats.remote()
        return {
            "kind": "relay",
            "node_id": self.node_id,
            "relay": relay_name(self.node_id),
            "track": self.track_name.decode(),
            "chunks_indexed_here": len(self._held),
            "relay_stats": dict(stats),
        }

    async def locate(self, hashes: Sequence[bytes]) -> tuple[int, int]:
        """Leading chunks held on this node, and held anywhere (from the directory)."""
        if not hashes:
            return 0, 0
        try:
            chain = await self.relay.longest_prefix.remote(list(hashes))
        except Exception as exc:
            await self._on_error(exc)
            return 0, 0
        local = 0
        for locs in chain:
            if not any(loc.node_id == self.node_id for loc in locs):
                break
            local += 1
        return local, len(chain)

    # ---- data plane ----------------------------------------------------------------------

    async def fetch_prefix(
        self, hashes: Sequence[bytes], n: int, *, timeout_s: float
    ) -> FetchResult:
        """Chunks for ``hashes[:n]`` via the directory and this node's relay."""
        res = FetchResult()
        try:
            chain = await asyncio.wait_for(
                self.relay.longest_prefix.remote(list(hashes[:n])), timeout_s
            )
        except Exception as exc:
            res.fallbacks.append(_reason(exc))
            await self._on_error(exc)
            return res
        deadline = time.monotonic() + timeout_s
        for k, locs in enumerate(chain[:n]):
            if not locs:
                break
            loc = next((x for x in locs if x.node_id == self.node_id), locs[0])
            remaining = deadline - time.monotonic()
            try:
                if remaining <= 0:
                    raise TimeoutError
                arr, nbytes = await asyncio.wait_for(
                    self._read_group(loc.namespace, loc.track, loc.group_id), remaining
                )
            except Exception as exc:
                res.fallbacks.append(_reason(exc))
                await self._on_error(exc)
                break
            res.chunks.append(arr)
            self._remember(hashes[k])
            if loc.node_id == self.node_id:
                res.local += 1
                res.bytes_zero_copy += nbytes
            else:
                res.remote += 1
                res.bytes_moqt += nbytes
        return res

    async def publish(
        self, namespace: Namespace, group: int, chunk: np.ndarray, chunk_hash: bytes | None
    ) -> None:
        """Encode the chunk (one object per token, digest attached) and publish the group."""
        payloads = await asyncio.to_thread(self.codec.encode_chunk, chunk)
        objects = [
            CachedObject(object_id=i, payload=p, extensions=(attach_digest(p),))
            for i, p in enumerate(payloads)
        ]
        try:
            await self.relay.publish_group.remote(
                namespace, self.track_name, group, objects, chunk_hash=chunk_hash
            )
        except Exception as exc:
            await self._on_error(exc)
            raise
        if chunk_hash is not None:
            self._remember(chunk_hash)

    async def end_track(self, namespace: Namespace, last_group: int) -> None:
        """Mark the prompt's track complete (live subscribers then finish)."""
        try:
            await self.relay.end_track.remote(namespace, self.track_name, last_group)
        except Exception as exc:
            await self._on_error(exc)

    async def track(
        self,
        namespace: Namespace,
        n_groups: int,
        *,
        source_node: str | None,
        timeout_s: float,
        start_group: int = 0,
    ) -> AsyncIterator[tuple[int, np.ndarray]]:
        """Groups 0..n-1 of a live track, in order, from one subscription on this node's relay
        (which subscribes upstream once over MoQT if the track lives on another node).

        The track may not exist yet: the relay waits up to ``timeout_s`` for it. Each group
        must arrive within ``timeout_s`` of the previous one; groups may complete out of
        order, so they are buffered and handed out in order. Ends quietly when late.
        """
        gen = self.relay.subscribe_groups.remote(
            namespace, self.track_name, start_group, wait_s=timeout_s
        )
        it = gen.__aiter__()
        buffered: dict[int, np.ndarray] = {}
        nxt = start_group
        try:
            while nxt < n_groups:
                try:
                    ref = await asyncio.wait_for(it.__anext__(), timeout_s)
                    item = await ref
                except (StopAsyncIteration, TimeoutError):
                    return
                except Exception as exc:
                    if _not_yet(exc):
                        return  # never appeared: the caller recomputes
                    await self._on_error(exc)
                    raise
                if "ref" not in item:  # end of track
                    return
                g = int(item["group_id"])
                if nxt <= g < n_groups and g not in buffered:
                    buffered[g], _ = await self._decode_packed(await item["ref"])
                while nxt in buffered:
                    yield nxt, buffered.pop(nxt)
                    nxt += 1
        finally:
            if nxt < n_groups:
                with contextlib.suppress(Exception):
                    ray.cancel(gen)

    # ---- internals ---------------------------------------------------------------------------

    async def _read_group(
        self, namespace: Namespace, track: bytes, group: int
    ) -> tuple[np.ndarray, int]:
        ref = await self.relay.get_group_ref.remote(namespace, track, group)
        return await self._decode_packed(await ref)

    async def _decode_packed(self, packed: Any) -> tuple[np.ndarray, int]:
        """Verify every object's digest, then decode the group into one chunk array."""
        payloads = []
        for o in unpack_group(packed):
            verify(o.payload, [(t, v) for t, v in o.extensions if t == KV_DIGEST_EXTENSION])
            payloads.append(bytes(o.payload))
        nbytes = sum(len(p) for p in payloads)
        geo = _geometry(payloads[0] if payloads else b"")
        arr = await asyncio.to_thread(
            self.codec.decode_objects, payloads, geo, dtype=_out_dtype(self.track_name)
        )
        return arr, nbytes

    def _remember(self, h: bytes) -> None:
        self._held[h] = None
        self._held.move_to_end(h)
        while len(self._held) > _MAX_TRACKED:
            self._held.popitem(last=False)


def start_node_relay(
    node_id: str, budget_bytes: int, timeout_s: float = 60.0, *, datagram_size: int = 1452
) -> Any:
    """Find or start the relay of ``node_id`` (and the directory) in :data:`RAY_NAMESPACE`.

    ``datagram_size`` is the QUIC datagram size the relay uses towards its peers (pacing stays
    on: between relays it measured faster than unpaced, `kvmoq bench relay --no-pacing`). A
    relay that already runs keeps its settings. Synchronous (call it from a replica's
    constructor or a thread).
    """
    transport = {"max_datagram_size": datagram_size}
    handles = start_relays(
        node_ids=[node_id],
        budget_bytes=budget_bytes,
        namespace=RAY_NAMESPACE,
        timeout_s=timeout_s,
        network={"transport_options": transport},
    )
    return handles[node_id]


def _geometry(payload: bytes) -> KVGeometry:
    from ray_kvmoq.kvcache.layout import parse_header

    return parse_header(payload).geometry


def _out_dtype(track: bytes) -> Any:
    return {b"BF16": "bf16", b"FP16": "float16"}.get(track, "float32")


def _not_yet(exc: BaseException) -> bool:
    """True for 'track/group not there yet' errors worth retrying while prefill runs: the
    relay's ``RelayError`` (re-raised through Ray) with MoQT's TRACK_DOES_NOT_EXIST or
    NO_OBJECTS code (draft-14 §13.1.2, §13.1.5)."""
    code = getattr(exc, "error_code", None)
    if code in (FetchErrorCode.TRACK_DOES_NOT_EXIST, FetchErrorCode.NO_OBJECTS):
        return True
    text = str(exc).lower()
    return code is None and ("not found" in text or "not available" in text)


def _reason(exc: BaseException) -> str:
    name = type(exc).__name__.lower()
    if "digest" in name or "integrity" in name:
        return "digest"
    if isinstance(exc, TimeoutError) or "timeout" in name:
        return "timeout"
    return "error"
