"""The qh3 backend of moqt.aio: bit-exact MoQT transfers against itself and against aioquic at
every datagram size, the datagram-size rules, and the repeated end-of-stream qh3 reports."""

from __future__ import annotations

import asyncio
import hashlib
import os

import pytest

from ray_kvmoq.moqt import api
from ray_kvmoq.moqt.aio import MOQT_ALPN, MOQT_ALPNS, TransportConfig, resolve_backend
from ray_kvmoq.moqt.certs import self_signed
from ray_kvmoq.moqt.codec import DRAFT_14, DRAFT_16, Location

qh3 = pytest.importorskip("qh3")

NS, TRACK = "bench/qh3", "t"


async def _fetch_all(
    server_be: str,
    client_be: str,
    datagram: int,
    groups: int = 6,
    client_alpns: tuple[str, ...] = MOQT_ALPNS,
) -> dict:
    leaf = self_signed()
    common = {"max_datagram_size": datagram, "socket_buffer": 256 << 10}
    srv = TransportConfig(backend=server_be, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem, **common)
    cli = TransportConfig(backend=client_be, cadata=leaf.ca_pem, alpns=client_alpns, **common)
    track = api.MemoryTrack(max_groups=64)
    payloads = [os.urandom(300_000 + 7 * g) for g in range(groups)]
    server = await api.serve(
        "127.0.0.1",
        0,
        transport=srv,
        handler_factory=lambda: api.TrackServer({api.FullTrackName.parse(NS, TRACK): track}),
    )
    try:
        for g, p in enumerate(payloads):
            await track.publish_group(g, [p[:1000], p[1000:]])
        async with api.connect(f"moqt://127.0.0.1:{server.port}", transport=cli, timeout=5) as c:
            stream = await c.fetch(NS, TRACK, start=Location(0, 0), end=Location(groups - 1, 0))
            got = [g async for g in stream.groups()]
            server_sizes = [s.protocol.datagram_size for s in server.sessions]
            return {
                "sha": hashlib.sha256(b"".join(bytes(g.buffer) for g in got)).hexdigest(),
                "want": hashlib.sha256(b"".join(payloads)).hexdigest(),
                "groups": [g.group_id for g in got],
                "client_size": c.protocol.datagram_size,
                "server_sizes": server_sizes,
                "versions": {c.session.version} | {s.session.version for s in server.sessions},
            }
    finally:
        server.close()


@pytest.mark.parametrize("datagram", [1452, 9000, 60000])
@pytest.mark.parametrize(
    "server_be,client_be", [("qh3", "qh3"), ("qh3", "aioquic"), ("aioquic", "qh3")]
)
def test_fetch_is_bit_exact_between_qh3_and_either_library(
    server_be: str, client_be: str, datagram: int
) -> None:
    out = asyncio.run(asyncio.wait_for(_fetch_all(server_be, client_be, datagram), 60))
    assert out["sha"] == out["want"] and out["groups"] == list(range(6))
    assert out["versions"] == {DRAFT_16}  # both offer moqt-16 first


@pytest.mark.parametrize("server_be,client_be", [("qh3", "qh3"), ("aioquic", "qh3")])
def test_qh3_peer_offering_only_moq00_fetches_bit_exact_over_draft14(
    server_be: str, client_be: str
) -> None:
    run = _fetch_all(server_be, client_be, 9000, client_alpns=(MOQT_ALPN,))
    out = asyncio.run(asyncio.wait_for(run, 60))
    assert out["sha"] == out["want"] and out["versions"] == {DRAFT_14}


def test_qh3_sends_at_most_16384_byte_datagrams_and_accepts_larger_ones() -> None:
    out = asyncio.run(asyncio.wait_for(_fetch_all("aioquic", "qh3", 60000, groups=1), 60))
    assert out["client_size"] == 16384  # qh3 writes 2-byte STREAM frame lengths
    assert out["server_sizes"] == [60000]  # the qh3 client advertised a real receive limit


def test_qh3_repeated_end_of_stream_is_dropped_before_the_session_sees_it() -> None:
    from qh3.quic.stream import QuicStreamReceiver

    receiver = QuicStreamReceiver(stream_id=2, readable=True)
    first = receiver.handle_frame(0, b"abc", True)
    repeat = receiver.handle_frame(0, b"abc", True)  # a retransmission that crossed the ACK
    assert first is not None and first.end_stream
    assert repeat is not None and repeat.end_stream and repeat.data == b""  # qh3 1.9 says so

    from ray_kvmoq.moqt.aio_qh3 import Qh3Protocol

    class Probe:
        def __init__(self) -> None:
            self._rx_done: set[int] = set()

    probe = Probe()
    assert Qh3Protocol._duplicate_end(probe, first) is False  # type: ignore[arg-type]
    assert Qh3Protocol._duplicate_end(probe, repeat) is True  # type: ignore[arg-type]


def test_auto_backend_is_qh3_when_installed_and_unknown_names_are_refused() -> None:
    assert resolve_backend("auto") == "qh3"
    assert resolve_backend("aioquic") == "aioquic"
    with pytest.raises(ValueError):
        resolve_backend("quiche")
