"""The scheduler's step clock: prefill seconds per token and decode seconds per sequence, from
the times between the engine's own steps (pure: an injected clock)."""

from __future__ import annotations

import pytest

from ray_kvmoq.connector.scheduler import _StepClock


def test_prefill_steps_give_seconds_per_prompt_token_and_decode_steps_seconds_per_sequence() -> (
    None
):
    clock = _StepClock(period_s=2.5)
    assert clock.step(0.0, 1024, 1024) == []  # a 1,024-token prefill step: 2 s
    for t in (2.0, 2.2, 2.4):  # four sequences decoding: 0.2 s a step
        assert clock.step(t, 4, 0) == []
    out = {k: (v, n) for k, v, n in clock.step(2.6, 4, 0)}
    assert out["prefill_s_per_token"] == (pytest.approx(2.0 / 1024), 1)
    assert out["decode_s_per_token"] == (pytest.approx(0.2 / 4), 3)
    assert clock.step(2.8, 4, 0) == []  # the sums and the period restart after a report
    out = {k: (v, n) for k, v, n in clock.step(5.2, 4, 0)}
    assert out == {"decode_s_per_token": (pytest.approx((0.2 + 2.4) / 8), 2)}


def test_a_decode_step_followed_by_a_prefill_or_by_nothing_is_not_timed() -> None:
    """The engine may have sat idle between the last decode step and a new request's prefill,
    so that gap says nothing about decode speed."""
    clock = _StepClock(period_s=100.0)
    clock.step(0.0, 2, 0)
    clock.step(30.0, 512, 512)  # a new request after 30 s idle
    clock.step(31.0, 2, 0)  # the prefill step took 1 s
    clock.step(31.1, 0, 0)  # then nothing scheduled
    out = {k: (v, n) for k, v, n in clock.step(200.0, 3, 0)}
    assert "decode_s_per_token" not in out
    assert out["prefill_s_per_token"] == (pytest.approx(1.0 / 512), 1)


def test_mixed_and_small_steps_are_neither_prefill_nor_decode() -> None:
    clock = _StepClock(period_s=0.0)
    clock.step(0.0, 200, 100)  # half prefill: neither figure
    clock.step(1.0, 64, 64)  # a prefill under 128 tokens: too small to time
    assert clock.step(2.0, 1, 0) == []
