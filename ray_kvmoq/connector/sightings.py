"""Which prompt chunks one engine has seen, how often, and which the cluster already holds.

The admission rule for publishing (``publish_threshold``): a chunk is published once its
engine has seen it that many times, not on first sight. Publishing costs a cold prefill
(gathering every layer of the chunk, encoding it, storing it in the node relay: +17 % on a
1,088-token SmolLM2 prompt on this machine's CPUs), and a chunk seen once is, on most
workloads, never asked for again: with vLLM's ``random`` dataset each node published ~560 MB
that nobody read. On the second sight the engine usually still holds the chunk in vLLM's own
prefix cache (the router sends repeats where the prefix is), so publishing then costs a gather
from that cache, not a prefill. SGLang's HiCache makes the same trade with its
``write_through_selective`` policy (a host copy once a node's hit count passes a threshold).

Sightings are counted per engine, as hashes: a chunk hash chains every token before it, so
"chunk k seen" means "the prompt up to chunk k seen". The table is an LRU of at most
``capacity`` hashes, so it stays small whatever the traffic.

Whether the cluster already holds a chunk decides whether a sight publishes it again. The
engine's own marks (it published the chunk, or a lookup found it) go stale when a relay evicts
the group under its memory budget; where the engine has a current copy of the directory, that
copy decides instead, and an evicted chunk is published again on its next sight.

Publishing on second sight loses where the shared prefixes outgrow the engine's own KV memory:
a chunk vLLM evicts before its second sight is in no relay, so that sight recomputes it. The
engine sees this happen: a prompt comes back, and vLLM's prefix cache no longer holds chunks
it held before (an *evicted repeat*). So while evicted repeats number at least
``FIRST_SIGHT_PAYS`` of the chunks seen for the first time (both counted over the last
minutes, ``EVICTION_MEMORY_S``), the engine publishes on first sight (threshold 1). Where no
prompt comes back (vLLM's ``random`` dataset) there are no evicted repeats and nothing changes;
where the engine holds every prefix (no eviction) neither.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["EVICTION_MEMORY_S", "FIRST_SIGHT_PAYS", "HELD_TRUSTED_S", "Sightings"]

SIGHTINGS_KEPT = 1 << 16
"""Hashes remembered per engine (8.4 M prompt tokens of 128-token chunks, a few MB)."""

HELD_TRUSTED_S = 10.0
"""How long a mark that the cluster holds a chunk outweighs a current copy of the directory that
does not list it: a chunk this engine publishes reaches the copy one relay call and one
directory round trip later (well under a second on an idle machine)."""

FIRST_SIGHT_PAYS = 0.2
"""Evicted repeats per first-sight chunk above which publishing on first sight pays. Publishing
a chunk as it is computed costs about a sixth of its prefill (+17 % on a cold 1,088-token
SmolLM2 prompt here); an evicted repeat that finds the chunk in a relay loads it instead of
computing it again (0.06 against 0.92-1.0 ms a token, measured 2026-12-07). So first-sight
publishing pays once about one chunk in five comes back after its engine evicted it."""

EVICTION_MEMORY_S = 120.0
"""Time constant of the evicted-repeat and first-sight counts: both decay by e every this many
seconds, so the rule follows the workload of the last few minutes."""


@dataclass(slots=True)
class _Seen:
    count: int = 0
    cached: bool = False
    """This engine's prefix cache has held the chunk (a step computed, loaded or hit it), and no
    later sight found it evicted."""
    held_at: float | None = None
    """When the cluster was last known to hold the chunk (this engine published it, or the
    directory said so); None: not known."""


class Sightings:
    """Per chunk hash: times seen (capped at the threshold) and whether the cluster holds it."""

    def __init__(
        self, threshold: int, capacity: int = SIGHTINGS_KEPT, *, when_evicting: bool = False
    ) -> None:
        if threshold < 1 or capacity < 1:
            raise ValueError("threshold and capacity must be at least 1")
        self.threshold = threshold
        """The configured threshold."""
        self.capacity = capacity
        self.when_evicting = when_evicting
        """Publish on first sight while evicted repeats are frequent (the module docstring)."""
        self._seen: OrderedDict[bytes, _Seen] = OrderedDict()
        self._first = 0.0
        """First-sight chunks, decayed (``EVICTION_MEMORY_S``)."""
        self._evicted = 0.0
        """Evicted repeats, decayed."""
        self._decayed_at = 0.0

    def __len__(self) -> int:
        return len(self._seen)

    def _decay(self, now: float) -> None:
        if now > self._decayed_at:
            f = math.exp(-(now - self._decayed_at) / EVICTION_MEMORY_S)
            self._first *= f
            self._evicted *= f
            self._decayed_at = now

    def threshold_at(self, now: float) -> int:
        """The threshold in force at ``now``: 1 while evicted repeats are at least
        ``FIRST_SIGHT_PAYS`` of first sights (with ``when_evicting``), else the configured one."""
        if not self.when_evicting or self.threshold == 1:
            return self.threshold
        self._decay(now)
        if self._evicted > 0 and self._evicted >= FIRST_SIGHT_PAYS * self._first:
            return 1
        return self.threshold

    def mark_cached(self, hashes: Sequence[bytes]) -> None:
        """This engine's prefix cache now holds these chunks (a step computed, loaded or hit
        them)."""
        for h in hashes:
            entry = self._seen.get(h)
            if entry is not None:
                entry.cached = True

    def note_evicted(self, hashes: Sequence[bytes], now: float) -> int:
        """Of ``hashes`` (chunks of a new prompt that vLLM's prefix cache does not hold, though
        it could), count those it held before: evicted repeats. Returns how many."""
        evicted = 0
        for h in hashes:
            entry = self._seen.get(h)
            if entry is not None and entry.cached:
                entry.cached = False
                evicted += 1
        if evicted:
            self._decay(now)
            self._evicted += evicted
        return evicted

    def sight(self, hashes: Sequence[bytes], *, now: float = 0.0) -> int:
        """Count one more sighting of each of ``hashes`` (a prompt's chained chunk hashes) and
        return how many leading chunks have now been seen as many times as the threshold in
        force (:meth:`threshold_at`): those the engine may publish."""
        threshold = self.threshold_at(now)
        admitted = 0
        leading = True
        first = 0
        for h in hashes:
            entry = self._seen.get(h)
            if entry is None:
                entry = self._seen[h] = _Seen()
            else:
                self._seen.move_to_end(h)
            first += entry.count == 0
            entry.count = min(entry.count + 1, self.threshold)
            if leading and entry.count >= threshold:
                admitted += 1
            else:
                leading = False
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        if first:
            self._decay(now)
            self._first += first
        return admitted

    def mark_held(self, hashes: Sequence[bytes], now: float) -> None:
        """The cluster holds these chunks as of ``now`` (this engine published them, or the
        directory said so)."""
        for h in hashes:
            entry = self._seen.get(h)
            if entry is not None:
                entry.held_at = now

    def held(
        self, h: bytes, *, listed: Callable[[bytes], bool] | None = None, now: float = 0.0
    ) -> bool:
        """Whether the cluster is known to hold ``h``. Without ``listed`` that is any mark,
        however old. With ``listed`` (a current copy of the directory: does some relay hold
        it?) the copy decides, except that a mark younger than ``HELD_TRUSTED_S`` at ``now``
        still counts (a publish on its way to the copy). So a chunk a relay has since evicted
        is published again, from the engine's own cache, on its next sight."""
        entry = self._seen.get(h)
        marked = entry.held_at if entry is not None else None
        if marked is not None and (listed is None or now - marked < HELD_TRUSTED_S):
            return True
        return listed is not None and listed(h)

    def first_not_held(
        self,
        hashes: Sequence[bytes],
        *,
        listed: Callable[[bytes], bool] | None = None,
        now: float = 0.0,
    ) -> int:
        """Index of the first of ``hashes`` the cluster is not known to hold (see :meth:`held`)."""
        return next(
            (k for k, h in enumerate(hashes) if not self.held(h, listed=listed, now=now)),
            len(hashes),
        )
