"""Interop with aiomoqt 0.5.3 (pure Python on qh3): its interop-runner client against our server.

The client (``python -m aiomoqt.examples.moq_interop_client``, TAP output, exit 0 on pass) runs
as a subprocess under a hard timeout against a :func:`ray_kvmoq.moqt.api.serve` endpoint in
this test's event loop: raw QUIC, ALPN ``moq-00``, self-signed certificate. The server accepts
namespaces (a sink, like a relay with no subscribers) and refuses unknown tracks, which is what
the four cases need: ``setup-only``, ``announce-only``, ``publish-namespace-done``,
``subscribe-error``.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

import pytest

from ray_kvmoq.moqt.aio import TransportConfig
from ray_kvmoq.moqt.api import TrackServer, serve
from ray_kvmoq.moqt.certs import self_signed

pytestmark = pytest.mark.interop

CASES = ["setup-only", "announce-only", "publish-namespace-done", "subscribe-error"]


@pytest.mark.parametrize("case", CASES)
async def test_aiomoqt_interop_client(case: str) -> None:
    leaf = self_signed()
    handlers: list[TrackServer] = []

    def factory() -> TrackServer:
        handlers.append(TrackServer({}, accept_namespaces=True))
        return handlers[-1]

    server = await serve(
        "127.0.0.1",
        0,
        transport=TransportConfig(cert_pem=leaf.cert_pem, key_pem=leaf.key_pem),
        handler_factory=factory,
    )
    proc = await asyncio.create_subprocess_exec(
        "timeout",
        "-s",
        "KILL",
        "30",
        sys.executable,
        "-m",
        "aiomoqt.examples.moq_interop_client",
        "-r",
        f"moqt://127.0.0.1:{server.port}",
        "--tls-disable-verify",
        "-t",
        case,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    try:
        out, _ = await asyncio.wait_for(proc.communicate(), 40)
    finally:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        server.close()
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert f"ok 1 - {case}" in text, text
    if case == "publish-namespace-done":
        assert handlers and handlers[-1].announced == []  # withdrawn again
