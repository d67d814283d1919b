"""The Ray shell: one ``RelayActor`` per node, the ``kvmoq_directory`` actor, a zero-copy store.

The only relay module that imports ``ray`` (STYLE rule 9: a thin shell over :class:`~.relay.Relay`,
which is tested without Ray).

* :class:`RayGroupStore` puts each sealed group into the object store as one
  :class:`~.packed.PackedGroup` (a ``uint8`` payload buffer + an ``int64`` offsets table), so
  actors on the same node map it without a copy. The relay actor owns those objects; eviction
  drops its reference, and Ray frees the memory once no reader holds a ref either.
* ``RelayActor`` (async actor, ``num_cpus=0``, pinned to its node with
  ``NodeAffinitySchedulingStrategy(soft=False)``) runs the relay core, its MoQT server on a UDP
  port, and its pool of sessions to peer relays. Between nodes, bytes move only over MoQT.
* ``DirectoryActor`` (named ``kvmoq_directory``, not detached: it lives as long as the process
  that created it — the serving app's driver, or :func:`start_relays`' caller) holds the
  :class:`~.directory.Directory`. Relays feed it; a watchdog pings every registered relay and
  drops a node whose relay is dead (its ping fails at once), so the directory forgets a killed
  relay within about ``watchdog_s`` seconds; a merely unresponsive one after 10 silent rounds.

Never a blocking ``ray.get`` inside ``async def``: the actors await refs. The one ``ray.get`` in
:meth:`RayGroupStore.put` reads back an object this process has just put (sealed locally, so it
returns at once) to keep a zero-copy view for the relay's own reads.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from .cache import CachedObject, GroupKey, GroupStore, RelayCache
from .directory import Directory, Location, NodeInfo
from .events import TIMEOUT, TRACK_DOES_NOT_EXIST
from .packed import PackedGroup, pack_group, unpack_group
from .relay import GroupEnded, Relay, RelayError, TrackEnded, as_namespace, as_track

__all__ = [
    "DIRECTORY_NAME",
    "DirectoryActor",
    "RayDirectoryClient",
    "RayGroupStore",
    "RelayActor",
    "get_directory",
    "local_relay",
    "relay_name",
    "start_relays",
]

DIRECTORY_NAME = "kvmoq_directory"
"""Name of the directory actor (in the current Ray namespace)."""


def relay_name(node_id: str, prefix: str = "kvmoq_relay_") -> str:
    """Actor name of the relay on ``node_id``."""
    return f"{prefix}{node_id}"


def local_relay(prefix: str = "kvmoq_relay_", namespace: str | None = None) -> Any:
    """The relay actor on the caller's node (for Serve replicas and other actors)."""
    node_id = ray.get_runtime_context().get_node_id()
    return ray.get_actor(relay_name(node_id, prefix), namespace=namespace)


class RayGroupStore(GroupStore[tuple[Any, PackedGroup]]):
    """Sealed groups as object-store buffers; handle = (ObjectRef, zero-copy local view)."""

    zero_copy = True

    def put(self, key: GroupKey, objects: Sequence[CachedObject]) -> tuple[Any, PackedGroup]:
        ref = ray.put(pack_group(objects))
        return ref, ray.get(ref)  # our own object, sealed locally: returns at once

    def get(self, handle: tuple[Any, PackedGroup]) -> list[CachedObject]:
        return unpack_group(handle[1])

    def delete(self, handle: tuple[Any, PackedGroup]) -> None:
        return None  # dropping the handle drops our ref; readers' refs keep it alive


class RayDirectoryClient:
    """The relay's :class:`~.relay.DirectoryClient` over the directory actor (awaits refs)."""

    def __init__(self, handle: Any, relay_handle: Any = None) -> None:
        self._h = handle
        self._relay = relay_handle

    async def register_node(self, info: NodeInfo) -> None:
        await self._h.register_node.remote(info, self._relay)

    async def add_groups(
        self,
        node_id: str,
        namespace: tuple[bytes, ...],
        track: bytes,
        groups: list[int],
        hashes: dict[int, bytes],
    ) -> None:
        await self._h.add_groups.remote(node_id, namespace, track, groups, hashes)

    async def remove_groups(
        self, node_id: str, namespace: tuple[bytes, ...], track: bytes, groups: list[int]
    ) -> None:
        await self._h.remove_groups.remote(node_id, namespace, track, groups)

    async def locate(self, namespace: tuple[bytes, ...], track: bytes) -> list[NodeInfo]:
        return list(await self._h.locate.remote(namespace, track))


@ray.remote(num_cpus=0)
class DirectoryActor:
    """The cluster directory (see :class:`~.directory.Directory`) with a relay watchdog."""

    def __init__(self, watchdog_s: float = 1.0) -> None:
        self._d = Directory()
        self._relays: dict[str, Any] = {}
        self._watchdog_s = watchdog_s
        self.unresponsive_limit = 10
        """Silent ping rounds before a live-but-unresponsive relay is dropped."""
        self._task: asyncio.Task[None] | None = None

    async def register_node(self, info: NodeInfo, relay_handle: Any = None) -> None:
        """Record a relay's address (and its handle, for the watchdog)."""
        self._d.register_node(info)
        if relay_handle is not None:
            self._relays[info.node_id] = relay_handle
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._watch())

    async def add_groups(
        self,
        node_id: str,
        namespace: tuple[bytes, ...],
        track: bytes,
        groups: list[int],
        hashes: dict[int, bytes],
    ) -> None:
        """Record groups cached on a node."""
        if node_id in self._relays or self._d.node(node_id) is not None:
            self._d.add_groups(node_id, namespace, track, groups, hashes)

    async def remove_groups(
        self, node_id: str, namespace: tuple[bytes, ...], track: bytes, groups: list[int]
    ) -> None:
        """Forget evicted groups."""
        self._d.remove_groups(node_id, namespace, track, groups)

    async def remove_node(self, node_id: str) -> None:
        """Forget a node (also done by the watchdog when its relay dies)."""
        self._relays.pop(node_id, None)
        self._d.remove_node(node_id)

    async def locate(self, namespace: tuple[bytes, ...], track: bytes) -> list[NodeInfo]:
        """Relays caching any group of the track."""
        infos = (self._d.node(n) for n in self._d.nodes_for(namespace, track))
        return [i for i in infos if i is not None]

    async def nodes_for(
        self, namespace: tuple[bytes, ...], track: bytes, group_id: int | None = None
    ) -> list[str]:
        """Node ids caching a group (or any group) of a track."""
        return self._d.nodes_for(namespace, track, group_id)

    async def lookup_hash(self, chunk_hash: bytes) -> list[Location]:
        """Every location of a chunk hash."""
        return self._d.lookup_hash(chunk_hash)

    async def longest_prefix(self, chunk_hashes: list[bytes]) -> list[list[Location]]:
        """Locations of the longest known prefix of a chunk-hash chain."""
        return self._d.longest_prefix(chunk_hashes)

    async def nodes(self) -> list[NodeInfo]:
        """Every registered relay."""
        return self._d.nodes()

    async def stats(self) -> dict[str, int]:
        """Directory sizes."""
        return self._d.stats()

    async def _watch(self) -> None:
        # A dead relay (ray.kill, node loss) fails its ping at once: forget it immediately. A
        # slow one (busy CPU) only after `unresponsive_limit` silent rounds, so load alone never
        # erases a healthy relay from the directory.
        misses: dict[str, int] = {}
        while True:
            await asyncio.sleep(self._watchdog_s)
            for node_id, handle in list(self._relays.items()):
                try:
                    await asyncio.wait_for(handle.ping.remote(), 2 * self._watchdog_s)
                    misses.pop(node_id, None)
                except ray.exceptions.ActorDiedError:
                    misses[node_id] = self.unresponsive_limit
                except (TimeoutError, ray.exceptions.RayError):
                    misses[node_id] = misses.get(node_id, 0) + 1
                if misses.get(node_id, 0) >= self.unresponsive_limit:
                    misses.pop(node_id, None)
                    await self.remove_node(node_id)


_HELD: dict[str, Any] = {}


_T = TypeVar("_T")


async def _retry_missing(fn: Callable[[], Awaitable[_T]], wait_s: float) -> _T:
    """``fn()``, retried every 50 ms while it fails with TRACK_DOES_NOT_EXIST, for ``wait_s``."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            return await fn()
        except RelayError as exc:
            if exc.error_code != TRACK_DOES_NOT_EXIST or time.monotonic() >= deadline:
                raise
        await asyncio.sleep(0.05)


def get_directory(*, create: bool = True, namespace: str | None = None) -> Any:
    """The ``kvmoq_directory`` actor handle (created, owned by the caller, if absent).

    Ray collects a non-detached actor once no handle is left, so this process keeps one: the
    directory lives as long as the process that created it (or until ``ray.shutdown``).
    ``namespace``: the Ray namespace to look in (default: the caller's).
    """
    if not create:
        return ray.get_actor(DIRECTORY_NAME, namespace=namespace)
    handle = DirectoryActor.options(  # type: ignore[attr-defined]
        name=DIRECTORY_NAME, namespace=namespace, get_if_exists=True, num_cpus=0
    ).remote()
    # keep the first handle of each directory actor: it is the owner's, later ones are borrowed
    _HELD.setdefault(handle._actor_id.hex(), handle)
    return handle


@ray.remote(num_cpus=0, max_restarts=0)
class RelayActor:
    """One node's relay. Construct with :func:`start_relays` (or pin it yourself), then
    ``start``. Methods are the in-node API documented in ``ray_kvmoq.relay``."""

    def __init__(
        self,
        *,
        host: str | None = None,
        port: int = 0,
        budget_bytes: int = 256 << 20,
        network: dict[str, Any] | None = None,
        directory: Any = None,
        relay_id: str | None = None,
    ) -> None:
        self.ray_node_id = ray.get_runtime_context().get_node_id()
        self.node_id = relay_id or self.ray_node_id
        """Directory key of this relay (the Ray node id unless a test runs two per node)."""
        self.host = host or ray.util.get_node_ip_address()
        self.port = port
        self.budget_bytes = budget_bytes
        self._network_opts = dict(network or {})
        self._directory_handle = directory
        self.relay: Relay | None = None
        self._net: Any = None

    async def start(self) -> NodeInfo:
        """Start the MoQT server and register with the directory; returns the address."""
        if self.relay is not None:
            return NodeInfo(node_id=self.node_id, host=self.host, port=self.port)
        me = ray.get_runtime_context().current_actor
        dclient = (
            RayDirectoryClient(self._directory_handle, me)
            if self._directory_handle is not None
            else None
        )
        listen = self._network_opts.pop("listen", True)
        if "security" not in self._network_opts:
            from .peers import ClusterSecurity

            self._network_opts["security"] = ClusterSecurity.from_env()  # None when unset
        if listen:
            from .network import RelayNetwork  # MoQT side; late so the core stays Ray-testable

            self._net = RelayNetwork(
                node_id=self.node_id, host=self.host, port=self.port, **self._network_opts
            )
        self.relay = Relay(
            node_id=self.node_id,
            cache=RelayCache(self.budget_bytes, RayGroupStore()),
            directory=dclient,
            connect=self._net.connect if self._net is not None else None,
        )
        if self._net is not None:
            self.port = await self._net.start(self.relay)
        info = NodeInfo(node_id=self.node_id, host=self.host, port=self.port)
        if dclient is not None:
            await dclient.register_node(info)
        return info

    # ---- in-node API -------------------------------------------------------------------------

    async def publish_group(
        self,
        namespace: Sequence[str | bytes] | str,
        track: str | bytes,
        group_id: int,
        objects: Sequence[bytes | CachedObject],
        *,
        end_of_track: bool = False,
        chunk_hash: bytes | None = None,
    ) -> None:
        """Publish one complete group (payloads, or CachedObjects for full control)."""
        objs = [
            o if isinstance(o, CachedObject) else CachedObject(object_id=i, payload=o)
            for i, o in enumerate(objects)
        ]
        await self._relay().publish_group(
            as_namespace(namespace),
            as_track(track),
            group_id,
            objs,
            end_of_track=end_of_track,
            chunk_hash=chunk_hash,
        )

    async def end_track(
        self, namespace: Sequence[str | bytes] | str, track: str | bytes, last_group: int
    ) -> None:
        """Mark a track complete after ``last_group``."""
        self._relay().end_track(as_namespace(namespace), as_track(track), last_group)

    async def lookup(
        self, namespace: Sequence[str | bytes] | str, track: str | bytes
    ) -> dict[str, Any]:
        """What this node caches of a track (groups, sealed, largest, end_of_track, live)."""
        return self._relay().lookup(as_namespace(namespace), as_track(track))

    async def get_group_ref(
        self,
        namespace: Sequence[str | bytes] | str,
        track: str | bytes,
        group_id: int,
        *,
        wait_s: float = 0.0,
        timeout_s: float | None = 30.0,
    ) -> Any:
        """An ObjectRef to the sealed group as a :class:`~.packed.PackedGroup` (pulled from a
        peer relay over MoQT first if this node does not have it).

        ``wait_s``: keep looking this long for a track no relay has announced yet (prefill may
        not have published it); ``timeout_s``: give up on the whole pull (RelayError 0x2), so a
        caller can fall back to recomputing instead of waiting on a slow peer.
        """
        ns, tr = as_namespace(namespace), as_track(track)
        relay = self._relay()

        async def pull() -> None:
            await _retry_missing(lambda: relay.get_group(ns, tr, group_id), wait_s)

        try:
            await asyncio.wait_for(pull(), timeout_s)
        except TimeoutError:
            raise RelayError(TIMEOUT, f"group {group_id}: no answer in {timeout_s} s") from None
        handle = relay.cache.group_handle(ns, tr, group_id, time.monotonic())
        if handle is None:
            raise RelayError(TRACK_DOES_NOT_EXIST, f"group {group_id} was evicted before use")
        return handle[0]

    async def subscribe_groups(
        self,
        namespace: Sequence[str | bytes] | str,
        track: str | bytes,
        start_group: int = 0,
        *,
        wait_s: float = 0.0,
    ) -> AsyncIterator[dict[str, Any]]:
        """Live track as sealed groups: yields ``{"group_id": g, "ref": ObjectRef}`` as each
        group completes (cached ones first), then ``{"end": True}``. Raises RelayError when
        the track cannot be found within ``wait_s`` or its upstream fails."""
        ns, tr = as_namespace(namespace), as_track(track)
        relay = self._relay()
        sub = await _retry_missing(
            lambda: relay.open_subscription(ns, tr, start_group=start_group), wait_s
        )
        try:
            async for ev in sub:
                if isinstance(ev, GroupEnded):
                    handle = relay.cache.group_handle(ns, tr, ev.group_id, time.monotonic())
                    if handle is not None:
                        yield {"group_id": ev.group_id, "ref": handle[0]}
                elif isinstance(ev, TrackEnded):
                    yield {"end": True}
                    return
        finally:
            sub.close()

    async def lookup_hash(self, chunk_hash: bytes) -> list[Location]:
        """Directory: every location of a chunk hash."""
        if self._directory_handle is None:
            return []
        return list(await self._directory_handle.lookup_hash.remote(chunk_hash))

    async def longest_prefix(self, chunk_hashes: list[bytes]) -> list[list[Location]]:
        """Directory: locations of the longest known prefix of a chunk-hash chain."""
        if self._directory_handle is None:
            return []
        return list(await self._directory_handle.longest_prefix.remote(chunk_hashes))

    async def flush_directory(self) -> None:
        """Wait until the directory has seen every seal and eviction so far."""
        await self._relay().flush_directory()

    async def stats(self) -> dict[str, int]:
        """Cache and transfer counters."""
        return self._relay().stats()

    async def address(self) -> NodeInfo:
        """Where this relay's MoQT server listens."""
        return NodeInfo(node_id=self.node_id, host=self.host, port=self.port)

    async def ping(self) -> str:
        """Liveness probe (the directory's watchdog)."""
        return self.node_id

    async def shutdown(self) -> None:
        """Close the MoQT server, the peer sessions and the relay."""
        if self._net is not None:
            await self._net.close()
        if self.relay is not None:
            await self.relay.close()

    def _relay(self) -> Relay:
        if self.relay is None:
            raise RuntimeError("RelayActor.start() has not run")
        return self.relay


def start_relays(
    *,
    node_ids: Sequence[str] | None = None,
    port: int = 0,
    budget_bytes: int = 256 << 20,
    security: Any = None,
    network: dict[str, Any] | None = None,
    timeout_s: float = 60.0,
    name_prefix: str = "kvmoq_relay_",
    namespace: str | None = None,
) -> dict[str, Any]:
    """Start (or find) one pinned relay per node and the directory; returns node id → handle.

    ``security`` is a :class:`~.peers.ClusterSecurity` (cluster CA + token keys). None: each
    relay derives it from ``$KVMOQ_CLUSTER_SECRET`` (hex, same on every node; pass it in the
    job's ``runtime_env``) if set, else its sessions use self-signed certificates, no tokens. ``network`` holds extra
    :class:`~.network.RelayNetwork` options (``idle_timeout_s``, ``transport_options``).
    Synchronous driver-side helper (the serving app's builder or a test); the directory is
    owned by the caller.
    """
    network = {**(network or {}), **({"security": security} if security is not None else {})}
    directory = get_directory(namespace=namespace)
    if node_ids is None:
        node_ids = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    handles = {}
    for node_id in node_ids:
        handles[node_id] = RelayActor.options(  # type: ignore[attr-defined]
            name=relay_name(node_id, name_prefix),
            namespace=namespace,
            get_if_exists=True,
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(
            port=port,
            budget_bytes=budget_bytes,
            network=network,
            directory=directory,
        )
    ray.get([h.start.remote() for h in handles.values()], timeout=timeout_s)
    return handles
