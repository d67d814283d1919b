"""``kvmoq chat`` and ``kvmoq bench engine``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_kvmoq.cli import main


def test_chat_rejects_bad_input_before_loading() -> None:
    runner = CliRunner()
    res = runner.invoke(main, ["chat", "   "])
    assert res.exit_code == 2 and "prompt is empty" in res.output
    res = runner.invoke(main, ["chat", "hi", "--temperature", "-1"])
    assert res.exit_code == 1 and "temperature" in res.output
    res = runner.invoke(main, ["chat", "hi", "--model", "/nonexistent/model"])
    assert res.exit_code == 1 and "neither" in res.output


@pytest.mark.model
def test_chat_answers_with_builtin_model() -> None:
    res = CliRunner().invoke(
        main, ["chat", "What is the capital of France?", "--max-tokens", "24", "--json"]
    )
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout.strip().splitlines()[-1])
    assert "Paris" in obj["text"] and obj["model"] == "SmolLM2-135M-Instruct"


def test_bench_engine_json_on_tiny_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tests.engine.conftest import make_tiny_checkpoint

    costs = tmp_path / "costs.json"
    monkeypatch.setenv("KVMOQ_COSTS", str(costs))

    d = make_tiny_checkpoint(
        tmp_path / "tiny", "llama", max_position_embeddings=4096, hidden_size=128
    )
    args = ["bench", "engine", "--model", str(d), "--dtype", "float32", "--repeats", "1", "--json"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    obj = json.loads(res.stdout.strip().splitlines()[-1])
    for key in (
        "load_s",
        "prefill_tok_s_512",
        "prefill_tok_s_2048",
        "decode_tok_s_b1",
        "decode_tok_s_b8",
    ):
        assert obj[key] > 0, key
    table = obj["break_even"]
    assert list(table) == ["FP16", "BF16", "FP8", "Int8", "FP4", "Int4", "AC"]
    # tiny geometry L=2, H=2, D=32: FP16 = 12-byte header + 2*2*2*32 values * 2 bytes
    assert table["FP16"]["bytes_per_token"] == 12 + 2 * 2 * 2 * 32 * 2
    assert table["AC"]["bytes_per_token"] < table["Int8"]["bytes_per_token"]
    # the serving router prices recompute and KV size with what this bench measured
    from ray_kvmoq.serving.costmodel import load_figures

    figures = load_figures(costs)
    assert figures.source == str(costs)
    assert figures.prefill_s_per_token == pytest.approx(1 / obj["prefill_tok_s_2048"])
    assert figures.kv_bytes_per_token == table["BF16"]["bytes_per_token"]
