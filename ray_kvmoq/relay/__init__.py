"""ray_kvmoq.relay: a payload-agnostic caching MoQT relay, one per Ray node.

Modules (imports: ``ray_kvmoq.moqt`` only, never ``kvcache``; ``ray`` only in ``actor.py``):

    cache.py      sans-I/O object cache: (namespace, track, group, object) → opaque object,
                  one byte budget, LRU of whole groups, latest group kept, merged in-flight pulls
    packed.py     a sealed group as one numpy buffer + offsets table (object-store form)
    directory.py  sans-I/O directory: node → track groups, chunk hash → locations
    auth.py       HMAC-signed, expiring, namespace-scoped AUTHORIZATION_TOKENs
    events.py     track events, Upstream / DirectoryClient protocols, RelayError
    relay.py      the relay core (asyncio, transport-agnostic): routing, fan-out, live tracks
    peers.py      MoQT client side: cluster CA + tokens, pooled sessions to peer relays
    network.py    MoQT server side: downstream sessions, namespace announcements
    actor.py      Ray shell: ``RelayActor`` per node, ``kvmoq_directory`` actor, zero-copy store

In-node API (stable; for Serve replicas and other actors on the same node). Start the relays
once from the driver (the serving app's builder)::

    from ray_kvmoq.relay.actor import start_relays, local_relay
    from ray_kvmoq.relay.peers import ClusterSecurity
    relays = start_relays(port=0, budget_bytes=256 << 20,  # node id -> RelayActor handle
                          security=ClusterSecurity.generate())  # cluster CA + token keys
    relay = local_relay()                                   # in a replica: this node's relay

``namespace`` is a tuple/list of str|bytes fields (or a "/"-separated str), ``track`` str|bytes.
Every method is awaited from async code (``await relay.m.remote(...)``):

* ``publish_group(namespace, track, group_id, objects, *, end_of_track=False,
  chunk_hash=None) -> None`` — ``objects`` are payload ``bytes`` (object ids 0..n-1) or
  :class:`~ray_kvmoq.relay.cache.CachedObject` s; ``chunk_hash`` labels the group in the directory.
* ``end_track(namespace, track, last_group) -> None``.
* ``lookup(namespace, track) -> {"groups", "sealed", "largest", "end_of_track", "live"}``.
* ``get_group_ref(namespace, track, group_id, *, wait_s=0.0, timeout_s=30.0) ->
  ObjectRef[PackedGroup]`` — from the local cache, or pulled once from the relay that has it
  (MoQT FETCH); ``await`` the ref (zero-copy on the same node) and call
  :func:`~ray_kvmoq.relay.packed.unpack_group`. ``wait_s``: how long a not-yet-published track
  may take to appear; ``timeout_s``: RelayError 0x2 after that (fall back to recomputing).
* ``subscribe_groups(namespace, track, start_group=0, *, wait_s=0.0)`` — a streaming generator:
  ``async for ref in relay.subscribe_groups.remote(...)``; each item is
  ``{"group_id": g, "ref": ObjectRef[PackedGroup]}`` as groups complete (cached ones first,
  live ones as they are published anywhere in the cluster), then ``{"end": True}``.
* ``lookup_hash(chunk_hash) -> list[Location]``, ``longest_prefix(chunk_hashes) ->
  list[list[Location]]`` — directory queries (also on the ``kvmoq_directory`` actor itself,
  with ``nodes_for(namespace, track, group_id)`` and ``nodes()``).
* ``stats() -> dict[str, int]``, ``address() -> NodeInfo``, ``flush_directory()``,
  ``shutdown()``.

Errors: ``RelayError`` (``error_code`` = draft-14 request error, e.g. 0x4 TRACK_DOES_NOT_EXIST)
when no relay has a track or the upstream fails (a dead peer is noticed within the QUIC idle
timeout, 5 s by default). Groups of one track complete on separate QUIC streams, so a live
subscriber may see group k+1 before group k: use ``group_id``, not arrival order. The in-node
API is trusted (same-node actors); tenant tokens apply to MoQT sessions.

Outside Ray, ``kvmoq relay --listen HOST:PORT`` runs the same relay as a plain MoQT relay.

Transport between relays: QUIC with 1,452-byte datagrams and pacing on by default, which is
safe on any 1500-MTU network but slow (every packet costs the same Python work in aioquic, so
throughput scales with the datagram size). Clusters whose relays talk over jumbo frames should
use 9,000-byte datagrams, and may turn pacing off on a dedicated LAN (the congestion window
still bounds what is in flight)::

    start_relays(..., network={"transport_options": {"max_datagram_size": 9000,
                                                     "pacing": False}})
    kvmoq relay --datagram 9000 --no-pacing

``transport_options`` takes any :class:`~ray_kvmoq.moqt.aio.TransportConfig` field. A peer's
smaller ``max_udp_payload_size`` still bounds the size, but nothing discovers the path MTU: a
datagram larger than it is lost, so never set more than the network carries. Measure with
``kvmoq bench relay --datagram 9000 [--no-pacing]`` before keeping pacing off: on one 2-core
loopback host it was slower (ACKs, not the pacer's timer, clock the sender there).
"""

from .auth import TokenSigner, TokenVerifier
from .cache import CachedObject, RelayCache
from .directory import Directory, Location, NodeInfo
from .packed import PackedGroup, pack_group, unpack_group
from .relay import Relay, RelayError

__all__ = [
    "CachedObject",
    "Directory",
    "Location",
    "NodeInfo",
    "PackedGroup",
    "Relay",
    "RelayCache",
    "RelayError",
    "TokenSigner",
    "TokenVerifier",
    "pack_group",
    "unpack_group",
]
