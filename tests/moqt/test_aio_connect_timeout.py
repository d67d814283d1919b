"""Regression: a handshake timeout must not leave a failed future nobody retrieves.

Root cause: aioquic's ``wait_connected`` awaits ``asyncio.shield(waiter)``; when ``wait_for``
times out, the shielded waiter stays pending and is failed with ``ConnectionError`` once the
connection is closed, so asyncio logged "Future exception was never retrieved" on every
unreachable peer.
"""

from __future__ import annotations

import asyncio
import gc
from typing import Any

import pytest

from ray_kvmoq.moqt.aio import TransportConfig, connect_quic
from tests.helpers import free_port


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
