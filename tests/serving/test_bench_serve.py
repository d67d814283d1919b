"""``kvmoq bench serve`` helpers (the workload, the aggregation) and the CLI wiring."""

from __future__ import annotations

import math

from click.testing import CliRunner

from ray_kvmoq.bench.serve import (
    MODES,
    Sample,
    make_documents,
    prefill_cost_fit,
    schedule,
    summarize,
    table,
)
from ray_kvmoq.cli import main


def test_schedule_is_poisson_and_covers_every_pair() -> None:
    plan = schedule(3, 4, rate=2.0, seed=1)
    assert sorted((d, q) for _, d, q in plan) == [(d, q) for d in range(3) for q in range(4)]
    times = [t for t, _, _ in plan]
    assert times == sorted(times) and times[0] == 0.0
    assert plan == schedule(3, 4, rate=2.0, seed=1)


def test_documents_differ_and_have_the_asked_size() -> None:
    docs = make_documents(3, 100, 200, seed=0)
    assert len(set(docs)) == 3
    assert all(70 <= len(d.split()) <= 160 for d in docs)


def _s(ttft: float, prompt: int = 1000, cached: int = 0, ok: bool = True) -> Sample:
    return Sample("router", 0, ttft, ttft + 1, prompt, cached, 8, ok)


def test_summary_and_ratio() -> None:
    out = summarize([_s(1.0, cached=512), _s(3.0, cached=0), _s(0, ok=False)], makespan=4.0)
    assert out["errors"] == 1 and out["ttft_mean_s"] == 2.0 and out["ttft_p50_s"] == 2.0
    assert out["reused_token_ratio"] == 512 / 2000 and out["throughput_rps"] == 0.5
    assert math.isnan(summarize([], 1.0)["ttft_mean_s"])


def test_prefill_fit_recovers_the_slope() -> None:
    samples = [_s(0.1 + 1e-3 * n, prompt=n) for n in (100, 500, 900, 1300)]
    fit = prefill_cost_fit(samples)
    assert fit is not None and abs(fit - 1e-3) < 1e-9


def test_table_names_every_mode() -> None:
    runs = {m: summarize([_s(1.0 + i)], 1.0) for i, m in enumerate(MODES)}
    ratios = {
        "ttft_mean_no_reuse_over_router": 0.5,
        "ttft_mean_round_robin_over_router": 1.5,
        "ttft_p99_no_reuse_over_router": 0.5,
    }
    text = table({"runs": runs, "ratios": ratios})
    assert all(m in text for m in MODES)


def test_cli_registers_serving_commands() -> None:
    runner = CliRunner()
    for args in (["serve", "--help"], ["inspect", "--help"], ["bench", "serve", "--help"]):
        res = runner.invoke(main, args)
        assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["bench", "serve", "--url", "http://127.0.0.1:9", "--docs", "1"])
    assert res.exit_code != 0 and "make serve" in res.output
