"""``kvmoq bench relay``: fan-out, cross-node pull over MoQT vs ``ray.get``, zero-copy reads.

One run on a private multi-node Ray cluster on this machine (head + a node on 127.0.0.2, the
layout of the test fixture), or on an existing cluster with ``--address``:

* **fan-out**: a track published on node A, ``N`` subscribers on node B. Row: upstream bytes
  that crossed into B's relay / one track's bytes (1.0 = one transfer however many readers),
  and delivered bytes / track bytes (= N).
* **pull**: B's relay pulls every group of a fresh track from A over MoQT (FETCH), timed from
  the consumer on B; then a consumer on B ``ray.get``s the same bytes (A's object refs) — the
  object store's own cross-node path. MB/s of each and their ratio.
* **zero-copy**: a consumer on A reads a sealed 4 MiB group through the relay's ref; median
  latency of ``get_group_ref`` + ``await ref`` (no copy: the array is a read-only view).

Progress goes to stderr; ``--json`` prints one object with ``fanout_upstream_ratio``,
``pull_mb_s``, ``ray_get_mb_s`` and the rest of the table.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any

import click

NS = ["moq://kvcache.moq.arpa/v1/", "bench", "relay"]


def _log(msg: str) -> None:
    click.echo(f"[bench relay] {msg}", err=True)


def _consumer_cls() -> Any:
    import ray

    @ray.remote(num_cpus=0)
    class Consumer:
        """A reader on one node (stands in for a decode replica)."""

        async def pull(self, relay: Any, namespace: list[str], track: str, groups: int) -> float:
            t0 = time.perf_counter()
            n = 0
            for g in range(groups):
                ref = await relay.get_group_ref.remote(namespace, track, g)
                packed = await ref
                n += int(packed.payload.nbytes)
            return n / (time.perf_counter() - t0) / 1e6

        async def ray_get(self, refs: list[Any]) -> float:
            t0 = time.perf_counter()
            n = 0
            for ref in refs:
                packed = await ref
                n += int(packed.payload.nbytes)
            return n / (time.perf_counter() - t0) / 1e6

        async def follow(self, relay: Any, namespace: list[str], track: str) -> int:
            n = 0
            async for ref in relay.subscribe_groups.remote(namespace, track):
                item = await ref
                if "ref" in item:
                    packed = await item["ref"]
                    n += int(packed.payload.nbytes)
            return n

        async def read_latency(
            self, relay: Any, namespace: list[str], track: str, reps: int
        ) -> dict[str, Any]:
            times = []
            writeable = True
            for _ in range(reps):
                t0 = time.perf_counter()
                ref = await relay.get_group_ref.remote(namespace, track, 0)
                packed = await ref
                times.append(time.perf_counter() - t0)
                writeable = not packed.payload.readonly
            return {"median_ms": statistics.median(times) * 1e3, "copied": writeable}

    return Consumer


def _pinned(cls: Any, node_id: str, **kw: Any) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return cls.options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    ).remote(**kw)


def _start_cluster(groups: int, group_mb: int) -> Any:
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.makedirs("/tmp/ray", exist_ok=True)  # Cluster.add_node writes its address file there
    store = max(256 << 20, 3 * groups * group_mb << 20)
    _log("starting a 2-node Ray cluster (head + 127.0.0.2)")
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(
            num_cpus=2,
            include_dashboard=False,
            object_store_memory=store,
            temp_dir=tempfile.mkdtemp(prefix="rkb", dir="/tmp"),
        ),
    )
    cluster.add_node(num_cpus=2, node_ip_address="127.0.0.2", object_store_memory=store)
    cluster.wait_for_nodes()
    return cluster


@dataclass
class _Ctx:
    """What every measurement needs: two pinned relays, a consumer class, sizes."""

    node_a: str
    node_b: str
    rel_a: Any
    rel_b: Any
    consumer: Any
    groups: int
    size: int
    actors: list[Any] = field(default_factory=list)

    def pin(self, node: str) -> Any:
        actor = _pinned(self.consumer, node)
        self.actors.append(actor)
        return actor

    def publish(self, track: str, payloads: list[bytes], *, end: bool = True) -> None:
        import ray

        for g, p in enumerate(payloads):
            last = end and g == len(payloads) - 1
            ray.get(
                self.rel_a.publish_group.remote(NS, track, g, [p], end_of_track=last), timeout=60
            )
        ray.get(self.rel_a.flush_directory.remote(), timeout=60)


def _setup(groups: int, group_mb: int, datagram: int, pacing: bool) -> _Ctx:
    import ray

    from ray_kvmoq.relay.actor import RelayActor, get_directory
    from ray_kvmoq.relay.security import ClusterSecurity

    alive = [n for n in ray.nodes() if n["Alive"]]
    if len(alive) < 2:
        raise click.ClickException("the bench needs a cluster with at least two nodes")
    node_a, node_b = alive[0]["NodeID"], alive[1]["NodeID"]
    net = {
        "security": ClusterSecurity.generate(),
        "transport_options": {"max_datagram_size": datagram, "pacing": pacing},
    }
    budget = 4 * groups * group_mb << 20
    relays = [
        _pinned(RelayActor, n, budget_bytes=budget, directory=get_directory(), network=net)
        for n in (node_a, node_b)
    ]
    ctx = _Ctx(node_a, node_b, relays[0], relays[1], _consumer_cls(), groups, group_mb << 20)
    ctx.actors += relays
    ray.get([r.start.remote() for r in relays], timeout=60)
    return ctx


def _fanout(ctx: _Ctx, subscribers: int) -> dict[str, Any]:
    import ray

    _log(
        f"fan-out: 1 track × {ctx.groups} groups of {ctx.size >> 20} MiB, {subscribers} subscribers"
    )
    payloads = [bytes([g + 1]) * ctx.size for g in range(ctx.groups)]
    ctx.publish("fanout", payloads[:1], end=ctx.groups == 1)
    subs = [ctx.pin(ctx.node_b) for _ in range(subscribers)]
    futs = [s.follow.remote(ctx.rel_b, NS, "fanout") for s in subs]
    for g in range(1, ctx.groups):
        last = g == ctx.groups - 1
        ray.get(
            ctx.rel_a.publish_group.remote(NS, "fanout", g, [payloads[g]], end_of_track=last),
            timeout=60,
        )
    delivered = sum(ray.get(futs, timeout=300))
    upstream = ray.get(ctx.rel_b.stats.remote(), timeout=30)["upstream_bytes"]
    track_bytes = ctx.groups * ctx.size
    return {
        "subscribers": subscribers,
        "track_bytes": track_bytes,
        "fanout_upstream_bytes": upstream,
        "fanout_delivered_bytes": delivered,
        "fanout_upstream_ratio": upstream / track_bytes,
        "fanout_delivered_ratio": delivered / track_bytes,
    }


def _pull(ctx: _Ctx) -> dict[str, Any]:
    import ray

    _log("pull: B's relay fetches a fresh track from A over MoQT")
    payloads = [bytes([g % 251]) * ctx.size for g in range(ctx.groups)]
    ctx.publish("pull", payloads)
    reader = ctx.pin(ctx.node_b)
    pull = ray.get(reader.pull.remote(ctx.rel_b, NS, "pull", ctx.groups), timeout=300)
    _log("baseline: ray.get of the same bytes across nodes")
    ctx.publish("rayget", payloads, end=False)
    refs = [
        ray.get(ctx.rel_a.get_group_ref.remote(NS, "rayget", g), timeout=60)
        for g in range(ctx.groups)
    ]
    ray_get = ray.get(reader.ray_get.remote(refs), timeout=300)
    return {
        "pull_mb_s": pull,
        "ray_get_mb_s": ray_get,
        "pull_vs_ray_get": pull / ray_get if ray_get else 0.0,
    }


def _zero_copy(ctx: _Ctx) -> dict[str, Any]:
    import ray

    _log("zero-copy: same-node read of a sealed 4 MiB group")
    ray.get(ctx.rel_a.publish_group.remote(NS, "local", 0, [b"\x07" * (4 << 20)]), timeout=60)
    reader = ctx.pin(ctx.node_a)
    lat = ray.get(reader.read_latency.remote(ctx.rel_a, NS, "local", 50), timeout=120)
    return {"zero_copy_read_ms": lat["median_ms"], "zero_copy": not lat["copied"]}


def _run(
    subscribers: int,
    group_mb: int,
    groups: int,
    address: str | None,
    datagram: int,
    pacing: bool = True,
) -> dict[str, Any]:
    import ray

    cluster = _start_cluster(groups, group_mb) if address is None else None
    owns_ray = not ray.is_initialized()  # a test may already be connected to its cluster
    if owns_ray:
        ray.init(
            address=cluster.address if cluster is not None else address,
            include_dashboard=False,
            log_to_driver=False,
        )
    ctx: _Ctx | None = None
    try:
        ctx = _setup(groups, group_mb, datagram, pacing)
        return {**_fanout(ctx, subscribers), **_pull(ctx), **_zero_copy(ctx)}
    finally:
        for a in ctx.actors if ctx is not None else []:
            ray.kill(a)
        if owns_ray:
            ray.shutdown()
        if cluster is not None:
            cluster.shutdown()


@click.command()
@click.option(
    "--subscribers",
    default=8,
    show_default=True,
    type=click.IntRange(1, 64),
    help="Subscribers on node B for the fan-out row.",
)
@click.option(
    "--group-mb", default=4, show_default=True, type=click.IntRange(1, 64), help="MiB per group."
)
@click.option(
    "--groups", default=8, show_default=True, type=click.IntRange(1, 256), help="Groups per track."
)
@click.option(
    "--address",
    default=None,
    help="Use this Ray cluster (needs two nodes) instead of starting one.",
)
@click.option(
    "--datagram",
    default=1452,
    show_default=True,
    type=click.IntRange(1200, 65527),
    help="QUIC datagram size between relays (loopback allows up to 65527).",
)
@click.option(
    "--pacing/--no-pacing",
    default=True,
    show_default=True,
    help="QUIC packet pacing between relays (the relays' default is on).",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
def relay(
    subscribers: int,
    group_mb: int,
    groups: int,
    address: str | None,
    datagram: int,
    pacing: bool,
    as_json: bool,
) -> None:
    """Relay fan-out, cross-node pull over MoQT vs ray.get, same-node zero-copy reads."""
    res = _run(subscribers, group_mb, groups, address, datagram, pacing)
    res["datagram"] = datagram
    res["pacing"] = pacing
    if as_json:
        click.echo(json.dumps(res))
        return
    rows = [
        ("fan-out upstream / track bytes", f"{res['fanout_upstream_ratio']:.3f}"),
        ("fan-out delivered / track bytes", f"{res['fanout_delivered_ratio']:.1f}"),
        ("cross-node pull over MoQT (MB/s)", f"{res['pull_mb_s']:.1f}"),
        ("cross-node ray.get (MB/s)", f"{res['ray_get_mb_s']:.1f}"),
        ("MoQT pull / ray.get", f"{res['pull_vs_ray_get']:.2f}"),
        ("same-node read via relay (ms, median)", f"{res['zero_copy_read_ms']:.3f}"),
        ("zero-copy (read-only shared view)", str(res["zero_copy"])),
    ]
    w = max(len(k) for k, _ in rows)
    for k, v in rows:
        sys.stdout.write(f"{k:<{w}}  {v}\n")
