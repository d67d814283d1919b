"""Where prefill and decode get and put KV chunks: the ``KVPlane`` interface and its in-process form.

STYLE rule 8: control-plane methods (what is held, where) are kept apart from data-plane methods
(moving chunks), and optional behaviour is a capability flag the caller checks
(``supports_remote``: can pull chunks that live on other nodes; ``shared_across_processes``: a
chunk published here can be read by other replicas on the node).

A chunk is one ``[L, 2, H, n, D]`` numpy array (n ≤ chunk size; only the last group of a track is
short) — exactly group ``g`` of the prompt's KV track (DESIGN.md). Chunks are keyed two ways:
by the chained chunk hash ``h_k`` (prefix reuse across prompts) and by ``(namespace, group)``
(one prompt's track, which decode reads).

Failure rule (DESIGN.md): a fetch that fails, times out or fails verification returns fewer
chunks and names the reason in ``fallbacks``; callers recompute the rest. Nothing here raises for
a cache miss.

:class:`LocalKVPlane` keeps chunks in this process under a byte budget (LRU). It is what the
combined one-node mode uses when no relay runs, and the reference the relay-backed plane
(``relayplane.py``) is tested against.
"""

from __future__ import annotations

import abc
import asyncio
import itertools
from collections import OrderedDict
from collections.abc import AsyncIterator, Reversible, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Namespace = tuple[bytes, ...]


def short_hash(h: bytes) -> str:
    """The hex prefix of a chunk hash used in routing stats and routing hints."""
    return h.hex()[:16]


def newest_short_hashes(hashes: Reversible[bytes], limit: int) -> list[str]:
    """:func:`short_hash` of the last ``limit`` of ``hashes`` (oldest first), newest first."""
    return [short_hash(h) for h in itertools.islice(reversed(hashes), limit)]


@dataclass(kw_only=True)
class FetchResult:
    """The outcome of fetching a prompt's leading chunks."""

    chunks: list[np.ndarray] = field(default_factory=list)
    """Chunks 0..n-1, in order (possibly fewer than asked for)."""
    local: int = 0
    """How many came from this node."""
    remote: int = 0
    """How many were pulled from another node."""
    bytes_zero_copy: int = 0
    """Bytes read from this node's object store."""
    bytes_moqt: int = 0
    """Bytes pulled over MoQT."""
    fallbacks: list[str] = field(default_factory=list)
    """One reason per failed fetch (``timeout``, ``digest``, ``error``, ``evicted``)."""


class KVPlane(abc.ABC):
    """Access to the KV chunks of a node (and, if ``supports_remote``, of the cluster)."""

    supports_remote: bool = False
    """Whether chunks held on other nodes can be pulled (over MoQT)."""
    shared_across_processes: bool = False
    """Whether other replicas on the node see chunks published here."""

    # ---- control plane -------------------------------------------------------------------

    @abc.abstractmethod
    def held_hashes(self, limit: int) -> list[str]:
        """Short hashes (:func:`short_hash`) of chunks held on this node, newest first."""

    @abc.abstractmethod
    async def snapshot(self) -> dict[str, Any]:
        """What this node holds, for ``kvmoq inspect`` (JSON-able)."""

    @abc.abstractmethod
    async def locate(self, hashes: Sequence[bytes]) -> tuple[int, int]:
        """(leading chunks held on this node, leading chunks held anywhere reachable)."""

    # ---- data plane ----------------------------------------------------------------------

    @abc.abstractmethod
    async def fetch_prefix(
        self, hashes: Sequence[bytes], n: int, *, timeout_s: float
    ) -> FetchResult:
        """Chunks for ``hashes[:n]``; stops at the first chunk that cannot be had."""

    @abc.abstractmethod
    async def publish(
        self, namespace: Namespace, group: int, chunk: np.ndarray, chunk_hash: bytes | None
    ) -> None:
        """Publish group ``group`` of the track in ``namespace`` (and index it by ``chunk_hash``)."""

    @abc.abstractmethod
    def track(
        self,
        namespace: Namespace,
        n_groups: int,
        *,
        source_node: str | None,
        timeout_s: float,
        start_group: int = 0,
    ) -> AsyncIterator[tuple[int, np.ndarray]]:
        """Groups ``start_group..n_groups-1`` of a (possibly still growing) track, in order.

        Stops early (without raising) when a group does not arrive within ``timeout_s``; the
        caller compares what it got with what it asked for.
        """

    async def end_track(self, namespace: Namespace, last_group: int) -> None:  # noqa: B027
        """Mark a track complete after ``last_group`` (optional: live readers finish early)."""

    async def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources (subscriptions, sessions)."""


class LocalKVPlane(KVPlane):
    """Chunks kept in this process under a byte budget, evicted least recently used."""

    def __init__(self, budget_bytes: int = 2 << 30) -> None:
        self._budget = budget_bytes
        self._size = 0
        self._groups: OrderedDict[tuple[Namespace, int], np.ndarray] = OrderedDict()
        self._by_hash: OrderedDict[bytes, tuple[Namespace, int]] = OrderedDict()
        self._hash_of: dict[tuple[Namespace, int], bytes] = {}
        self._arrived: dict[tuple[Namespace, int], asyncio.Event] = {}

    # control plane

    def held_hashes(self, limit: int) -> list[str]:
        """Short hashes of held chunks, most recently used first."""
        return newest_short_hashes(self._by_hash, limit)

    async def snapshot(self) -> dict[str, Any]:
        """Tracks (namespace → groups held) and totals of this process's store."""
        tracks: dict[str, list[int]] = {}
        for ns, g in self._groups:
            tracks.setdefault("/".join(p.decode(errors="replace") for p in ns[1:]), []).append(g)
        return {
            "kind": "local",
            "bytes": self._size,
            "budget_bytes": self._budget,
            "chunks_indexed": len(self._by_hash),
            "tracks": {k: sorted(v) for k, v in tracks.items()},
        }

    async def locate(self, hashes: Sequence[bytes]) -> tuple[int, int]:
        """Local only: both numbers are the leading chunks held here."""
        n = 0
        for h in hashes:
            if h not in self._by_hash:
                break
            n += 1
        return n, n

    # data plane

    async def fetch_prefix(
        self, hashes: Sequence[bytes], n: int, *, timeout_s: float
    ) -> FetchResult:
        """The leading held chunks among ``hashes[:n]``."""
        res = FetchResult()
        for h in hashes[:n]:
            key = self._by_hash.get(h)
            arr = self._groups.get(key) if key is not None else None
            if arr is None:
                break
            self._touch(key, h)  # type: ignore[arg-type]
            res.chunks.append(arr)
            res.local += 1
            res.bytes_zero_copy += arr.nbytes
        return res

    async def publish(
        self, namespace: Namespace, group: int, chunk: np.ndarray, chunk_hash: bytes | None
    ) -> None:
        """Store the chunk (read-only view) and wake readers of the track."""
        key = (namespace, group)
        if key not in self._groups:
            arr = chunk.view()
            arr.flags.writeable = False
            self._groups[key] = arr
            self._size += arr.nbytes
        if chunk_hash is not None:
            self._by_hash[chunk_hash] = key
            self._hash_of[key] = chunk_hash
        self._touch(key, chunk_hash)
        self._event(key).set()
        self._evict()

    async def track(
        self,
        namespace: Namespace,
        n_groups: int,
        *,
        source_node: str | None,
        timeout_s: float,
        start_group: int = 0,
    ) -> AsyncIterator[tuple[int, np.ndarray]]:
        """Groups of a track published in this process, waiting for live ones."""
        for g in range(start_group, n_groups):
            key = (namespace, g)
            if key not in self._groups:
                try:
                    await asyncio.wait_for(self._event(key).wait(), timeout_s)
                except TimeoutError:
                    return
            arr = self._groups.get(key)
            if arr is None:
                return
            yield g, arr

    # internals

    def _event(self, key: tuple[Namespace, int]) -> asyncio.Event:
        ev = self._arrived.get(key)
        if ev is None:
            ev = self._arrived[key] = asyncio.Event()
        return ev

    def _touch(self, key: tuple[Namespace, int], h: bytes | None) -> None:
        self._groups.move_to_end(key)
        if h is not None and h in self._by_hash:
            self._by_hash.move_to_end(h)

    def _evict(self) -> None:
        while self._size > self._budget and len(self._groups) > 1:
            key, arr = self._groups.popitem(last=False)
            self._size -= arr.nbytes
            self._arrived.pop(key, None)
            h = self._hash_of.pop(key, None)
            if h is not None and self._by_hash.get(h) == key:
                del self._by_hash[h]
