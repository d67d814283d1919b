"""The qh3 shell: QUIC endpoints for MoQT on ``qh3`` (aioquic's API; AEAD, header protection,
stream buffers and UDP batching in Rust), a drop-in for :mod:`.aio`'s aioquic endpoints.

Select it with ``TransportConfig(backend="qh3")``; :func:`~.aio.serve_quic` and
:func:`~.aio.connect_quic` dispatch here. The protocol object offers what
:class:`~.aio.FastQuicProtocol` offers (``on_event``, ``transmit``, ``transmit_soon``,
``send_buffered``, ``drain``, ``datagram_size``, ``is_closed``, ``close``), and every QUIC event
reaches ``on_event`` as the *aioquic* event class with the same fields, so the sans-I/O
session consumes qh3 exactly as it consumes aioquic.

Fast-path levers, as in :mod:`.aio` where they apply:

1. **Batched receive.** Clients get whole bursts from qh3's ``recvmmsg``/GRO transport
   (``datagrams_received``) and process events and transmit once per burst. On a server the
   datagrams of one socket wake-up are fed to their connections first; each connection touched
   processes events and transmits once, at the end of that loop turn.
2. **Batched send.** qh3's transport sends each transmit's datagrams with ``sendmmsg``/GSO.
3. **Datagram size set after the handshake** (1,200 bytes until then), bounded by the peer's
   ``max_udp_payload_size`` and by 16,384 (qh3 writes 2-byte STREAM frame lengths; the wide
   frames of :mod:`.aio` live in Python code qh3 moved to Rust); qh3's own path-MTU probing is
   off (the size is configured). A qh3 client advertises the ``max_udp_payload_size`` it really
   receives (65,527), not qh3's fixed 1,472.
4. **Socket buffers and flow-control windows** from :class:`~.aio.TransportConfig`.
5. **Pacing that survives coarse timers** (:class:`~.aio.GranularPacer` replaces the Rust
   pacer after the handshake), or no pacing at all.

qh3 1.9 reports a stream's end again when a duplicate frame arrives after it finished (a
retransmission that crossed the ACK): such repeats are dropped here, or the session would see
a new stream that ends before its header. qh3 takes ``bytes`` only: a ``memoryview`` or ``bytearray`` written to a stream is turned into
``bytes`` first (one copy; qh3 then copies it into its Rust send buffer). Invariants: every
change is per connection (a connection subclass, never a patched module); nothing here knows
MoQT beyond the ALPN.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import fields
from typing import TYPE_CHECKING, Any, ClassVar, cast

from aioquic.quic import events as aq_events
from qh3._hazmat import Buffer
from qh3.asyncio._transport import create_optimized_datagram_transport
from qh3.asyncio.protocol import QuicConnectionProtocol
from qh3.asyncio.server import QuicServer
from qh3.quic import events
from qh3.quic.configuration import QuicConfiguration
from qh3.quic.connection import NetworkAddress, QuicConnection
from qh3.quic.packet import pull_quic_transport_parameters, push_quic_transport_parameters

if TYPE_CHECKING:
    from .aio import QuicListener, TransportConfig

__all__ = ["Qh3Protocol", "connect_qh3", "serve_qh3"]

_SMALLEST_DATAGRAM = 1200
_MAX_UDP_PAYLOAD = 65527
_RX_DONE_MAX = 1 << 16
"""Finished receive streams remembered to drop qh3's repeated end-of-stream events."""
_MAX_SEND_DATAGRAM = 16384
"""qh3 writes every STREAM frame length as a 2-byte varint (like stock aioquic), so a frame
must stay under 16,384 bytes: larger datagrams would carry corrupt frames to other stacks."""

_EVENT_MAP: dict[type, tuple[type, tuple[str, ...]]] = {}
for _name in (
    "ConnectionIdIssued",
    "ConnectionIdRetired",
    "ConnectionTerminated",
    "DatagramFrameReceived",
    "HandshakeCompleted",
    "PingAcknowledged",
    "ProtocolNegotiated",
    "StopSendingReceived",
    "StreamDataReceived",
    "StreamReset",
):
    _src, _dst = getattr(events, _name), getattr(aq_events, _name)
    _EVENT_MAP[_src] = (_dst, tuple(f.name for f in fields(_dst)))


_QH3_DATA = events.StreamDataReceived
_AQ_DATA = aq_events.StreamDataReceived


def as_aioquic_event(event: events.QuicEvent) -> aq_events.QuicEvent | None:
    """The aioquic event with the same meaning and fields (None for qh3-only events)."""
    if isinstance(event, _QH3_DATA):  # the hot path: one per STREAM frame
        return _AQ_DATA(data=event.data, end_stream=event.end_stream, stream_id=event.stream_id)
    known = _EVENT_MAP.get(type(event))
    if known is None:
        return None
    cls, names = known
    return cast(aq_events.QuicEvent, cls(**{n: getattr(event, n) for n in names}))


class _Qh3Connection(QuicConnection):
    """qh3's connection taking any bytes-like stream data and reporting the peer's
    ``max_udp_payload_size`` (no new slots: a server's connections are switched to it)."""

    __slots__ = ()
    peer_udp_limit: ClassVar[dict[int, int]] = {}

    def send_stream_data(self, stream_id: int, data: Any, end_stream: bool = False) -> None:
        super().send_stream_data(
            stream_id, data if type(data) is bytes else bytes(data), end_stream=end_stream
        )

    def _serialize_transport_parameters(self) -> bytes:
        # A qh3 client advertises a fixed max_udp_payload_size of 1,472 (a browser-like
        # fingerprint); its receive path takes any size, so say so, or every peer would cap
        # what it sends us at 1,472 bytes.
        data = super()._serialize_transport_parameters()
        if not self._is_client:
            return data
        params = pull_quic_transport_parameters(Buffer(data=data))
        params.max_udp_payload_size = _MAX_UDP_PAYLOAD
        buf = Buffer(capacity=len(data) + 64)
        push_quic_transport_parameters(buf, params)
        return bytes(buf.data)

    def _parse_transport_parameters(self, data: bytes, from_session_ticket: bool = False) -> None:
        super()._parse_transport_parameters(data, from_session_ticket)
        params = pull_quic_transport_parameters(Buffer(data=data))
        _Qh3Connection.peer_udp_limit[id(self)] = params.max_udp_payload_size or _MAX_UDP_PAYLOAD


class _NoPacer:
    """Pacer that never holds a packet back (congestion control still applies)."""

    def start_pacing(self, now: float, congestion_window: int, smoothed_rtt: float) -> None:
        return None

    def next_send_time(self, now: float) -> float | None:
        return None

    def update_after_send(self, now: float) -> None:
        return None

    def update_bucket(self, now: float) -> None:
        return None

    def update_rate(self, congestion_window: int, smoothed_rtt: float) -> None:
        return None


def set_datagram_size(quic: QuicConnection, size: int, *, config: TransportConfig) -> None:
    """Switch a qh3 connection to ``size``-byte datagrams (builder, congestion window, pacer:
    :class:`~.aio.GranularPacer` in place of qh3's own, or none without pacing)."""
    from .aio import GranularPacer

    quic._max_datagram_size = size
    quic._mtu_probe_sizes = []
    loss = quic._loss
    cc = loss._cc
    cc._max_datagram_size = size
    cc.congestion_window = max(cc.congestion_window, 10 * size)
    pacer: Any = _NoPacer()
    if config.pacing:
        pacer = GranularPacer(max_datagram_size=size, granularity=config.pacing_granularity)
        pacer.update_rate(cc.congestion_window, max(loss._rtt_smoothed, loss._rtt_initial))
    loss._pacer = pacer


def quic_configuration(config: TransportConfig, *, is_client: bool) -> QuicConfiguration:
    """qh3's configuration for ``config`` (the handshake runs at 1,200-byte datagrams)."""
    cfg = QuicConfiguration(
        is_client=is_client,
        alpn_protocols=list(config.alpns),
        idle_timeout=config.idle_timeout,
        max_data=config.max_data,
        max_stream_data=config.max_stream_data,
        max_datagram_frame_size=config.max_datagram_frame_size,
        max_datagram_size=_SMALLEST_DATAGRAM,
        probe_datagram_size=False,
        server_name=config.server_name,
    )
    if config.cafile or config.cadata:
        cfg.load_verify_locations(cafile=config.cafile, cadata=config.cadata)
    if is_client and not config.verify_peer:
        cfg.verify_mode = ssl.CERT_NONE
    if config.certfile:
        cfg.load_cert_chain(config.certfile, config.keyfile)
    elif config.cert_pem is not None:
        if config.key_pem is None:
            raise ValueError("TransportConfig.cert_pem needs key_pem")
        cfg.load_cert_chain(config.cert_pem, config.key_pem)
    if not is_client and cfg.certificate is None:
        raise ValueError("a QUIC server needs a certificate: set certfile/keyfile or cert_pem")
    for key, value in config.extra.items():
        setattr(cfg, key, value)
    return cfg


class Qh3Protocol(QuicConnectionProtocol):
    """One qh3 QUIC connection with the fast path and a single event callback (aioquic
    events; see the module docstring)."""

    def __init__(
        self,
        quic: QuicConnection,
        stream_handler: Any = None,
        *,
        config: TransportConfig,
        server: _Qh3Server | None = None,
    ) -> None:
        if type(quic) is QuicConnection:
            quic.__class__ = _Qh3Connection  # same layout: per-connection behaviour only
        super().__init__(quic, stream_handler)
        self.config = config
        self.on_event: Callable[[aq_events.QuicEvent], None] = lambda event: None
        self._server = server
        self._drain_waiters: list[tuple[int, asyncio.Future[None]]] = []
        self._keepalive_handle: asyncio.TimerHandle | None = None
        self._alpn: str | None = None
        self._pending_flush = False
        self._rx_done: set[int] = set()

    @property
    def quic(self) -> Any:
        """The underlying sans-I/O connection (qh3's, aioquic's API)."""
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

    def close(self, error_code: int = 0, reason_phrase: str = "") -> None:
        """Close the connection (CONNECTION_CLOSE with ``error_code``)."""
        self._quic.close(error_code=error_code, reason_phrase=reason_phrase)
        self.transmit()

    # receive path ---------------------------------------------------------------------------

    def datagram_received(self, data: bytes | str, addr: NetworkAddress) -> None:
        self._quic.receive_datagram(cast(bytes, data), addr, now=self._loop.time())
        if self._server is not None:  # a server socket's burst: flush once, after it
            if not self._pending_flush:
                self._pending_flush = True
                self._loop.call_soon(self._flush)
            return
        self._process_events()
        self.transmit()

    def _flush(self) -> None:
        self._pending_flush = False
        self._process_events()
        self.transmit()

    def quic_event_received(self, event: events.QuicEvent) -> None:
        if isinstance(event, events.HandshakeCompleted):
            self._connected = True  # see FastQuicProtocol: no waiter yet must not mean "not yet"
            self._alpn = event.alpn_protocol
            self._schedule_keepalive()
            peer = _Qh3Connection.peer_udp_limit.get(id(self._quic), _MAX_UDP_PAYLOAD)
            size = min(self.config.max_datagram_size, peer, _MAX_SEND_DATAGRAM)
            set_datagram_size(self._quic, max(_SMALLEST_DATAGRAM, size), config=self.config)
        if isinstance(event, events.StreamDataReceived) and self._duplicate_end(event):
            return
        translated = as_aioquic_event(event)
        if translated is not None:
            self.on_event(translated)
        if isinstance(event, events.ConnectionTerminated):
            _Qh3Connection.peer_udp_limit.pop(id(self._quic), None)
            self._wake_drain_waiters(error=True)
            if self._keepalive_handle is not None:
                self._keepalive_handle.cancel()

    def _duplicate_end(self, event: events.StreamDataReceived) -> bool:
        """qh3 1.9 re-reports the end of a stream when a duplicate frame arrives after the
        stream finished (aioquic returns nothing once ``is_finished``): drop such repeats."""
        sid = event.stream_id
        if sid in self._rx_done:
            return True
        if event.end_stream:
            self._rx_done.add(sid)
            if len(self._rx_done) > _RX_DONE_MAX:  # forget the oldest half (lowest ids)
                self._rx_done = set(sorted(self._rx_done)[_RX_DONE_MAX // 2 :])
        return False

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
        self._quic.send_ping(0)
        self.transmit()
        self._schedule_keepalive()

    # send path ------------------------------------------------------------------------------

    def transmit(self) -> None:
        """Send what the connection has to send (batched), re-arm the timer, wake drains."""
        if self._transport is None or self._transport.is_closing():
            self._transmit_task = None
            timer_at = self._quic.get_timer()
            if self._timer is not None and self._timer_at != timer_at:
                self._timer.cancel()
                self._timer = None
            if self._timer is None and timer_at is not None:
                self._timer = self._loop.call_at(timer_at, self._handle_timer)
            self._timer_at = timer_at
        else:
            super().transmit()
        if self._drain_waiters:
            self._wake_drain_waiters()

    def transmit_soon(self) -> None:
        """Transmit at the end of this loop turn (coalesces many writes into one pass)."""
        self._transmit_soon()

    def send_buffered(self) -> int:
        """Bytes written to streams and not yet sent."""
        total = 0
        for stream in self._quic._streams.values():
            for start, stop in stream.sender._pending:
                total += stop - start
        return total

    async def drain(self, limit: int = 8 << 20) -> None:
        """Wait until at most ``limit`` bytes are buffered; ``ConnectionError`` if it closes."""
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


class _Qh3Server(QuicServer):
    """qh3's server; its connections are :class:`Qh3Protocol` s that flush once per burst."""


async def serve_qh3(
    host: str,
    port: int,
    *,
    config: TransportConfig,
    on_connection: Callable[[Any], None],
) -> QuicListener:
    """Listen on ``host:port`` with qh3; ``on_connection`` gets each new :class:`Qh3Protocol`."""
    from .aio import QuicListener, _udp_socket

    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    sock = _udp_socket(host, port, infos[0][0], config.socket_buffer)
    holder: list[_Qh3Server] = []

    def create_protocol(quic: QuicConnection, stream_handler: Any = None) -> Qh3Protocol:
        protocol = Qh3Protocol(quic, stream_handler, config=config, server=holder[0])
        on_connection(protocol)
        return protocol

    server = _Qh3Server(
        configuration=quic_configuration(config, is_client=False), create_protocol=create_protocol
    )
    holder.append(server)
    await create_optimized_datagram_transport(loop, lambda: server, sock=sock)
    return QuicListener(host=host, port=int(sock.getsockname()[1]), server=server)  # type: ignore[arg-type]


@contextlib.asynccontextmanager
async def connect_qh3(
    host: str,
    port: int,
    *,
    config: TransportConfig,
    on_event: Callable[[aq_events.QuicEvent], None] | None = None,
    connect_timeout: float = 10.0,
) -> AsyncIterator[Qh3Protocol]:
    """Connect with qh3; yield the protocol once the handshake completed; close on exit."""
    from .aio import _udp_socket

    loop = asyncio.get_running_loop()
    cfg = quic_configuration(config, is_client=True)
    if cfg.server_name is None:
        cfg.server_name = host
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_DGRAM)
    family, _, _, _, addr = infos[0]
    quic = _Qh3Connection(configuration=cfg)
    local = "::" if family == socket.AF_INET6 else "0.0.0.0"
    sock = _udp_socket(local, 0, family, config.socket_buffer)
    transport, proto = await create_optimized_datagram_transport(
        loop, lambda: Qh3Protocol(quic, config=config), sock=sock
    )
    protocol = cast(Qh3Protocol, proto)
    if on_event is not None:
        protocol.on_event = on_event
    try:
        protocol.connect(cast(NetworkAddress, addr))
        try:
            await asyncio.wait_for(protocol.wait_connected(), connect_timeout)
        except BaseException:
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
