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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["HELD_TRUSTED_S", "Sightings"]

SIGHTINGS_KEPT = 1 << 16
"""Hashes remembered per engine (8.4 M prompt tokens of 128-token chunks, a few MB)."""

HELD_TRUSTED_S = 10.0
"""How long a mark that the cluster holds a chunk outweighs a current copy of the directory that
does not list it: a chunk this engine publishes reaches the copy one relay call and one
directory round trip later (well under a second on an idle machine)."""


@dataclass(slots=True)
class _Seen:
    count: int = 0
    held_at: float | None = None
    """When the cluster was last known to hold the chunk (this engine published it, or the
    directory said so); None: not known."""


class Sightings:
    """Per chunk hash: times seen (capped at the threshold) and whether the cluster holds it."""

    def __init__(self, threshold: int, capacity: int = SIGHTINGS_KEPT) -> None:
        if threshold < 1 or capacity < 1:
            raise ValueError("threshold and capacity must be at least 1")
        self.threshold = threshold
        self.capacity = capacity
        self._seen: OrderedDict[bytes, _Seen] = OrderedDict()

    def __len__(self) -> int:
        return len(self._seen)

    def sight(self, hashes: Sequence[bytes]) -> int:
        """Count one more sighting of each of ``hashes`` (a prompt's chained chunk hashes) and
        return how many leading chunks have now been seen ``threshold`` times: those the
        engine may publish."""
        admitted = 0
        leading = True
        for h in hashes:
            entry = self._seen.get(h)
            if entry is None:
                entry = self._seen[h] = _Seen()
            else:
                self._seen.move_to_end(h)
            entry.count = min(entry.count + 1, self.threshold)
            if leading and entry.count >= self.threshold:
                admitted += 1
            else:
                leading = False
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
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
