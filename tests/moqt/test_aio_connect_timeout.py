"""Regression: a handshake timeout must not leave a failed future nobody retrieves.

Root cause: aioquic's ``wait_connected`` awaits ``asyncio.shield(waiter)``; when ``wait_for``
times out, the shielded waiter stays pending and is failed with ``ConnectionError`` once the
connection is closed, so asyncio logged "Future exception was never retrieved" on every
unreachable peer.
"""

from __future__ import annotations

import asyncio
import functools
import gc
from typing import Any

import pytest

from ray_kvmoq.moqt.aio import TransportConfig as _TransportConfig
from ray_kvmoq.moqt.aio import connect_quic
from tests.helpers import free_port

TransportConfig = functools.partial(_TransportConfig, backend="aioquic")  # aioquic's fast path


async def test_connect_timeout_leaves_no_unretrieved_future() -> None:
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: reported.append(ctx))
    config = TransportConfig(verify_peer=False, idle_timeout=1.0)
    with pytest.raises(TimeoutError):
        async with connect_quic("127.0.0.1", free_port(), config=config, connect_timeout=0.3):
            pass
    await asyncio.sleep(0.2)
    gc.collect()
    await asyncio.sleep(0)
    assert [ctx.get("message") for ctx in reported] == []


@pytest.mark.parametrize("backend", ["aioquic", "qh3"])
async def test_a_handshake_completed_before_wait_connected_does_not_hang(backend: str) -> None:
    """Root cause of the relay bench's ``peers failed: ... TimeoutError()``: aioquic (and qh3)
    mark a connection connected only if a ``wait_connected`` waiter already exists when the
    HandshakeCompleted event is processed. Under uvloop (Ray's async actors) a socket callback
    can complete the handshake before the task that calls ``wait_connected`` first runs; the
    waiter created afterwards then waited until the connect timeout, on every attempt."""
    cfg = _TransportConfig(backend=backend, verify_peer=False)
    if backend == "qh3":
        from qh3.quic.events import HandshakeCompleted as QH3HandshakeCompleted

        from ray_kvmoq.moqt.aio_qh3 import Qh3Protocol, _Qh3Connection, quic_configuration

        quic: Any = _Qh3Connection(configuration=quic_configuration(cfg, is_client=True))
        protocol: Any = Qh3Protocol(quic, config=cfg)
        event: Any = QH3HandshakeCompleted(
            alpn_protocol="moq-00", early_data_accepted=False, session_resumed=False
        )
    else:
        from aioquic.quic.connection import QuicConnection
        from aioquic.quic.events import HandshakeCompleted

        from ray_kvmoq.moqt.aio import FastQuicProtocol

        quic = QuicConnection(configuration=cfg.quic_configuration(is_client=True))
        protocol = FastQuicProtocol(quic, config=cfg)
        event = HandshakeCompleted(
            alpn_protocol="moq-00", early_data_accepted=False, session_resumed=False
        )
    quic._events.append(event)
    protocol._process_events()  # the handshake completes: no waiter exists yet
    await asyncio.wait_for(protocol.wait_connected(), 2.0)


@pytest.mark.parametrize("backend", ["aioquic", "qh3"])
def test_twenty_connects_under_uvloop_all_complete(backend: str) -> None:
    uvloop = pytest.importorskip("uvloop")
    from ray_kvmoq.moqt.aio import serve_quic
    from ray_kvmoq.moqt.certs import self_signed

    leaf = self_signed()

    async def run() -> int:
        server = _TransportConfig(backend=backend, cert_pem=leaf.cert_pem, key_pem=leaf.key_pem)
        client = _TransportConfig(backend=backend, cadata=leaf.ca_pem)
        listener = await serve_quic("127.0.0.1", 0, config=server, on_connection=lambda p: None)
        try:
            done = 0
            for _ in range(20):
                async with connect_quic(
                    "127.0.0.1", listener.port, config=client, connect_timeout=3.0
                ):
                    done += 1
            return done
        finally:
            listener.close()

    assert uvloop.run(run()) == 20
