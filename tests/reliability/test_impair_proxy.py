"""The impairment proxy's sans-I/O core (every decision counted, reproducible per seed) and its
asyncio shell on loopback (delay, duplication, blackout, one upstream socket per client)."""

from __future__ import annotations

import asyncio
import socket
import time

import pytest

from ray_kvmoq.bench.impair_proxy import DOWN, UP, Impairer, Impairment, ImpairProxy


def test_loss_rate_is_close_and_reproducible() -> None:
    def drops(seed: int) -> list[int]:
        imp = Impairer(Impairment(loss=0.1, seed=seed))
        return [i for i in range(20_000) if not imp.decide(UP, 1200, 0.0)]

    a, b = drops(7), drops(7)
    assert a == b  # same seed, same fate for every datagram
    assert 1800 < len(a) < 2200
    assert drops(8) != a


def test_delay_jitter_reorder_duplicate_are_applied_and_counted() -> None:
    imp = Impairer(Impairment(rtt_ms=20, jitter_ms=4, reorder=0.2, reorder_ms=30, duplicate=0.1))
    fates = [imp.decide(DOWN, 1000, 0.0) for _ in range(5000)]
    st = imp.stats
    assert all(0.010 <= f[0] <= 0.010 + 0.004 + 0.030 for f in fates)
    assert sum(len(f) == 2 for f in fates) == st.duplicated and 350 < st.duplicated < 650
    assert sum(f[0] > 0.015 for f in fates) == st.reordered and 850 < st.reordered < 1150
    assert st.sent[DOWN] == 5000 + st.duplicated and st.received[DOWN] == 5000


def test_blackout_after_bytes_opens_once_for_its_length() -> None:
    imp = Impairer(Impairment(blackout_after_bytes=3000, blackout_s=2.0))
    assert imp.decide(DOWN, 1000, 0.0) and imp.decide(DOWN, 1000, 0.1)
    assert imp.decide(UP, 5000, 0.2)  # upstream bytes do not count
    assert not imp.decide(DOWN, 1000, 0.3)  # 3000 bytes down: the window opens
    assert not imp.decide(UP, 100, 2.2)
    assert imp.decide(DOWN, 1000, 2.31) and imp.decide(UP, 100, 2.4)
    assert imp.stats.blackouts == 1 and imp.stats.dropped_blackout == 2


def test_a_bottleneck_serializes_datagrams_at_its_rate_and_tail_drops_past_its_queue() -> None:
    # 8 Mbit/s: a 1000-byte datagram takes 1 ms on the wire; a 5 ms queue holds 5 of them
    imp = Impairer(Impairment(rate_mbit=8, queue_ms=5, rtt_ms=2))
    fates = [imp.decide(DOWN, 1000, 0.0) for _ in range(10)]
    sent = [f[0] for f in fates if f]
    assert sent == pytest.approx([0.001 + 0.001 * k for k in range(1, 7)])  # 1 ms one-way + queue
    assert imp.stats.dropped_queue == 4 and imp.stats.sent[DOWN] == 6
    assert imp.decide(UP, 1000, 0.0) == pytest.approx([0.002])  # each direction its own link
    assert imp.decide(DOWN, 1000, 0.1) == pytest.approx([0.002])  # drained by then


@pytest.mark.parametrize("field", ["loss", "reorder", "duplicate"])
def test_probabilities_are_checked(field: str) -> None:
    with pytest.raises(ValueError):
        Impairment(**{field: 1.5})


class _Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: object) -> None:
        self.transport.sendto(data, addr)  # type: ignore[attr-defined]


@pytest.mark.timeout(30)
async def test_proxy_on_loopback_delays_duplicates_and_blacks_out() -> None:
    loop = asyncio.get_running_loop()
    echo, _ = await loop.create_datagram_endpoint(_Echo, local_addr=("127.0.0.1", 0))
    target = echo.get_extra_info("sockname")
    imp = Impairment(rtt_ms=40, duplicate=1.0)
    try:
        async with ImpairProxy(("127.0.0.1", 0), target, imp) as proxy:
            sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            sock.setblocking(False)
            t0 = time.monotonic()
            await loop.sock_sendto(sock, b"ping", proxy.address)
            first = await asyncio.wait_for(loop.sock_recv(sock, 100), 5)
            rtt = time.monotonic() - t0
            assert first == b"ping" and rtt >= 0.039
            # duplicated both ways: 1 datagram becomes 2 upstream, each echoed, each doubled
            replies = [first]
            while len(replies) < 4:
                replies.append(await asyncio.wait_for(loop.sock_recv(sock, 100), 5))
            assert replies == [b"ping"] * 4
            assert proxy.stats.duplicated == 1 + 2
            proxy.set_impairment(Impairment())
            proxy.blackout(0.5)
            await loop.sock_sendto(sock, b"lost", proxy.address)
            await asyncio.sleep(0.6)
            await loop.sock_sendto(sock, b"back", proxy.address)
            assert await asyncio.wait_for(loop.sock_recv(sock, 100), 5) == b"back"
            assert proxy.stats.dropped_blackout == 1 and proxy.stats.clients == 1
            sock.close()
    finally:
        echo.close()
