"""The relay core: one node's cache, local publishers, live fan-out and upstream routing.

Transport-agnostic asyncio logic. It is driven from three sides:

* **in-node publishers** (prefill, via the Ray actor) call :meth:`Relay.publish_group` (a
  whole group: objects, or one :class:`~ray_kvmoq.moqt.api.Group`) or
  :meth:`Relay.publish_object`;
* **downstream readers** — in-node actors, or MoQT sessions through ``downstream.py`` — call
  :meth:`Relay.subscribe` (live: cached groups first, then new ones as they arrive, then
  :class:`TrackEnded`), :meth:`Relay.get_group`, :meth:`Relay.ensure_groups` and
  :meth:`Relay.fetch`;
* **upstreams** are anything implementing :class:`Upstream` (a MoQT session to a peer relay, a
  striped set of data-plane connections, or an external publisher's session that sent
  PUBLISH_NAMESPACE). Routing order for a track the cache cannot answer: a local live track,
  then an announced publisher whose namespace is a field-wise prefix, then a peer relay the
  :class:`DirectoryClient` names.

Pulls are pipelined: :meth:`Relay.ensure_groups` asks for every missing group at once, as
range FETCHes of up to ``fetch_chunk`` groups with up to ``fetch_window`` requests in flight
per upstream connection (``Upstream.parallelism``), so no group waits for the previous one's
round trip. ``stats()["max_groups_in_flight"]`` records how deep the pipeline ran.

Invariants (draft-14 §8 aggregation, docs/moqt-draft14.md §5):

* at most one upstream subscription per track, whatever the number of downstream subscribers;
  its objects fill the cache once and fan out to every queue; ``upstream_bytes`` counts every
  payload byte received from upstream, duplicates included;
* concurrent pulls of one group merge into one upstream request (:class:`~.cache.InFlight`);
* a subscriber registers its queue and snapshots the cache in one step (no ``await`` between),
  so it sees every object exactly once, in order per group;
* an upstream failure reaches every waiting subscriber as :class:`RelayError` and drops the
  live entry, so the next subscriber routes afresh;
* every group the cache seals or evicts is reported to the directory (batched, in order);
* a track's live entry is dropped once it has ended (or lost every cached group) and nobody
  watches it, so finished prompts hold no state; the cache's byte budget bounds the rest.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence

from ray_kvmoq.moqt.api import Group, MoqtObject

from .cache import (
    OBJECT_END_OF_GROUP,
    OBJECT_END_OF_TRACK,
    CacheFull,
    GroupKey,
    InFlight,
    RelayCache,
)
from .directory import NodeInfo
from .events import (
    INTERNAL_ERROR,
    TRACK_DOES_NOT_EXIST,
    DirectoryClient,
    GroupEnded,
    LocalDirectoryClient,
    ObjectReceived,
    RelayError,
    TrackEnded,
    TrackEvent,
    Upstream,
    as_namespace,
    as_track,
)
from .pulls import PullMixin
from .subscription import TrackSubscription, _Live

__all__ = [  # the core, plus the event types re-exported for callers' convenience
    "DirectoryClient",
    "GroupEnded",
    "LocalDirectoryClient",
    "ObjectReceived",
    "Relay",
    "RelayError",
    "TrackEnded",
    "TrackEvent",
    "TrackSubscription",
    "Upstream",
    "as_namespace",
    "as_track",
]

Namespace = tuple[bytes, ...]


def _prefix_of(prefix: Namespace, namespace: Namespace) -> bool:
    return len(prefix) <= len(namespace) and namespace[: len(prefix)] == prefix


class Relay(PullMixin):
    """A node's relay. All methods run on one asyncio loop."""

    def __init__(
        self,
        *,
        node_id: str,
        cache: RelayCache,
        directory: DirectoryClient | None = None,
        connect: Callable[[NodeInfo], Awaitable[Upstream]] | None = None,
        clock: Callable[[], float] = time.monotonic,
        queue_limit: int = 0,
        fetch_chunk: int = 8,
        fetch_window: int = 2,
    ) -> None:
        self.node_id = node_id
        self.cache = cache
        self.directory = directory
        self._connect = connect
        self._clock = clock
        self._queue_limit = queue_limit
        self.fetch_chunk = fetch_chunk
        """Most groups one upstream FETCH asks for."""
        self.fetch_window = fetch_window
        """FETCH requests in flight per upstream connection during a pull."""
        self._live: dict[tuple[Namespace, bytes], _Live] = {}
        self._publishers: dict[Namespace, Upstream] = {}
        self._group_waiters: dict[GroupKey, list[asyncio.Future[None]]] = {}
        self._pulls: InFlight[GroupKey, asyncio.Future[None]] = InFlight()
        self._pull_leaders: dict[GroupKey, asyncio.Future[None]] = {}
        self._hashes: dict[GroupKey, bytes] = {}
        self._dir_queue: list[tuple[str, GroupKey]] = []
        self._dir_task: asyncio.Task[None] | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.upstream_bytes = 0
        self.upstream_subscriptions = 0
        self.upstream_fetches = 0
        self.delivered_bytes = 0
        self.groups_in_flight = 0
        self.max_groups_in_flight = 0

    # ---- in-node publishing ------------------------------------------------------------------

    async def publish_group(
        self,
        namespace: Namespace,
        track: bytes,
        group_id: int,
        objects: Sequence[MoqtObject] | Group,
        *,
        end_of_track: bool = False,
        chunk_hash: bytes | None = None,
    ) -> None:
        """Publish one complete group (objects in ascending id, or one Group) and optionally
        end the track. Raises RelayError (INTERNAL_ERROR) when it cannot fit the budget."""
        live = self._live.setdefault((namespace, track), _Live())
        live.local = True
        if chunk_hash is not None:
            self._hashes[(namespace, track, group_id)] = chunk_hash
        self._ingest_group(namespace, track, group_id, objects)
        if end_of_track:
            self._ingest_track_end(namespace, track, group_id)

    def publish_object(
        self, namespace: Namespace, track: bytes, group_id: int, obj: MoqtObject
    ) -> None:
        """Publish one object of an open group (use :meth:`end_group` to complete it)."""
        self._live.setdefault((namespace, track), _Live()).local = True
        self._ingest_object(namespace, track, group_id, obj)

    def end_group(self, namespace: Namespace, track: bytes, group_id: int) -> None:
        """Mark a group complete."""
        self._ingest_group_end(namespace, track, group_id)

    def end_track(self, namespace: Namespace, track: bytes, last_group: int) -> None:
        """Mark the track complete after ``last_group``."""
        self._ingest_track_end(namespace, track, last_group)

    # ---- external publishers ---------------------------------------------------------------

    def add_publisher(self, prefix: Namespace, upstream: Upstream) -> None:
        """A session announced ``prefix`` (PUBLISH_NAMESPACE): route matching tracks to it."""
        self._publishers[prefix] = upstream

    def remove_publisher(self, prefix: Namespace, upstream: Upstream | None = None) -> None:
        """The announcement was withdrawn or its session ended."""
        if upstream is None or self._publishers.get(prefix) is upstream:
            self._publishers.pop(prefix, None)

    def drop_upstream(self, upstream: Upstream) -> None:
        """Forget every announcement made through ``upstream`` (its session closed)."""
        for prefix in [p for p, u in self._publishers.items() if u is upstream]:
            del self._publishers[prefix]

    def has_publisher(self, namespace: Namespace) -> bool:
        """True when an announced publisher covers ``namespace``."""
        return self._publisher_for(namespace) is not None

    # ---- reading ---------------------------------------------------------------------------

    def lookup(self, namespace: Namespace, track: bytes) -> dict[str, object]:
        """What this node has of a track: cached groups, sealed ones, largest, end of track."""
        largest, end = self.cache.track_info(namespace, track)
        groups = self.cache.cached_groups(namespace, track)
        return {
            "groups": groups,
            "sealed": [g for g in groups if self.cache.is_sealed(namespace, track, g)],
            "largest": largest,
            "end_of_track": end,
            "live": (namespace, track) in self._live,
        }

    async def open_subscription(
        self, namespace: Namespace, track: bytes, *, start_group: int = 0
    ) -> TrackSubscription:
        """Subscribe: returns once the track is known to exist here or upstream (the upstream
        subscription is established first, draft-14 §8), else raises :class:`RelayError`.

        Iterate the result for cached groups from ``start_group``, then live ones, then
        :class:`TrackEnded`; ``close()`` it when leaving early.
        """
        key = (namespace, track)
        queue: asyncio.Queue[TrackEvent | RelayError] = asyncio.Queue(self._queue_limit)
        snapshot = self._snapshot(namespace, track, start_group)
        largest, _ = self.cache.track_info(namespace, track)
        if snapshot and isinstance(snapshot[-1], TrackEnded):
            return TrackSubscription(self, key, None, queue, snapshot, start_group, largest)
        live = self._live.get(key)
        if live is None:
            live = self._live[key] = _Live()
        live.queues.add(queue)
        sub = TrackSubscription(self, key, live, queue, snapshot, start_group, largest)
        try:
            if not live.local and not live.ended:
                await self._ensure_upstream(namespace, track, live)
        except BaseException:
            sub.close()
            raise
        sub.largest = self.cache.track_info(namespace, track)[0]
        return sub

    async def subscribe(
        self, namespace: Namespace, track: bytes, *, start_group: int = 0
    ) -> AsyncIterator[TrackEvent]:
        """:meth:`open_subscription` as one async generator."""
        sub = await self.open_subscription(namespace, track, start_group=start_group)
        try:
            async for ev in sub:
                yield ev
        finally:
            sub.close()

    async def get_group(
        self, namespace: Namespace, track: bytes, group_id: int
    ) -> list[MoqtObject]:
        """A complete group: from the cache, after a local publisher finishes it, or pulled
        from a peer (one upstream request however many callers ask at once)."""
        for _ in range(3):  # a group evicted between its arrival and this read is pulled again
            await self.ensure_groups(namespace, track, [group_id])
            objs = self.cache.get_group(namespace, track, group_id, self._clock())
            if objs is not None:
                self.delivered_bytes += sum(o.size for o in objs)
                return objs
        raise RelayError(TRACK_DOES_NOT_EXIST, f"group {group_id} was evicted before use")

    async def fetch(
        self, namespace: Namespace, track: bytes, start: tuple[int, int], end: tuple[int, int]
    ) -> list[tuple[int, MoqtObject]]:
        """Objects of the FETCH range [start, end): complete groups from the cache, missing
        ones pulled upstream (pipelined). A range that runs past what exists ends early."""
        objs, complete = self.cache.read_range(namespace, track, start, end, self._clock())
        if not complete:
            _, eot = self.cache.track_info(namespace, track)
            last = end[0] if eot is None else min(end[0], eot[0])
            missing = [
                g
                for g in range(start[0], last + 1)
                if not self.cache.is_sealed(namespace, track, g)
            ]
            try:
                await self.ensure_groups(namespace, track, missing)
            except RelayError:
                if not self.cache.is_sealed(namespace, track, start[0]):
                    raise  # nothing from the start on: refuse; else serve what exists
            objs, _ = self.cache.read_range(namespace, track, start, end, self._clock())
        if not objs:
            raise RelayError(TRACK_DOES_NOT_EXIST, "no objects in range")
        self.delivered_bytes += sum(o.size for _, o in objs)
        return objs

    def set_budget(self, budget_bytes: int) -> int:
        """Resize the cache (evicting LRU groups to fit, the directory told); returns the old
        budget. :class:`~.cache.CacheFull` when open groups alone are larger."""
        old = self.cache.budget_bytes
        self._evicted(self.cache.set_budget(budget_bytes))
        return old

    def stats(self) -> dict[str, int]:
        """Counters: cache hits/misses/bytes/evictions, upstream and delivered bytes, pulls."""
        c = self.cache.counters
        return {
            "hits": c.hits,
            "misses": c.misses,
            "bytes_in": c.bytes_in,
            "bytes_out": c.bytes_out,
            "evictions": c.evictions,
            "evicted_bytes": c.evicted_bytes,
            "refused_bytes": c.refused_bytes,
            "bytes_cached": self.cache.bytes_cached,
            "budget_bytes": self.cache.budget_bytes,
            "upstream_bytes": self.upstream_bytes,
            "upstream_subscriptions": self.upstream_subscriptions,
            "upstream_fetches": self.upstream_fetches,
            "delivered_bytes": self.delivered_bytes,
            "live_tracks": len(self._live),
            "cached_tracks": sum(1 for _ in self.cache.tracks()),
            "groups_in_flight": self.groups_in_flight,
            "max_groups_in_flight": self.max_groups_in_flight,
        }

    async def flush_directory(self) -> None:
        """Wait until every seal/eviction so far has reached the directory."""
        while self._dir_queue or (self._dir_task is not None and not self._dir_task.done()):
            if self._dir_task is None or self._dir_task.done():
                self._dir_task = asyncio.create_task(self._report())
            await asyncio.shield(self._dir_task)

    async def announce_all(self) -> int:
        """Report every sealed group to the directory again (a new directory starts empty);
        returns how many were queued."""
        keys = list(self.cache.sealed_groups())
        for key in keys:
            self._queue_report("add", key)
        await self.flush_directory()
        return len(keys)

    async def close(self) -> None:
        """Cancel upstream subscriptions and pulls, fail waiting subscribers."""
        for live in list(self._live.values()):
            if live.upstream is not None:
                live.upstream.cancel()
            for q in live.queues:
                q.put_nowait(RelayError(INTERNAL_ERROR, "relay closing"))
        self._live.clear()
        for task in list(self._tasks):
            task.cancel()
        if self._dir_task is not None:
            self._dir_task.cancel()
            with contextlib.suppress(BaseException):
                await self._dir_task

    # ---- ingest (shared by local publishers and upstreams) ----------------------------------

    def _coming(self, ns: Namespace, track: bytes, gid: int, live: _Live | None) -> bool:
        """Whether a live track will still deliver ``gid`` (else it must be pulled)."""
        if live is None or live.ended or not (live.local or live.upstream is not None):
            return False
        if gid in self.cache.cached_groups(ns, track):
            return True  # open: its remaining objects are on their way
        largest, _ = self.cache.track_info(ns, track)
        return largest is None or gid > largest[0]  # an older group was evicted: pull it

    def _budget_error(self, exc: CacheFull) -> RelayError:
        return RelayError(INTERNAL_ERROR, f"relay cache full: {exc}")

    def _ingest_object(self, ns: Namespace, track: bytes, gid: int, obj: MoqtObject) -> None:
        if self.cache.knows(ns, track, gid, obj.object_id):
            return
        try:
            evicted = self.cache.put_object(ns, track, gid, obj, self._clock())
        except CacheFull as exc:
            raise self._budget_error(exc) from None
        self._evicted(evicted)
        self._fan_out((ns, track), ObjectReceived(group_id=gid, obj=obj))
        if obj.status in (OBJECT_END_OF_GROUP, OBJECT_END_OF_TRACK):
            self._sealed(ns, track, gid)
        if obj.status == OBJECT_END_OF_TRACK:
            self._ingest_track_end(ns, track, gid)

    def _ingest_group(
        self, ns: Namespace, track: bytes, gid: int, objects: Sequence[MoqtObject] | Group
    ) -> None:
        """A whole group at once: one store put, then its objects and its end fan out."""
        if self.cache.is_sealed(ns, track, gid):
            self.cache.put_group(ns, track, gid, objects, self._clock())  # checks duplicates
            return
        group = objects if isinstance(objects, Group) else Group.pack(gid, objects)
        try:
            evicted = self.cache.put_group(ns, track, gid, group, self._clock())
        except CacheFull as exc:
            raise self._budget_error(exc) from None
        self._evicted(evicted)
        live = self._live.get((ns, track))
        if live is not None and live.queues:
            for obj in group.objects():
                self._fan_out((ns, track), ObjectReceived(group_id=gid, obj=obj))
        self._sealed(ns, track, gid)

    def _ingest_group_end(self, ns: Namespace, track: bytes, gid: int) -> None:
        if self.cache.is_sealed(ns, track, gid):
            return
        self._evicted(self.cache.seal_group(ns, track, gid, self._clock()))
        self._sealed(ns, track, gid)

    def _ingest_track_end(self, ns: Namespace, track: bytes, last_group: int) -> None:
        live = self._live.get((ns, track))
        if live is not None and live.ended:
            return
        for gid in self.cache.cached_groups(ns, track):
            if not self.cache.is_sealed(ns, track, gid):
                # nothing can join a group once the track ended (publishers that FIN groups
                # without an End of Group status get their groups completed here)
                self._evicted(self.cache.seal_group(ns, track, gid, self._clock()))
                self._sealed(ns, track, gid)
        self.cache.end_track(ns, track, last_group, self._clock())
        if live is not None:
            live.ended = True
        self._fan_out((ns, track), TrackEnded())
        if live is not None and not live.queues and self._live.get((ns, track)) is live:
            del self._live[(ns, track)]  # finished and unwatched: the cache alone answers now
        for key in [k for k in self._group_waiters if k[:2] == (ns, track)]:
            for fut in self._group_waiters.pop(key):
                if not fut.done():
                    fut.set_result(None)

    def _sealed(self, ns: Namespace, track: bytes, gid: int) -> None:
        self._fan_out((ns, track), GroupEnded(group_id=gid))
        for fut in self._group_waiters.pop((ns, track, gid), []):
            if not fut.done():
                fut.set_result(None)
        self._queue_report("add", (ns, track, gid))

    def _evicted(self, keys: list[GroupKey]) -> None:
        for key in [*keys, *self.cache.drain_evicted()]:
            self._hashes.pop(key, None)
            self._queue_report("remove", key)
            ns, track, _ = key
            live = self._live.get((ns, track))
            if (
                live is not None
                and not live.queues
                and live.upstream is None
                and not self.cache.has_track(ns, track)
                and not any(k[:2] == (ns, track) for k in self._group_waiters)
            ):
                del self._live[(ns, track)]  # nothing held, nobody watching: forget the track

    def _fan_out(self, key: tuple[Namespace, bytes], ev: TrackEvent) -> None:
        live = self._live.get(key)
        if live is None:
            return
        for q in live.queues:
            q.put_nowait(ev)

    def _count(self, ev: TrackEvent) -> None:
        if isinstance(ev, ObjectReceived):
            self.delivered_bytes += ev.obj.size

    def _snapshot(self, ns: Namespace, track: bytes, start_group: int) -> list[TrackEvent]:
        out: list[TrackEvent] = []
        now = self._clock()
        for gid in self.cache.cached_groups(ns, track):
            if gid < start_group:
                continue
            for obj in self.cache.get_group(ns, track, gid, now) or []:
                out.append(ObjectReceived(group_id=gid, obj=obj))
            if self.cache.is_sealed(ns, track, gid):
                out.append(GroupEnded(group_id=gid))
        _, eot = self.cache.track_info(ns, track)
        if eot is not None:
            # ended: nothing more will come. Groups missing here were evicted (or never
            # existed); a reader that needs one pulls it with get_group/fetch.
            out.append(TrackEnded())
        return out

    # ---- upstream --------------------------------------------------------------------------

    def _publisher_for(self, namespace: Namespace) -> Upstream | None:
        best: tuple[int, Upstream] | None = None
        for prefix, up in self._publishers.items():
            if _prefix_of(prefix, namespace) and (best is None or len(prefix) > best[0]):
                best = (len(prefix), up)
        return None if best is None else best[1]

    async def _resolve(self, namespace: Namespace, track: bytes) -> Upstream:
        up = self._publisher_for(namespace)
        if up is not None:
            return up
        failures = []
        if self.directory is not None and self._connect is not None:
            for info in await self.directory.locate(namespace, track):
                if info.node_id == self.node_id:
                    failures.append(f"{info.node_id[:8]}: ourselves")
                    continue
                try:
                    return await self._connect(info)
                except Exception as exc:  # any peer failure: try the next holder
                    failures.append(f"{info.host}:{info.port}: {exc!r}")
        why = f" (peers failed: {'; '.join(failures)})" if failures else ""
        raise RelayError(TRACK_DOES_NOT_EXIST, "track not found on any relay" + why)

    async def _ensure_upstream(self, ns: Namespace, track: bytes, live: _Live) -> None:
        if live.ready is not None:
            await asyncio.shield(live.ready)
            return
        ready = live.ready = asyncio.get_running_loop().create_future()
        try:
            up = await self._resolve(ns, track)
            events = await up.subscribe(ns, track)
        except BaseException as exc:
            err = exc if isinstance(exc, RelayError) else RelayError(INTERNAL_ERROR, repr(exc))
            ready.set_exception(err)
            ready.exception()  # retrieved: concurrent openers re-raise it themselves
            self._fail((ns, track), live, err)
            raise err from None
        self.upstream_subscriptions += 1
        ready.set_result(None)
        live.upstream = asyncio.create_task(self._pump(ns, track, events, live))

    async def _pump(
        self, ns: Namespace, track: bytes, events: AsyncIterator[TrackEvent], live: _Live
    ) -> None:
        try:
            async for ev in events:
                if isinstance(ev, ObjectReceived):
                    self.upstream_bytes += ev.obj.size  # every byte that crossed, duplicates too
                    self._ingest_object(ns, track, ev.group_id, ev.obj)
                elif isinstance(ev, GroupEnded):
                    self._ingest_group_end(ns, track, ev.group_id)
                else:
                    largest, _ = self.cache.track_info(ns, track)
                    groups = self.cache.cached_groups(ns, track)
                    last = max([*groups, largest[0] if largest else -1])
                    self._ingest_track_end(ns, track, last)
                    return
            raise RelayError(INTERNAL_ERROR, "upstream subscription ended early")
        except asyncio.CancelledError:
            raise
        except RelayError as exc:
            self._fail((ns, track), live, exc)
        except Exception as exc:  # a dead peer surfaces as any transport error
            self._fail((ns, track), live, RelayError(INTERNAL_ERROR, f"upstream failed: {exc!r}"))
        finally:
            if live.upstream is asyncio.current_task():
                live.upstream = None

    def _fail(self, key: tuple[Namespace, bytes], live: _Live, exc: RelayError) -> None:
        for q in live.queues:
            q.put_nowait(exc)
        if self._live.get(key) is live and not live.local:
            del self._live[key]
        live.upstream = None
        for gkey in [k for k in self._group_waiters if k[:2] == key]:
            for fut in self._group_waiters.pop(gkey):
                if not fut.done():
                    fut.set_exception(exc)

    def _maybe_stop_upstream(self, key: tuple[Namespace, bytes], live: _Live) -> None:
        if live.queues:
            return
        if live.local:
            if live.ended and self._live.get(key) is live:
                del self._live[key]  # a finished local track nobody watches any more
            return
        if live.upstream is not None and not live.ended:
            if any(k[:2] == key for k in self._group_waiters):
                return
            live.upstream.cancel()
            live.upstream = None
        if self._live.get(key) is live:
            del self._live[key]

    # ---- directory reports -----------------------------------------------------------------

    def _queue_report(self, op: str, key: GroupKey) -> None:
        if self.directory is None:
            return
        self._dir_queue.append((op, key))
        if self._dir_task is None or self._dir_task.done():
            with contextlib.suppress(RuntimeError):  # no running loop: flushed later
                self._dir_task = asyncio.get_running_loop().create_task(self._report())

    async def _report(self) -> None:
        """Send queued seals and evictions in order, one call per run of one kind and track."""
        assert self.directory is not None
        while self._dir_queue:
            batch, self._dir_queue = self._dir_queue, []
            runs: list[tuple[str, Namespace, bytes, list[int]]] = []
            for op, (ns, track, gid) in batch:
                if op == "add" and not self.cache.is_sealed(ns, track, gid):
                    continue  # evicted since
                if runs and runs[-1][:3] == (op, ns, track):
                    runs[-1][3].append(gid)
                else:
                    runs.append((op, ns, track, [gid]))
            for op, ns, track, gids in runs:
                if op == "add":
                    hashes = {g: h for g in gids if (h := self._hashes.get((ns, track, g)))}
                    await self.directory.add_groups(self.node_id, ns, track, gids, hashes)
                else:
                    await self.directory.remove_groups(self.node_id, ns, track, gids)
