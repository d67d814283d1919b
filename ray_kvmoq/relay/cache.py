"""The relay's object cache: sans-I/O, payload-agnostic, one byte budget per node.

Design (STYLE rule 7; draft-14 §8 and docs/moqt-draft14.md §5):

* The key of an object is ``(namespace, track, group, object)``. Objects are
  :class:`~ray_kvmoq.moqt.api.MoqtObject` s (``CachedObject`` is the same class) — payload,
  status, extensions, publisher priority and subgroup — and the cache never looks inside a
  payload.
* Objects may arrive one by one into an *open* group. When the group is known to be complete
  (End of Group, End of Track, or a whole group handed over at once) it is *sealed*: it becomes
  one :class:`~ray_kvmoq.moqt.api.Group` (one payload buffer, the objects as views of it)
  in a pluggable :class:`GroupStore` (in memory here; the Ray actor plugs in a store that
  ``ray.put`` s each sealed group as one shared-memory buffer, so same-node actors read it
  without a copy). A whole group handed over as a ``Group`` is stored as it is (no copy).
* **One byte budget for the whole node, never exceeded.** Every payload byte counts, open
  groups included. Room is made *before* bytes are added, by evicting whole sealed groups in
  LRU order: first any sealed group except the latest group of a live (not ended) track, then,
  if that is not enough, those latest groups too (a late subscriber then pulls the group
  again). Open groups are never evicted; when they alone leave no room for new bytes, the write
  is refused with :class:`CacheFull` and nothing is stored. So ``bytes_cached <= budget_bytes``
  holds after every call, whatever the number of tracks.
* The clock is injected: every method that needs time takes ``now`` (seconds). A track may
  carry a MAX_CACHE_DURATION (ms); an object older than that is no longer served and its group
  is dropped on the next access.
* Duplicates: the same key with identical content is ignored; a different payload, priority
  or subgroup raises :class:`MalformedTrackError` (draft-14 §2.5); a status change only to
  "does not exist" is allowed.
* :class:`InFlight` merges concurrent upstream requests: the first caller for a key becomes the
  leader and does the work; the others wait on opaque tokens that the leader hands back.

Invariants: ``bytes_cached`` equals the sum of the payload sizes of every cached group and
never exceeds ``budget_bytes``; every evicted group is reported once, in the return value of
the call that evicted it (or in :meth:`RelayCache.drain_evicted` for evictions on read), so
callers can keep the directory right; a track with no cached group left is forgotten.
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from ray_kvmoq.moqt.api import Group, MoqtObject
from ray_kvmoq.moqt.codec import ObjectStatus

__all__ = [
    "OBJECT_DOES_NOT_EXIST",
    "OBJECT_END_OF_GROUP",
    "OBJECT_END_OF_TRACK",
    "OBJECT_NORMAL",
    "CacheCounters",
    "CacheFull",
    "CachedObject",
    "GroupKey",
    "GroupStore",
    "InFlight",
    "MalformedTrackError",
    "MemoryGroupStore",
    "RelayCache",
    "TrackKey",
]

# Object Status values (draft-14 §10.2.1.1).
OBJECT_NORMAL = ObjectStatus.NORMAL
OBJECT_DOES_NOT_EXIST = ObjectStatus.DOES_NOT_EXIST
OBJECT_END_OF_GROUP = ObjectStatus.END_OF_GROUP
OBJECT_END_OF_TRACK = ObjectStatus.END_OF_TRACK

CachedObject = MoqtObject
"""The relay's name for :class:`~ray_kvmoq.moqt.api.MoqtObject` (one object type on the
whole KV path). ``subgroup_id`` is readable as an alias of ``subgroup``."""

Namespace = tuple[bytes, ...]
TrackKey = tuple[Namespace, bytes]
"""(namespace tuple, track name): a Full Track Name."""
GroupKey = tuple[Namespace, bytes, int]
"""(namespace tuple, track name, group id)."""


class MalformedTrackError(ValueError):
    """The same object arrived twice with different content (draft-14 §2.5).

    ``error_code`` is PUBLISH_DONE / FETCH_ERROR ``MALFORMED_TRACK``.
    """

    error_code = 0x7


class CacheFull(RuntimeError):
    """No room within the byte budget: open groups fill it, or one group is larger than it.

    Nothing was stored. ``error_code`` is the request error INTERNAL_ERROR.
    """

    error_code = 0x0


def _same_content(a: MoqtObject, b: MoqtObject) -> bool:
    return (
        bytes(a.payload) == bytes(b.payload)
        and a.priority == b.priority
        and a.subgroup == b.subgroup
        and a.extensions == b.extensions
    )


Handle = TypeVar("Handle")


class GroupStore(abc.ABC, Generic[Handle]):
    """Where sealed groups live. ``put`` is called once per sealed group, ``delete`` once on
    eviction; ``get`` may be called any number of times in between.

    Capability flag: ``zero_copy`` is True when ``get`` returns views into shared memory.
    """

    zero_copy: bool = False

    @abc.abstractmethod
    def put(self, key: GroupKey, group: Group) -> Handle:
        """Store a sealed group and return its handle."""

    @abc.abstractmethod
    def get(self, handle: Handle) -> Group:
        """The sealed group behind ``handle``."""

    @abc.abstractmethod
    def delete(self, handle: Handle) -> None:
        """Forget a sealed group (eviction): release what holds its buffer."""


class MemoryGroupStore(GroupStore[Group]):
    """The pure store: the handle is the group itself."""

    def put(self, key: GroupKey, group: Group) -> Group:
        return group

    def get(self, handle: Group) -> Group:
        return handle

    def delete(self, handle: Group) -> None:
        return None


@dataclass
class CacheCounters:
    """Monotonic counters, read by the relay's stats and by the bench."""

    hits: int = 0
    """Group or object reads answered from the cache."""
    misses: int = 0
    """Reads of groups the cache did not have (or had expired)."""
    bytes_in: int = 0
    """Payload bytes stored (each new object once)."""
    bytes_out: int = 0
    """Payload bytes handed out by reads."""
    evictions: int = 0
    """Groups evicted for the budget or for age."""
    evicted_bytes: int = 0
    """Payload bytes of those groups."""
    refused_bytes: int = 0
    """Payload bytes refused with :class:`CacheFull`."""


@dataclass
class _Group:
    objects: dict[int, MoqtObject] = field(default_factory=dict)
    handle: Any = None
    sealed: bool = False
    nbytes: int = 0
    first_seen: float = 0.0


@dataclass
class _Track:
    groups: dict[int, _Group] = field(default_factory=dict)
    latest_group: int = -1
    largest: tuple[int, int] | None = None
    end_of_track: tuple[int, int] | None = None
    max_age_s: float | None = None


class RelayCache:
    """A node's object cache. Not thread-safe: the relay calls it from one event loop."""

    def __init__(self, budget_bytes: int, store: GroupStore[Any] | None = None) -> None:
        self.budget_bytes = budget_bytes
        self.store: GroupStore[Any] = store if store is not None else MemoryGroupStore()
        self.counters = CacheCounters()
        self.bytes_cached = 0
        self._tracks: dict[TrackKey, _Track] = {}
        self._lru: OrderedDict[GroupKey, None] = OrderedDict()
        """Sealed groups evictable first, least recently used first."""
        self._lru_latest: OrderedDict[GroupKey, None] = OrderedDict()
        """Sealed latest groups of live tracks (evicted only when nothing else is left)."""
        self._open_bytes = 0
        self._expired: list[GroupKey] = []

    def set_budget(self, budget_bytes: int) -> list[GroupKey]:
        """Change the byte budget; returns the sealed groups evicted (LRU order, the latest
        groups of live tracks last) to fit a smaller one. Raises :class:`CacheFull` and changes
        nothing when open groups alone hold more than ``budget_bytes``."""
        if budget_bytes <= 0:
            raise ValueError(f"budget_bytes must be positive, not {budget_bytes}")
        if self._open_bytes > budget_bytes:
            raise CacheFull(
                f"cannot shrink the budget to {budget_bytes} bytes: open groups hold "
                f"{self._open_bytes}; retry when they are sealed"
            )
        evicted = self._evict_down_to(budget_bytes, keep=None)
        self.budget_bytes = budget_bytes
        return evicted

    # ---- writing -------------------------------------------------------------------------

    def put_object(
        self, namespace: Namespace, track: bytes, group_id: int, obj: MoqtObject, now: float
    ) -> list[GroupKey]:
        """Store one object; seals the group on End of Group / End of Track status.

        Returns the groups evicted to make room. Raises :class:`MalformedTrackError` on a
        conflicting duplicate, :class:`CacheFull` when it cannot fit.
        """
        t = self._tracks.get((namespace, track))
        key: GroupKey = (namespace, track, group_id)
        g = None if t is None else t.groups.get(group_id)
        if g is None:
            eot = None if t is None else t.end_of_track
            if eot is not None and (group_id, obj.object_id) > eot:
                raise MalformedTrackError(f"object {group_id}/{obj.object_id} after end of track")
        elif g.sealed:
            self._check_sealed_duplicate(g, obj)
            return []
        old = None if g is None else g.objects.get(obj.object_id)
        if old is not None:
            if old.status == obj.status and _same_content(old, obj):
                return []
            if obj.status != OBJECT_DOES_NOT_EXIST:
                raise MalformedTrackError(f"object {group_id}/{obj.object_id} changed")
        need = obj.size - (old.size if old is not None else 0)
        evicted = self._make_room(need, keep=key)
        t = self._track(namespace, track)
        g = t.groups.get(group_id)
        if g is None:
            g = t.groups[group_id] = _Group(first_seen=now)
            self._new_group(namespace, track, t, group_id)
        g.objects[obj.object_id] = obj
        g.nbytes += need
        self.bytes_cached += need
        self._open_bytes += need
        self.counters.bytes_in += obj.size
        if obj.status == OBJECT_NORMAL:
            loc = (group_id, obj.object_id)
            t.largest = loc if t.largest is None else max(t.largest, loc)
        if obj.status in (OBJECT_END_OF_GROUP, OBJECT_END_OF_TRACK):
            self._seal(key, g)
        if obj.status == OBJECT_END_OF_TRACK:
            t.end_of_track = (group_id, obj.object_id)
            self._track_ended(namespace, track, t)
        return evicted

    def put_group(
        self,
        namespace: Namespace,
        track: bytes,
        group_id: int,
        objects: Sequence[MoqtObject] | Group,
        now: float,
        *,
        end_of_track: bool = False,
    ) -> list[GroupKey]:
        """Store a whole group at once and seal it; returns the evicted groups.

        A :class:`~ray_kvmoq.moqt.api.Group` goes to the store as it is; a list of objects
        is packed into one first (one copy). An identical group already sealed is ignored.
        Raises :class:`CacheFull` (nothing stored) when the group cannot fit.
        """
        key: GroupKey = (namespace, track, group_id)
        t = self._tracks.get((namespace, track))
        old = None if t is None else t.groups.get(group_id)
        if old is not None and old.sealed:
            for obj in objects if isinstance(objects, Sequence) else objects.objects():
                self._check_sealed_duplicate(old, obj)
            if end_of_track:
                self.end_track(namespace, track, group_id, now)
            return []
        if old is not None:  # an open group completed in one call: merge object by object
            evicted: list[GroupKey] = []
            for obj in objects if isinstance(objects, Sequence) else objects.objects():
                evicted += self.put_object(namespace, track, group_id, obj, now)
            evicted += self.seal_group(namespace, track, group_id, now)
            if end_of_track:
                self.end_track(namespace, track, group_id, now)
            return evicted
        group = objects if isinstance(objects, Group) else Group.pack(group_id, objects)
        evicted = self._make_room(group.nbytes, keep=key)
        t = self._track(namespace, track)
        if t.end_of_track is not None and (group_id, 0) > t.end_of_track:
            raise MalformedTrackError(f"group {group_id} after end of track")
        g = t.groups[group_id] = _Group(first_seen=now, nbytes=group.nbytes)
        self._new_group(namespace, track, t, group_id)
        self.bytes_cached += group.nbytes
        self.counters.bytes_in += group.nbytes
        for oid, status, *_ in reversed(group.table):
            if status == OBJECT_NORMAL:
                loc = (group_id, oid)
                t.largest = loc if t.largest is None else max(t.largest, loc)
                break
        g.handle = self.store.put(key, group)
        g.sealed = True
        self._place(key, t)
        if end_of_track:
            self.end_track(namespace, track, group_id, now)
        return evicted

    def seal_group(
        self, namespace: Namespace, track: bytes, group_id: int, now: float
    ) -> list[GroupKey]:
        """Mark a group complete (its subgroup stream ended with FIN) and move it to the store."""
        t = self._track(namespace, track)
        g = t.groups.get(group_id)
        if g is None:
            g = t.groups[group_id] = _Group(first_seen=now)
            self._new_group(namespace, track, t, group_id)
        if not g.sealed:
            self._seal((namespace, track, group_id), g)
        return []

    def end_track(self, namespace: Namespace, track: bytes, last_group: int, now: float) -> None:
        """Record End of Track after ``last_group`` (nothing larger will ever exist)."""
        t = self._track(namespace, track)
        last_obj = -1
        g = t.groups.get(last_group)
        if g is not None:
            if g.sealed:
                last_obj = self.store.get(g.handle).last_object_id()
            else:
                last_obj = max(g.objects, default=-1)
        t.end_of_track = (last_group, last_obj + 1)
        self._track_ended(namespace, track, t)
        if not t.groups:
            del self._tracks[(namespace, track)]  # nothing cached to describe

    def set_max_age(self, namespace: Namespace, track: bytes, max_cache_duration_ms: int) -> None:
        """Apply a MAX_CACHE_DURATION (ms) to a track (draft-14 §9.2.2.3)."""
        self._track(namespace, track).max_age_s = max_cache_duration_ms / 1000.0

    def drop_track(self, namespace: Namespace, track: bytes) -> list[GroupKey]:
        """Forget every cached group of a track (e.g. its publisher is gone); returns them."""
        t = self._tracks.get((namespace, track))
        keys = [(namespace, track, gid) for gid in sorted(t.groups)] if t else []
        for key in keys:
            self._drop(key)
        return keys

    # ---- reading -------------------------------------------------------------------------

    def get_group(
        self, namespace: Namespace, track: bytes, group_id: int, now: float
    ) -> list[MoqtObject] | None:
        """The objects of a cached group (sealed or not), or None on a miss."""
        g = self._live_group(namespace, track, group_id, now)
        if g is None:
            self.counters.misses += 1
            return None
        self.counters.hits += 1
        objs = self._objects_of(g)
        self.counters.bytes_out += g.nbytes
        self._touch((namespace, track, group_id))
        return objs

    def get_packed(
        self, namespace: Namespace, track: bytes, group_id: int, now: float
    ) -> Group | None:
        """A sealed group as one :class:`~ray_kvmoq.moqt.api.Group`, or None."""
        g = self._live_group(namespace, track, group_id, now)
        if g is None or not g.sealed:
            self.counters.misses += 1
            return None
        self.counters.hits += 1
        self.counters.bytes_out += g.nbytes
        self._touch((namespace, track, group_id))
        group: Group = self.store.get(g.handle)
        return group

    def group_handle(self, namespace: Namespace, track: bytes, group_id: int, now: float) -> Any:
        """The store handle of a sealed group (an ObjectRef with the Ray store), or None."""
        g = self._live_group(namespace, track, group_id, now)
        if g is None or not g.sealed:
            self.counters.misses += 1
            return None
        self.counters.hits += 1
        self._touch((namespace, track, group_id))
        return g.handle

    def knows(self, namespace: Namespace, track: bytes, group_id: int, object_id: int) -> bool:
        """True when the object is cached, or its group is sealed (so nothing new can join)."""
        t = self._tracks.get((namespace, track))
        g = None if t is None else t.groups.get(group_id)
        return g is not None and (g.sealed or object_id in g.objects)

    def is_sealed(self, namespace: Namespace, track: bytes, group_id: int) -> bool:
        """True when the group is cached and complete."""
        t = self._tracks.get((namespace, track))
        g = None if t is None else t.groups.get(group_id)
        return g is not None and g.sealed

    def read_range(
        self,
        namespace: Namespace,
        track: bytes,
        start: tuple[int, int],
        end: tuple[int, int],
        now: float,
    ) -> tuple[list[tuple[int, MoqtObject]], bool]:
        """Objects in [start, end) as FETCH names it (end.object 0 = the whole group).

        Returns ``(objects, complete)``: the cached ``(group, object)`` list in ascending order
        and whether every group in the range is sealed (so the answer is final).
        """
        out: list[tuple[int, MoqtObject]] = []
        complete = True
        t = self._tracks.get((namespace, track))
        last_group = end[0]
        if t is not None and t.end_of_track is not None:
            last_group = min(last_group, t.end_of_track[0])
        for gid in range(start[0], last_group + 1):
            g = self._live_group(namespace, track, gid, now)
            if g is None or not g.sealed:
                complete = False
            if g is None:
                continue
            self._touch((namespace, track, gid))
            for obj in self._objects_of(g):
                loc = (gid, obj.object_id)
                if loc < start or (end[1] > 0 and loc >= end):
                    continue
                out.append((gid, obj))
                self.counters.bytes_out += obj.size
        self.counters.hits += 1 if complete else 0
        self.counters.misses += 0 if complete else 1
        return out, complete

    def track_info(
        self, namespace: Namespace, track: bytes
    ) -> tuple[tuple[int, int] | None, tuple[int, int] | None]:
        """(largest Normal object location, end-of-track location) of a track, if known."""
        t = self._tracks.get((namespace, track))
        return (None, None) if t is None else (t.largest, t.end_of_track)

    def cached_groups(self, namespace: Namespace, track: bytes) -> list[int]:
        """Group ids currently cached for a track, ascending."""
        t = self._tracks.get((namespace, track))
        return sorted(t.groups) if t else []

    def has_track(self, namespace: Namespace, track: bytes) -> bool:
        """True while any group of the track is cached."""
        return (namespace, track) in self._tracks

    def tracks(self) -> Iterator[TrackKey]:
        """Every track with cached state."""
        return iter(list(self._tracks))

    def sealed_groups(self) -> Iterator[GroupKey]:
        """Every sealed group, in LRU order (least recently used first)."""
        yield from list(self._lru)
        yield from list(self._lru_latest)

    def drain_evicted(self) -> list[GroupKey]:
        """Groups dropped on read (expired by MAX_CACHE_DURATION) since the last call."""
        out, self._expired = self._expired, []
        return out

    # ---- internals -----------------------------------------------------------------------

    def _track(self, namespace: Namespace, track: bytes) -> _Track:
        return self._tracks.setdefault((namespace, track), _Track())

    def _objects_of(self, g: _Group) -> list[MoqtObject]:
        if g.sealed:
            group: Group = self.store.get(g.handle)
            return group.objects()
        return [g.objects[k] for k in sorted(g.objects)]

    def _live_group(self, ns: Namespace, track: bytes, gid: int, now: float) -> _Group | None:
        t = self._tracks.get((ns, track))
        g = None if t is None else t.groups.get(gid)
        if g is None or t is None:
            return None
        if t.max_age_s is not None and now - g.first_seen > t.max_age_s:
            self._drop((ns, track, gid))
            self._expired.append((ns, track, gid))
            return None
        return g

    def _check_sealed_duplicate(self, g: _Group, obj: MoqtObject) -> None:
        for old in self.store.get(g.handle).objects():
            if old.object_id == obj.object_id:
                if not (_same_content(old, obj) or obj.status == OBJECT_DOES_NOT_EXIST):
                    raise MalformedTrackError(f"object {obj.object_id} of a sealed group changed")
                return
        if obj.status == OBJECT_NORMAL:
            raise MalformedTrackError(f"object {obj.object_id} after the end of its group")

    def _seal(self, key: GroupKey, g: _Group) -> None:
        objects = [g.objects[k] for k in sorted(g.objects)]
        g.handle = self.store.put(key, Group.pack(key[2], objects))
        g.objects = {}
        g.sealed = True
        self._open_bytes -= g.nbytes
        self._place(key, self._tracks[(key[0], key[1])])

    def _new_group(self, ns: Namespace, track: bytes, t: _Track, gid: int) -> None:
        if gid <= t.latest_group:
            return
        previous = (ns, track, t.latest_group)
        t.latest_group = gid
        if self._lru_latest.pop(previous, 0) is None:
            self._lru[previous] = None  # no longer the latest: evictable first

    def _track_ended(self, ns: Namespace, track: bytes, t: _Track) -> None:
        key = (ns, track, t.latest_group)
        if self._lru_latest.pop(key, 0) is None:
            self._lru[key] = None

    def _place(self, key: GroupKey, t: _Track) -> None:
        """File a sealed group in the LRU its role puts it in (most recently used end)."""
        self._lru.pop(key, None)
        self._lru_latest.pop(key, None)
        if t.end_of_track is None and t.latest_group == key[2]:
            self._lru_latest[key] = None
        else:
            self._lru[key] = None

    def _touch(self, key: GroupKey) -> None:
        if key in self._lru:
            self._lru.move_to_end(key)
        elif key in self._lru_latest:
            self._lru_latest.move_to_end(key)

    def _make_room(self, need: int, keep: GroupKey) -> list[GroupKey]:
        """Evict until ``need`` more bytes fit; raise CacheFull (evicting nothing) if they
        cannot, even with every sealed group but ``keep`` gone."""
        if self.bytes_cached + need <= self.budget_bytes:
            return []
        ns, track, gid = keep
        kt = self._tracks.get((ns, track))
        kg = None if kt is None else kt.groups.get(gid)
        kept = kg.nbytes if kg is not None and kg.sealed else 0
        if self._open_bytes + kept + need > self.budget_bytes:
            self.counters.refused_bytes += need
            raise CacheFull(
                f"{need} bytes do not fit the {self.budget_bytes}-byte budget "
                f"({self._open_bytes} bytes held by open groups)"
            )
        return self._evict_down_to(self.budget_bytes - need, keep=keep)

    def _evict_down_to(self, limit: int, keep: GroupKey | None) -> list[GroupKey]:
        """Evict sealed groups, LRU first and the latest groups of live tracks last, until at
        most ``limit`` bytes are cached (or nothing evictable but ``keep`` is left)."""
        evicted: list[GroupKey] = []
        for lru in (self._lru, self._lru_latest):
            while lru and self.bytes_cached > limit:
                key = next(iter(lru))
                if key == keep:
                    lru.move_to_end(key)
                    if next(iter(lru)) == keep:
                        break
                    continue
                self._drop(key)
                evicted.append(key)
        return evicted

    def _drop(self, key: GroupKey) -> None:
        ns, track, gid = key
        t = self._tracks[(ns, track)]
        g = t.groups.pop(gid)
        self._lru.pop(key, None)
        self._lru_latest.pop(key, None)
        if g.sealed:
            self.store.delete(g.handle)
        else:
            self._open_bytes -= g.nbytes
        self.bytes_cached -= g.nbytes
        if not t.groups:
            del self._tracks[(ns, track)]  # nothing left to describe
        self.counters.evictions += 1
        self.counters.evicted_bytes += g.nbytes


_K = TypeVar("_K", bound=Hashable)
_W = TypeVar("_W")


class InFlight(Generic[_K, _W]):
    """Merges concurrent upstream requests for the same key into one.

    ``join(key, waiter)`` returns True for the first caller (the leader, who does the request);
    later callers' waiters are queued. ``finish(key)`` returns every queued waiter so the leader
    can wake them with its result (or its error). Waiters are opaque (futures in the relay).
    """

    def __init__(self) -> None:
        self._waiting: dict[_K, list[_W]] = {}

    def join(self, key: _K, waiter: _W) -> bool:
        """Register ``waiter``; True when no request for ``key`` is in flight yet."""
        if key in self._waiting:
            self._waiting[key].append(waiter)
            return False
        self._waiting[key] = []
        return True

    def finish(self, key: _K) -> list[_W]:
        """End the request for ``key``; returns the waiters that joined it."""
        return self._waiting.pop(key, [])

    def __contains__(self, key: object) -> bool:
        return key in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)
