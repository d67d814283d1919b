"""Pipelined pulls of the relay core: every missing group of a request asked for at once, as
range FETCHes of up to ``fetch_chunk`` groups with up to ``fetch_window`` requests in flight per
upstream connection (``Upstream.parallelism``), so no group waits for another's round trip.

A mixin of :class:`~.relay.Relay` (split from it for size): the leader of a group's pull is
the first caller that needs it (:class:`~.cache.InFlight`); later callers wait on its result;
a group a live track is still delivering is awaited, not pulled. ``groups_in_flight`` counts
groups whose FETCH is on the wire and not yet complete; ``max_groups_in_flight`` its peak.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING

from ray_kvmoq.moqt.api import Group, MoqtObject

from .cache import GroupKey, InFlight, RelayCache
from .events import INTERNAL_ERROR, TRACK_DOES_NOT_EXIST, RelayError, Upstream

if TYPE_CHECKING:
    from .subscription import _Live

__all__ = ["PullMixin"]

Namespace = tuple[bytes, ...]


def _chunks(group_ids: Sequence[int], size: int) -> list[list[int]]:
    """Split ascending ids into runs of consecutive ids, each at most ``size`` long."""
    out: list[list[int]] = []
    for gid in group_ids:
        if out and gid == out[-1][-1] + 1 and len(out[-1]) < size:
            out[-1].append(gid)
        else:
            out.append([gid])
    return out


def _retrieve(fut: asyncio.Future[None]) -> None:
    if not fut.cancelled():
        fut.exception()


class PullMixin:
    """Pipelined upstream pulls (see the module docstring); state lives in the Relay."""

    cache: RelayCache
    fetch_chunk: int
    fetch_window: int
    upstream_bytes: int
    upstream_fetches: int
    groups_in_flight: int
    max_groups_in_flight: int
    _live: dict[tuple[Namespace, bytes], _Live]
    _group_waiters: dict[GroupKey, list[asyncio.Future[None]]]
    _pulls: InFlight[GroupKey, asyncio.Future[None]]
    _pull_leaders: dict[GroupKey, asyncio.Future[None]]
    _tasks: set[asyncio.Task[None]]

    # Hooks the Relay defines; declared here, as typed attributes, so mypy checks the calls.

    _coming: Callable[[Namespace, bytes, int, _Live | None], bool]
    """Whether a live track will still deliver a group (then it is awaited, not pulled)."""
    _resolve: Callable[[Namespace, bytes], Awaitable[Upstream]]
    """The upstream to pull a track from (RelayError when none has it)."""
    _ingest_group: Callable[[Namespace, bytes, int, Sequence[MoqtObject] | Group], None]
    """Store a whole group and fan it out."""

    async def ensure_groups(
        self, namespace: Namespace, track: bytes, group_ids: Sequence[int]
    ) -> None:
        """Return once every group in ``group_ids`` is sealed in the cache: cached ones at once,
        ones a live track is still delivering when they complete, the rest pulled upstream in
        one pipelined batch. Raises :class:`RelayError` if any of them cannot be had."""
        loop = asyncio.get_running_loop()
        waits: list[tuple[int, asyncio.Future[None]]] = []
        lead: list[int] = []
        live = self._live.get((namespace, track))
        for gid in sorted(set(group_ids)):
            if self.cache.is_sealed(namespace, track, gid):
                continue
            gkey: GroupKey = (namespace, track, gid)
            fut: asyncio.Future[None] = loop.create_future()
            if self._coming(namespace, track, gid, live):
                self._group_waiters.setdefault(gkey, []).append(fut)
            elif self._pulls.join(gkey, fut):
                lead.append(gid)
                self._pull_leaders[gkey] = fut
            waits.append((gid, fut))
        if lead:
            task = loop.create_task(self._pull_groups(namespace, track, lead))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            for gid, fut in waits:
                await fut
                if not self.cache.is_sealed(namespace, track, gid):
                    raise RelayError(TRACK_DOES_NOT_EXIST, f"group {gid} is not available")
        except BaseException:
            # The caller gave up (its timeout, or an earlier group failed): the pull goes on for
            # other waiters, and the errors of futures nobody awaits now must not be logged.
            for _, fut in waits:
                fut.add_done_callback(_retrieve)
            raise

    async def _pull_groups(self, ns: Namespace, track: bytes, gids: list[int]) -> None:
        """Pull ``gids`` (whose waiters this call leads) with pipelined range FETCHes."""
        keys = {gid: (ns, track, gid) for gid in gids}
        issued: set[int] = set()
        try:
            up = await self._resolve(ns, track)
            window = self.fetch_window * max(1, int(getattr(up, "parallelism", 1)))
            sem = asyncio.Semaphore(window)

            async def one(chunk: list[int]) -> None:
                async with sem:
                    issued.update(chunk)
                    self._note_in_flight(len(chunk))
                    await self._fetch_chunk(up, ns, track, chunk, keys)

            await asyncio.gather(*(one(c) for c in _chunks(gids, self.fetch_chunk)))
            error: BaseException = RelayError(TRACK_DOES_NOT_EXIST, "not on the upstream")
        except BaseException as exc:
            error = exc
            if not isinstance(exc, (RelayError, asyncio.CancelledError)):
                error = RelayError(INTERNAL_ERROR, f"upstream pull failed: {exc!r}")
        for gid in list(keys):  # whatever did not arrive: wake its waiters (they re-check)
            self._finish_pull(keys.pop(gid), error, in_flight=gid in issued)
        if isinstance(error, asyncio.CancelledError):
            raise error

    async def _fetch_chunk(
        self,
        up: Upstream,
        ns: Namespace,
        track: bytes,
        chunk: list[int],
        keys: dict[int, GroupKey],
    ) -> None:
        self.upstream_fetches += 1
        # an upstream that can bound a group is told the budget: a larger one is never cached
        cap = (
            {"max_group_bytes": self.cache.budget_bytes} if getattr(up, "bounded_groups", 0) else {}
        )
        try:
            groups = await up.fetch_groups(ns, track, chunk[0], chunk[-1], **cap)
            async for group in groups:
                gid = group.group_id
                self.upstream_bytes += group.nbytes  # every byte that crossed, duplicates too
                if gid in keys and not self.cache.is_sealed(ns, track, gid):
                    self._ingest_group(ns, track, gid, group)
                key = keys.pop(gid, None)
                if key is not None:
                    self._finish_pull(key, None, in_flight=True)
        except RelayError as exc:
            for gid in chunk:  # this chunk failed; the others may still succeed
                key = keys.pop(gid, None)
                if key is not None:
                    self._finish_pull(key, exc, in_flight=True)

    def _note_in_flight(self, n: int) -> None:
        self.groups_in_flight += n
        self.max_groups_in_flight = max(self.max_groups_in_flight, self.groups_in_flight)

    def _finish_pull(self, key: GroupKey, error: BaseException | None, *, in_flight: bool) -> None:
        if in_flight:
            self.groups_in_flight -= 1
        waiters = self._pulls.finish(key)
        leader = self._pull_leaders.pop(key, None)
        if leader is not None:
            waiters.append(leader)
        sealed = self.cache.is_sealed(*key)
        for w in waiters:
            if w.done():
                continue
            if sealed or error is None:
                w.set_result(None)
            elif isinstance(error, asyncio.CancelledError):
                w.cancel()
            else:
                w.set_exception(error)
