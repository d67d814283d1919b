"""The one module that touches aioquic's asyncio layer and internals: QUIC endpoints for MoQT.

Everything else in ``ray_kvmoq.moqt`` is sans-I/O. This module turns a
:class:`~aioquic.quic.connection.QuicConnection` into a running endpoint (``connect_quic`` and
``serve_quic``), builds TLS configurations (``TransportConfig``), and applies the fast-path
changes that make aioquic move hundreds of MB/s (see ``docs`` and ``kvmoq bench transport``):

1. **Batched receive (ACK coalescing).** Stock aioquic answers every datagram with a full
   ``datagrams_to_send`` pass (an ACK build, a packet builder, a stream walk). We read every datagram
   already waiting on the socket (up to ``max_receive_batch``), feed them all to the connection,
   and only then process events and transmit once. On a server the batch spans all connections
   sharing the socket; each connection touched by the batch transmits once at its end.
2. **Wide STREAM frames.** aioquic writes a STREAM frame's length as a 2-byte varint (at most
   16,383 bytes) and one frame per stream per packet, so datagrams larger than ~16 KB either stay
   mostly empty or are corrupt. The patched writer (:func:`_write_stream_frame_wide`, installed per
   connection, never globally) reserves a 4-byte varint length, so one frame fills a 60 KB datagram.
   Any RFC 9000 receiver parses it (length is a plain varint); only the sender changes.
3. **Datagram size negotiated after the handshake.** The handshake runs at 1,200 bytes (the RFC 9000
   minimum, so any peer accepts our Initial). On HANDSHAKE_COMPLETED the connection grows to
   ``max_datagram_size`` bounded by the peer's ``max_udp_payload_size`` transport parameter, which
   we capture while aioquic parses it; aioquic itself ignores that bound.
4. **Larger socket buffers and flow-control windows**, so a burst of large datagrams is not dropped
   by the kernel and one stream is not starved by MAX_STREAM_DATA. We create the UDP sockets
   ourselves: asyncio only hands out a restricted wrapper, which can neither be drained (1.)
   nor tuned reliably.
5. **Pacing that survives coarse timers.** aioquic's pacer lets at most ~16 datagrams (or a
   quarter of the window) out per timer wake-up. An event loop whose timers fire in whole
   milliseconds — uvloop, which Ray's async actors run — then caps a connection at 16
   datagrams per ms (23 MB/s at 1,452 bytes) whatever the window. :class:`GranularPacer` keeps
   the same average rate (window / RTT) but lets a burst cover ``pacing_granularity`` seconds
   (2 ms), so a late timer costs nothing. ``pacing=False`` turns pacing off entirely (the
   congestion window alone limits what is in flight).
6. **UDP GSO** (Linux ``UDP_SEGMENT``): a run of equal-size datagrams leaves in one ``sendmsg``;
   the receiver still sees ordinary datagrams. Falls back to ``sendto`` where unsupported.

Backends: ``TransportConfig.backend`` picks the QUIC library: ``"aioquic"`` (this module) or
``"qh3"`` (:mod:`.aio_qh3`: aioquic's API with crypto, buffers and UDP batching in Rust; the
levers above that apply are carried over there). Both yield a :class:`QuicEndpoint`; the
session above sees aioquic event classes either way. ``"auto"`` uses qh3 when it is installed,
else aioquic; the default is aioquic (interop-tested), the relays use ``"auto"`` between
themselves.

Invariants: all patches are per connection (``FastQuicProtocol.__init__``), each can be switched
off in ``TransportConfig`` (the bench measures each), and nothing here knows about MoQT beyond the
ALPN. The application sees QUIC events through one callback and must call
:meth:`FastQuicProtocol.transmit` (or ``transmit_soon``) after it writes to the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
import struct
import types
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol, cast

from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.asyncio.server import QuicServer
from aioquic.buffer import Buffer, size_uint_var
from aioquic.quic import events
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE, QuicConfiguration
from aioquic.quic.connection import NetworkAddress, QuicConnection
from aioquic.quic.packet import QuicFrameType, pull_quic_transport_parameters
from aioquic.quic.recovery import QuicPacketPacer
from cryptography import x509
from cryptography.hazmat.primitives import serialization

MOQT_ALPN = "moq-00"
"""ALPN of MoQT draft-14 over raw QUIC (d14 §3.1.2)."""

MOQT_ALPNS: tuple[str, ...] = ("moqt-16", MOQT_ALPN)
"""ALPNs an endpoint offers by default, newest first: draft-16 (d16 §3.1, the ALPN is the
version), then draft-14. A TLS server picks the first of *its* list the client offered, so
two of our endpoints settle on draft-16 and a peer offering only ``moq-00`` gets draft-14."""

MAX_UDP_PAYLOAD = 65527
"""RFC 9000 §18.2 default and upper bound of ``max_udp_payload_size``."""

MAX_IPV4_UDP_PAYLOAD = 65507
"""Largest UDP payload an IPv4 packet carries (65,535 - 20 - 8): the cap we actually use."""

MAX_NARROW_DATAGRAM = 16384
"""Largest datagram safe with aioquic's stock 2-byte STREAM length (frames stay < 16,384 bytes)."""

EventHandler = Callable[[events.QuicEvent], None]

BACKENDS = ("auto", "aioquic", "qh3")
"""Values of :attr:`TransportConfig.backend`."""


def resolve_backend(name: str) -> str:
    """The QUIC library ``name`` stands for: "auto" is qh3 when importable, else aioquic."""
    if name not in BACKENDS:
        raise ValueError(f"unknown QUIC backend {name!r}; use one of {', '.join(BACKENDS)}")
    if name != "auto":
        return name
    try:
        import qh3  # noqa: F401
    except ImportError:
        return "aioquic"
    return "qh3"


class QuicEndpoint(Protocol):
    """What the MoQT layer uses of a running QUIC connection (either backend)."""

    on_event: EventHandler
    """Receives every QUIC event (aioquic classes)."""

    @property
    def quic(self) -> Any:
        """The sans-I/O connection (aioquic's API)."""

    @property
    def datagram_size(self) -> int:
        """The datagram size in use now."""

    @property
    def alpn(self) -> str | None:
        """The ALPN the handshake negotiated (None before it completed)."""

    @property
    def is_closed(self) -> bool:
        """Whether the connection has terminated."""

    def transmit(self) -> None:
        """Send what the connection has to send now."""

    def transmit_soon(self) -> None:
        """Send at the end of this loop turn."""

    def send_buffered(self) -> int:
        """Bytes queued on streams and not yet sent (or acknowledged)."""

    async def drain(self, limit: int = 8 << 20) -> None:
        """Wait until at most ``limit`` bytes are buffered."""

    def close(self, error_code: int = 0, reason_phrase: str = "") -> None:
        """Close the connection."""

    async def wait_closed(self) -> None:
        """Wait until the connection has terminated."""


@dataclass(frozen=True, kw_only=True)
class TransportConfig:
    """QUIC, TLS and fast-path settings of one endpoint (client or server).

    TLS: a server needs ``certfile``/``keyfile`` or ``cert_pem``/``key_pem``; a client verifies
    the server against ``cafile``/``cadata`` (or the system store) unless ``verify_peer`` is off
    (``--tls-disable-verify``, self-signed test peers).
    """

    alpns: tuple[str, ...] = MOQT_ALPNS
    """ALPNs offered (client) or accepted (server), most preferred first; each names a MoQT
    version (``moqt-16``: draft-16, ``moq-00``: draft-14), the session speaks the one agreed."""
    backend: str = "aioquic"
    """QUIC library: "aioquic", "qh3", or "auto" (qh3 when installed). Both ends of a
    connection may use different ones. The relays pick "auto" between themselves; endpoints
    that serve other stacks stay on aioquic (a qh3 server lost groups to moq-rs subscribers
    and answered aiomoqt late in the interop runs)."""
    max_datagram_size: int = 1452
    """UDP payload size used after the handshake (bounded by the peer's limit). 1452 suits any
    Ethernet path; 9000 a jumbo-frame link; up to 65527 on loopback."""
    wide_stream_frames: bool = True
    """Write STREAM frame lengths as 4-byte varints (needed above ~16 KB datagrams)."""
    batch_receive: bool = True
    """Drain all waiting datagrams before processing events and transmitting once."""
    gso: bool = True
    """Send runs of equal-size datagrams with one ``sendmsg`` (Linux UDP_SEGMENT), where the
    kernel supports it; otherwise one ``sendto`` per datagram."""
    max_receive_batch: int = 64
    """Most datagrams read per batch."""
    socket_buffer: int = 4 << 20
    """SO_RCVBUF / SO_SNDBUF requested for the UDP socket (0: leave the OS default)."""
    pacing: bool = True
    """Pace packets at window / RTT (:class:`GranularPacer`); off: only the congestion window
    limits bursts."""
    pacing_granularity: float = 0.002
    """Seconds of sending one paced burst may cover (at least the loop's timer resolution)."""
    congestion_control: str = "reno"
    """aioquic congestion controller name ("reno" or "cubic")."""
    max_data: int = 64 << 20
    """Connection flow-control window we grant the peer."""
    max_stream_data: int = 16 << 20
    """Per-stream flow-control window we grant the peer."""
    idle_timeout: float = 30.0
    """Seconds without any packet before the connection is dropped (peer death detection)."""
    keepalive: float | None = -1.0
    """Seconds between PINGs so a quiet but live peer is never idled out; negative: a third of
    ``idle_timeout``; None: no keepalive."""
    max_datagram_frame_size: int = 65536
    """QUIC DATAGRAM support (d14 requires it to be negotiated)."""
    cafile: str | None = None
    """PEM file with CA certificates to verify the peer against."""
    cadata: bytes | None = None
    """PEM CA certificates (alternative to ``cafile``)."""
    certfile: str | None = None
    """PEM certificate chain of this endpoint (servers; optional for clients)."""
    keyfile: str | None = None
    """PEM private key for ``certfile``."""
    cert_pem: bytes | None = None
    """In-memory certificate (alternative to ``certfile``)."""
    key_pem: bytes | None = None
    """In-memory private key (alternative to ``keyfile``)."""
    verify_peer: bool = True
    """Clients: verify the server certificate. Off only for tests and debugging."""
    server_name: str | None = None
    """SNI / name to verify (default: the host connected to)."""
    extra: dict[str, Any] = field(default_factory=dict)
    """Extra ``QuicConfiguration`` attributes (escape hatch for experiments)."""

    def quic_configuration(self, *, is_client: bool) -> QuicConfiguration:
        """Build aioquic's configuration. The handshake runs at 1,200-byte datagrams."""
        cfg = QuicConfiguration(
            is_client=is_client,
            alpn_protocols=list(self.alpns),
            congestion_control_algorithm=self.congestion_control,
            idle_timeout=self.idle_timeout,
            max_data=self.max_data,
            max_stream_data=self.max_stream_data,
            max_datagram_frame_size=self.max_datagram_frame_size,
            max_datagram_size=SMALLEST_MAX_DATAGRAM_SIZE,
            server_name=self.server_name,
        )
        if self.cafile or self.cadata:
            cfg.load_verify_locations(cafile=self.cafile, cadata=self.cadata)
        if is_client and not self.verify_peer:
            cfg.verify_mode = ssl.CERT_NONE
        if self.certfile:
            cfg.load_cert_chain(self.certfile, self.keyfile)
        elif self.cert_pem is not None:
            if self.key_pem is None:
                raise ValueError("TransportConfig.cert_pem needs key_pem")
            certs = x509.load_pem_x509_certificates(self.cert_pem)
            cfg.certificate = certs[0]
            cfg.certificate_chain = list(certs[1:])
            cfg.private_key = serialization.load_pem_private_key(self.key_pem, password=None)
        if not is_client and cfg.certificate is None:
            raise ValueError("a QUIC server needs a certificate: set certfile/keyfile or cert_pem")
        for key, value in self.extra.items():
            setattr(cfg, key, value)
        return cfg


# --------------------------------------------------------------------------- aioquic patches


def _write_stream_frame_wide(
    self: QuicConnection, builder: Any, space: Any, stream: Any, max_offset: int
) -> int:
    """``QuicConnection._write_stream_frame`` with a 4-byte length field.

    Same contract as aioquic 1.7's method (returns the new bytes counted against MAX_DATA);
    the only change is the length's width, so frames may reach 2^30 - 1 bytes.
    """
    offset = stream.sender.next_offset
    overhead = 1 + size_uint_var(stream.stream_id) + (size_uint_var(offset) if offset else 0) + 4
    before = stream.sender.highest_offset
    frame = stream.sender.get_frame(builder.remaining_flight_space - overhead, max_offset)
    if frame is None:
        return 0
    frame_type = QuicFrameType.STREAM_BASE | 2
    if frame.offset:
        frame_type |= 4
    if frame.fin:
        frame_type |= 1
    buf = builder.start_frame(
        frame_type,
        capacity=overhead,
        handler=stream.sender.on_data_delivery,
        handler_args=(frame.offset, frame.offset + len(frame.data), frame.fin),
    )
    buf.push_uint_var(stream.stream_id)
    if frame.offset:
        buf.push_uint_var(frame.offset)
    buf.push_uint32(len(frame.data) | 0x80000000)
    buf.push_bytes(frame.data)
    if self._quic_logger is not None:
        builder.quic_logger_frames.append(
            self._quic_logger.encode_stream_frame(frame, stream_id=stream.stream_id)
        )
    return int(stream.sender.highest_offset - before)


def _capture_peer_udp_limit(quic: QuicConnection, sink: list[int]) -> None:
    """Record the peer's ``max_udp_payload_size`` when aioquic parses its transport parameters."""
    original = quic._parse_transport_parameters

    def parse(self: QuicConnection, data: bytes, from_session_ticket: bool = False) -> None:
        original(data, from_session_ticket)
        params = pull_quic_transport_parameters(Buffer(data=data))
        sink.append(params.max_udp_payload_size or MAX_UDP_PAYLOAD)

    setattr(quic, "_parse_transport_parameters", types.MethodType(parse, quic))  # noqa: B010


def set_datagram_size(quic: QuicConnection, size: int) -> None:
    """Switch a connection to ``size``-byte datagrams (packet builder, pacer, congestion window)."""
    quic._max_datagram_size = size
    loss = quic._loss
    loss._pacer._max_datagram_size = size
    cc = loss._cc
    if hasattr(cc, "_max_datagram_size"):
        cc._max_datagram_size = size
    if hasattr(cc, "additive_increase_factor"):
        cc.additive_increase_factor = size
    cc.congestion_window = max(cc.congestion_window, 10 * size)


def _never_wait(now: float) -> None:
    """Pacer replacement: never hold a packet back (congestion control still applies)."""
    return None


class GranularPacer(QuicPacketPacer):
    """aioquic's token-bucket pacer whose bucket holds at least ``granularity`` seconds of
    sending, so timers that fire late (millisecond event loops) do not lower the rate.

    Also offers ``start_pacing``, the extra entry point of qh3's pacer, so either library's
    recovery code can drive it.
    """

    def __init__(self, *, max_datagram_size: int, granularity: float = 0.002) -> None:
        super().__init__(max_datagram_size=max_datagram_size)
        self.granularity = granularity
        """Smallest burst, in seconds of sending at the pacing rate."""

    def update_rate(self, congestion_window: int, smoothed_rtt: float) -> None:
        super().update_rate(congestion_window, smoothed_rtt)
        self.bucket_max = max(self.bucket_max, self.granularity)

    def start_pacing(self, now: float, congestion_window: int, smoothed_rtt: float) -> None:
        """Begin pacing at ``now`` (qh3's recovery calls this once the RTT is first known)."""
        self.evaluation_time = now
        self.update_rate(congestion_window, smoothed_rtt)


# --------------------------------------------------------------------------- protocol


class _ReceiveBatch:
    """Shared by a server socket and its connections: who must transmit when a batch ends."""

    def __init__(self) -> None:
        self.active = False
        self.touched: dict[int, FastQuicProtocol] = {}


class FastQuicProtocol(QuicConnectionProtocol):
    """One QUIC connection with the fast path and a single event callback.

    ``on_event`` receives every QUIC event (after aioquic's own bookkeeping); it may write to the
    connection, and the protocol transmits after each batch of events. Stream data never goes
    through asyncio streams here.
    """

    def __init__(
        self,
        quic: QuicConnection,
        stream_handler: Any = None,
        *,
        config: TransportConfig,
        batch: _ReceiveBatch | None = None,
    ) -> None:
        super().__init__(quic, stream_handler)
        self.config = config
        self.on_event: EventHandler = lambda event: None
        self._batch = batch
        self._peer_udp_limit: list[int] = []
        self._drain_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._sock: socket.socket | None = None
        self._send_sock: socket.socket | None = None
        self._keepalive_handle: asyncio.TimerHandle | None = None
        self._alpn: str | None = None
        if config.wide_stream_frames:
            setattr(  # noqa: B010
                quic, "_write_stream_frame", types.MethodType(_write_stream_frame_wide, quic)
            )
        _capture_peer_udp_limit(quic, self._peer_udp_limit)
        if not config.pacing:
            setattr(quic._loss._pacer, "next_send_time", _never_wait)  # noqa: B010
        else:
            quic._loss._pacer = GranularPacer(
                max_datagram_size=quic._max_datagram_size, granularity=config.pacing_granularity
            )

    @property
    def quic(self) -> QuicConnection:
        """The underlying sans-I/O connection."""
        return self._quic

    @property
    def datagram_size(self) -> int:
        """The datagram size in use now."""
        return int(self._quic._max_datagram_size)

    @property
    def alpn(self) -> str | None:
        """The ALPN the handshake negotiated (None before it completed)."""
        return self._alpn

    @property
    def is_closed(self) -> bool:
        """Whether the connection has terminated."""
        return self._closed.is_set()

    def attach_socket(self, sock: socket.socket, *, drain: bool = True) -> None:
        """The UDP socket this connection sends on (GSO) and, with ``drain``, reads batches
        from (clients; a server's connections share its socket, which the server drains)."""
        self._send_sock = sock
        if drain:
            self._sock = sock

    # receive path ---------------------------------------------------------------------------

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        quic = self._quic
        quic.receive_datagram(cast(bytes, data), addr, now=self._loop.time())
        if self._batch is not None and self._batch.active:
            self._batch.touched[id(self)] = self
            return
        if self.config.batch_receive and self._sock is not None:
            for data2, addr2 in _drain_socket(self._sock, self.config.max_receive_batch - 1):
                quic.receive_datagram(data2, addr2, now=self._loop.time())
        self.batch_done()

    def batch_done(self) -> None:
        """Process the events of everything received, then transmit once."""
        self._process_events()
        self.transmit()

    def _schedule_keepalive(self) -> None:
        interval = self.config.keepalive
        if interval is None:
            return
        if interval < 0:
            interval = self.config.idle_timeout / 3
        self._keepalive_handle = self._loop.call_later(interval, self._send_keepalive)

    def _send_keepalive(self) -> None:
        if self.is_closed:
            return
        self._quic.send_ping(0)  # uid 0: no waiter, the ACK is all we need
        self.transmit()
        self._schedule_keepalive()

    def quic_event_received(self, event: events.QuicEvent) -> None:
        if isinstance(event, events.HandshakeCompleted):
            # aioquic marks the connection connected only when a wait_connected() waiter
            # already exists; a handshake that completes before the caller's first await
            # (uvloop runs socket callbacks before freshly created tasks) left it unmarked,
            # and wait_connected() then hung until its timeout.
            self._connected = True
            self._alpn = event.alpn_protocol
            self._schedule_keepalive()
            peer = self._peer_udp_limit[-1] if self._peer_udp_limit else MAX_UDP_PAYLOAD
            size = min(self.config.max_datagram_size, peer, MAX_IPV4_UDP_PAYLOAD)
            size = max(SMALLEST_MAX_DATAGRAM_SIZE, size)
            if not self.config.wide_stream_frames:
                size = min(size, MAX_NARROW_DATAGRAM)
            set_datagram_size(self._quic, size)
        self.on_event(event)
        if isinstance(event, events.ConnectionTerminated):
            self._wake_drain_waiters(error=True)
            if self._keepalive_handle is not None:
                self._keepalive_handle.cancel()

    # send path ------------------------------------------------------------------------------

    def transmit(self) -> None:
        """Send what the connection has to send (GSO runs where possible), re-arm the timer.

        If the socket is gone (listener closed) the datagrams are dropped but the timers keep
        running, so the connection still reaches ConnectionTerminated.
        """
        self._transmit_task = None
        transport = self._transport
        datagrams = self._quic.datagrams_to_send(now=self._loop.time())
        if datagrams and transport is not None and not transport.is_closing():
            sock = self._send_sock if self.config.gso else None
            if sock is None or getattr(transport, "get_write_buffer_size", lambda: 0)():
                for data, addr in datagrams:
                    transport.sendto(data, addr)
            else:
                _send_gso(sock, transport, datagrams)
        self._rearm_timer()
        if self._drain_waiters:
            self._wake_drain_waiters()

    def _rearm_timer(self) -> None:
        timer_at = self._quic.get_timer()
        if self._timer is not None and self._timer_at != timer_at:
            self._timer.cancel()
            self._timer = None
        if self._timer is None and timer_at is not None:
            self._timer = self._loop.call_at(timer_at, self._handle_timer)
        self._timer_at = timer_at

    def transmit_soon(self) -> None:
        """Transmit at the end of this loop turn (coalesces many writes into one pass)."""
        self._transmit_soon()

    def send_buffered(self) -> int:
        """Bytes written to streams and not yet acknowledged by the peer."""
        return sum(len(s.sender._buffer) for s in self._quic._streams.values())

    async def drain(self, limit: int = 8 << 20) -> None:
        """Wait until at most ``limit`` bytes are buffered (aioquic buffers without bound).

        Raises ``ConnectionError`` if the connection terminates meanwhile.
        """
        if self.is_closed:
            raise ConnectionError("QUIC connection closed")
        if self.send_buffered() <= limit:
            return
        waiter: asyncio.Future[None] = self._loop.create_future()
        self._drain_waiters.append((limit, waiter))
        self.transmit_soon()
        await waiter

    def _wake_drain_waiters(self, *, error: bool = False) -> None:
        buffered = -1 if error else self.send_buffered()
        keep: list[tuple[int, asyncio.Future[None]]] = []
        for limit, waiter in self._drain_waiters:
            if waiter.done():
                continue
            if error:
                waiter.set_exception(ConnectionError("QUIC connection closed"))
            elif buffered <= limit:
                waiter.set_result(None)
            else:
                keep.append((limit, waiter))
        self._drain_waiters = keep


_SO_RCVBUFFORCE = getattr(socket, "SO_RCVBUFFORCE", 33)
_SO_SNDBUFFORCE = getattr(socket, "SO_SNDBUFFORCE", 32)


def _udp_socket(host: str, port: int, family: int, size: int) -> socket.socket:
    """A non-blocking UDP socket bound to ``host:port`` with ``size``-byte kernel buffers.

    We own the socket object (asyncio only exposes a restricted wrapper) so that the receive
    path can drain it. The FORCE variants lift the ``rmem_max`` cap when privileged.
    """
    sock = socket.socket(family, socket.SOCK_DGRAM)
    try:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
        if size > 0:
            for force, plain in (
                (_SO_RCVBUFFORCE, socket.SO_RCVBUF),
                (_SO_SNDBUFFORCE, socket.SO_SNDBUF),
            ):
                try:
                    sock.setsockopt(socket.SOL_SOCKET, force, size)
                except OSError:
                    with contextlib.suppress(OSError):
                        sock.setsockopt(socket.SOL_SOCKET, plain, size)
        sock.bind((host, port))
        sock.setblocking(False)
    except BaseException:
        sock.close()
        raise
    return sock


_UDP_SEGMENT = 103  # linux/udp.h
_GSO_MAX_SEGMENTS = 64
_GSO_MAX_BYTES = 65000
_gso_broken = not hasattr(socket, "SOL_UDP") or not hasattr(socket.socket, "sendmsg")


def _send_gso(
    sock: socket.socket, transport: asyncio.DatagramTransport, datagrams: list[tuple[bytes, Any]]
) -> None:
    """Send ``datagrams`` in order, each run of equal-size ones to one address in one syscall.

    A run may end with one shorter datagram (the kernel cuts the buffer into ``size`` pieces).
    Anything the socket refuses goes through the transport, which buffers it.
    """
    global _gso_broken
    i, n = 0, len(datagrams)
    while i < n:
        data, addr = datagrams[i]
        size = total = len(data)
        j = i + 1
        while j < n and j - i < _GSO_MAX_SEGMENTS and datagrams[j][1] == addr:
            length = len(datagrams[j][0])
            if length > size or total + length > _GSO_MAX_BYTES:
                break
            total += length
            j += 1
            if length < size:
                break
        if j - i == 1 or _gso_broken:
            for k in range(i, j):
                transport.sendto(*datagrams[k])
            i = j
            continue
        payload = b"".join(d for d, _ in datagrams[i:j])
        try:
            segment = [(socket.SOL_UDP, _UDP_SEGMENT, struct.pack("=H", size))]
            sock.sendmsg([payload], segment, 0, addr)
        except (BlockingIOError, InterruptedError):
            for k in range(i, j):
                transport.sendto(*datagrams[k])
        except OSError:  # no GSO here (old kernel, no checksum offload): never try again
            _gso_broken = True
            for k in range(i, j):
                transport.sendto(*datagrams[k])
        i = j


def _drain_socket(sock: socket.socket, limit: int) -> list[tuple[bytes, Any]]:
    out: list[tuple[bytes, Any]] = []
    for _ in range(limit):
        try:
            out.append(sock.recvfrom(MAX_UDP_PAYLOAD + 64))
        except (BlockingIOError, InterruptedError):
            break
        except OSError:  # e.g. ICMP port unreachable surfaced as ECONNREFUSED: stop the batch
            break
    return out


# --------------------------------------------------------------------------- server


class _BatchingQuicServer(QuicServer):
    """aioquic's ``QuicServer`` reading whole batches of datagrams per socket wake-up."""

    def __init__(self, *, transport_config: TransportConfig, batch: _ReceiveBatch, **kw: Any):
        super().__init__(**kw)
        self._tconfig = transport_config
        self._batch = batch
        self._sock: socket.socket | None = None

    def attach_socket(self, sock: socket.socket) -> None:
        """The listening socket, drained after each wake-up."""
        self._sock = sock

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        batch = self._batch
        if not self._tconfig.batch_receive or self._sock is None:
            batch.active = True
            try:
                super().datagram_received(data, addr)
            finally:
                batch.active = False
            self._flush_batch()
            return
        batch.active = True
        try:
            super().datagram_received(data, addr)
            for data2, addr2 in _drain_socket(self._sock, self._tconfig.max_receive_batch - 1):
                super().datagram_received(data2, addr2)
        finally:
            batch.active = False
        self._flush_batch()

    def _flush_batch(self) -> None:
        touched = list(self._batch.touched.values())
        self._batch.touched.clear()
        for protocol in touched:
            protocol.batch_done()


@dataclass(kw_only=True)
class QuicListener:
    """A running QUIC server socket. ``close()`` stops accepting and drops all connections."""

    host: str
    """Bound address."""
    port: int
    """Bound UDP port (useful with port 0)."""
    server: QuicServer
    """The aioquic server protocol."""

    def close(self) -> None:
        """Close every connection (with NO_ERROR) and the socket."""
        self.server.close()


async def serve_quic(
    host: str,
    port: int,
    *,
    config: TransportConfig,
    on_connection: Callable[[Any], None],
) -> QuicListener:
    """Listen on ``host:port`` (UDP); call ``on_connection`` with each new connection's protocol.

    ``on_connection`` runs synchronously as the connection is created (before the handshake) and
    should set ``protocol.on_event``.
    """
    if resolve_backend(config.backend) == "qh3":
        from .aio_qh3 import serve_qh3

        return await serve_qh3(host, port, config=config, on_connection=on_connection)
    loop = asyncio.get_running_loop()
    batch = _ReceiveBatch()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    sock = _udp_socket(host, port, infos[0][0], config.socket_buffer)

    def create_protocol(quic: QuicConnection, stream_handler: Any = None) -> FastQuicProtocol:
        protocol = FastQuicProtocol(quic, stream_handler, config=config, batch=batch)
        protocol.attach_socket(sock, drain=False)
        on_connection(protocol)
        return protocol

    server_factory = partial(
        _BatchingQuicServer,
        transport_config=config,
        batch=batch,
        configuration=config.quic_configuration(is_client=False),
        create_protocol=create_protocol,
    )
    _, protocol = await loop.create_datagram_endpoint(server_factory, sock=sock)
    server = protocol
    server.attach_socket(sock)
    return QuicListener(host=host, port=int(sock.getsockname()[1]), server=server)


# --------------------------------------------------------------------------- client


@contextlib.asynccontextmanager
async def connect_quic(
    host: str,
    port: int,
    *,
    config: TransportConfig,
    on_event: EventHandler | None = None,
    connect_timeout: float = 10.0,
) -> AsyncIterator[FastQuicProtocol]:
    """Connect to ``host:port``; yield the protocol once the handshake completed; close on exit.

    Raises ``ConnectionError`` (or ``TimeoutError``) if the handshake fails or takes longer than
    ``connect_timeout`` seconds.
    """
    if resolve_backend(config.backend) == "qh3":
        from .aio_qh3 import connect_qh3

        async with connect_qh3(
            host, port, config=config, on_event=on_event, connect_timeout=connect_timeout
        ) as qh3_protocol:
            yield qh3_protocol  # type: ignore[misc]
        return
    loop = asyncio.get_running_loop()
    cfg = config.quic_configuration(is_client=True)
    if cfg.server_name is None:
        cfg.server_name = host
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    family, _, _, _, addr = infos[0]
    quic = QuicConnection(configuration=cfg)
    local = "::" if family == socket.AF_INET6 else "0.0.0.0"
    sock = _udp_socket(local, 0, family, config.socket_buffer)
    transport, proto = await loop.create_datagram_endpoint(
        lambda: FastQuicProtocol(quic, config=config), sock=sock
    )
    protocol = proto
    protocol.attach_socket(sock)
    if on_event is not None:
        protocol.on_event = on_event
    try:
        protocol.connect(cast(NetworkAddress, addr))
        try:
            await asyncio.wait_for(protocol.wait_connected(), connect_timeout)
        except BaseException:
            # aioquic shields its handshake waiter, so a timeout leaves it pending; closing the
            # connection then fails it with an exception nobody would ever retrieve.
            waiter = protocol._connected_waiter
            if waiter is not None:
                waiter.add_done_callback(lambda f: f.cancelled() or f.exception())
            raise
        yield protocol
    finally:
        if not protocol.is_closed:
            protocol.close()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(protocol.wait_closed(), 2.0)
        transport.close()
