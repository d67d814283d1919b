"""``kvmoq bench impair``: relay-to-relay pulls over MoQT through a network you can break.

Three processes on the path of ``impair_netns.py`` (relay A in namespace ``a``, the impairment
proxy of ``impair_proxy.py`` in ``m``, relay B in ``b``; MTU 1500, 1452-byte QUIC datagrams):

* **publisher** (A): a :class:`~ray_kvmoq.relay.relay.Relay` behind a
  :class:`~ray_kvmoq.relay.downstream.RelayNetwork` with the cluster's TLS and tokens; it
  publishes ``groups`` groups of seeded random objects and prints their SHA-256;
* **proxy** (m): one per setting (loss %, added RTT, …), so its counters are that setting's;
* **puller** (B): a fresh Relay whose directory says A holds the track at the proxy's address;
  it pulls every group with :meth:`~ray_kvmoq.relay.relay.Relay.ensure_groups` (pipelined
  range FETCHes) under a timeout, and prints the SHA-256 of what its cache sealed, the time,
  and its relay and session counters.

B verifies A's certificate by the name ``localhost`` (in every leaf the cluster CA issues),
because it reaches A through the proxy's address, not A's own.

Each setting's row reports MB/s of payload (median of ``--repeat`` pulls), whether every pull
was bit-exact, and the proxy's drops. A pull that fails or times out is a row with its error,
never dropped; the command then exits 1. Without root (no ``ip netns``) ``--loopback`` runs
the same three processes on 127.0.0.1.

The roles are also the test tool: ``tests/reliability/test_impaired_path.py`` drives
:class:`PathRun` directly. ``python -m ray_kvmoq.bench.impair publisher|puller ...`` runs one
role (JSON lines on stdout).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import hashlib
import json
import os
import random
import secrets
import select
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import IO, Any

import click

from .impair_netns import NetPath, loopback_path, netns_path, netns_unavailable, remove_stale
from .impair_proxy import Impairment

NS = (b"moq://kvcache.moq.arpa/v1/", b"bench", b"impair")
TRACK = b"FP16"
_MODULE = "ray_kvmoq.bench.impair"
DATAGRAM = 1452
"""QUIC datagram size: 1452 + 28 bytes of IPv4/UDP headers fit a 1500-byte MTU."""

__all__ = ["PathRun", "PullResult", "impair", "payloads"]


def payloads(seed: int, group: int, group_bytes: int, object_bytes: int) -> list[bytes]:
    """The objects of one group: seeded random bytes, ``object_bytes`` each (last one shorter)."""
    data = random.Random(seed * 1_000_003 + group).randbytes(group_bytes)
    return [data[i : i + object_bytes] for i in range(0, group_bytes, object_bytes)]


# ------------------------------------------------------------------------------- the roles


def _emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def _security() -> Any:
    from ray_kvmoq.relay.security import ClusterSecurity

    sec = ClusterSecurity.from_env()
    if sec is None:
        raise SystemExit("KVMOQ_CLUSTER_SECRET is not set")
    return sec


async def _wait_stdin_closed() -> None:
    loop = asyncio.get_running_loop()
    closed = asyncio.Event()
    fd = sys.stdin.fileno()
    loop.add_reader(fd, lambda: None if os.read(fd, 4096) else closed.set())
    await closed.wait()


async def _publisher(args: argparse.Namespace) -> None:
    from ray_kvmoq.moqt.api import Group
    from ray_kvmoq.relay.cache import RelayCache
    from ray_kvmoq.relay.downstream import RelayNetwork
    from ray_kvmoq.relay.relay import Relay

    opts = {"max_datagram_size": DATAGRAM, "backend": args.backend}
    net = RelayNetwork(node_id="A", host=args.host, security=_security(), transport_options=opts)
    relay = Relay(node_id="A", cache=RelayCache(1 << 31))
    digest = hashlib.sha256()
    for g in range(args.groups):
        objs = payloads(args.seed, g, args.group_bytes, args.object_bytes)
        digest.update(b"".join(objs))
        last = g == args.groups - 1
        await relay.publish_group(NS, TRACK, g, Group.from_payloads(g, objs), end_of_track=last)
    port = await net.start(relay)
    _emit("ready", port=port, sha256=digest.hexdigest(), bytes=args.groups * args.group_bytes)
    try:
        await _wait_stdin_closed()
    finally:
        _emit("stats", relay=relay.stats())
        await net.close()
        await relay.close()


async def _puller(args: argparse.Namespace) -> None:
    from ray_kvmoq.moqt.api import TransportConfig
    from ray_kvmoq.relay.cache import RelayCache
    from ray_kvmoq.relay.directory import NodeInfo
    from ray_kvmoq.relay.events import LocalDirectoryClient
    from ray_kvmoq.relay.relay import Relay
    from ray_kvmoq.relay.upstream import PeerPool

    sec = _security()
    tc = TransportConfig(
        cadata=sec.ca_cert_pem,
        server_name="localhost",
        max_datagram_size=DATAGRAM,
        idle_timeout=args.idle_timeout,
        backend=args.backend,
    )
    pool = PeerPool(transport=tc, token=lambda: sec.peer_token(time.time()))
    directory = LocalDirectoryClient()
    await directory.register_node(NodeInfo(node_id="A", host=args.proxy_host, port=args.port))
    await directory.add_groups("A", NS, TRACK, list(range(args.groups)), {})
    relay = Relay(
        node_id="B", cache=RelayCache(1 << 31), directory=directory, connect=pool.upstream
    )
    t0 = time.monotonic()
    error = None
    try:
        await asyncio.wait_for(relay.ensure_groups(NS, TRACK, range(args.groups)), args.timeout)
    except (TimeoutError, Exception) as exc:
        error = f"{type(exc).__name__}: {exc}"
    seconds = time.monotonic() - t0
    digest, objects, nbytes = hashlib.sha256(), 0, 0
    for g in range(args.groups):
        packed = relay.cache.get_packed(NS, TRACK, g, 0.0)
        if packed is None:
            break
        digest.update(packed.buffer)
        objects += len(packed)
        nbytes += packed.nbytes
    sessions = [dict(s.counters) for s in pool.sessions()]
    _emit(
        "result",
        ok=error is None,
        error=error,
        seconds=seconds,
        sha256=digest.hexdigest(),
        objects=objects,
        bytes=nbytes,
        relay=relay.stats(),
        sessions=sessions,
        connects=pool.connects,
    )
    await pool.close()
    await relay.close()


def _role_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ray_kvmoq.bench.impair")
    p.add_argument("role", choices=["publisher", "puller"])
    p.add_argument("--host", default="127.0.0.1", help="publisher: address to listen on")
    p.add_argument("--proxy-host", default="127.0.0.1", help="puller: the proxy's address")
    p.add_argument("--port", type=int, default=0, help="puller: the proxy's port")
    p.add_argument("--groups", type=int, default=8)
    p.add_argument("--group-bytes", type=int, default=128 << 10)
    p.add_argument("--object-bytes", type=int, default=8 << 10)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--timeout", type=float, default=60.0, help="puller: seconds for the pull")
    p.add_argument("--idle-timeout", type=float, default=5.0, help="puller: QUIC idle timeout")
    p.add_argument("--backend", default="aioquic")
    return p


def _role_main(argv: list[str] | None = None) -> None:
    args = _role_parser().parse_args(argv)
    asyncio.run(_publisher(args) if args.role == "publisher" else _puller(args))


# ---------------------------------------------------------------------------- orchestration


class _Proc:
    """A role subprocess that speaks JSON lines on stdout; stderr goes to a temp file."""

    def __init__(self, argv: list[str], env: dict[str, str]) -> None:
        self.err: IO[bytes] = tempfile.TemporaryFile()  # noqa: SIM115 (closed in stop())
        self.p = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.err, env=env
        )
        self._buf = b""

    def event(self, name: str, timeout: float) -> dict[str, Any]:
        """The next JSON line whose ``event`` is ``name`` (TimeoutError / RuntimeError if the
        process says nothing in time or exits first)."""
        assert self.p.stdout is not None
        deadline = time.monotonic() + timeout
        while True:
            while b"\n" in self._buf:
                line, self._buf = self._buf.split(b"\n", 1)
                msg = json.loads(line)
                if msg.get("event") == name:
                    return dict(msg)
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"no {name!r} event within {timeout:.0f} s: {self.stderr()}")
            ready, _, _ = select.select([self.p.stdout], [], [], left)
            if ready:
                chunk = os.read(self.p.stdout.fileno(), 65536)
                if not chunk:
                    raise RuntimeError(f"exited ({self.p.wait()}) before {name!r}: {self.stderr()}")
                self._buf += chunk

    def stderr(self) -> str:
        self.err.seek(0)
        return self.err.read().decode(errors="replace")[-2000:]

    def stop(self, final: str | None = None, timeout: float = 5.0) -> dict[str, Any] | None:
        """Close stdin (the role's signal to finish), read ``final``, reap it (kill by PID if it
        does not exit in time)."""
        out = None
        try:
            if self.p.stdin is not None and not self.p.stdin.closed:
                self.p.stdin.close()
            if final is not None:
                out = self.event(final, timeout)
            self.p.wait(timeout)
        except (TimeoutError, RuntimeError, subprocess.TimeoutExpired):
            pass
        finally:
            if self.p.poll() is None:
                self.p.kill()
                self.p.wait(5)
            if self.p.stdout is not None:
                self.p.stdout.close()
            self.err.close()
        return out


@dataclass(kw_only=True)
class PullResult:
    """One pull through one impairment setting."""

    impairment: Impairment
    ok: bool
    """The pull completed in time."""
    bit_exact: bool
    """B's sealed groups hash to what A published (and ok)."""
    seconds: float
    """Time of the pull at B (wall clock, from the first FETCH's connect to the last group)."""
    wall_s: float
    """The puller process's whole life, seen from outside (startup, pull, exit)."""
    mb_s: float
    """Payload MB/s of the pull (0 when it failed)."""
    error: str | None
    result: dict[str, Any] = field(default_factory=dict)
    """The puller's ``result`` event (relay and session counters)."""
    proxy: dict[str, Any] = field(default_factory=dict)
    """The proxy's ``stats`` event (drops, duplicates, largest datagram, …)."""


class PathRun:
    """A publisher on the path's A side, serving every pull of a run (one proxy + one fresh
    puller per :meth:`pull`). Use as a context manager; everything started is stopped by PID."""

    def __init__(
        self,
        path: NetPath,
        *,
        groups: int = 8,
        group_bytes: int = 128 << 10,
        object_bytes: int = 8 << 10,
        backend: str = "aioquic",
    ) -> None:
        self.path = path
        self.shape = ["--groups", str(groups), "--group-bytes", str(group_bytes)]
        self.shape += ["--object-bytes", str(object_bytes), "--backend", backend]
        self.env = {**os.environ, "KVMOQ_CLUSTER_SECRET": secrets.token_hex(32)}
        self.procs: list[_Proc] = []
        self.port = 0
        self.sha256 = ""
        self.total_bytes = 0

    def _start(self, role: str, argv: list[str]) -> _Proc:
        proc = _Proc([*self.path.prefix(role), sys.executable, *argv], self.env)
        self.procs.append(proc)
        return proc

    def __enter__(self) -> PathRun:
        self.publisher = self._start(
            "a", ["-m", _MODULE, "publisher", "--host", self.path.a_host, *self.shape]
        )
        try:
            ready = self.publisher.event("ready", 60)
        except BaseException:
            self.__exit__()
            raise
        self.port, self.sha256, self.total_bytes = ready["port"], ready["sha256"], ready["bytes"]
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    def pull(self, impairment: Impairment, *, timeout: float = 60.0) -> PullResult:
        """One pull of the whole track by a fresh relay B through a fresh proxy."""
        flags = []
        for name, value in asdict(impairment).items():
            flags += ["--" + name.replace("_", "-"), str(value)]
        listen, target = f"{self.path.proxy_listen}:0", f"{self.path.a_host}:{self.port}"
        proxy = self._start(
            "m",
            ["-m", "ray_kvmoq.bench.impair_proxy", "--listen", listen, "--target", target, *flags],
        )
        t0 = time.monotonic()
        try:
            pport = proxy.event("listening", 60)["port"]
            args = ["--proxy-host", self.path.proxy_listen, "--port", str(pport)]
            args += ["--timeout", str(timeout), *self.shape]
            puller = self._start("b", ["-m", _MODULE, "puller", *args])
            t0 = time.monotonic()
            res = puller.event("result", timeout + 30)
            error = res["error"]
        except (TimeoutError, RuntimeError) as exc:
            res, error = {}, f"{type(exc).__name__}: {exc}"
        finally:
            wall = time.monotonic() - t0
            stats = proxy.stop("stats") or {}
            for p in [p for p in self.procs if p is not self.publisher]:
                p.stop()
            self.procs = [self.publisher]
        ok = bool(res) and error is None
        exact = ok and res["sha256"] == self.sha256 and res["bytes"] == self.total_bytes
        seconds = float(res.get("seconds", wall))
        mb_s = self.total_bytes / seconds / 1e6 if ok and seconds > 0 else 0.0
        return PullResult(
            impairment=impairment,
            ok=ok,
            bit_exact=exact,
            seconds=seconds,
            wall_s=wall,
            mb_s=mb_s,
            error=error,
            result=res,
            proxy=stats,
        )


# ------------------------------------------------------------------------------ the command


def _settings(losses: list[float], rtts: list[float]) -> Iterator[Impairment]:
    for rtt in rtts:
        for loss in losses:
            yield Impairment(loss=loss / 100.0, rtt_ms=rtt)


def _floats(text: str) -> list[float]:
    return [float(x) for x in text.split(",") if x.strip()]


@click.command()
@click.option("--loss", "losses", default="0,1,5,10", show_default=True, help="loss %, comma list")
@click.option("--rtt", "rtts", default="0,10,50", show_default=True, help="added RTT ms, list")
@click.option("--mb", default=4.0, show_default=True, help="MiB per pull")
@click.option("--group-kb", default=256, show_default=True, help="KiB per group")
@click.option("--repeat", default=1, show_default=True, help="pulls per setting (median)")
@click.option("--timeout", default=120.0, show_default=True, help="seconds per pull")
@click.option("--backend", default="aioquic", show_default=True, help="aioquic or qh3")
@click.option("--loopback", is_flag=True, help="127.0.0.1 instead of network namespaces")
@click.option("--json", "as_json", is_flag=True, help="print one JSON object")
def impair(
    losses: str,
    rtts: str,
    mb: float,
    group_kb: int,
    repeat: int,
    timeout: float,
    backend: str,
    loopback: bool,
    as_json: bool,
) -> None:
    """Relay-to-relay pull throughput per loss % × added RTT, through an impairment proxy."""
    if not loopback:
        why = netns_unavailable()
        if why is not None:
            raise click.ClickException(f"{why} (use --loopback)")
        remove_stale()
    group_bytes = group_kb << 10
    groups = max(1, int(mb * (1 << 20)) // group_bytes)
    rows: list[dict[str, Any]] = []
    failures = 0
    with loopback_path() if loopback else netns_path() as path:
        mtu = path.mtu
        with PathRun(path, groups=groups, group_bytes=group_bytes, backend=backend) as run:
            for imp in _settings(_floats(losses), _floats(rtts)):
                # a fresh loss pattern per repeat (the seed), the same patterns in every run
                pulls = [
                    run.pull(dataclasses.replace(imp, seed=i + 1), timeout=timeout)
                    for i in range(repeat)
                ]
                bad = [p for p in pulls if not p.bit_exact]
                failures += len(bad)
                good = [p.mb_s for p in pulls if p.bit_exact]
                row = {
                    "loss_pct": imp.loss * 100,
                    "rtt_ms": imp.rtt_ms,
                    "mb_s": statistics.median(good) if good else 0.0,
                    "mb_s_range": [min(good), max(good)] if good else [],
                    "seconds": statistics.median(p.seconds for p in pulls),
                    "bit_exact": f"{len(pulls) - len(bad)}/{len(pulls)}",
                    "dropped": sum(p.proxy.get("dropped_loss", 0) for p in pulls),
                    "max_datagram": max(p.proxy.get("max_datagram", 0) for p in pulls),
                    "errors": [p.error for p in bad],
                }
                rows.append(row)
                click.echo(f"[bench impair] {json.dumps(row)}", err=True)
    out = {"mtu": mtu, "bytes": groups * group_bytes, "backend": backend, "rows": rows}
    out["failures"] = failures
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(f"{groups * group_bytes / 2**20:.1f} MiB per pull, MTU {mtu}, {backend}")
        click.echo(
            "| loss % | added RTT ms | MB/s (median) | MB/s (min-max) | s (median) | bit-exact "
            "| datagrams dropped | largest datagram |"
        )
        click.echo("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for r in rows:
            lo, hi = r["mb_s_range"] or [0.0, 0.0]
            click.echo(
                f"| {r['loss_pct']:g} | {r['rtt_ms']:g} | {r['mb_s']:.2f} | {lo:.2f}-{hi:.2f} "
                f"| {r['seconds']:.1f} | {r['bit_exact']} | {r['dropped']} | {r['max_datagram']} |"
            )
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    _role_main()
