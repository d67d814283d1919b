"""``ray_kvmoq.moqt.aio`` and ``certs``: TLS configurations, datagram-size negotiation, endpoints.

Real sockets on 127.0.0.1 throughout; the only stand-in is a server whose transport parameters
are rewritten to advertise a small ``max_udp_payload_size`` (what moq-rs does, 1472), to check
that the fast path honours the peer's limit where stock aioquic ignores it.
"""

from __future__ import annotations

import asyncio
import functools
import types
from pathlib import Path

import pytest
from aioquic.buffer import Buffer
from aioquic.quic import events
from aioquic.quic.configuration import SMALLEST_MAX_DATAGRAM_SIZE
from aioquic.quic.connection import QuicConnection
from aioquic.quic.packet import pull_quic_transport_parameters, push_quic_transport_parameters
from cryptography import x509

from ray_kvmoq.moqt.aio import (
    MOQT_ALPNS,
    FastQuicProtocol,
    connect_quic,
    serve_quic,
    set_datagram_size,
)
from ray_kvmoq.moqt.aio import (
    TransportConfig as _TransportConfig,
)
from ray_kvmoq.moqt.certs import (
    generate_ca,
    issue_certificate,
    self_signed,
    write_pem_files,
)

# These tests exercise the aioquic fast path (patched aioquic internals): pin the backend.
TransportConfig = functools.partial(_TransportConfig, backend="aioquic")

LEAF = self_signed()


def _advertise_udp_limit(quic: QuicConnection, limit: int) -> None:
    original = quic._serialize_transport_parameters

    def serialize(self: QuicConnection) -> bytes:
        params = pull_quic_transport_parameters(Buffer(data=original()))
        params.max_udp_payload_size = limit
        buf = Buffer(capacity=4096)
        push_quic_transport_parameters(buf, params)
        return buf.data

    quic._serialize_transport_parameters = types.MethodType(serialize, quic)  # type: ignore[method-assign]


async def _connected_size(server_limit: int | None, wanted: int) -> int:
    def on_connection(protocol: FastQuicProtocol) -> None:
        if server_limit is not None:
            _advertise_udp_limit(protocol.quic, server_limit)

    server = TransportConfig(cert_pem=LEAF.cert_pem, key_pem=LEAF.key_pem)
    listener = await serve_quic("127.0.0.1", 0, config=server, on_connection=on_connection)
    try:
        client = TransportConfig(cadata=LEAF.ca_pem, max_datagram_size=wanted)
        async with connect_quic("127.0.0.1", listener.port, config=client) as proto:
            return proto.datagram_size
    finally:
        listener.close()


@pytest.mark.parametrize(
    ("server_limit", "wanted", "expected"),
    [(1472, 60000, 1472), (None, 60000, 60000), (9000, 1452, 1452), (1200, 9000, 1200)],
)
async def test_datagram_size_honours_the_peer_limit(
    server_limit: int | None, wanted: int, expected: int
) -> None:
    assert await _connected_size(server_limit, wanted) == expected


def test_quic_configuration_from_settings(tmp_path: Path) -> None:
    paths = write_pem_files(issue_certificate(generate_ca(), ["node1.local", "10.0.0.7"]), tmp_path)
    assert paths.keyfile.stat().st_mode & 0o077 == 0
    server = TransportConfig(
        certfile=str(paths.certfile), keyfile=str(paths.keyfile)
    ).quic_configuration(is_client=False)
    assert server.alpn_protocols == list(MOQT_ALPNS)
    assert server.max_datagram_size == SMALLEST_MAX_DATAGRAM_SIZE  # the handshake stays small
    san = server.certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName)
    assert "node1.local" in san.value.get_values_for_type(x509.DNSName)
    client = TransportConfig(
        cafile=str(paths.cafile), congestion_control="cubic"
    ).quic_configuration(is_client=True)
    assert client.congestion_control_algorithm == "cubic"
    with pytest.raises(ValueError, match="key_pem"):
        TransportConfig(cert_pem=LEAF.cert_pem).quic_configuration(is_client=False)


async def test_verify_off_accepts_an_unknown_ca_and_files_work(tmp_path: Path) -> None:
    paths = write_pem_files(self_signed(), tmp_path)
    server = TransportConfig(certfile=str(paths.certfile), keyfile=str(paths.keyfile))
    got: asyncio.Queue[bytes] = asyncio.Queue()

    def on_connection(protocol: FastQuicProtocol) -> None:
        def on_event(event: events.QuicEvent) -> None:
            if isinstance(event, events.StreamDataReceived) and event.end_stream:
                got.put_nowait(event.data)

        protocol.on_event = on_event

    listener = await serve_quic("127.0.0.1", 0, config=server, on_connection=on_connection)
    try:
        for client in (
            TransportConfig(verify_peer=False),
            TransportConfig(cafile=str(paths.cafile)),
        ):
            async with connect_quic("127.0.0.1", listener.port, config=client) as proto:
                sid = proto.quic.get_next_available_stream_id(is_unidirectional=True)
                proto.quic.send_stream_data(sid, b"hello", end_stream=True)
                proto.transmit()
                assert await asyncio.wait_for(got.get(), 5) == b"hello"
    finally:
        listener.close()


async def test_wrong_server_name_is_refused() -> None:
    leaf = issue_certificate(generate_ca(), ["other.example"])
    server = TransportConfig(cert_pem=leaf.cert_pem, key_pem=leaf.key_pem)
    listener = await serve_quic("127.0.0.1", 0, config=server, on_connection=lambda p: None)
    try:
        with pytest.raises(ConnectionError):
            async with connect_quic(
                "127.0.0.1",
                listener.port,
                config=TransportConfig(cadata=leaf.ca_pem),
                connect_timeout=5,
            ):
                pass
    finally:
        listener.close()


async def test_set_datagram_size_updates_every_consumer() -> None:
    listener = await serve_quic(
        "127.0.0.1",
        0,
        config=TransportConfig(cert_pem=LEAF.cert_pem, key_pem=LEAF.key_pem),
        on_connection=lambda p: None,
    )
    try:
        client = TransportConfig(cadata=LEAF.ca_pem, congestion_control="cubic")
        async with connect_quic("127.0.0.1", listener.port, config=client) as proto:
            set_datagram_size(proto.quic, 30000)
            loss = proto.quic._loss
            assert proto.quic._max_datagram_size == 30000
            assert loss._pacer._max_datagram_size == 30000
            assert loss._cc._max_datagram_size == 30000  # type: ignore[attr-defined]
            assert loss._cc.congestion_window >= 300000
    finally:
        listener.close()


async def test_gso_runs_arrive_as_the_original_datagrams() -> None:
    """Runs of equal-size datagrams (each may end with one shorter) go out in one sendmsg and
    the receiver still sees every datagram, in order, byte for byte."""
    import socket

    from ray_kvmoq.moqt import aio

    loop = asyncio.get_running_loop()
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", 0))
    rx.settimeout(5)
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind(("127.0.0.1", 0))
    tx.setblocking(False)
    transport, _ = await loop.create_datagram_endpoint(asyncio.DatagramProtocol, sock=tx)
    try:
        addr = rx.getsockname()
        sizes = [9000] * 9 + [700, 9000, 9000, 1200, 1200, 1200, 50, 60000]
        datagrams = [(bytes([i]) * n, addr) for i, n in enumerate(sizes)]
        aio._send_gso(tx, transport, datagrams)
        received = [rx.recv(65535) for _ in sizes]
        assert received == [d for d, _ in datagrams]
        assert not aio._gso_broken  # Linux loopback supports UDP_SEGMENT
    finally:
        transport.close()
        rx.close()


@pytest.mark.parametrize(("keepalive", "alive"), [(-1.0, True), (None, False)])
async def test_keepalive_keeps_a_quiet_connection_open(
    keepalive: float | None, alive: bool
) -> None:
    server = TransportConfig(
        cert_pem=LEAF.cert_pem, key_pem=LEAF.key_pem, idle_timeout=1.0, keepalive=keepalive
    )
    listener = await serve_quic("127.0.0.1", 0, config=server, on_connection=lambda p: None)
    try:
        client = TransportConfig(cadata=LEAF.ca_pem, idle_timeout=1.0, keepalive=keepalive)
        async with connect_quic("127.0.0.1", listener.port, config=client) as proto:
            await asyncio.sleep(3.2)  # > 3 idle timeouts without application traffic
            assert proto.is_closed is not alive
    finally:
        listener.close()
