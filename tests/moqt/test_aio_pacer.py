"""GranularPacer: paced sending survives an event loop whose timers fire in whole milliseconds.

Regression for the relay pulls that ran at 10-20 MB/s inside Ray actors: Ray's async actors
run uvloop, whose timers have millisecond resolution, and aioquic's pacer lets at most 16
datagrams out per timer wake-up, so a paced connection was capped at 16 datagrams per ms
whatever its congestion window. The simulation below is deterministic (no clock, no I/O).
"""

from __future__ import annotations

from aioquic.quic.recovery import QuicPacketPacer

from ray_kvmoq.moqt.aio import GranularPacer, TransportConfig

DATAGRAM = 1452
CWND = 4 << 20  # bytes
SRTT = 0.010  # s: pacing rate = 400 MB/s
TIMER_RESOLUTION = 0.001  # a timer asked for t fires at the next whole millisecond


def _packets_sent_in(pacer: QuicPacketPacer, seconds: float) -> int:
    """Send whenever the pacer allows; when it asks to wait, sleep on a 1 ms-resolution timer."""
    pacer.update_rate(CWND, SRTT)
    now, sent = 0.0, 0
    while now < seconds:
        wait_until = pacer.next_send_time(now)
        if wait_until is None:
            pacer.update_after_send(now)
            sent += 1
            continue
        now = (int(wait_until / TIMER_RESOLUTION) + 1) * TIMER_RESOLUTION
    return sent


def test_stock_pacer_is_capped_by_a_millisecond_timer() -> None:
    sent = _packets_sent_in(QuicPacketPacer(max_datagram_size=DATAGRAM), 0.1)
    assert sent * DATAGRAM / 0.1 < 30e6  # ~16 datagrams per ms: under 30 MB/s


def test_granular_pacer_keeps_the_window_rate_with_a_millisecond_timer() -> None:
    pacer = GranularPacer(max_datagram_size=DATAGRAM, granularity=0.002)
    sent = _packets_sent_in(pacer, 0.1)
    rate = sent * DATAGRAM / 0.1
    assert 0.9 * CWND / SRTT <= rate <= 1.1 * CWND / SRTT


def test_granular_pacer_still_spaces_a_burst_to_its_granularity() -> None:
    pacer = GranularPacer(max_datagram_size=DATAGRAM, granularity=0.002)
    pacer.update_rate(CWND, SRTT)
    pacer.update_bucket(1.0)  # a long idle period fills the bucket only to its maximum
    burst = 0
    while pacer.next_send_time(1.0) is None:
        pacer.update_after_send(1.0)
        burst += 1
    assert burst * DATAGRAM <= 0.002 * CWND / SRTT + 2 * DATAGRAM


def test_transport_config_paces_with_a_two_millisecond_granularity_by_default() -> None:
    cfg = TransportConfig()
    assert cfg.pacing is True and cfg.pacing_granularity == 0.002
