"""``kvmoq bench relay``: cross-node pulls over MoQT side by side with ``ray.get`` of the same
bytes, per datagram size × data planes (K) × QUIC library; fan-out; same-node zero-copy reads.

One run on a private two-node Ray cluster on this machine (head + a node on 127.0.0.2, the
layout of the test fixture), or on an existing cluster with ``--address``. Each *row* starts a
fresh relay pair with its transport settings, then repeats ``--repeat`` times:

* **pull**: a track of ``--mb`` MiB (groups of ``--group-mb``, each of ``--objects`` equal
  objects: one per token, as a KV track has them) is published on node A; a
  consumer on node B asks B's relay for every group at once (``get_group_refs``: pipelined
  range FETCHes striped over K data planes) and awaits the refs. Timed at the consumer.
  ``--reader prefetch`` reads the groups one by one after one ``prefetch`` call, as the KV
  connector loads a prefix; ``--reader sequential`` one by one without it (each read its own
  pull: the connector before the prefetch).
* **ray.get**: the same consumer awaits A's own refs to the same groups (``ray.get`` of the
  list: the object store's cross-node path, all transfers at once), in the same run.

Rows report medians of the runs (MB/s of each, and the median of the per-run ratios); a run
that fails is counted and reported with its error, never dropped (the command then exits 1).
Once per bench: **fan-out** (one track, ``--subscribers`` readers on B: upstream bytes / track
bytes must be 1.0) and **zero-copy** (median latency of a same-node read of a sealed group).

Progress goes to stderr; ``--json`` prints one object: ``rows`` (each with ``datagram``,
``planes``, ``backend``, ``reader``, ``pull_mb_s``, ``ray_get_mb_s``, ``pull_vs_ray_get``,
``runs``, ``failures``, ``errors``), ``failures`` (total), and the fan-out / zero-copy figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from typing import Any

import click

from .cluster import stdout_to_stderr, two_node_cluster

NS = ["moq://kvcache.moq.arpa/v1/", "bench", "relay"]
READERS = ("batch", "prefetch", "sequential")


def _log(msg: str) -> None:
    click.echo(f"[bench relay] {msg}", err=True)


def _actor_classes() -> tuple[Any, Any]:
    import ray

    @ray.remote(num_cpus=0)
    class Publisher:
        """Publishes synthetic groups on one node (stands in for a prefill replica)."""

        def __init__(self, group_bytes: int, objects: int) -> None:
            from ray_kvmoq.moqt.api import Group

            block = os.urandom(1 << 20)
            data = memoryview((block * (group_bytes // len(block) + 1))[:group_bytes])
            # one object per token, as a KV track has them: `objects` equal slices of the group
            step = -(-group_bytes // objects)
            self.payloads = [data[i : i + step] for i in range(0, group_bytes, step)]
            self.group_bytes = group_bytes
            self.group_cls = Group

        async def publish(self, relay: Any, track: str, groups: int, end: bool = True) -> int:
            for g in range(groups):
                group = self.group_cls.from_payloads(g, self.payloads)
                last = end and g == groups - 1
                await relay.publish_group.remote(NS, track, g, group, end_of_track=last)
            await relay.flush_directory.remote()
            return groups * self.group_bytes

    @ray.remote(num_cpus=0)
    class Consumer:
        """A reader on one node (stands in for a decode replica)."""

        async def pull(
            self, relay: Any, track: str, groups: int, reader: str = "batch"
        ) -> dict[str, float]:
            ids = list(range(groups))
            t0 = time.perf_counter()
            if reader == "batch":  # one call for every group
                refs = await relay.get_group_refs.remote(NS, track, ids, timeout_s=600.0)
                got = await asyncio.gather(*refs)
            else:  # group by group, as the connector reads a prefix
                if reader == "prefetch":
                    prefetch = relay.prefetch.remote(NS, track, ids, timeout_s=600.0)
                got = []
                for g in ids:
                    got.append(await (await relay.get_group_ref.remote(NS, track, g)))
                if reader == "prefetch":
                    await prefetch
            dt = time.perf_counter() - t0
            return {"bytes": float(sum(g.nbytes for g in got)), "seconds": dt}

        async def ray_get(self, relay: Any, track: str, groups: int) -> dict[str, float]:
            refs = await relay.get_group_refs.remote(NS, track, list(range(groups)))
            t0 = time.perf_counter()
            got = await asyncio.gather(*refs)
            dt = time.perf_counter() - t0
            return {"bytes": float(sum(g.nbytes for g in got)), "seconds": dt}

        async def follow(self, relay: Any, track: str) -> int:
            n = 0
            async for ref in relay.subscribe_groups.remote(NS, track, wait_s=10.0):
                item = await ref
                if "ref" in item:
                    n += int((await item["ref"]).nbytes)
            return n

        async def read_latency(self, relay: Any, track: str, reps: int) -> dict[str, Any]:
            times, copied = [], True
            for _ in range(reps):
                t0 = time.perf_counter()
                group = await (await relay.get_group_ref.remote(NS, track, 0))
                times.append(time.perf_counter() - t0)
                copied = not group.buffer.readonly
            return {"median_ms": statistics.median(times) * 1e3, "copied": copied}

    return Publisher, Consumer


def _pinned(cls: Any, node_id: str, **kw: Any) -> Any:
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    return cls.options(
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    ).remote(**kw)


@dataclass(frozen=True)
class Row:
    """One configuration of the relay pair."""

    datagram: int
    planes: int
    backend: str
    pacing: bool = True
    reader: str = "batch"
    """How the consumer reads the track: ``batch`` (every group in one call), ``prefetch``
    (group by group after one prefetch call: the connector's way) or ``sequential`` (group by
    group, each its own pull)."""

    @property
    def name(self) -> str:
        return f"{self.backend} {self.datagram} B K={self.planes} {self.reader}"


@dataclass
class _Bench:
    node_a: str
    node_b: str
    mb: int
    group_mb: int
    publisher: Any = None
    consumer: Any = None
    actors: list[Any] = field(default_factory=list)
    security: Any = None

    @property
    def groups(self) -> int:
        return max(1, self.mb // self.group_mb)

    def relays(self, row: Row) -> tuple[Any, Any]:
        import ray

        from ray_kvmoq.relay.actor import RelayActor, get_directory

        net = {
            "security": self.security,
            "transport_options": {
                "max_datagram_size": row.datagram,
                "pacing": row.pacing,
                "backend": row.backend,
            },
        }
        budget = (2 * self.mb + 2 * self.group_mb) << 20
        pair = [
            _pinned(
                RelayActor,
                n,
                budget_bytes=budget,
                directory=get_directory(detached=False),
                network=net,
                data_planes=row.planes,
                relay_id=f"{n}/{row.name}",
            )
            for n in (self.node_a, self.node_b)
        ]
        ray.get([r.start.remote() for r in pair], timeout=120)
        return pair[0], pair[1]


def _one_run(b: _Bench, rel_a: Any, rel_b: Any, track: str, reader: str) -> dict[str, Any]:
    import ray

    total = ray.get(b.publisher.publish.remote(rel_a, track, b.groups), timeout=300)
    pull = ray.get(b.consumer.pull.remote(rel_b, track, b.groups, reader), timeout=600)
    base = ray.get(b.consumer.ray_get.remote(rel_a, track, b.groups), timeout=600)
    if pull["bytes"] != total or base["bytes"] != total:
        raise RuntimeError(f"moved {pull['bytes']:.0f} / {base['bytes']:.0f} of {total} bytes")
    pull_mb_s = total / pull["seconds"] / 1e6
    ray_mb_s = total / base["seconds"] / 1e6
    return {"pull_mb_s": pull_mb_s, "ray_get_mb_s": ray_mb_s, "ratio": pull_mb_s / ray_mb_s}


def _row(b: _Bench, row: Row, repeat: int) -> dict[str, Any]:
    import ray

    _log(f"row {row.name}: {repeat} × {b.groups} groups of {b.group_mb} MiB")
    runs: list[dict[str, Any]] = []
    errors: list[str] = []
    rel_a = rel_b = None
    try:
        rel_a, rel_b = b.relays(row)
        for r in range(repeat):
            try:
                track = f"pull-{row.backend}-{row.datagram}-{row.planes}-{row.reader}-{r}"
                res = _one_run(b, rel_a, rel_b, track, row.reader)
                runs.append(res)
                _log(
                    f"  run {r}: pull {res['pull_mb_s']:.1f} MB/s, ray.get {res['ray_get_mb_s']:.1f}"
                )
            except Exception as exc:  # a failed run is reported, never dropped
                errors.append(f"run {r}: {exc!r}"[:500])
                _log(f"  run {r}: FAILED {exc!r}"[:300])
        stats = ray.get(rel_b.stats.remote(), timeout=60)
    except Exception as exc:
        errors.append(f"setup: {exc!r}"[:500])
        stats = {}
    finally:
        for h in (rel_a, rel_b):
            if h is not None:
                ray.kill(h)
    med = lambda k: statistics.median(x[k] for x in runs) if runs else 0.0  # noqa: E731
    return {
        "datagram": row.datagram,
        "planes": row.planes,
        "backend": row.backend,
        "pacing": row.pacing,
        "reader": row.reader,
        "pull_mb_s": round(med("pull_mb_s"), 1),
        "ray_get_mb_s": round(med("ray_get_mb_s"), 1),
        "pull_vs_ray_get": round(med("ratio"), 3),
        "runs": [{k: round(v, 2) for k, v in x.items()} for x in runs],
        "failures": len(errors) + max(0, repeat - len(runs) - len(errors)),
        "errors": errors,
        "max_groups_in_flight": stats.get("max_groups_in_flight", 0),
    }


def _fanout(b: _Bench, row: Row, subscribers: int, groups: int) -> dict[str, Any]:
    import ray

    _log(f"fan-out: 1 track × {groups} groups, {subscribers} subscribers on B ({row.name})")
    rel_a, rel_b = b.relays(row)
    subs: list[Any] = []
    try:
        ray.get(b.publisher.publish.remote(rel_a, "fanout", 1, False), timeout=120)
        _, Consumer = _actor_classes()
        subs = [_pinned(Consumer, b.node_b) for _ in range(subscribers)]
        futs = [s.follow.remote(rel_b, "fanout") for s in subs]
        time.sleep(1.0)
        ray.get(b.publisher.publish.remote(rel_a, "fanout", groups), timeout=300)
        delivered = sum(ray.get(futs, timeout=600))
        upstream = ray.get(rel_b.stats.remote(), timeout=60)["upstream_bytes"]
        ray.get(b.publisher.publish.remote(rel_a, "local", 1), timeout=120)
        reader = _pinned(Consumer, b.node_a)
        subs.append(reader)
        lat = ray.get(reader.read_latency.remote(rel_a, "local", 50), timeout=120)
    finally:
        for h in (*subs, rel_a, rel_b):
            ray.kill(h)
    track_bytes = groups * (b.group_mb << 20)
    return {
        "subscribers": subscribers,
        "track_bytes": track_bytes,
        "fanout_upstream_bytes": upstream,
        "fanout_delivered_bytes": delivered,
        "fanout_upstream_ratio": upstream / track_bytes,
        "fanout_delivered_ratio": delivered / track_bytes,
        "zero_copy_read_ms": lat["median_ms"],
        "zero_copy": not lat["copied"],
    }


def _kill_all(actors: list[Any]) -> None:
    import ray

    for a in actors:
        ray.kill(a)


def run_bench(
    *,
    rows: list[Row],
    mb: int,
    group_mb: int,
    repeat: int,
    subscribers: int,
    address: str | None,
    objects: int = 128,
) -> dict[str, Any]:
    """Run every row (and the fan-out / zero-copy checks once); returns the JSON object."""
    import ray

    from ray_kvmoq.relay.security import ClusterSecurity

    store = max(512 << 20, (5 * mb + 8 * group_mb) << 20)
    with contextlib.ExitStack() as stack:
        stack.enter_context(stdout_to_stderr())
        if not ray.is_initialized():  # else: a test already connected to its cluster
            if address is None:
                stack.enter_context(two_node_cluster(store_bytes=store, num_cpus=2))
            else:
                ray.init(address=address, include_dashboard=False, log_to_driver=False)
                stack.callback(ray.shutdown)
        alive = [n["NodeID"] for n in ray.nodes() if n["Alive"]]
        if len(alive) < 2:
            raise click.ClickException("the bench needs a cluster with at least two nodes")
        b = _Bench(alive[0], alive[1], mb, group_mb, security=ClusterSecurity.generate())
        stack.callback(_kill_all, b.actors)
        Publisher, Consumer = _actor_classes()
        b.publisher = _pinned(Publisher, b.node_a, group_bytes=group_mb << 20, objects=objects)
        b.consumer = _pinned(Consumer, b.node_b)
        b.actors += [b.publisher, b.consumer]
        results = [_row(b, row, repeat) for row in rows]
        extra = _fanout(b, rows[0], subscribers, min(8, b.groups))
    return {
        "mb": mb,
        "group_mb": group_mb,
        "objects_per_group": objects,
        "repeat": repeat,
        "rows": results,
        "failures": sum(r["failures"] for r in results),
        **extra,
    }


def _ints(value: str) -> list[int]:
    return [int(v) for v in value.split(",") if v]


@click.command()
@click.option("--mb", default=256, show_default=True, type=click.IntRange(1), help="MiB per run.")
@click.option("--group-mb", default=4, show_default=True, type=click.IntRange(1, 64))
@click.option(
    "--objects",
    default=128,
    show_default=True,
    type=click.IntRange(1, 4096),
    help="Objects per group (a KV track has one per token, 128 per group).",
)
@click.option(
    "--repeat", default=5, show_default=True, type=click.IntRange(1), help="Runs per row."
)
@click.option(
    "--datagram",
    "datagrams",
    default="1452,9000,60000",
    show_default=True,
    help="QUIC datagram sizes (comma-separated; loopback allows up to 65527).",
)
@click.option(
    "--planes", default="1,2", show_default=True, help="Data planes per relay (K), comma-separated."
)
@click.option(
    "--backend",
    "backends",
    default="aioquic,qh3",
    show_default=True,
    help="QUIC libraries, comma-separated.",
)
@click.option("--pacing/--no-pacing", default=True, show_default=True, help="QUIC packet pacing.")
@click.option(
    "--reader",
    "readers",
    default="batch",
    show_default=True,
    help="How node B's reader asks for the groups, comma-separated: batch (one call for all),"
    " prefetch (one prefetch call, then group by group: how the KV connector loads a prefix),"
    " sequential (group by group, each pulled on its own).",
)
@click.option("--subscribers", default=8, show_default=True, type=click.IntRange(1, 64))
@click.option("--address", default=None, help="Use this Ray cluster (two nodes or more).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
def relay(
    mb: int,
    group_mb: int,
    objects: int,
    repeat: int,
    datagrams: str,
    planes: str,
    backends: str,
    pacing: bool,
    readers: str,
    subscribers: int,
    address: str | None,
    as_json: bool,
) -> None:
    """Cross-node MoQT pulls vs ray.get per datagram size, K and QUIC library; fan-out."""
    # libraries alternate row by row, so load that comes and goes hits both alike
    modes = readers.split(",")
    unknown = sorted(set(modes) - set(READERS))
    if unknown:
        raise click.BadParameter(
            f"{', '.join(unknown)}: not one of {', '.join(READERS)}", param_hint="--reader"
        )
    rows = [
        Row(datagram=d, planes=k, backend=be, pacing=pacing, reader=rd)
        for d, k, be, rd in itertools.product(
            _ints(datagrams), _ints(planes), backends.split(","), modes
        )
    ]
    res = run_bench(
        rows=rows,
        mb=mb,
        group_mb=group_mb,
        repeat=repeat,
        subscribers=subscribers,
        address=address,
        objects=objects,
    )
    if as_json:
        click.echo(json.dumps(res))
    else:
        _print(res)
    if res["failures"]:
        sys.exit(1)


def _print(res: dict[str, Any]) -> None:
    click.echo(
        f"{'backend':<8} {'datagram':>8} {'K':>2} {'reader':>10} {'pull MB/s':>10}"
        f" {'ray.get MB/s':>13} {'pull/ray.get':>12} {'fail':>4}"
    )
    for r in res["rows"]:
        click.echo(
            f"{r['backend']:<8} {r['datagram']:>8} {r['planes']:>2} {r['reader']:>10}"
            f" {r['pull_mb_s']:>10.1f}"
            f" {r['ray_get_mb_s']:>13.1f} {r['pull_vs_ray_get']:>12.3f} {r['failures']:>4}"
        )
    click.echo(
        f"\nfan-out ({res['subscribers']} subscribers): upstream/track "
        f"{res['fanout_upstream_ratio']:.3f}, delivered/track {res['fanout_delivered_ratio']:.1f}"
        f"; same-node read {res['zero_copy_read_ms']:.2f} ms (zero-copy: {res['zero_copy']})"
    )
    for r in res["rows"]:
        for e in r["errors"]:
            click.echo(f"FAILED {r['backend']} {r['datagram']} K={r['planes']}: {e}")
