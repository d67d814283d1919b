"""``kvmoq chat``: one prompt answered by the reference runner (the built-in model, torch)."""

from __future__ import annotations

import json

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
