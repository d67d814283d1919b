"""ray_kvmoq.relay: a payload-agnostic caching MoQT relay, one per Ray node.

Modules by role (imports: ``ray_kvmoq.moqt`` only, never ``kvcache``; ``ray`` only in
``actor.py``)::

    the core        relay.py      routing, live fan-out, pipelined pulls (asyncio, no I/O of its own)
                    cache.py      sans-I/O cache: (namespace, track, group, object) → object, one
                                  byte budget never exceeded, LRU of whole groups, merged pulls
                    directory.py  sans-I/O directory: node → track groups, chunk hash → locations
                    events.py     track events, Upstream / DirectoryClient protocols, RelayError
                    packed.py     the object-store form of a sealed group (= moqt.objects.Group)
    downstream      downstream.py the MoQT server subscribers and peer relays connect to
    upstream        upstream.py   pooled sessions to peer relays; Upstream over one session
    data plane      dataplane.py  K FETCH-serving/pulling endpoints per node, striped pulls
    security        security.py   cluster CA + leaf certificates; auth.py: HMAC tokens
    Ray actor shell actor.py      RelayActor per node, DataPlaneActor ×K, kvmoq_directory

(``peers.py`` re-exports the upstream and security names for existing callers.)

One object model on the whole KV path: :class:`~ray_kvmoq.moqt.api.MoqtObject`
(``CachedObject`` is the same class) and :class:`~ray_kvmoq.moqt.api.Group` (one payload
buffer + a row per object; ``PackedGroup`` is the same class). A chunk takes three shapes
between the engine's encode and its decode: the codec's buffer, a ``Group`` (object store,
cache, what MoQT writes from and reassembles into), and the wire.

In-node API (stable; for Serve replicas and other actors on the same node). Start the relays
once from the driver (the serving app's builder)::

    from ray_kvmoq.relay.actor import start_relays, local_relay
    from ray_kvmoq.relay.security import ClusterSecurity
    relays = start_relays(port=0, budget_bytes=256 << 20,  # node id -> RelayActor handle
                          security=ClusterSecurity.generate())  # cluster CA + token keys
    relay = local_relay()                                   # in a replica: this node's relay

Relays and the ``kvmoq_directory`` actor are detached and restartable: they outlive the
process that created them; a restarted relay starts empty and registers afresh; a restarted
directory is rebuilt from the relays within about a second (they re-announce what they hold).
``start_relays`` is idempotent; it sets the budget of relays it finds running (a redeployed
app with a new ``relay_budget_mb`` gets it). ``data_planes=K`` (default min(node cores, 8), none below 4
cores; 0 = none) runs K data-plane processes per relay, each with its own QUIC endpoint;
pulls stripe over them.

``namespace`` is a tuple/list of str|bytes fields (or a "/"-separated str), ``track`` str|bytes.
Every method is awaited from async code (``await relay.m.remote(...)``):

* ``publish_group(namespace, track, group_id, objects, *, end_of_track=False,
  chunk_hash=None) -> None`` — ``objects``: payload ``bytes`` (object ids 0..n-1),
  ``CachedObject`` s, or one :class:`~ray_kvmoq.moqt.api.Group` — one buffer + offsets
  table, e.g. ``Group.from_buffer(group_id, buf, lengths, extensions)`` (no copy) or
  ``Group.from_payloads(group_id, payloads, extensions)``; the relay stores a Group as it is.
  ``chunk_hash`` labels the group in the directory. RelayError 0x0 when the group cannot fit
  the budget (larger than it, or open groups fill it).
* ``end_track(namespace, track, last_group) -> None``.
* ``lookup(namespace, track) -> {"groups", "sealed", "largest", "end_of_track", "live"}``.
* ``get_group_ref(namespace, track, group_id, *, wait_s=0.0, timeout_s=30.0) ->
  ObjectRef[PackedGroup]`` — from the local cache, or pulled from the relay that has it
  (MoQT FETCH); ``await`` the ref (zero-copy on the same node) and call
  :func:`~ray_kvmoq.relay.packed.unpack_group`. ``wait_s``: how long a not-yet-published track
  may take to appear; ``timeout_s``: RelayError 0x2 after that (fall back to recomputing).
* ``get_group_refs(namespace, track, group_ids, *, wait_s=0.0, timeout_s=30.0) ->
  list[ObjectRef[PackedGroup]]`` — several groups in one call, in ``group_ids`` order; the
  missing ones are pulled in one pipelined batch (range FETCHes, many groups in flight,
  striped over the data planes). Prefer it to a loop of ``get_group_ref``.
* ``subscribe_groups(namespace, track, start_group=0, *, wait_s=0.0)`` — a streaming generator:
  ``async for ref in relay.subscribe_groups.remote(...)``; each item is
  ``{"group_id": g, "ref": ObjectRef[PackedGroup]}`` as groups complete (cached ones first,
  live ones as they are published anywhere in the cluster), then ``{"end": True}``.
* ``lookup_hash(chunk_hash) -> list[Location]``, ``longest_prefix(chunk_hashes) ->
  list[list[Location]]`` — directory queries (also on the ``kvmoq_directory`` actor itself,
  with ``nodes_for(namespace, track, group_id)``, ``groups_on(node_id, namespace, track)`` and
  ``nodes()``).
* ``stats() -> dict[str, int]`` (cache, budget, upstream/delivered bytes, live tracks, groups
  in flight, per-data-plane FETCHes), ``address() -> NodeInfo`` (with ``data_ports``),
  ``set_budget(budget_bytes) -> int`` (resize, evicting LRU groups to fit; kept across a
  restart; returns the old budget), ``flush_directory()``, ``reannounce() -> int``,
  ``get_incarnation() -> str``,
  ``shutdown()``.

Errors: ``RelayError`` (``error_code`` = draft-14 request error, e.g. 0x4 TRACK_DOES_NOT_EXIST)
when no relay has a track or the upstream fails (a dead peer is noticed within the QUIC idle
timeout, 5 s by default). Groups of one track complete on separate QUIC streams, so a live
subscriber may see group k+1 before group k: use ``group_id``, not arrival order. The in-node
API is trusted (same-node actors); tenant tokens apply to MoQT sessions.

Outside Ray, ``kvmoq relay --listen HOST:PORT`` runs the same relay as a plain MoQT relay.

Transport between relays: QUIC (qh3 when installed, else aioquic; ``transport_options=
{"backend": ...}`` picks one) with 1,452-byte datagrams and pacing on by default, which is
safe on any 1500-MTU network. Pacing bursts cover 2 ms so the millisecond timers of Ray's
event loop (uvloop) do not throttle it. Clusters whose relays talk over jumbo frames should use
9,000-byte datagrams::

    start_relays(..., network={"transport_options": {"max_datagram_size": 9000}})
    kvmoq relay --datagram 9000

``transport_options`` takes any :class:`~ray_kvmoq.moqt.api.TransportConfig` field. A peer's
smaller ``max_udp_payload_size`` still bounds the size, but nothing discovers the path MTU: a
datagram larger than it is lost, so never set more than the network carries. qh3 sends at most
16,384-byte datagrams (2-byte STREAM frame lengths). Measure with ``kvmoq bench relay``.
"""

from .auth import TokenSigner, TokenVerifier
from .cache import CachedObject, RelayCache
from .directory import Directory, Location, NodeInfo
from .packed import PackedGroup, pack_group, unpack_group
from .relay import Relay, RelayError
from .security import ClusterSecurity

__all__ = [
    "CachedObject",
    "ClusterSecurity",
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
