"""The KV directory: which node holds which track groups and which chunk hashes (sans-I/O).

Fed by the relays (a relay reports the groups it caches and the ones it evicts), read by the
router and by prefill. Payload-agnostic: a chunk hash is an opaque ``bytes`` label that a
publisher attached to a group (DESIGN.md "prefix reuse": h_k names chunk k of any prompt that
shares the first (k+1)·C tokens, so a lookup by h_k finds a group on some node's relay).

Invariants:

* Every location recorded for a node is dropped by ``remove_groups`` (eviction) or by
  ``remove_node`` (relay death); nothing keeps pointing at a node after ``remove_node``.
* ``by_hash`` and ``by_node`` are two views of the same set of :class:`Location` s.
* A group reported without a hash (a relay that pulled it over MoQT cannot know it) inherits
  the hash another holder of the same (namespace, track, group) reported.

Readers on the request path (the router, a prefill's lookup) keep a :class:`HashView`: a copy
of the hash index, kept current from the directory's change journal (``version`` counts every
change to the hash index; :meth:`Directory.changes_since` answers what changed after a version,
or None once the journal no longer reaches back that far, when the reader takes a whole
:meth:`Directory.hash_entries` snapshot instead). A lookup then costs no round trip.

The Ray shell (``actor.py``) wraps one :class:`Directory` in the ``kvmoq_directory`` actor; tests
and the plain relay use it directly.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["JOURNAL_KEPT", "Change", "Directory", "HashView", "Location", "NodeInfo"]

Namespace = tuple[bytes, ...]

JOURNAL_KEPT = 65536
"""Hash-index changes the directory remembers; a reader further behind takes a snapshot."""


@dataclass(frozen=True, kw_only=True, order=True)
class Location:
    """One group of one track on one node."""

    node_id: str
    """The Ray node id (or any relay id outside Ray)."""
    namespace: Namespace
    """Track namespace tuple."""
    track: bytes
    """Track name."""
    group_id: int
    """Group id (chunk index for KV tracks)."""


@dataclass(frozen=True, kw_only=True)
class NodeInfo:
    """Where a node's relay listens."""

    node_id: str
    """The Ray node id."""
    host: str
    """IP the relay's MoQT server is bound to."""
    port: int
    """UDP port of the relay's MoQT server."""
    data_ports: tuple[int, ...] = ()
    """UDP ports of the relay's data-plane processes (same host), one QUIC endpoint each;
    empty when the relay serves FETCH on ``port`` itself."""


Change = tuple[bool, bytes, "Location"]
"""One change to the hash index: (added, chunk hash, location); False: the location is gone."""


@dataclass
class _NodeState:
    info: NodeInfo | None = None
    groups: dict[tuple[Namespace, bytes], set[int]] = field(default_factory=dict)
    hashes: dict[tuple[Namespace, bytes, int], bytes] = field(default_factory=dict)


class Directory:
    """node → tracks/groups and chunk hash → locations; removal on eviction and node death."""

    def __init__(self) -> None:
        self._nodes: dict[str, _NodeState] = {}
        self._by_hash: dict[bytes, set[Location]] = {}
        self._by_track: dict[tuple[Namespace, bytes], dict[int, set[str]]] = {}
        self.version = 0
        """Changes to the hash index so far (see :meth:`changes_since`)."""
        self._journal: deque[Change] = deque(maxlen=JOURNAL_KEPT)
        """The last changes, the newest at ``version``."""

    # ---- feeding -------------------------------------------------------------------------

    def register_node(self, info: NodeInfo, *, fresh: bool = False) -> None:
        """Record (or update) where a node's relay listens; ``fresh``: the relay (re)started
        with an empty cache, so forget every group recorded for it before."""
        if fresh:
            self.remove_node(info.node_id)
        self._nodes.setdefault(info.node_id, _NodeState()).info = info

    def add_groups(
        self,
        node_id: str,
        namespace: Namespace,
        track: bytes,
        groups: Iterable[int],
        hashes: Mapping[int, bytes] | None = None,
    ) -> None:
        """Record that ``node_id`` caches ``groups`` of a track; ``hashes`` maps group → hash."""
        st = self._nodes.setdefault(node_id, _NodeState())
        held = st.groups.setdefault((namespace, track), set())
        per_group = self._by_track.setdefault((namespace, track), {})
        hashes = hashes or {}
        for gid in groups:
            held.add(gid)
            h = hashes.get(gid)
            if h is None:  # a relay that pulled the group inherits the publisher's label
                h = self._known_hash(namespace, track, gid, per_group.get(gid, set()))
            per_group.setdefault(gid, set()).add(node_id)
            if h is not None:
                old = st.hashes.get((namespace, track, gid))
                if old is not None and old != h:
                    self._unhash(
                        old,
                        Location(node_id=node_id, namespace=namespace, track=track, group_id=gid),
                    )
                st.hashes[(namespace, track, gid)] = h
                loc = Location(node_id=node_id, namespace=namespace, track=track, group_id=gid)
                locs = self._by_hash.setdefault(h, set())
                if loc not in locs:
                    locs.add(loc)
                    self._note(True, h, loc)

    def remove_groups(
        self, node_id: str, namespace: Namespace, track: bytes, groups: Iterable[int]
    ) -> None:
        """Forget groups a node no longer caches (eviction)."""
        st = self._nodes.get(node_id)
        if st is None:
            return
        held = st.groups.get((namespace, track), set())
        per_group = self._by_track.get((namespace, track), {})
        for gid in groups:
            held.discard(gid)
            nodes = per_group.get(gid)
            if nodes is not None:
                nodes.discard(node_id)
                if not nodes:
                    del per_group[gid]
            h = st.hashes.pop((namespace, track, gid), None)
            if h is not None:
                self._unhash(
                    h, Location(node_id=node_id, namespace=namespace, track=track, group_id=gid)
                )
        if not held:
            st.groups.pop((namespace, track), None)
        if not per_group:
            self._by_track.pop((namespace, track), None)

    def remove_node(self, node_id: str) -> None:
        """Forget everything about a node (its relay died or left)."""
        st = self._nodes.pop(node_id, None)
        if st is None:
            return
        for (ns, track), groups in st.groups.items():
            per_group = self._by_track.get((ns, track), {})
            for gid in groups:
                nodes = per_group.get(gid)
                if nodes is not None:
                    nodes.discard(node_id)
                    if not nodes:
                        del per_group[gid]
            if not per_group:
                self._by_track.pop((ns, track), None)
        for (ns, track, gid), h in st.hashes.items():
            self._unhash(h, Location(node_id=node_id, namespace=ns, track=track, group_id=gid))

    # ---- queries -------------------------------------------------------------------------

    def nodes(self) -> list[NodeInfo]:
        """Every registered node's relay address."""
        return [st.info for st in self._nodes.values() if st.info is not None]

    def node(self, node_id: str) -> NodeInfo | None:
        """One node's relay address, if registered."""
        st = self._nodes.get(node_id)
        return None if st is None else st.info

    def nodes_for(
        self, namespace: Namespace, track: bytes, group_id: int | None = None
    ) -> list[str]:
        """Nodes caching a group (or any group of the track when ``group_id`` is None), sorted."""
        per_group = self._by_track.get((namespace, track), {})
        if group_id is not None:
            return sorted(per_group.get(group_id, set()))
        return sorted(set().union(*per_group.values())) if per_group else []

    def groups_on(self, node_id: str, namespace: Namespace, track: bytes) -> list[int]:
        """Groups of a track that a node caches, ascending."""
        st = self._nodes.get(node_id)
        return sorted(st.groups.get((namespace, track), ())) if st else []

    def lookup_hash(self, chunk_hash: bytes) -> list[Location]:
        """Every known location of a chunk hash, sorted."""
        return sorted(self._by_hash.get(chunk_hash, ()))

    def longest_prefix(self, chunk_hashes: Sequence[bytes]) -> list[list[Location]]:
        """Locations for ``chunk_hashes[0..k]`` for the largest k where every hash is known.

        The result has one entry per matched chunk (so ``len`` is the number of reusable
        chunks); a prefill reads chunk i from any location in entry i.
        """
        return _longest_prefix(self._by_hash, chunk_hashes)

    def changes_since(self, version: int) -> list[Change] | None:
        """The hash-index changes after ``version``, oldest first; None when the journal no
        longer reaches back that far, or ``version`` is not one of this directory's."""
        if version == self.version:
            return []
        if version > self.version or version < self.version - len(self._journal):
            return None
        return list(
            itertools.islice(self._journal, len(self._journal) - (self.version - version), None)
        )

    def hash_entries(self) -> list[tuple[bytes, Location]]:
        """Every (chunk hash, location) pair: a :class:`HashView` snapshot at ``version``."""
        return [(h, loc) for h, locs in self._by_hash.items() for loc in locs]

    def stats(self) -> dict[str, int]:
        """Sizes, for logs and tests."""
        return {
            "nodes": len(self._nodes),
            "hashes": len(self._by_hash),
            "tracks": len(self._by_track),
        }

    def _known_hash(
        self, namespace: Namespace, track: bytes, gid: int, holders: set[str]
    ) -> bytes | None:
        for other in holders:
            st = self._nodes.get(other)
            h = None if st is None else st.hashes.get((namespace, track, gid))
            if h is not None:
                return h
        return None

    def _note(self, added: bool, h: bytes, loc: Location) -> None:
        self.version += 1
        self._journal.append((added, h, loc))

    def _unhash(self, h: bytes, loc: Location) -> None:
        if _discard(self._by_hash, h, loc):
            self._note(False, h, loc)


def _discard(by_hash: dict[bytes, set[Location]], h: bytes, loc: Location) -> bool:
    """Drop ``loc`` from ``h``'s locations (and ``h`` with its last one); whether it was there."""
    locs = by_hash.get(h)
    if locs is None or loc not in locs:
        return False
    locs.discard(loc)
    if not locs:
        del by_hash[h]
    return True


def _longest_prefix(
    by_hash: dict[bytes, set[Location]], chunk_hashes: Sequence[bytes]
) -> list[list[Location]]:
    """Sorted locations of ``chunk_hashes[0..k]`` for the largest k where every hash is known."""
    out: list[list[Location]] = []
    for h in chunk_hashes:
        locs = by_hash.get(h)
        if not locs:
            break
        out.append(sorted(locs))
    return out


class HashView:
    """A reader's copy of a :class:`Directory`'s hash index at one version of one directory
    incarnation (``epoch``), answering :meth:`longest_prefix` as the directory would."""

    def __init__(self) -> None:
        self.epoch: str | None = None
        """The directory incarnation this copy follows (None: none yet)."""
        self.version = 0
        self._by_hash: dict[bytes, set[Location]] = {}

    def reset(self, epoch: str, version: int, entries: Iterable[tuple[bytes, Location]]) -> None:
        """Replace the copy with a snapshot (:meth:`Directory.hash_entries` at ``version``)."""
        self._by_hash = {}
        for h, loc in entries:
            self._by_hash.setdefault(h, set()).add(loc)
        self.epoch, self.version = epoch, version

    def apply(self, version: int, changes: Iterable[Change]) -> None:
        """Apply :meth:`Directory.changes_since` ``(self.version)``, which brings it to
        ``version``."""
        for added, h, loc in changes:
            if added:
                self._by_hash.setdefault(h, set()).add(loc)
            else:
                _discard(self._by_hash, h, loc)
        self.version = version

    def __len__(self) -> int:
        return len(self._by_hash)

    def longest_prefix(self, chunk_hashes: Sequence[bytes]) -> list[list[Location]]:
        """As :meth:`Directory.longest_prefix`, from this copy."""
        return _longest_prefix(self._by_hash, chunk_hashes)

    def holds(self, chunk_hash: bytes) -> bool:
        """Whether some relay holds the group of ``chunk_hash``."""
        return bool(self._by_hash.get(chunk_hash))
