"""``kvmoq bench transport``: MoQT over QUIC vs a plain TCP socket, publisher and subscriber in
separate processes over loopback.

Each run moves a track of 128-object groups (one subgroup stream per group) from a publisher
process to a subscriber process and times the subscriber from its first to its last byte. The
same bytes then cross a plain TCP socket between two processes, in the same run, as the
baseline. Rows:

* ``moqt`` rows go through the full stack (``ray_kvmoq.moqt.api``: session, codec, fast path);
* ``quic`` rows (``--levers``) move the same bytes on raw QUIC streams with one fast-path lever
  switched at a time, to show what each one buys.

Progress goes to stderr; ``--json`` prints one JSON object (figures for the 160 KB objects at
top level: ``moqt_mb_s`` best loopback, ``moqt_mb_s_9000``, ``tcp_mb_s``, ``ratio``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import socket
import sys
import time
from dataclasses import asdict, dataclass
from typing import Any

import click

from ray_kvmoq.moqt.api import (
    FastQuicProtocol,
    TransportConfig,
    connect_quic,
    self_signed,
    serve_quic,
)

OBJECTS_PER_GROUP = 128


@dataclass(frozen=True, kw_only=True)
class Workload:
    """What one run moves."""

    object_size: int
    """Bytes per object."""
    groups: int
    """Groups of ``OBJECTS_PER_GROUP`` objects."""

    @property
    def total(self) -> int:
        """Payload bytes in the whole track."""
        return self.object_size * OBJECTS_PER_GROUP * self.groups


@dataclass(frozen=True, kw_only=True)
class Variant:
    """One row of the table: a transport path and its knobs."""

    name: str
    """Row label."""
    path: str
    """"tcp", "quic" (raw streams) or "moqt" (full stack)."""
    datagram: int = 1452
    """QUIC max datagram size."""
    batch: bool = True
    """Batched receive."""
    wide: bool = True
    """4-byte STREAM frame lengths."""
    pacing: bool = False
    """aioquic's packet pacer."""
    gso: bool = True
    """UDP GSO on the sender."""
    send_buffer: int = 16 << 20
    """Unacknowledged bytes the publisher may have outstanding (its backpressure window)."""
    backend: str = "aioquic"
    """QUIC library (``TransportConfig.backend``); the raw-QUIC lever rows need aioquic."""
    draft: int = 16
    """MoQT version of the ``moqt`` rows (16: ALPN ``moqt-16``, 14: ``moq-00``)."""

    def transport(self, **tls: Any) -> TransportConfig:
        """The QUIC settings of this row."""
        return TransportConfig(
            alpns=(_ALPNS[self.draft],),
            backend=self.backend,
            max_datagram_size=self.datagram,
            batch_receive=self.batch,
            wide_stream_frames=self.wide,
            pacing=self.pacing,
            gso=self.gso,
            **tls,
        )


# --------------------------------------------------------------------------- TCP baseline


def _tcp_sub(conn: Any, work: Workload) -> None:
    with socket.create_server(("127.0.0.1", 0)) as srv:
        conn.send(srv.getsockname()[1])
        peer, _ = srv.accept()
        with peer:
            peer.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4 << 20)
            buf = bytearray(1 << 20)
            view = memoryview(buf)
            got, meter = 0, _Meter()
            while got < work.total:
                n = peer.recv_into(view)
                if n == 0:
                    break
                if got == 0:
                    meter.start()
                got += n
            conn.send((got, *meter.stop()))


def _tcp_pub(port: int, work: Workload, meter: _Meter) -> None:
    payload = os.urandom(work.object_size)
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4 << 20)
        meter.start()
        for _ in range(work.groups * OBJECTS_PER_GROUP):
            sock.sendall(payload)


# --------------------------------------------------------------------------- raw QUIC streams


async def _quic_sub_async(conn: Any, work: Workload, variant: Variant, tls: dict[str, Any]) -> None:
    from aioquic.quic import events

    state = {"got": 0}  # raw rows run on aioquic (Variant.backend), events are aioquic's
    meter = _Meter()
    done = asyncio.Event()

    def on_connection(protocol: FastQuicProtocol) -> None:
        def on_event(event: events.QuicEvent) -> None:
            if isinstance(event, events.StreamDataReceived):
                if state["got"] == 0:
                    meter.start()
                state["got"] += len(event.data)
                if state["got"] >= work.total:
                    meter.stop()
                    done.set()
            elif isinstance(event, events.ConnectionTerminated):
                done.set()

        protocol.on_event = on_event

    listener = await serve_quic(
        "127.0.0.1", 0, config=variant.transport(**tls), on_connection=on_connection
    )
    conn.send(listener.port)
    await done.wait()
    conn.send((state["got"], *meter.stop()))
    listener.close()


async def _quic_pub_async(
    port: int, work: Workload, variant: Variant, tls: dict[str, Any], meter: _Meter
) -> None:
    payload = os.urandom(work.object_size)
    async with connect_quic("127.0.0.1", port, config=variant.transport(**tls)) as proto:
        quic = proto.quic
        meter.start()
        for _ in range(work.groups):
            sid = quic.get_next_available_stream_id(is_unidirectional=True)
            for i in range(OBJECTS_PER_GROUP):
                quic.send_stream_data(sid, payload, end_stream=i == OBJECTS_PER_GROUP - 1)
                proto.transmit_soon()
                await proto.drain(variant.send_buffer)
        with contextlib.suppress(ConnectionError):  # the subscriber hangs up when it has it all
            await proto.drain(0)
        meter.stop()


# --------------------------------------------------------------------------- full MoQT stack
# The subscriber process listens; the publisher connects, announces the namespace and serves
# the SUBSCRIBE the subscriber sends back on the same session (a client that publishes).

_NAMESPACE = "bench/transport"
_TRACK = "kv"


async def _moqt_sub_async(conn: Any, work: Workload, variant: Variant, tls: dict[str, Any]) -> None:
    from ray_kvmoq.moqt import api

    state = {"got": 0}
    meter = _Meter()
    done = asyncio.Event()

    class Sink(api.SessionHandler):
        async def on_publish_namespace(
            self, session: api.MoqtConnection, request: api.NamespaceRequest
        ) -> None:
            asyncio.get_running_loop().create_task(self._pull(session))

        async def _pull(self, session: api.MoqtConnection) -> None:
            sub = await session.subscribe(_NAMESPACE, _TRACK)
            async for obj in sub:
                if state["got"] == 0:
                    meter.start()
                state["got"] += len(obj.payload)
                if state["got"] >= work.total:
                    meter.stop()
                    done.set()

    server = await api.serve(
        "127.0.0.1", 0, transport=variant.transport(**tls), handler_factory=Sink
    )
    conn.send(server.port)
    await done.wait()
    conn.send((state["got"], *meter.stop()))
    await asyncio.sleep(0.2)  # let the final ACKs out before the publisher's PUBLISH_DONE
    server.close()


async def _moqt_pub_async(
    port: int, work: Workload, variant: Variant, tls: dict[str, Any], meter: _Meter
) -> None:
    from ray_kvmoq.moqt import api

    payload = os.urandom(work.object_size)
    track = api.MemoryTrack(max_groups=2)
    handler = api.TrackServer({api.FullTrackName.parse(_NAMESPACE, _TRACK): track})
    transport = variant.transport(**tls)
    url = f"moqt://127.0.0.1:{port}"
    async with api.connect(
        url, transport=transport, handler=handler, send_buffer=variant.send_buffer
    ) as s:
        await s.publish_namespace(_NAMESPACE)
        await track.wait_subscribers(1, timeout=30)
        objects = [payload] * OBJECTS_PER_GROUP
        meter.start()
        with contextlib.suppress(api.SessionClosed):
            for group in range(work.groups):
                await track.publish_group(group, objects)
            await track.finish()  # returns once the subscriber acknowledged everything
            meter.stop()
            await s.wait_closed()


# --------------------------------------------------------------------------- process plumbing


def _sub_main(conn: Any, work: Workload, variant: Variant, tls: dict[str, Any]) -> None:
    if variant.path == "tcp":
        _tcp_sub(conn, work)
    elif variant.path == "quic":
        asyncio.run(_quic_sub_async(conn, work, variant, tls))
    else:
        asyncio.run(_moqt_sub_async(conn, work, variant, tls))


def _pub_main(port: int, work: Workload, variant: Variant, tls: dict[str, Any], conn: Any) -> None:
    meter = _Meter()
    if variant.path == "tcp":
        _tcp_pub(port, work, meter)
    elif variant.path == "quic":
        asyncio.run(_quic_pub_async(port, work, variant, tls, meter))
    else:
        asyncio.run(_moqt_pub_async(port, work, variant, tls, meter))
    conn.send(meter.stop()[1])


@dataclass(frozen=True, kw_only=True)
class Measurement:
    """One run of one row."""

    mb_s: float
    """Payload MB/s (10^6 B/s) at the subscriber, first byte to last."""
    sub_cpu_ms_per_mb: float
    """Subscriber process CPU time per MB moved (user + system)."""
    pub_cpu_ms_per_mb: float
    """Publisher process CPU time per MB moved."""


def run_variant(work: Workload, variant: Variant, *, timeout: float = 120.0) -> Measurement:
    """Move ``work`` along ``variant`` between two fresh processes and measure it."""
    ctx = multiprocessing.get_context("spawn")
    leaf = self_signed()
    server_tls = {"cert_pem": leaf.cert_pem, "key_pem": leaf.key_pem}
    client_tls = {"cadata": leaf.ca_pem}
    parent, child = ctx.Pipe()
    pub_parent, pub_child = ctx.Pipe()
    sub = ctx.Process(target=_sub_main, args=(child, work, variant, server_tls), daemon=True)
    sub.start()
    pub = None
    try:
        if not parent.poll(30):
            raise RuntimeError(f"{variant.name}: subscriber did not start")
        port = parent.recv()
        pub = ctx.Process(
            target=_pub_main, args=(port, work, variant, client_tls, pub_child), daemon=True
        )
        pub.start()
        if not parent.poll(timeout):
            raise RuntimeError(f"{variant.name}: no result within {timeout:.0f} s")
        got, seconds, sub_cpu = parent.recv()
        if got < work.total:
            raise RuntimeError(f"{variant.name}: received {got} of {work.total} bytes")
        pub_cpu = pub_parent.recv() if pub_parent.poll(30) else float("nan")
        mb = got / 1e6
        return Measurement(
            mb_s=mb / seconds,
            sub_cpu_ms_per_mb=1000 * sub_cpu / mb,
            pub_cpu_ms_per_mb=1000 * pub_cpu / mb,
        )
    finally:
        for proc in (pub, sub):
            if proc is not None:
                proc.join(10)
                if proc.is_alive():
                    proc.terminate()
                    proc.join(5)


class _Meter:
    """Wall and process-CPU time between ``start`` and the first ``stop``."""

    def __init__(self) -> None:
        self._t0 = self._c0 = 0.0
        self._result: tuple[float, float] | None = None

    def start(self) -> None:
        self._t0, self._c0 = time.perf_counter(), time.process_time()

    def stop(self) -> tuple[float, float]:
        """(wall seconds, CPU seconds); later calls return the first result."""
        if self._result is None:
            self._result = (time.perf_counter() - self._t0, time.process_time() - self._c0)
        return self._result


LEVER_ROWS: tuple[Variant, ...] = (
    Variant(
        name="quic stock-like 1452", path="quic", batch=False, wide=False, pacing=True, gso=False
    ),
    Variant(name="quic +batch 1452", path="quic", wide=False, pacing=True),
    Variant(name="quic +batch 9000 (paced)", path="quic", datagram=9000, pacing=True),
    Variant(name="quic +batch -pacing 9000", path="quic", datagram=9000),
    Variant(name="quic +batch -pacing -gso 9000", path="quic", datagram=9000, gso=False),
    Variant(name="quic -batch -pacing 9000", path="quic", datagram=9000, batch=False),
    Variant(name="quic +batch -pacing 16384 narrow", path="quic", datagram=16384, wide=False),
    Variant(name="quic +batch -pacing +wide 32000", path="quic", datagram=32000),
    Variant(name="quic -batch -pacing +wide 60000", path="quic", datagram=60000, batch=False),
    Variant(name="quic +batch +wide 60000 (paced)", path="quic", datagram=60000, pacing=True),
    Variant(name="quic +batch -pacing +wide 60000", path="quic", datagram=60000),
    Variant(name="quic +batch -pacing +wide -gso 60000", path="quic", datagram=60000, gso=False),
)
_ALPNS = {16: "moqt-16", 14: "moq-00"}
MOQT_ROWS: tuple[Variant, ...] = tuple(
    Variant(
        name=f"moqt{'' if d == 16 else ' d14'} {be} {dg} B datagrams",
        path="moqt",
        datagram=dg,
        backend=be,
        draft=d,
    )
    for d in (16, 14)
    for be in ("aioquic", "qh3")
    for dg in (1452, 9000, 60000)
)
TCP_ROW = Variant(name="tcp", path="tcp")


def _groups_for(object_size: int, megabytes: int) -> int:
    return max(1, round(megabytes * 1_000_000 / (object_size * OBJECTS_PER_GROUP)))


@click.command("transport")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
@click.option("--mb", default=200, show_default=True, help="Megabytes moved per row and size.")
@click.option(
    "--sizes",
    default="23000,160000",
    show_default=True,
    help="Object sizes in bytes, comma-separated.",
)
@click.option(
    "--levers", is_flag=True, help="Also run raw-QUIC rows switching one lever at a time."
)
@click.option("--raw-only", is_flag=True, help="Only raw QUIC and TCP rows (no MoQT stack).")
@click.option("--only", "only", help="Run only rows whose name contains this text (and tcp).")
@click.option("--repeat", default=1, show_default=True, help="Runs per row; the median counts.")
@click.option(
    "--draft",
    "drafts",
    default="16",
    show_default=True,
    help="MoQT versions of the MoQT rows, comma-separated (16, 14); d14 rows are named so.",
)
@click.option(
    "--backend",
    "backends",
    default="aioquic,qh3",
    show_default=True,
    help="QUIC libraries of the MoQT rows, comma-separated.",
)
def transport(
    as_json: bool,
    mb: int,
    sizes: str,
    levers: bool,
    raw_only: bool,
    only: str | None,
    repeat: int,
    drafts: str,
    backends: str,
) -> None:
    """Throughput of MoQT/QUIC vs plain TCP between two processes on loopback."""
    wanted = set(backends.split(","))
    versions = {int(d) for d in drafts.split(",") if d}
    rows: list[Variant] = (
        [] if raw_only else [r for r in MOQT_ROWS if r.backend in wanted and r.draft in versions]
    )
    if levers or raw_only:
        rows += LEVER_ROWS
    rows.append(TCP_ROW)
    if only:
        rows = [r for r in rows if only in r.name or r.path == "tcp"]
    results: list[dict[str, Any]] = []
    for size in [int(s) for s in sizes.split(",") if s]:
        work = Workload(object_size=size, groups=_groups_for(size, mb))
        for variant in rows:
            click.echo(f"[{size} B objects] {variant.name} ...", err=True, nl=False)
            runs = sorted(
                (run_variant(work, variant) for _ in range(max(1, repeat))), key=lambda m: m.mb_s
            )
            median = runs[len(runs) // 2]
            click.echo(" " + ", ".join(f"{r.mb_s:,.1f}" for r in runs) + " MB/s", err=True)
            results.append(
                {
                    "object_size": size,
                    **asdict(variant),
                    "mb_s": round(median.mb_s, 1),
                    "sub_cpu_ms_per_mb": round(median.sub_cpu_ms_per_mb, 2),
                    "pub_cpu_ms_per_mb": round(median.pub_cpu_ms_per_mb, 2),
                }
            )
    summary = _summary(results)
    if as_json:
        click.echo(json.dumps({**summary, "rows": results}))
        return
    _print_table(results, summary)


def _summary(results: list[dict[str, Any]]) -> dict[str, Any]:
    big = [r for r in results if r["object_size"] == max(r["object_size"] for r in results)]
    tcp = max((r["mb_s"] for r in big if r["path"] == "tcp"), default=0.0)
    moqt = [r for r in big if r["path"] == "moqt"] or [r for r in big if r["path"] == "quic"]
    best = max((r["mb_s"] for r in moqt), default=0.0)
    at_9000 = max((r["mb_s"] for r in moqt if r["datagram"] <= 9000), default=0.0)
    return {
        "object_size": big[0]["object_size"] if big else 0,
        "moqt_mb_s": best,
        "moqt_mb_s_9000": at_9000,
        "tcp_mb_s": tcp,
        "ratio": round(best / tcp, 4) if tcp else 0.0,
    }


def _print_table(results: list[dict[str, Any]], summary: dict[str, Any]) -> None:
    click.echo(
        f"{'object':>8}  {'row':<36} {'datagram':>8} {'MB/s':>9} {'sub ms/MB':>10} {'pub ms/MB':>10}"
    )
    for r in results:
        dg = "-" if r["path"] == "tcp" else str(r["datagram"])
        click.echo(
            f"{r['object_size']:>8}  {r['name']:<36} {dg:>8} {r['mb_s']:>9,.1f}"
            f" {r['sub_cpu_ms_per_mb']:>10.2f} {r['pub_cpu_ms_per_mb']:>10.2f}"
        )
    click.echo(
        f"\n{summary['object_size']} B objects: MoQT best {summary['moqt_mb_s']:,.1f} MB/s, "
        f"≤9000 B datagrams {summary['moqt_mb_s_9000']:,.1f} MB/s, TCP {summary['tcp_mb_s']:,.1f}"
        f" MB/s, ratio {summary['ratio']:.3f}"
    )


__all__ = [
    "LEVER_ROWS",
    "MOQT_ROWS",
    "Measurement",
    "Variant",
    "Workload",
    "run_variant",
    "transport",
]

if __name__ == "__main__":  # pragma: no cover
    sys.exit(transport())
