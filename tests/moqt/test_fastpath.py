"""The aioquic fast path (``ray_kvmoq.moqt.aio``) moves bytes intact at every datagram size.

Each case moves a few MB over one QUIC connection on 127.0.0.1 (real sockets, real TLS) and
compares SHA-256 digests; the datagram size actually in use after the handshake is checked too,
so a lever that silently fails to apply is caught. One case pairs a patched sender with an
unpatched receiver (the wide STREAM length is plain RFC 9000, so stock aioquic must parse it).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import os

import pytest
from aioquic.quic import events

from ray_kvmoq.moqt.aio import (
    MAX_NARROW_DATAGRAM,
    FastQuicProtocol,
    connect_quic,
    serve_quic,
)
from ray_kvmoq.moqt.aio import (
    TransportConfig as _TransportConfig,
)
from ray_kvmoq.moqt.certs import self_signed

# These tests exercise the aioquic fast path (patched aioquic internals): pin the backend.
TransportConfig = functools.partial(_TransportConfig, backend="aioquic")

LEAF = self_signed()


async def _move(
    payload: bytes, client: TransportConfig, server: TransportConfig, chunk: int = 150_000
) -> tuple[bytes, int]:
    received = bytearray()
    done = asyncio.Event()

    def on_connection(protocol: FastQuicProtocol) -> None:
        def on_event(event: events.QuicEvent) -> None:
            if isinstance(event, events.StreamDataReceived):
                received.extend(event.data)
                if event.end_stream:
                    done.set()

        protocol.on_event = on_event

    listener = await serve_quic("127.0.0.1", 0, config=server, on_connection=on_connection)
    try:
        async with connect_quic("127.0.0.1", listener.port, config=client) as proto:
            size = proto.datagram_size
            quic = proto.quic
            sid = quic.get_next_available_stream_id(is_unidirectional=True)
            for start in range(0, len(payload), chunk):
                end = start + chunk >= len(payload)
                quic.send_stream_data(sid, payload[start : start + chunk], end_stream=end)
                proto.transmit_soon()
                await proto.drain(2 << 20)
            await asyncio.wait_for(done.wait(), 60)
    finally:
        listener.close()
    return bytes(received), size


def _configs(**kw: object) -> tuple[TransportConfig, TransportConfig]:
    client = TransportConfig(cadata=LEAF.ca_pem, **kw)  # type: ignore[arg-type]
    server = TransportConfig(cert_pem=LEAF.cert_pem, key_pem=LEAF.key_pem, **kw)  # type: ignore[arg-type]
    return client, server


@pytest.mark.parametrize(
    ("datagram", "wide", "batch", "pacing", "expected"),
    [
        (1452, True, True, True, 1452),
        (9000, True, True, False, 9000),
        (9000, False, False, True, 9000),
        (60000, False, True, True, MAX_NARROW_DATAGRAM),  # narrow frames cap the size
        (60000, True, True, False, 60000),
        (65527, True, False, True, 65507),  # IPv4 caps UDP payloads
    ],
)
async def test_bytes_intact_at_each_datagram_size(
    datagram: int, wide: bool, batch: bool, pacing: bool, expected: int
) -> None:
    payload = os.urandom((1 if datagram < 9000 else 3) << 20)
    client, server = _configs(
        max_datagram_size=datagram, wide_stream_frames=wide, batch_receive=batch, pacing=pacing
    )
    received, size = await _move(payload, client, server)
    assert size == expected
    assert hashlib.sha256(received).hexdigest() == hashlib.sha256(payload).hexdigest()


async def test_wide_sender_unpatched_receiver() -> None:
    payload = os.urandom(2 << 20)
    client = TransportConfig(cadata=LEAF.ca_pem, max_datagram_size=60000)
    server = TransportConfig(
        cert_pem=LEAF.cert_pem,
        key_pem=LEAF.key_pem,
        max_datagram_size=1452,
        wide_stream_frames=False,
        batch_receive=False,
    )
    received, size = await _move(payload, client, server)
    assert size == 60000
    assert received == payload


async def test_server_requires_certificate() -> None:
    with pytest.raises(ValueError, match="certificate"):
        await serve_quic("127.0.0.1", 0, config=TransportConfig(), on_connection=lambda p: None)


async def test_client_rejects_untrusted_server() -> None:
    other = self_signed()
    client = TransportConfig(cadata=other.ca_pem)
    server = TransportConfig(cert_pem=LEAF.cert_pem, key_pem=LEAF.key_pem)
    listener = await serve_quic("127.0.0.1", 0, config=server, on_connection=lambda p: None)
    try:
        with pytest.raises(ConnectionError):
            async with connect_quic("127.0.0.1", listener.port, config=client, connect_timeout=5):
                pass
    finally:
        listener.close()


async def test_drain_fails_when_connection_dies() -> None:
    client, server = _configs()
    protocols: list[FastQuicProtocol] = []
    listener = await serve_quic("127.0.0.1", 0, config=server, on_connection=protocols.append)
    try:
        async with connect_quic("127.0.0.1", listener.port, config=client) as proto:
            sid = proto.quic.get_next_available_stream_id(is_unidirectional=True)
            proto.quic.send_stream_data(sid, os.urandom(8 << 20))
            proto.transmit_soon()
            protocols[0].close()  # the peer hangs up while we still have data queued
            with pytest.raises(ConnectionError):
                await asyncio.wait_for(proto.drain(0), 10)
    finally:
        listener.close()


def test_bench_transport_json_smoke() -> None:
    """``kvmoq bench transport --json`` runs both processes per row and reports the keys."""
    import json

    from click.testing import CliRunner

    from ray_kvmoq.bench.transport import transport

    args = ["--json", "--mb", "3", "--sizes", "160000", "--only", "9000"]
    result = CliRunner().invoke(transport, args)
    assert result.exit_code == 0, result.output
    report = json.loads(result.output.strip().splitlines()[-1])
    for key in ("moqt_mb_s", "moqt_mb_s_9000", "tcp_mb_s", "ratio"):
        assert report[key] > 0, report
    assert {r["path"] for r in report["rows"]} == {"moqt", "tcp"}
    assert {r["backend"] for r in report["rows"] if r["path"] == "moqt"} == {"aioquic", "qh3"}
