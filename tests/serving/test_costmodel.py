"""The cost model: figures file, plans, and the last-token rule."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from ray_kvmoq.serving.costmodel import (
    CHUNK_TOKENS,
    DEFAULT_FIGURES,
    leading_hits,
    load_figures,
    plan_prefix,
    record_measurement,
    reusable_chunks,
)


def test_missing_or_bad_file_gives_defaults(tmp_path: Path) -> None:
    assert load_figures(tmp_path / "none.json") is DEFAULT_FIGURES
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    assert load_figures(bad) is DEFAULT_FIGURES


def test_sections_override_flat_keys(tmp_path: Path) -> None:
    p = tmp_path / "costs.json"
    p.write_text(
        json.dumps(
            {"prefill_s_per_token": 1.0, "engine": {"prefill_s_per_token": 2e-3}, "x": "ignored"}
        )
    )
    fig = load_figures(p)
    assert fig.prefill_s_per_token == 2e-3 and fig.source == str(p)
    assert fig.moqt_s_per_byte == DEFAULT_FIGURES.moqt_s_per_byte


def test_record_measurement_merges(tmp_path: Path) -> None:
    p = tmp_path / "d" / "costs.json"
    record_measurement("engine", {"prefill_s_per_token": 1e-3}, p)
    record_measurement("transport", {"moqt_s_per_byte": 2e-8}, p)
    fig = load_figures(p)
    assert (fig.prefill_s_per_token, fig.moqt_s_per_byte) == (1e-3, 2e-8)


def test_last_token_is_always_recomputed() -> None:
    assert reusable_chunks(256) == 1 and reusable_chunks(257) == 2 and reusable_chunks(1) == 0
    plan = plan_prefix(DEFAULT_FIGURES, prompt_tokens=256, local_chunks=2, available_chunks=2)
    assert plan.local_chunks == 1 and plan.recompute_tokens == CHUNK_TOKENS


def test_local_beats_remote_beats_recompute_when_transfer_is_cheap() -> None:
    fig = replace(DEFAULT_FIGURES, moqt_s_per_byte=1e-10)
    local = plan_prefix(fig, prompt_tokens=1000, local_chunks=7, available_chunks=7)
    remote = plan_prefix(fig, prompt_tokens=1000, local_chunks=0, available_chunks=7)
    none = plan_prefix(fig, prompt_tokens=1000, local_chunks=0, available_chunks=0)
    assert remote.remote_chunks == 7 and remote.recompute_tokens == 1000 - 7 * 128
    assert local.cost_s < remote.cost_s < none.cost_s


def test_slow_transfer_is_not_worth_pulling() -> None:
    fig = replace(DEFAULT_FIGURES, moqt_s_per_byte=1e-3)
    plan = plan_prefix(fig, prompt_tokens=1000, local_chunks=0, available_chunks=7)
    assert plan.remote_chunks == 0 and plan.recompute_tokens == 1000


def test_queue_adds_service_time() -> None:
    a = plan_prefix(DEFAULT_FIGURES, prompt_tokens=10, local_chunks=0, available_chunks=0)
    b = plan_prefix(
        DEFAULT_FIGURES, prompt_tokens=10, local_chunks=0, available_chunks=0, queue_len=2
    )
    assert abs((b.cost_s - a.cost_s) - 2 * DEFAULT_FIGURES.service_s) < 1e-9


def test_leading_hits_stop_at_first_gap() -> None:
    assert leading_hits(["a", "b", "c"], {"a", "c"}) == 1
    assert leading_hits(["a", "b"], {"a", "b"}) == 2 and leading_hits([], {"a"}) == 0
