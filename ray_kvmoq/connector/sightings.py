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
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

__all__ = ["Sightings"]

SIGHTINGS_KEPT = 1 << 16
"""Hashes remembered per engine (8.4 M prompt tokens of 128-token chunks, a few MB)."""


class Sightings:
    """Per chunk hash: times seen (capped at the threshold) and whether the cluster holds it."""

    def __init__(self, threshold: int, capacity: int = SIGHTINGS_KEPT) -> None:
        if threshold < 1 or capacity < 1:
            raise ValueError("threshold and capacity must be at least 1")
        self.threshold = threshold
        self.capacity = capacity
        self._seen: OrderedDict[bytes, list[int | bool]] = OrderedDict()
        """hash -> [sightings, held]"""

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
                entry = self._seen[h] = [0, False]
            else:
                self._seen.move_to_end(h)
            entry[0] = min(int(entry[0]) + 1, self.threshold)
            if leading and entry[0] >= self.threshold:
                admitted += 1
            else:
                leading = False
        while len(self._seen) > self.capacity:
            self._seen.popitem(last=False)
        return admitted

    def mark_held(self, hashes: Sequence[bytes]) -> None:
        """The cluster holds these chunks (this engine published them, or the directory said so)."""
        for h in hashes:
            entry = self._seen.get(h)
            if entry is not None:
                entry[1] = True

    def held(self, h: bytes) -> bool:
        """Whether ``h`` is known to be held by the cluster."""
        entry = self._seen.get(h)
        return entry is not None and bool(entry[1])

    def first_not_held(self, hashes: Sequence[bytes]) -> int:
        """Index of the first of ``hashes`` the cluster is not known to hold."""
        return next((k for k, h in enumerate(hashes) if not self.held(h)), len(hashes))
