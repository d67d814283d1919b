"""GPU checks, kept apart from the CPU tests (skipped where CUDA is absent)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from ray_kvmoq.engine import KVCache, SamplingParams, load_engine

pytestmark = [
    pytest.mark.model,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device"),
]


@pytest.fixture(scope="module")
def gpu_engine() -> Any:
    return load_engine(dtype="bfloat16", device="cuda")


def test_cuda_chat_and_prefix_exactness(gpu_engine: Any) -> None:
    out = gpu_engine.generate(
        [{"role": "user", "content": "What is the capital of France?"}],
        SamplingParams(max_tokens=24),
    )
    assert "Paris" in out.text
    tokens = gpu_engine.tokenizer.encode("The history of the river town. " * 30)[:200]
    sp = SamplingParams(max_tokens=16, ignore_eos=True)
    full = gpu_engine.generate(tokens, sp).token_ids
    kv = KVCache.from_chunks(gpu_engine.prefill(tokens[:128]).kv.chunks())  # via host numpy
    assert gpu_engine.generate(tokens, sp, prefix_kv=kv).token_ids == full


def test_cuda_batched_decode_matches_single() -> None:
    eng = load_engine(dtype="float32", device="cuda")  # fp32: batch shape cannot flip a token
    prompts = [eng.tokenizer.encode(f"Count to {n}:") for n in (3, 5, 7)]
    sp = SamplingParams(max_tokens=12, ignore_eos=True)
    alone = [eng.generate(p, sp).token_ids for p in prompts]
    together = [c.token_ids for c in eng.generate_batch(prompts, sp)]
    assert together == alone
