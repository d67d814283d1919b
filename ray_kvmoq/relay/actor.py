"""The Ray shell: one ``RelayActor`` per node, the ``kvmoq_directory`` actor, a zero-copy store.

The only relay module that imports ``ray`` (STYLE rule 9: a thin shell over :class:`~.relay.Relay`,
which is tested without Ray).

* :class:`RayGroupStore` puts each sealed group into the object store as one
  :class:`~ray_kvmoq.moqt.api.Group` (its one payload buffer travels out of band), so
  actors on the same node map it without a copy. The relay actor owns those objects; eviction
  drops its reference, and Ray frees the memory once no reader holds a ref either.
* ``RelayActor`` (async actor, ``num_cpus=0``, pinned to its node with
  ``NodeAffinitySchedulingStrategy(soft=False)``) runs the relay core, its MoQT server on a UDP
  port, and its pool of sessions to peer relays. Between nodes, bytes move only over MoQT.
* ``DirectoryActor`` (named ``kvmoq_directory``) holds the :class:`~.directory.Directory`.
  Relays feed it; its watchdog keeps one long call (``beat``) pending on every registered
  relay, so a dead relay's node is dropped as soon as Ray fails that call, and a merely
  unresponsive one after ``unresponsive_s`` of silence. Its ``watch`` is a long poll on the
  hash index's change journal, which a :class:`DirectoryFollower` uses to keep a
  :class:`~.directory.HashView` current in a reader's process (the router; prefill's
  lookups), so a lookup on the request path costs no round trip.

Lifetime (what :func:`start_relays` creates): the directory and every relay are **detached**
(they outlive the process that created them) and **restartable** (``max_restarts=-1``). A
relay (re)starts itself on its first call after a restart (the directory's next beat, or its
first use), registers its node afresh (the directory forgets what the old incarnation held:
its object-store buffers died with it) and keeps one long call (``epoch_after``) pending on the
directory. The directory carries a random *epoch*; a restarted directory answers that call at
once with a new one (Ray retries the call there), and the relay registers again and
re-announces every sealed group it holds, so the directory rebuilds itself from the relays.

Both watches are long calls, not pings: idle, the KV plane makes one call per relay and
direction every ``watchdog_s`` / ``heartbeat_s`` (10 and 30 s), and still learns of a death as
soon as Ray does. Measured idle on a 2-node cluster here, one-second pings cost each relay
0.005 of a core and the directory 0.007 beyond an idle Ray actor's 0.008.

``start_relays`` is idempotent: it finds the named actors that exist and starts only what is
missing.

Never a blocking ``ray.get`` inside ``async def``: the actors await refs. The one ``ray.get`` in
:meth:`RayGroupStore.put` reads back an object this process has just put (sealed locally, so it
returns at once) to keep a zero-copy view for the relay's own reads.
"""

from __future__ import annotations

import asyncio
import logging
import os
import secrets
import socket
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, TypeVar

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from ray_kvmoq.moqt.api import Group, MoqtObject

from .cache import CacheFull, GroupKey, GroupStore, RelayCache
from .directory import Directory, HashView, Location, NodeInfo
from .events import INTERNAL_ERROR, TIMEOUT, TRACK_DOES_NOT_EXIST, Upstream
from .relay import GroupEnded, Relay, RelayError, TrackEnded, as_namespace, as_track

log = logging.getLogger(__name__)

__all__ = [
    "DIRECTORY_NAME",
    "WATCHDOG_S",
    "DataPlaneActor",
    "DirectoryActor",
    "DirectoryFollower",
    "RayDirectoryClient",
    "RayGroupStore",
    "RelayActor",
    "follow_directory",
    "get_directory",
    "local_relay",
    "on_head_node",
    "read_cluster_secret",
    "relay_name",
    "start_relays",
    "write_cluster_secret",
]

DIRECTORY_NAME = "kvmoq_directory"
"""Name of the directory actor (in the current Ray namespace)."""

WATCHDOG_S = 10.0
"""How long the directory's pending ``beat`` on a relay lasts before the relay answers it (and
the directory sends the next)."""
_BEAT_SLACK_S = 10.0
"""How much later than asked a long call (``beat``, ``epoch_after``) may answer before the caller
counts it as silence."""
_RETRY_S = 1.0
"""Pause after a failed long call (the other side restarting) before the next one."""


def _long_call_s(wait_s: float) -> float:
    """How long a long call (``watch``, ``epoch_after``, ``beat``) may wait: 0 to 60 s."""
    return min(max(wait_s, 0.0), 60.0)


_SECRET_KEY = b"kvmoq_cluster_secret"
_SECRET_NS = b"kvmoq"


def read_cluster_secret() -> bytes | None:
    """The relays' cluster secret from the cluster's GCS key-value store (None if absent)."""
    from ray.experimental import internal_kv

    value = internal_kv._internal_kv_get(_SECRET_KEY, namespace=_SECRET_NS)
    return bytes(value) if value else None


def _secret_id(secret: bytes | None) -> str | None:
    """A short fingerprint of a cluster secret (None: no secret), safe to log and compare."""
    import hashlib

    return None if secret is None else hashlib.sha256(b"kvmoq-secret-id" + secret).hexdigest()[:16]


def write_cluster_secret(secret: bytes) -> None:
    """Store the relays' cluster secret in the GCS (``kvmoq cluster-secret``; Ray's token auth
    guards who can read it)."""
    from ray.experimental import internal_kv

    if len(secret) < 16:
        raise ValueError("the cluster secret must have at least 16 bytes")
    internal_kv._internal_kv_put(_SECRET_KEY, secret, overwrite=True, namespace=_SECRET_NS)


def _budget_key() -> bytes | None:
    """GCS key of the calling relay actor's budget (None outside a named actor)."""
    ctx = ray.get_runtime_context()
    name = ctx.get_actor_name()
    return f"relay_budget/{ctx.namespace}/{name}".encode() if name else None


def relay_name(node_id: str, prefix: str = "kvmoq_relay_") -> str:
    """Actor name of the relay on ``node_id``."""
    return f"{prefix}{node_id}"


def local_relay(prefix: str = "kvmoq_relay_", namespace: str | None = None) -> Any:
    """The relay actor on the caller's node (for Serve replicas and other actors)."""
    node_id = ray.get_runtime_context().get_node_id()
    return ray.get_actor(relay_name(node_id, prefix), namespace=namespace)


class RayGroupStore(GroupStore[tuple[Any, Group]]):
    """Sealed groups as object-store buffers; handle = (ObjectRef, zero-copy local view)."""

    zero_copy = True

    def __init__(self) -> None:
        self._adopted: dict[int, tuple[Group, Any]] = {}

    def adopt(self, group: Group, ref: Any) -> None:
        """``group`` already lives in the object store as ``ref``: its ``put`` keeps that
        object instead of putting a copy."""
        self._adopted[id(group)] = (group, ref)

    def forget(self, group: Group) -> None:
        """Drop an adoption ``put`` did not use (the cache already had the group)."""
        self._adopted.pop(id(group), None)

    def put(self, key: GroupKey, group: Group) -> tuple[Any, Group]:
        known = self._adopted.pop(id(group), None)
        if known is not None and known[0] is group:
            return known[1], group
        ref = ray.put(group)
        return ref, ray.get(ref)  # our own object, sealed locally: returns at once

    def get(self, handle: tuple[Any, Group]) -> Group:
        return handle[1]

    def delete(self, handle: tuple[Any, Group]) -> None:
        return None  # dropping the handle drops our ref; readers' refs keep it alive


class RayDirectoryClient:
    """The relay's :class:`~.relay.DirectoryClient` over the directory actor (awaits refs)."""

    def __init__(self, handle: Any, relay_handle: Any = None) -> None:
        self._h = handle
        self._relay = relay_handle

    @property
    def handle(self) -> Any:
        """The directory actor."""
        return self._h

    async def register_node(self, info: NodeInfo, *, fresh: bool = False) -> None:
        await self._h.register_node.remote(info, self._relay, fresh=fresh)

    async def epoch(self) -> str:
        """The directory incarnation's random id (changes when it restarts)."""
        return str(await self._h.epoch.remote())

    async def epoch_after(self, epoch: str, wait_s: float) -> str:
        """The directory's epoch once it is not ``epoch``, or after ``wait_s``."""
        return str(await self._h.epoch_after.remote(epoch, wait_s))

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


# enable_task_events=False: no Ray task event per call (many per request; the GCS keeps them).
# A real Ray option, missing from its type stubs.
@ray.remote(num_cpus=0, enable_task_events=False)  # type: ignore[call-overload]
class DirectoryActor:
    """The cluster directory (see :class:`~.directory.Directory`) with a relay watchdog."""

    def __init__(self, watchdog_s: float = WATCHDOG_S) -> None:
        self._d = Directory()
        self._relays: dict[str, Any] = {}
        self._watchdog_s = watchdog_s
        self._epoch = secrets.token_hex(8)
        self.unresponsive_s = 30.0
        """How long a live relay may stay silent (its beats time out, or fail while it
        restarts) before its node is dropped: load alone never erases a healthy relay."""
        self._watchers: dict[str, asyncio.Task[None]] = {}
        self._changed = asyncio.Event()

    async def epoch(self) -> str:
        """This incarnation's id: a relay that sees it change re-announces what it holds."""
        return self._epoch

    async def epoch_after(self, epoch: str, wait_s: float = 0.0) -> str:
        """This incarnation's id: at once if it is not ``epoch``, else after ``wait_s`` (at most
        60). A relay keeps one such call pending; when this actor restarts, Ray retries the
        call on the new incarnation, which answers it at once."""
        if epoch == self._epoch:
            await asyncio.sleep(_long_call_s(wait_s))
        return self._epoch

    async def register_node(
        self, info: NodeInfo, relay_handle: Any = None, *, fresh: bool = False
    ) -> None:
        """Record a relay's address (and its handle, for the watchdog); ``fresh``: it holds
        nothing yet, forget what was recorded for the node before."""
        self._d.register_node(info, fresh=fresh)
        self._wake()
        if relay_handle is not None:
            self._relays[info.node_id] = relay_handle
            watcher = self._watchers.get(info.node_id)
            if watcher is None or watcher.done():
                self._watchers[info.node_id] = asyncio.get_running_loop().create_task(
                    self._watch(info.node_id)
                )

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
            self._wake()

    async def remove_groups(
        self, node_id: str, namespace: tuple[bytes, ...], track: bytes, groups: list[int]
    ) -> None:
        """Forget evicted groups."""
        self._d.remove_groups(node_id, namespace, track, groups)
        self._wake()

    async def remove_node(self, node_id: str) -> None:
        """Forget a node (also done by the watchdog when its relay dies)."""
        self._relays.pop(node_id, None)
        self._d.remove_node(node_id)
        self._wake()

    async def watch(
        self, epoch: str | None, version: int, timeout_s: float = 30.0
    ) -> dict[str, Any]:
        """Long poll for a :class:`~.directory.HashView` at ``(epoch, version)``: answers as
        soon as the hash index changed after it, else after ``timeout_s`` (at most 60) with no
        changes. ``{"epoch", "version", "changes"}`` brings the view to ``version``; a view of
        another incarnation, or further behind than the journal reaches, gets
        ``{"epoch", "version", "snapshot"}`` (every entry) instead."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + _long_call_s(timeout_s)
        while True:
            changes = self._d.changes_since(version) if epoch == self._epoch else None
            if changes is None:
                snapshot = self._d.hash_entries()
                return {"epoch": self._epoch, "version": self._d.version, "snapshot": snapshot}
            remaining = deadline - loop.time()
            if changes or remaining <= 0:
                return {"epoch": self._epoch, "version": self._d.version, "changes": changes}
            try:
                await asyncio.wait_for(self._changed.wait(), remaining)
            except TimeoutError:
                pass

    def _wake(self) -> None:
        """Answer every pending :meth:`watch` (each looks at what changed for itself)."""
        self._changed.set()
        self._changed = asyncio.Event()

    async def locate(self, namespace: tuple[bytes, ...], track: bytes) -> list[NodeInfo]:
        """Relays caching any group of the track."""
        infos = (self._d.node(n) for n in self._d.nodes_for(namespace, track))
        return [i for i in infos if i is not None]

    async def nodes_for(
        self, namespace: tuple[bytes, ...], track: bytes, group_id: int | None = None
    ) -> list[str]:
        """Node ids caching a group (or any group) of a track."""
        return self._d.nodes_for(namespace, track, group_id)

    async def groups_on(
        self, node_id: str, namespace: tuple[bytes, ...], track: bytes
    ) -> list[int]:
        """Groups of a track one node caches."""
        return self._d.groups_on(node_id, namespace, track)

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

    async def _watch(self, node_id: str) -> None:
        """Keep one ``beat`` pending on the node's relay while it is registered. A dead relay
        (ray.kill, node loss) fails it as soon as Ray knows: forget the node now. A slow one
        (busy CPU, or restarting) only once it has been silent for ``unresponsive_s``."""
        loop = asyncio.get_running_loop()
        silent_since: float | None = None
        while (handle := self._relays.get(node_id)) is not None:
            try:
                await asyncio.wait_for(
                    handle.beat.remote(self._watchdog_s), self._watchdog_s + _BEAT_SLACK_S
                )
                silent_since = None
                continue
            except ray.exceptions.ActorDiedError:
                dead = True
            except (TimeoutError, ray.exceptions.RayError):
                silent_since = loop.time() if silent_since is None else silent_since
                dead = loop.time() - silent_since >= self.unresponsive_s
            if dead and self._relays.get(node_id) is handle:
                await self.remove_node(node_id)
            elif not dead:
                await asyncio.sleep(_RETRY_S)


class DirectoryFollower:
    """A :class:`~.directory.HashView` of the ``kvmoq_directory`` actor, kept current in this
    process by a daemon thread with one pending :meth:`DirectoryActor.watch` call at a time.

    Idle, that is one call per ``poll_s``; a change reaches the view one round trip after it
    reaches the directory. Readers in any thread or event loop call :meth:`longest_prefix`
    (no round trip) while :attr:`live` is true, and ask the directory themselves otherwise:
    before the first answer, and from the moment a call fails or times out until one succeeds
    again. The directory :func:`get_directory` makes retries a pending call on its restarted
    incarnation instead of failing it; that answer is a snapshot (a new epoch), and the copy
    then fills up as the relays re-announce what they hold. Get one with
    :func:`follow_directory`."""

    def __init__(self, namespace: str | None = None, *, poll_s: float = 30.0) -> None:
        self.namespace = namespace
        self.poll_s = poll_s
        self.view = HashView()
        self.answers = 0
        """``watch`` answers absorbed (for tests and stats)."""
        self._lock = threading.Lock()
        self._live = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="kvmoq-directory", daemon=True)
        self._thread.start()

    @property
    def live(self) -> bool:
        """The view is current: the last ``watch`` answered and none has failed since."""
        return self._live.is_set()

    def wait_live(self, timeout_s: float) -> bool:
        """Wait up to ``timeout_s`` for the view to be current; returns :attr:`live`."""
        return self._live.wait(timeout_s)

    def longest_prefix(self, chunk_hashes: Sequence[bytes]) -> list[list[Location]]:
        """As :meth:`DirectoryActor.longest_prefix`, from the view (check :attr:`live`)."""
        with self._lock:
            return self.view.longest_prefix(chunk_hashes)

    def holds(self, chunk_hash: bytes) -> bool:
        """Whether some relay holds the group of ``chunk_hash``, by the view (check :attr:`live`)."""
        with self._lock:
            return self.view.holds(chunk_hash)

    def stop(self) -> None:
        """End the thread (after its pending call answers or times out). It also ends by itself
        when Ray is shut down in this process."""
        self._stop.set()
        self._live.clear()

    def _run(self) -> None:
        handle: Any = None
        backoff = 0.2
        while not self._stop.is_set():
            if not ray.is_initialized():
                # Ray was shut down in this process: calling it now would start it again
                # (its APIs auto-initialize), behind the back of whoever shut it down
                break
            try:
                if handle is None:
                    handle = ray.get_actor(DIRECTORY_NAME, namespace=self.namespace)
                v = self.view
                answer = ray.get(
                    handle.watch.remote(v.epoch, v.version, self.poll_s), timeout=self.poll_s + 10.0
                )  # no ref kept past the call: releasing one after ray.shutdown() ends the process
            except SystemExit:  # Ray is shutting down in this process
                break
            except Exception as exc:  # no directory yet, or it died: readers ask it themselves
                self._live.clear()
                handle = None
                log.debug("directory follower: %r; retrying in %.1f s", exc, backoff)
                self._stop.wait(backoff)
                backoff = min(2 * backoff, 5.0)
                continue
            with self._lock:
                if "snapshot" in answer:
                    self.view.reset(answer["epoch"], answer["version"], answer["snapshot"])
                else:
                    self.view.apply(answer["version"], answer["changes"])
                self.answers += 1
            self._live.set()
            backoff = 0.2
        self._live.clear()


_FOLLOWERS: dict[str | None, DirectoryFollower] = {}
_FOLLOWERS_LOCK = threading.Lock()


def follow_directory(namespace: str | None = None) -> DirectoryFollower:
    """This process's :class:`DirectoryFollower` of the directory in Ray namespace
    ``namespace`` (started on the first call, and again after the last one ended; Ray must be
    initialized)."""
    with _FOLLOWERS_LOCK:
        follower = _FOLLOWERS.get(namespace)
        if follower is None or follower._stop.is_set() or not follower._thread.is_alive():
            follower = _FOLLOWERS[namespace] = DirectoryFollower(namespace)
        return follower


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


def on_head_node() -> dict[str, Any]:
    """Actor options that place a cluster singleton (the directory, the figures board) on the
    head node, as Ray Train places its state actor: a sliver of the head's own resource. The
    head holds the GCS, so a singleton there is lost only with the whole cluster; on a worker
    node it would go down with that node and be unreachable until the GCS noticed the death and
    restarted it elsewhere. (A soft node affinity to the head's id landed on a worker node in
    1 of 5 tries here.) A restarted head has the same resource, so restarts land there too."""
    return {"resources": {"node:__internal_head__": 0.001}}


def get_directory(
    *, create: bool = True, namespace: str | None = None, detached: bool = True
) -> Any:
    """The ``kvmoq_directory`` actor handle (created if absent: detached and restartable,
    unless ``detached=False``, when it lives as long as the calling process).

    ``namespace``: the Ray namespace to look in (default: the caller's).
    """
    if not create:
        return ray.get_actor(DIRECTORY_NAME, namespace=namespace)
    opts: dict[str, Any] = {"max_restarts": -1, "max_task_retries": -1, **on_head_node()}
    if detached:
        opts["lifetime"] = "detached"
    handle = DirectoryActor.options(  # type: ignore[attr-defined]
        name=DIRECTORY_NAME, namespace=namespace, get_if_exists=True, num_cpus=0, **opts
    ).remote()
    # a non-detached actor lives while its owner holds a handle: keep the first one
    _HELD.setdefault(handle._actor_id.hex(), handle)
    return handle


@ray.remote(num_cpus=0, max_restarts=0, enable_task_events=False)  # type: ignore[call-overload]
class RelayActor:
    """One node's relay. Construct with :func:`start_relays` (or pin it yourself), then
    ``start`` (any in-node call also starts it, e.g. after a restart). Methods are the in-node
    API documented in ``ray_kvmoq.relay``."""

    def __init__(
        self,
        *,
        host: str | None = None,
        port: int = 0,
        budget_bytes: int = 256 << 20,
        network: dict[str, Any] | None = None,
        directory: Any = None,
        relay_id: str | None = None,
        heartbeat_s: float = 30.0,
        data_planes: int | None = 0,
    ) -> None:
        # The relay's one ray.get on its event loop does not block: RayGroupStore.put reads back
        # the object it has just sealed, which returns at once. Ray would still log "Using
        # blocking ray.get inside async actor" for it in every relay's log.
        os.environ.setdefault("RAY_WARN_BLOCKING_GET_INSIDE_ASYNC", "0")
        self.ray_node_id = ray.get_runtime_context().get_node_id()
        self.node_id = relay_id or self.ray_node_id
        """Directory key of this relay (the Ray node id unless a test runs two per node)."""
        self.host = host or ray.util.get_node_ip_address()
        self.port = port
        self.budget_bytes = budget_bytes
        self._network_opts = dict(network or {})
        self._directory_handle = directory
        self._heartbeat_s = heartbeat_s
        self.relay: Relay | None = None
        self._net: Any = None
        self._dclient: RayDirectoryClient | None = None
        self._starting: asyncio.Future[NodeInfo] | None = None
        self._heartbeat: asyncio.Task[None] | None = None
        self.data_planes = default_data_planes() if data_planes is None else data_planes
        """Data-plane processes (K) this relay runs; 0: it moves bytes in its own process."""
        self._planes: list[Any] = []
        self._plane_ports: tuple[int, ...] = ()
        self._plane_fetches: list[int] = [0] * self.data_planes
        self._store = RayGroupStore()
        self.incarnation = secrets.token_hex(8)
        """Random id of this process's life (a restarted relay has a new one)."""
        self._security_id: str | None = "explicit"  # set by _start when it reads the secret

    async def start(self) -> NodeInfo:
        """Start the MoQT server and register with the directory; returns the address.

        Idempotent and safe to call concurrently."""
        if self._starting is None:
            self._starting = asyncio.get_running_loop().create_future()
            try:
                self._starting.set_result(await self._start())
            except BaseException as exc:
                self._starting.set_exception(exc)
                self._starting.exception()
                self._starting = None
                raise
        return await asyncio.shield(self._starting)

    async def _start(self) -> NodeInfo:
        me = ray.get_runtime_context().current_actor
        if self._directory_handle is not None:
            self._dclient = RayDirectoryClient(self._directory_handle, me)
        opts = dict(self._network_opts)
        listen = opts.pop("listen", True)
        # between our own relays the faster QUIC library (qh3 when installed) unless told
        opts["transport_options"] = {"backend": "auto", **opts.get("transport_options", {})}
        if "security" not in opts:
            from .security import ClusterSecurity

            # $KVMOQ_CLUSTER_SECRET, else the secret `kvmoq cluster-secret ensure` put in the
            # cluster's GCS, else None (self-signed certificates, no tokens)
            from_env = ClusterSecurity.from_env()
            if from_env is not None:
                opts["security"], self._security_id = from_env, "env"
            else:
                secret = read_cluster_secret()
                opts["security"] = ClusterSecurity.from_secret(secret) if secret else None
                self._security_id = _secret_id(secret)
        if listen:
            from .downstream import RelayNetwork  # MoQT side; late so the core stays Ray-testable

            self._net = RelayNetwork(node_id=self.node_id, host=self.host, port=self.port, **opts)
        self.budget_bytes = self._persisted_budget() or self.budget_bytes
        self.relay = Relay(
            node_id=self.node_id,
            cache=RelayCache(self.budget_bytes, self._store),
            directory=self._dclient,
            connect=self._connect if self._net is not None else None,
        )
        if self._net is not None:
            self.port = await self._net.start(self.relay)
            if self.data_planes > 0:
                await self._start_planes(me, opts)
        info = self._info()
        if self._dclient is not None:
            epoch = await self._dclient.epoch()
            await self._dclient.register_node(info, fresh=True)  # our cache is empty
            self._heartbeat = asyncio.get_running_loop().create_task(self._keep_directory(epoch))
        return info

    def _info(self) -> NodeInfo:
        return NodeInfo(
            node_id=self.node_id, host=self.host, port=self.port, data_ports=self._plane_ports
        )

    async def _start_planes(self, me: Any, opts: dict[str, Any]) -> None:
        """K data-plane actors on this node, each on a port chosen here (a restarted plane
        binds the same one again, so the address in the directory stays right)."""
        ports = tuple(_free_udp_port(self.host) for _ in range(self.data_planes))
        strategy = NodeAffinitySchedulingStrategy(self.ray_node_id, soft=False)
        self._planes = [
            DataPlaneActor.options(  # type: ignore[attr-defined]
                num_cpus=0, scheduling_strategy=strategy, max_restarts=-1
            ).remote(relay=me, node_id=self.node_id, host=self.host, port=p, network=opts)
            for p in ports
        ]
        self._plane_ports = tuple(await asyncio.gather(*(p.start.remote() for p in self._planes)))

    async def _connect(self, info: NodeInfo) -> Upstream:
        """The upstream for a peer relay: striped over the data planes when both ends run
        them, else the pooled session to the peer relay itself."""
        assert self._net is not None
        control = await self._net.connect(info)
        if not self._planes or not info.data_ports:
            return control
        from .dataplane import StripedUpstream

        return StripedUpstream(control, info, len(self._planes), self._plane_pull)

    async def _plane_pull(
        self, index: int, peer: NodeInfo, ns: tuple[bytes, ...], track: bytes, first: int, last: int
    ) -> AsyncIterator[Group]:
        """Groups from data plane ``index``: each arrives as an object-store ref this relay owns
        (a streaming return), which the cache adopts instead of putting a copy."""
        self._plane_fetches[index] += 1
        gen = self._planes[index].pull.remote(peer.host, peer.port, ns, track, first, last)
        try:
            async for ref in gen:
                group = await ref
                self._store.adopt(group, ref)
                try:
                    yield group
                finally:
                    self._store.forget(group)
        except RelayError:
            raise
        except ray.exceptions.RayError as exc:
            raise RelayError(INTERNAL_ERROR, f"data plane {index} failed: {exc!r}"[:300]) from None

    async def _keep_directory(self, epoch: str) -> None:
        """Follow the directory's epoch with one long call at a time: when the directory comes
        back empty (new epoch), register again and re-announce every sealed group this relay
        holds."""
        assert self._dclient is not None and self.relay is not None
        while True:
            for plane in self._planes:  # a restarted plane starts on its first call
                plane.start.remote()
            try:
                now = await asyncio.wait_for(
                    self._dclient.epoch_after(epoch, self._heartbeat_s),
                    self._heartbeat_s + _BEAT_SLACK_S,
                )
                if now != epoch:
                    await self._dclient.register_node(self._info(), fresh=True)
                    await self.relay.announce_all()
                    epoch = now
            except (TimeoutError, ray.exceptions.RayError):
                await asyncio.sleep(_RETRY_S)  # restarting or busy: ask again

    async def _ready(self) -> Relay:
        if self.relay is None:
            await self.start()
        assert self.relay is not None
        return self.relay

    # ---- in-node API -------------------------------------------------------------------------

    async def publish_group(
        self,
        namespace: Sequence[str | bytes] | str,
        track: str | bytes,
        group_id: int,
        objects: Sequence[bytes | memoryview | MoqtObject] | Group,
        *,
        end_of_track: bool = False,
        chunk_hash: bytes | None = None,
    ) -> None:
        """Publish one complete group: payloads (object ids 0..n-1), objects (CachedObject /
        MoqtObject), or one :class:`~ray_kvmoq.moqt.api.Group` (one buffer + offsets)."""
        relay = await self._ready()
        if isinstance(objects, Group):
            group = objects if objects.group_id == group_id else _regroup(objects, group_id)
        else:
            objs = [
                o if isinstance(o, MoqtObject) else MoqtObject(object_id=i, payload=o)
                for i, o in enumerate(objects)
            ]
            group = Group.pack(group_id, objs)
        await relay.publish_group(
            as_namespace(namespace),
            as_track(track),
            group_id,
            group,
            end_of_track=end_of_track,
            chunk_hash=chunk_hash,
        )

    async def end_track(
        self, namespace: Sequence[str | bytes] | str, track: str | bytes, last_group: int
    ) -> None:
        """Mark a track complete after ``last_group``."""
        (await self._ready()).end_track(as_namespace(namespace), as_track(track), last_group)

    async def lookup(
        self, namespace: Sequence[str | bytes] | str, track: str | bytes
    ) -> dict[str, Any]:
        """What this node caches of a track (groups, sealed, largest, end_of_track, live)."""
        return (await self._ready()).lookup(as_namespace(namespace), as_track(track))

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
        refs = await self.get_group_refs(
            namespace, track, [group_id], wait_s=wait_s, timeout_s=timeout_s
        )
        return refs[0]

    async def get_group_refs(
        self,
        namespace: Sequence[str | bytes] | str,
        track: str | bytes,
        group_ids: Sequence[int],
        *,
        wait_s: float = 0.0,
        timeout_s: float | None = 30.0,
    ) -> list[Any]:
        """ObjectRefs to several sealed groups, in ``group_ids`` order; the missing ones are
        pulled in one pipelined batch (range FETCHes, many groups in flight). Errors as
        :meth:`get_group_ref` (the first group that cannot be had fails the call)."""
        ns, tr = as_namespace(namespace), as_track(track)
        relay = await self._ready()
        ids = list(group_ids)

        async def pull() -> None:
            await _retry_missing(lambda: relay.ensure_groups(ns, tr, ids), wait_s)

        for _ in range(3):  # a group evicted between its arrival and this read: pull it again
            try:
                await asyncio.wait_for(pull(), timeout_s)
            except TimeoutError:
                raise RelayError(
                    TIMEOUT, f"groups {ids[:4]}...: no answer in {timeout_s} s"
                ) from None
            handles = [relay.cache.group_handle(ns, tr, g, time.monotonic()) for g in ids]
            if all(h is not None for h in handles):
                return [h[0] for h in handles]
        raise RelayError(TRACK_DOES_NOT_EXIST, "groups were evicted before use (budget too small)")

    async def prefetch(
        self,
        namespace: Sequence[str | bytes] | str,
        track: str | bytes,
        group_ids: Sequence[int],
        *,
        timeout_s: float = 30.0,
    ) -> int:
        """Start pulling every group of ``group_ids`` this node lacks, in one pipelined batch,
        for a reader that then reads them one by one with :meth:`get_group_ref`: each read
        joins the pull in flight and waits only for its own group, so the reader decodes a
        group while the next ones are on the wire (one round trip per group otherwise).

        Returns how many of the groups are sealed here when the batch ends; never raises for
        a group that cannot be had (the reader's own read reports it), so a caller may drop
        the answer."""
        ns, tr = as_namespace(namespace), as_track(track)
        relay = await self._ready()
        ids = list(group_ids)
        try:
            await asyncio.wait_for(relay.ensure_groups(ns, tr, ids), timeout_s)
        except (RelayError, TimeoutError) as exc:
            log.debug("prefetch of %d groups of %r ended early: %s", len(ids), tr, exc)
        return sum(relay.cache.is_sealed(ns, tr, g) for g in ids)

    async def fetch_refs(
        self, namespace: tuple[bytes, ...], track: bytes, first: int, last: int
    ) -> tuple[list[tuple[int, Any]], bool]:
        """For this node's data planes: (group id, ref) of every group of ``first..last`` that
        can be had (missing ones pulled first), and whether the last one ends the track."""
        relay = await self._ready()
        _, eot = relay.cache.track_info(namespace, track)
        if eot is not None:
            last = min(last, eot[0])
        ids = list(range(first, last + 1))
        try:
            await relay.ensure_groups(namespace, track, ids)
        except RelayError:
            pass  # serve what exists; nothing at all is an error below
        now = time.monotonic()
        out = []
        for g in ids:
            handle = relay.cache.group_handle(namespace, track, g, now)
            if handle is not None:
                out.append((g, handle[0]))
        if not out:
            raise RelayError(TRACK_DOES_NOT_EXIST, f"no groups {first}..{last} here")
        _, eot = relay.cache.track_info(namespace, track)
        return out, eot is not None and out[-1][0] >= eot[0]

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
        relay = await self._ready()
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
        await (await self._ready()).flush_directory()

    async def reannounce(self) -> int:
        """Register again and report every sealed group to the directory (what the heartbeat
        does when the directory restarted); returns the number of groups."""
        relay = await self._ready()
        if self._dclient is None:
            return 0
        await self._dclient.register_node(self._info(), fresh=True)
        return await relay.announce_all()

    async def set_budget(self, budget_bytes: int, *, wait_s: float = 10.0) -> int:
        """Resize this relay's cache to ``budget_bytes`` (evicting LRU groups to fit); returns
        the old budget. The new one is kept in the GCS, so a restarted relay keeps it too.
        Groups still being written cannot be evicted: a budget smaller than they are waits up
        to ``wait_s`` for them to complete, then raises :class:`~.cache.CacheFull`."""
        from ray.experimental import internal_kv

        relay = await self._ready()
        deadline = time.monotonic() + wait_s
        while True:
            try:
                old = relay.set_budget(budget_bytes)
                break
            except CacheFull:
                if time.monotonic() >= deadline:
                    raise
                await asyncio.sleep(0.2)
        self.budget_bytes = budget_bytes
        key = _budget_key()
        if key is not None:
            value = str(budget_bytes).encode()
            internal_kv._internal_kv_put(key, value, overwrite=True, namespace=_SECRET_NS)
        return old

    def _persisted_budget(self) -> int | None:
        from ray.experimental import internal_kv

        key = _budget_key()
        value = key and internal_kv._internal_kv_get(key, namespace=_SECRET_NS)
        return int(value) if value else None

    async def stats(self) -> dict[str, int]:
        """Cache and transfer counters (``plane_fetches_<i>``: range FETCHes data plane i
        made for this relay)."""
        out = (await self._ready()).stats()
        out.update({f"plane_fetches_{i}": n for i, n in enumerate(self._plane_fetches)})
        return out

    async def security_id(self) -> str | None:
        """Which cluster secret this relay started with: a fingerprint of the GCS one, None
        (none: no tokens), ``"env"`` ($KVMOQ_CLUSTER_SECRET) or ``"explicit"`` (given)."""
        await self._ready()
        return self._security_id

    async def get_incarnation(self) -> str:
        """Random id of this relay process (changes when Ray restarts the actor)."""
        return self.incarnation

    async def address(self) -> NodeInfo:
        """Where this relay's MoQT server listens."""
        await self._ready()
        return self._info()

    async def beat(self, wait_s: float = 0.0) -> str:
        """The directory's watchdog: answers after ``wait_s`` (at most 60), so the one call it
        keeps pending fails as soon as this relay dies; starts a restarted relay."""
        await self._ready()
        await asyncio.sleep(_long_call_s(wait_s))
        return self.node_id

    async def shutdown(self) -> None:
        """Close the MoQT server, the peer sessions, the data planes and the relay."""
        if self._heartbeat is not None:
            self._heartbeat.cancel()
        for plane in self._planes:
            ray.kill(plane)
        if self._net is not None:
            await self._net.close()
        if self.relay is not None:
            await self.relay.close()


def default_data_planes() -> int:
    """K when unset: min(cores of this node, 8), and none below 4 cores, where each plane's
    process competes with the relay for the same cores (measured: no faster on 2 cores)."""
    cores = os.cpu_count() or 1
    return min(cores, 8) if cores >= 4 else 0


def _free_udp_port(host: str) -> int:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_DGRAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


@ray.remote(num_cpus=0, enable_task_events=False)  # type: ignore[call-overload]
class DataPlaneActor:
    """One data-plane process of a node's relay (see :mod:`.dataplane`): a QUIC endpoint that
    serves FETCH from the relay's object-store refs and pulls ranges for it. Created by the
    relay (it dies with it); restartable on the same port."""

    def __init__(
        self, *, relay: Any, node_id: str, host: str, port: int, network: dict[str, Any]
    ) -> None:
        from .dataplane import DataPlane

        self._relay = relay
        self._plane = DataPlane(node_id=node_id, host=host, port=port, **network)
        self._started: asyncio.Future[int] | None = None

    async def start(self) -> int:
        """Listen (idempotent); returns the bound UDP port."""
        if self._started is None:
            self._started = asyncio.get_running_loop().create_future()
            self._started.set_result(await self._plane.start(self._source))
        return await asyncio.shield(self._started)

    async def _source(
        self, ns: tuple[bytes, ...], track: bytes, first: int, last: int
    ) -> tuple[list[tuple[int, Awaitable[Group]]], bool]:
        items, ends = await self._relay.fetch_refs.remote(ns, track, first, last)
        return [(gid, _resolve_ref(ref)) for gid, ref in items], ends

    async def pull(
        self, host: str, port: int, ns: tuple[bytes, ...], track: bytes, first: int, last: int
    ) -> AsyncIterator[Group]:
        """Groups ``first..last`` from the data plane at ``host:port``, each yielded (into the
        object store, owned by the caller) as soon as it is complete."""
        await self.start()
        peer = NodeInfo(node_id="peer", host=host, port=port)
        async for group in self._plane.pull(peer, ns, track, first, last):
            yield group

    async def ping(self) -> int:
        """Liveness probe; starts a restarted plane."""
        return await self.start()


async def _resolve_ref(ref: Any) -> Group:
    group: Group = await ref
    return group


def _regroup(group: Group, group_id: int) -> Group:
    """``group``'s objects under another group id (no copy of the buffer)."""
    return Group(group_id, group.buffer, group.table, group.extensions)


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
    detached: bool = True,
    data_planes: int | None = None,
) -> dict[str, Any]:
    """Start (or find) one pinned relay per node and the directory; returns node id → handle.

    ``security`` is a :class:`~.security.ClusterSecurity` (cluster CA + token keys). None: each
    relay derives it from ``$KVMOQ_CLUSTER_SECRET`` (hex, same on every node; pass it in the
    job's ``runtime_env``) if set, else its sessions use self-signed certificates, no tokens.
    ``network`` holds extra :class:`~.downstream.RelayNetwork` options (``idle_timeout_s``,
    ``transport_options``). ``data_planes``: K data-plane processes per relay (None: min(the
    node's cores, 8), none below 4 cores; 0: the relay moves bytes itself). Relays and directory are detached and
    restartable (they survive
    the caller; see the module docstring) unless ``detached=False``. Idempotent: existing
    named relays are returned with their options unchanged except the budget, which every
    call sets (evicting to fit; a restarted relay keeps it). Synchronous
    driver-side helper (the serving app's builder or a test).
    """
    network = {**(network or {}), **({"security": security} if security is not None else {})}
    directory = get_directory(namespace=namespace, detached=detached)
    if node_ids is None:
        node_ids = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
    opts: dict[str, Any] = {"max_restarts": -1}
    if detached:
        opts["lifetime"] = "detached"
    handles = {}
    for node_id in node_ids:
        handles[node_id] = RelayActor.options(  # type: ignore[attr-defined]
            name=relay_name(node_id, name_prefix),
            namespace=namespace,
            get_if_exists=True,
            num_cpus=0,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
            **opts,
        ).remote(
            port=port,
            budget_bytes=budget_bytes,
            network=network,
            directory=directory,
            data_planes=data_planes,
        )
    # starts each relay; one found running keeps its other options but takes this budget
    olds = ray.get([h.set_budget.remote(budget_bytes) for h in handles.values()], timeout=timeout_s)
    for node_id, old in zip(handles, olds, strict=True):
        if old != budget_bytes:
            log.info("relay on node %s: cache budget %d -> %d MiB", node_id[:8], old >> 20,
                     budget_bytes >> 20)  # fmt: skip
    if security is None and not os.environ.get("KVMOQ_CLUSTER_SECRET"):
        _restart_stale_security(handles, timeout_s)
    return handles


def _restart_stale_security(handles: dict[str, Any], timeout_s: float) -> None:
    """Restart every relay that runs with another cluster secret than the GCS holds now.

    A relay reads the secret once, when it starts. One started before the secret existed (or
    before ``kvmoq cluster-secret rotate``) would send no token, or a stale one, to relays
    started after it, and they would refuse its pulls. A restarted relay reads the current
    secret; what it cached is lost (the directory forgets it), never used unauthenticated."""
    want = _secret_id(read_cluster_secret())
    ids = ray.get([h.security_id.remote() for h in handles.values()], timeout=timeout_s)
    stale = [n for n, got in zip(handles, ids, strict=True) if got not in (want, "env", "explicit")]
    for node_id in stale:
        log.warning(
            "relay on node %s runs with another cluster secret than the GCS holds: restarting it",
            node_id[:8],
        )
        old = ray.get(handles[node_id].get_incarnation.remote(), timeout=timeout_s)
        ray.kill(handles[node_id], no_restart=False)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if ray.get(handles[node_id].get_incarnation.remote(), timeout=timeout_s) != old:
                    break
            except (ray.exceptions.ActorUnavailableError, ray.exceptions.GetTimeoutError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"relay on node {node_id[:8]} did not restart in {timeout_s} s")
            time.sleep(0.2)
        ray.get(handles[node_id].security_id.remote(), timeout=timeout_s)  # started again
