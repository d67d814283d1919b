"""The scheduler's step clock: prefill seconds per token and the marginal decode seconds per
sequence, from the times between the engine's own steps (pure: an injected clock)."""

from __future__ import annotations

import pytest

from ray_kvmoq.connector.scheduler import _StepClock, marginal_seconds


def test_prefill_steps_give_seconds_per_prompt_token_and_decode_steps_the_slope_per_sequence() -> (
    None
):
    """Decode steps cost 0.1 s fixed plus 0.01 s per sequence: the clock reports the 0.01 s a
    request adds to a step, not the 0.1 s + 0.01 s × n spread over the n sequences."""
    clock = _StepClock(period_s=2.4)
    assert clock.step(0.0, 1024, 1024) == []  # a 1,024-token prefill step: 2 s
    t = 2.0
    for n in (2, 4, 8):  # decode steps of 2, 4 and 8 sequences
        assert clock.step(t, n, 0) == []
        t += 0.1 + 0.01 * n
    out = {k: (v, n) for k, v, n in clock.step(t, 4, 0)}
    assert out["prefill_s_per_token"] == (pytest.approx(2.0 / 1024), 1)
    assert out["decode_s_per_token"] == (pytest.approx(0.01), 3)
    assert clock.step(t + 0.1, 4, 0) == []  # the samples and the period restart after a report


def test_decode_steps_of_one_size_give_no_slope_until_a_size_differs() -> None:
    """Steps that all ran 4 sequences cannot split fixed from per-sequence cost: nothing is
    reported (the board keeps its last figure), and the steps are kept for a later period."""
    clock = _StepClock(period_s=1.0)
    t = 0.0
    for _ in range(10):
        assert clock.step(t, 4, 0) == []
        t += 0.3
    out = {k: (v, n) for k, v, n in clock.step(t, 6, 0)}
    assert "decode_s_per_token" not in out
    out = {k: (v, n) for k, v, n in clock.step(t + 0.5, 6, 0)}  # a 6-sequence step of 0.5 s
    assert out["decode_s_per_token"] == (pytest.approx(0.1), 11)


def test_marginal_seconds_is_the_least_squares_slope_clamped_at_zero() -> None:
    assert marginal_seconds([]) is None
    assert marginal_seconds([(4, 0.2)]) is None
    assert marginal_seconds([(4, 0.2), (4, 0.3)]) is None
    assert marginal_seconds([(1, 0.1), (3, 0.3), (2, 0.2)]) == pytest.approx(0.1)
    assert marginal_seconds([(1, 0.3), (3, 0.1)]) == 0.0  # noise can slope down: not negative


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


def test_the_scheduler_does_not_time_steps_that_run_a_start_up_probe() -> None:
    """The probe's first steps pay the engine's one-time warm-up (a 128-token step measured
    21 ms a token against 1.3 ms in real steps): steps with a probe in them are not timed."""
    from types import SimpleNamespace
    from typing import Any

    from tests.connector.test_pull_decision import _side

    side = _side(1e-8)
    seen: list[tuple[int, int]] = []
    side._clock.step = lambda now, tokens, prefill: seen.append((tokens, prefill)) or []  # type: ignore[method-assign]

    def req(rid: str, probe: bool) -> Any:
        params = {"kvmoq": {"load": False, "publish": False, "probe": True}} if probe else None
        return SimpleNamespace(request_id=rid, kv_transfer_params=params, cache_salt=None,
                               prompt_token_ids=list(range(512)))  # fmt: skip

    side._state(req("probe", True), 0)
    side._state(req("real", False), 0)
    side._time_step(SimpleNamespace(num_scheduled_tokens={"probe": 128, "other": 1}))
    side._time_step(SimpleNamespace(num_scheduled_tokens={"real": 128, "other": 1}))
    assert seen == [(0, 0), (129, 128)]
    assert side._reqs["probe"].probe and not side._reqs["real"].probe
