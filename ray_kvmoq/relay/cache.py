"""The relay's object cache: sans-I/O, payload-agnostic, one byte budget per node.

Design (STYLE rule 7; draft-14 §8 and docs/moqt-draft14.md §5):

* The key of an object is ``(namespace, track, group, object)``. The cache stores each object
  as an opaque :class:`CachedObject` — payload, status, extensions, publisher priority and
  subgroup — and never looks inside a payload.
* Objects arrive one by one into an *open* group. When the group is known to be complete
  (End of Group, End of Track, or a whole group handed over at once) it is *sealed*: its objects
  move, as one unit, into a pluggable :class:`GroupStore` (in memory here; the Ray actor plugs
  in a store that ``ray.put``s each sealed group as one numpy buffer so same-node actors read it
  without a copy).
* One byte budget for the whole node. When it is exceeded, whole sealed groups are evicted in
  LRU order. Never evicted: the latest group of every track (a live subscriber joins there),
  open groups (still being filled), and the group the current call wrote (its writer reads it
  next). The cache may therefore stay over budget while only protected groups remain.
* The clock is injected: every method that needs time takes ``now`` (seconds). A track may
  carry a MAX_CACHE_DURATION (ms); an object older than that is no longer served and its group
  is dropped on the next access.
* Duplicates: the same key with identical content is ignored; a different payload, priority
  or subgroup raises :class:`MalformedTrackError` (draft-14 §2.5); a status change only to
  "does not exist" is allowed.
* :class:`InFlight` merges concurrent upstream requests: the first caller for a key becomes the
  leader and does the work; the others wait on opaque tokens that the leader hands back.

Invariants: ``bytes_cached`` equals the sum of the payload sizes of every cached group; every
evicted group is reported once, in the return value of the call that evicted it, so callers can
keep the directory right.
"""

from __future__ import annotations

import abc
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

__all__ = [
    "OBJECT_DOES_NOT_EXIST",
    "OBJECT_END_OF_GROUP",
    "OBJECT_END_OF_TRACK",
    "OBJECT_NORMAL",
    "CacheCounters",
    "CachedObject",
    "GroupKey",
    "GroupStore",
    "InFlight",
    "MalformedTrackError",
    "MemoryGroupStore",
    "RelayCache",
    "TrackKey",
]

# Object Status values (draft-14 §10.2.1.1); plain ints so the cache stays wire-independent.
OBJECT_NORMAL = 0
OBJECT_DOES_NOT_EXIST = 1
OBJECT_END_OF_GROUP = 3
OBJECT_END_OF_TRACK = 4

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


@dataclass(frozen=True, kw_only=True)
class CachedObject:
    """One MoQT object as the relay keeps it: opaque bytes plus its canonical properties."""

    object_id: int
    """Object ID within its group."""
    payload: bytes | memoryview = b""
    """Payload bytes (a read-only view when it comes from the object store)."""
    status: int = OBJECT_NORMAL
    """Object Status; only Normal objects carry a payload."""
    extensions: tuple[tuple[int, int | bytes], ...] = ()
    """Extension headers (type, value), forwarded unchanged."""
    priority: int = 128
    """Publisher priority (0 = highest)."""
    subgroup_id: int = 0
    """Subgroup the object was published on."""

    @property
    def size(self) -> int:
        """Bytes counted against the budget (payload only)."""
        return len(self.payload)

    def same_content(self, other: CachedObject) -> bool:
        """True when ``other`` is the identical immutable object."""
        return (
            bytes(self.payload) == bytes(other.payload)
            and self.priority == other.priority
            and self.subgroup_id == other.subgroup_id
            and self.extensions == other.extensions
        )


Handle = TypeVar("Handle")


class GroupStore(abc.ABC, Generic[Handle]):
    """Where sealed groups live. ``put`` is called once per sealed group, ``delete`` once on
    eviction; ``get`` may be called any number of times in between.

    Capability flag: ``zero_copy`` is True when ``get`` returns views into shared memory.
    """

    zero_copy: bool = False

    @abc.abstractmethod
    def put(self, key: GroupKey, objects: Sequence[CachedObject]) -> Handle:
        """Store a sealed group (objects in ascending id order) and return its handle."""

    @abc.abstractmethod
    def get(self, handle: Handle) -> list[CachedObject]:
        """The objects of a sealed group, in ascending id order."""

    @abc.abstractmethod
    def delete(self, handle: Handle) -> None:
        """Forget a sealed group (eviction)."""


class MemoryGroupStore(GroupStore[tuple[CachedObject, ...]]):
    """The pure store: a sealed group is the tuple of its objects."""

    def put(self, key: GroupKey, objects: Sequence[CachedObject]) -> tuple[CachedObject, ...]:
        return tuple(objects)

    def get(self, handle: tuple[CachedObject, ...]) -> list[CachedObject]:
        return list(handle)

    def delete(self, handle: tuple[CachedObject, ...]) -> None:
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


@dataclass
class _Group:
    objects: dict[int, CachedObject] = field(default_factory=dict)
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

    # ---- writing -------------------------------------------------------------------------

    def put_object(
        self, namespace: Namespace, track: bytes, group_id: int, obj: CachedObject, now: float
    ) -> list[GroupKey]:
        """Store one object; seals the group on End of Group / End of Track status.

        Returns the groups evicted to make room. Raises :class:`MalformedTrackError` on a
        conflicting duplicate.
        """
        t = self._track(namespace, track)
        key: GroupKey = (namespace, track, group_id)
        g = t.groups.get(group_id)
        if g is None:
            if t.end_of_track is not None and (group_id, obj.object_id) > t.end_of_track:
                raise MalformedTrackError(f"object {group_id}/{obj.object_id} after end of track")
            g = t.groups[group_id] = _Group(first_seen=now)
            t.latest_group = max(t.latest_group, group_id)
        elif g.sealed:
            self._check_sealed_duplicate(g, obj)
            return []
        old = g.objects.get(obj.object_id)
        if old is not None:
            if old.status == obj.status and old.same_content(obj):
                return []
            if obj.status != OBJECT_DOES_NOT_EXIST:
                raise MalformedTrackError(f"object {group_id}/{obj.object_id} changed")
            g.nbytes -= old.size
            self.bytes_cached -= old.size
        g.objects[obj.object_id] = obj
        g.nbytes += obj.size
        self.bytes_cached += obj.size
        self.counters.bytes_in += obj.size
        if obj.status == OBJECT_NORMAL:
            loc = (group_id, obj.object_id)
            t.largest = loc if t.largest is None else max(t.largest, loc)
        self._lru[key] = None
        self._lru.move_to_end(key)
        if obj.status == OBJECT_END_OF_TRACK:
            t.end_of_track = (group_id, obj.object_id)
        if obj.status in (OBJECT_END_OF_GROUP, OBJECT_END_OF_TRACK):
            self._seal(key, g)
        return self._evict(keep=key)

    def put_group(
        self,
        namespace: Namespace,
        track: bytes,
        group_id: int,
        objects: Sequence[CachedObject],
        now: float,
        *,
        end_of_track: bool = False,
    ) -> list[GroupKey]:
        """Store a whole group at once and seal it; returns the evicted groups."""
        evicted: list[GroupKey] = []
        for obj in objects:
            evicted += self.put_object(namespace, track, group_id, obj, now)
        evicted += self.seal_group(namespace, track, group_id, now)
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
            t.latest_group = max(t.latest_group, group_id)
            self._lru[(namespace, track, group_id)] = None
        if not g.sealed:
            self._seal((namespace, track, group_id), g)
        return self._evict(keep=(namespace, track, group_id))

    def end_track(self, namespace: Namespace, track: bytes, last_group: int, now: float) -> None:
        """Record End of Track after ``last_group`` (nothing larger will ever exist)."""
        t = self._track(namespace, track)
        last_obj = -1
        g = t.groups.get(last_group)
        if g is not None:
            objs = self._objects_of(g)
            last_obj = max((o.object_id for o in objs), default=-1)
        t.end_of_track = (last_group, last_obj + 1)

    def set_max_age(self, namespace: Namespace, track: bytes, max_cache_duration_ms: int) -> None:
        """Apply a MAX_CACHE_DURATION (ms) to a track (draft-14 §9.2.2.3)."""
        self._track(namespace, track).max_age_s = max_cache_duration_ms / 1000.0

    # ---- reading -------------------------------------------------------------------------

    def get_group(
        self, namespace: Namespace, track: bytes, group_id: int, now: float
    ) -> list[CachedObject] | None:
        """The objects of a cached group (sealed or not), or None on a miss."""
        g = self._live_group(namespace, track, group_id, now)
        if g is None:
            self.counters.misses += 1
            return None
        self.counters.hits += 1
        objs = self._objects_of(g)
        self.counters.bytes_out += g.nbytes
        self._lru.move_to_end((namespace, track, group_id))
        return objs

    def group_handle(self, namespace: Namespace, track: bytes, group_id: int, now: float) -> Any:
        """The store handle of a sealed group (an ObjectRef with the Ray store), or None."""
        g = self._live_group(namespace, track, group_id, now)
        if g is None or not g.sealed:
            self.counters.misses += 1
            return None
        self.counters.hits += 1
        self._lru.move_to_end((namespace, track, group_id))
        return g.handle

    def knows(self, namespace: Namespace, track: bytes, group_id: int, object_id: int) -> bool:
        """True when the object is cached, or its group is sealed (so nothing new can join)."""
        g = self._tracks.get((namespace, track), _Track()).groups.get(group_id)
        return g is not None and (g.sealed or object_id in g.objects)

    def is_sealed(self, namespace: Namespace, track: bytes, group_id: int) -> bool:
        """True when the group is cached and complete."""
        g = self._tracks.get((namespace, track), _Track()).groups.get(group_id)
        return g is not None and g.sealed

    def read_range(
        self,
        namespace: Namespace,
        track: bytes,
        start: tuple[int, int],
        end: tuple[int, int],
        now: float,
    ) -> tuple[list[tuple[int, CachedObject]], bool]:
        """Objects in [start, end) as FETCH names it (end.object 0 = the whole group).

        Returns ``(objects, complete)``: the cached ``(group, object)`` list in ascending order
        and whether every group in the range is sealed (so the answer is final).
        """
        out: list[tuple[int, CachedObject]] = []
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
            self._lru.move_to_end((namespace, track, gid))
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

    def tracks(self) -> Iterator[TrackKey]:
        """Every track with cached state."""
        return iter(list(self._tracks))

    # ---- internals -----------------------------------------------------------------------

    def _track(self, namespace: Namespace, track: bytes) -> _Track:
        return self._tracks.setdefault((namespace, track), _Track())

    def _objects_of(self, g: _Group) -> list[CachedObject]:
        if g.sealed:
            return self.store.get(g.handle)
        return [g.objects[k] for k in sorted(g.objects)]

    def _live_group(self, ns: Namespace, track: bytes, gid: int, now: float) -> _Group | None:
        t = self._tracks.get((ns, track))
        g = None if t is None else t.groups.get(gid)
        if g is None or t is None:
            return None
        if t.max_age_s is not None and now - g.first_seen > t.max_age_s:
            self._drop((ns, track, gid))
            return None
        return g

    def _check_sealed_duplicate(self, g: _Group, obj: CachedObject) -> None:
        for old in self.store.get(g.handle):
            if old.object_id == obj.object_id:
                if not (old.same_content(obj) or obj.status == OBJECT_DOES_NOT_EXIST):
                    raise MalformedTrackError(f"object {obj.object_id} of a sealed group changed")
                return
        if obj.status == OBJECT_NORMAL:
            raise MalformedTrackError(f"object {obj.object_id} after the end of its group")

    def _seal(self, key: GroupKey, g: _Group) -> None:
        objects = [g.objects[k] for k in sorted(g.objects)]
        g.handle = self.store.put(key, objects)
        g.objects = {}
        g.sealed = True

    def _evict(self, keep: GroupKey | None = None) -> list[GroupKey]:
        evicted: list[GroupKey] = []
        if self.bytes_cached <= self.budget_bytes:
            return evicted
        for key in list(self._lru):
            if self.bytes_cached <= self.budget_bytes:
                break
            ns, track, gid = key
            t = self._tracks[(ns, track)]
            if key == keep or t.latest_group == gid or not t.groups[gid].sealed:
                # the latest group always stays (live subscribers join there); open groups are
                # being filled; the group just written is about to be read by its writer
                continue
            self._drop(key)
            evicted.append(key)
        return evicted

    def _drop(self, key: GroupKey) -> None:
        ns, track, gid = key
        t = self._tracks[(ns, track)]
        g = t.groups.pop(gid)
        self._lru.pop(key, None)
        if g.sealed:
            self.store.delete(g.handle)
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
