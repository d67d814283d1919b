"""A userspace UDP impairment proxy: delay, jitter, loss, reordering, duplication, blackouts.

This kernel has no ``netem`` qdisc, so the network a test or bench wants to break is made of a
proxy between two QUIC endpoints (in their own network namespaces, see ``impair_netns.py``, or
on loopback). Stdlib only, so it starts fast in a subprocess.

Design: :class:`Impairer` is the sans-I/O decision core. For each datagram it is given (a
direction, a size, ``now``) it returns the one-way delays after which copies go out: ``[]``
drops it, two entries duplicate it. All randomness comes from one seeded :class:`random.Random`
per direction, so a run is reproducible. :class:`ImpairProxy` is the thin asyncio shell: one
listening socket for clients, one upstream socket per client address (so the target sees each
client as its own peer), ``loop.call_later`` for delayed sends.

Model, per direction and datagram, in this order:

* **blackout**: while a blackout window is open every datagram is dropped (``dropped_blackout``).
  A window opens when :meth:`Impairer.blackout` is called, or once ``blackout_after_bytes``
  bytes have gone downstream (target → client: mid-transfer by construction);
* **loss**: dropped with probability ``loss`` (``dropped_loss``);
* **delay**: ``rtt_ms / 2`` plus a uniform jitter in ``[0, jitter_ms]``;
* **reordering**: with probability ``reorder``, ``reorder_ms`` more, so later datagrams overtake it;
* **duplication**: with probability ``duplicate``, a second copy 0.1 ms after the first;
* **bottleneck**: with ``rate_mbit``, datagrams leave one after another at that rate (each
  waits for the ones ahead of it: serialization delay, added to the delay above); one that
  would wait longer than ``queue_ms`` is dropped (a tail-drop router buffer, ``dropped_queue``).

Jitter alone reorders too (delays are independent per datagram); set ``jitter_ms=0`` for a
FIFO path. ``max_datagram`` records the largest datagram seen, so a test can check the path
MTU was respected.

CLI (what the netns tests run inside the middle namespace)::

    python -m ray_kvmoq.bench.impair_proxy --listen 10.77.2.2:0 --target 10.77.1.1:4433 \\
        --loss 0.05 --rtt-ms 10

prints ``{"event": "listening", "port": N}`` on stdout, then runs until stdin closes or SIGTERM,
and prints ``{"event": "stats", ...}`` (:meth:`ImpairStats.as_dict`) before it exits.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import signal
import socket
import sys
from dataclasses import asdict, dataclass, field
from typing import Any

__all__ = ["ImpairProxy", "ImpairStats", "Impairer", "Impairment", "main"]

UP = "up"
"""Client → target."""
DOWN = "down"
"""Target → client."""


@dataclass(frozen=True, kw_only=True)
class Impairment:
    """What the path does to datagrams (both directions alike)."""

    loss: float = 0.0
    """Probability a datagram is dropped, per direction (0.05 = 5 %)."""
    rtt_ms: float = 0.0
    """Added round-trip time; each direction gets half."""
    jitter_ms: float = 0.0
    """Uniform extra one-way delay in [0, jitter_ms]."""
    reorder: float = 0.0
    """Probability a datagram is held back ``reorder_ms`` so later ones overtake it."""
    reorder_ms: float = 5.0
    """How long a reordered datagram is held back."""
    duplicate: float = 0.0
    """Probability a datagram is sent twice."""
    blackout_after_bytes: int = 0
    """Open one blackout window once this many bytes went downstream (0: never by itself)."""
    blackout_s: float = 0.0
    """Length of that window (and the default for :meth:`Impairer.blackout`)."""
    rate_mbit: float = 0.0
    """Bottleneck bandwidth per direction in Mbit/s (0: unlimited)."""
    queue_ms: float = 100.0
    """With ``rate_mbit``: the longest a datagram waits in the bottleneck's queue."""
    seed: int = 1
    """Seed of the per-direction random streams."""

    def __post_init__(self) -> None:
        for name in ("loss", "reorder", "duplicate"):
            p = getattr(self, name)
            if not 0.0 <= p <= 1.0:
                raise ValueError(f"{name} must be a probability, got {p}")
        for name in ("rtt_ms", "jitter_ms", "reorder_ms", "blackout_s", "rate_mbit", "queue_ms"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0")


@dataclass(kw_only=True)
class ImpairStats:
    """Counters of one proxy (per direction where it matters)."""

    received: dict[str, int] = field(default_factory=lambda: {UP: 0, DOWN: 0})
    """Datagrams that arrived, per direction."""
    sent: dict[str, int] = field(default_factory=lambda: {UP: 0, DOWN: 0})
    """Datagrams sent on, copies included."""
    bytes_received: dict[str, int] = field(default_factory=lambda: {UP: 0, DOWN: 0})
    """Payload bytes that arrived, per direction."""
    dropped_loss: int = 0
    """Dropped by the loss draw."""
    dropped_blackout: int = 0
    """Dropped while a blackout window was open."""
    dropped_queue: int = 0
    """Dropped at a full bottleneck queue (``rate_mbit``)."""
    duplicated: int = 0
    """Extra copies sent."""
    reordered: int = 0
    """Datagrams held back to be overtaken."""
    blackouts: int = 0
    """Blackout windows opened."""
    max_datagram: int = 0
    """Largest datagram seen (bytes of UDP payload)."""
    clients: int = 0
    """Distinct client addresses seen."""

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready copy."""
        return asdict(self)


class Impairer:
    """The sans-I/O core: decides each datagram's fate; holds the counters."""

    def __init__(self, impairment: Impairment) -> None:
        self.impairment = impairment
        self.stats = ImpairStats()
        self._rng = {UP: random.Random(impairment.seed), DOWN: random.Random(impairment.seed + 1)}
        self._blackout_until = -1.0
        self._auto_blackout_done = impairment.blackout_after_bytes <= 0
        self._link_free_at = {UP: 0.0, DOWN: 0.0}

    def blackout(self, now: float, seconds: float | None = None) -> None:
        """Drop every datagram, both ways, from ``now`` for ``seconds`` (default ``blackout_s``)."""
        length = self.impairment.blackout_s if seconds is None else seconds
        self._blackout_until = max(self._blackout_until, now + length)
        self.stats.blackouts += 1

    def in_blackout(self, now: float) -> bool:
        """Whether a blackout window is open at ``now``."""
        return now < self._blackout_until

    def decide(self, direction: str, size: int, now: float) -> list[float]:
        """Delays (seconds from ``now``) of the copies to send; empty: dropped."""
        imp, st, rng = self.impairment, self.stats, self._rng[direction]
        st.received[direction] += 1
        st.bytes_received[direction] += size
        st.max_datagram = max(st.max_datagram, size)
        if (
            not self._auto_blackout_done
            and direction == DOWN
            and st.bytes_received[DOWN] >= imp.blackout_after_bytes
        ):
            self._auto_blackout_done = True
            self.blackout(now)
        if self.in_blackout(now):
            st.dropped_blackout += 1
            return []
        if imp.loss and rng.random() < imp.loss:
            st.dropped_loss += 1
            return []
        delay = imp.rtt_ms / 2000.0
        if imp.rate_mbit:
            start = max(now, self._link_free_at[direction])
            if start - now > imp.queue_ms / 1000.0:
                st.dropped_queue += 1
                return []
            self._link_free_at[direction] = start + size * 8 / (imp.rate_mbit * 1e6)
            delay += self._link_free_at[direction] - now
        if imp.jitter_ms:
            delay += rng.uniform(0.0, imp.jitter_ms / 1000.0)
        if imp.reorder and rng.random() < imp.reorder:
            delay += imp.reorder_ms / 1000.0
            st.reordered += 1
        out = [delay]
        if imp.duplicate and rng.random() < imp.duplicate:
            out.append(delay + 0.0001)
            st.duplicated += 1
        st.sent[direction] += len(out)
        return out


class _Listener(asyncio.DatagramProtocol):
    def __init__(self, proxy: ImpairProxy) -> None:
        self.proxy = proxy

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.proxy._from_client(data, addr)


class _Upstream(asyncio.DatagramProtocol):
    def __init__(self, proxy: ImpairProxy, client: Any) -> None:
        self.proxy, self.client = proxy, client
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.proxy._from_target(data, self.client)


class ImpairProxy:
    """The asyncio shell: forwards UDP between clients and one target through an :class:`Impairer`.

    ``async with ImpairProxy(("127.0.0.1", 0), target, Impairment(loss=0.05)) as proxy:``
    clients send to ``proxy.address``; ``proxy.stats`` has the counters.
    """

    def __init__(
        self,
        listen: tuple[str, int],
        target: tuple[str, int],
        impairment: Impairment | None = None,
        *,
        socket_buffer: int = 4 << 20,
    ) -> None:
        self.listen = listen
        self.target = target
        self.impairer = Impairer(impairment or Impairment())
        self._buffer = socket_buffer
        self._loop: asyncio.AbstractEventLoop | None = None
        self._listener: asyncio.DatagramTransport | None = None
        self._upstreams: dict[Any, _Upstream] = {}
        self._pending: dict[Any, list[bytes]] = {}

    @property
    def stats(self) -> ImpairStats:
        """The counters."""
        return self.impairer.stats

    @property
    def address(self) -> tuple[str, int]:
        """Where clients send (the bound port once started)."""
        assert self._listener is not None, "not started"
        host, port = self._listener.get_extra_info("sockname")[:2]
        return host, port

    def set_impairment(self, impairment: Impairment) -> None:
        """Change the path's behaviour from now on (counters and blackout state are kept)."""
        self.impairer.impairment = impairment

    def blackout(self, seconds: float) -> None:
        """Drop everything, both ways, for ``seconds`` from now."""
        assert self._loop is not None, "not started"
        self.impairer.blackout(self._loop.time(), seconds)

    async def start(self) -> tuple[str, int]:
        """Bind the listening socket; returns :attr:`address`."""
        self._loop = asyncio.get_running_loop()
        sock = self._socket(self.listen)
        self._listener, _ = await self._loop.create_datagram_endpoint(
            lambda: _Listener(self), sock=sock
        )
        return self.address

    async def close(self) -> None:
        """Close every socket (delayed datagrams still queued are dropped)."""
        for up in self._upstreams.values():
            if up.transport is not None:
                up.transport.close()
        self._upstreams.clear()
        if self._listener is not None:
            self._listener.close()

    async def __aenter__(self) -> ImpairProxy:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def _socket(self, addr: tuple[str, int]) -> socket.socket:
        family = socket.AF_INET6 if ":" in addr[0] else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_DGRAM)
        for opt in (socket.SO_RCVBUF, socket.SO_SNDBUF):
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, opt, self._buffer)
        sock.bind(addr)
        sock.setblocking(False)
        return sock

    def _from_client(self, data: bytes, client: Any) -> None:
        assert self._loop is not None
        up = self._upstreams.get(client)
        if up is None:
            up = self._upstreams[client] = _Upstream(self, client)
            self.stats.clients += 1
            self._pending[client] = []
            self._loop.create_task(self._open_upstream(up))
        delays = self.impairer.decide(UP, len(data), self._loop.time())
        for d in delays:
            self._schedule(d, lambda data=data, up=up: self._send_up(up, data))

    async def _open_upstream(self, up: _Upstream) -> None:
        assert self._loop is not None
        family = socket.AF_INET6 if ":" in self.target[0] else socket.AF_INET
        bind = ("::", 0) if family == socket.AF_INET6 else ("0.0.0.0", 0)
        sock = self._socket(bind)
        sock.connect(self.target)
        await self._loop.create_datagram_endpoint(lambda: up, sock=sock)
        for data in self._pending.pop(up.client, []):
            self._send_up(up, data)

    def _send_up(self, up: _Upstream, data: bytes) -> None:
        if up.transport is None:  # still connecting: keep order behind the socket's creation
            self._pending.setdefault(up.client, []).append(data)
        elif not up.transport.is_closing():
            up.transport.sendto(data)

    def _from_target(self, data: bytes, client: Any) -> None:
        assert self._loop is not None
        for d in self.impairer.decide(DOWN, len(data), self._loop.time()):
            self._schedule(d, lambda data=data: self._send_down(data, client))

    def _send_down(self, data: bytes, client: Any) -> None:
        if self._listener is not None and not self._listener.is_closing():
            self._listener.sendto(data, client)

    def _schedule(self, delay: float, send: Any) -> None:
        assert self._loop is not None
        if delay <= 0:
            send()
        else:
            self._loop.call_later(delay, send)


# ------------------------------------------------------------------------------------ the CLI


def _addr(text: str) -> tuple[str, int]:
    host, _, port = text.rpartition(":")
    return host.strip("[]"), int(port)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m ray_kvmoq.bench.impair_proxy", description=__doc__)
    p.add_argument("--listen", type=_addr, required=True, help="host:port clients send to")
    p.add_argument("--target", type=_addr, required=True, help="host:port datagrams go to")
    for name in Impairment.__dataclass_fields__:
        kind = int if name in ("blackout_after_bytes", "seed") else float
        p.add_argument("--" + name.replace("_", "-"), type=kind, default=None)
    return p


async def _run(args: argparse.Namespace) -> None:
    fields = {k: getattr(args, k) for k in Impairment.__dataclass_fields__}
    impairment = Impairment(**{k: v for k, v in fields.items() if v is not None})
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    fd = sys.stdin.fileno()
    loop.add_reader(fd, lambda: None if os.read(fd, 4096) else stop.set())
    async with ImpairProxy(args.listen, args.target, impairment) as proxy:
        print(json.dumps({"event": "listening", "port": proxy.address[1]}), flush=True)
        await stop.wait()
        print(json.dumps({"event": "stats", **proxy.stats.as_dict()}), flush=True)


def main(argv: list[str] | None = None) -> None:
    """Run the proxy from the command line (see the module docstring)."""
    asyncio.run(_run(_parser().parse_args(argv)))


if __name__ == "__main__":
    main()
