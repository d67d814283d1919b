"""The decoder and the KV paths on seeded tiny checkpoints, checked against transformers."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from ray_kvmoq.engine import (
    BatchScheduler,
    KVCache,
    SamplingParams,
    load_engine,
)


def _hf_logits(d: Path, tokens: list[int]) -> torch.Tensor:
    import transformers

    hf = transformers.AutoModelForCausalLM.from_pretrained(str(d), dtype=torch.float32)
    hf.eval()
    with torch.no_grad():
        return hf(torch.tensor([tokens])).logits[0].float()


def _tokens(n: int, seed: int = 1, vocab: int = 256) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return [int(x) for x in torch.randint(0, vocab, (n,), generator=g)]


@pytest.mark.parametrize("arch", ["llama", "qwen2", "mistral"])
def test_logits_equal_transformers(tiny_dirs: Callable[[str], Path], arch: str) -> None:
    d = tiny_dirs(arch)
    eng = load_engine(str(d), dtype="float32", device="cpu")
    # 200 tokens: past the llama3 scaling's original context (64), so the scaling matters
    toks = _tokens(200)
    ref = _hf_logits(d, toks)
    ours = eng.prefill(toks, all_logits=True)
    assert ours.logits is not None
    torch.testing.assert_close(ours.logits, ref, atol=2e-4, rtol=1e-4)
    assert eng.model_config.model_type == arch
    if arch == "qwen2":
        assert eng.model_config.attention_bias and not eng.model_config.o_bias
    if arch == "llama":
        assert eng.model_config.tie_word_embeddings
        assert eng.model_config.rope_scaling is not None
    if arch == "mistral":  # linear RoPE scaling and an explicit head_dim (32 != 64 / 4)
        assert eng.model_config.rope_scaling == {"rope_type": "linear", "factor": 2.0}
        assert eng.config.head_dim == 32


def test_mistral_sliding_window_matches_transformers(tmp_path: Path) -> None:
    from tests.engine.conftest import make_tiny_checkpoint

    d = make_tiny_checkpoint(tmp_path / "m", "mistral", sliding_window=16)
    eng = load_engine(str(d), dtype="float32", device="cpu")
    toks = _tokens(60, seed=3)
    ref = _hf_logits(d, toks)
    full = eng.prefill(toks, all_logits=True).logits
    torch.testing.assert_close(full, ref, atol=2e-4, rtol=1e-4)
    # the window also applies with an injected prefix and in batched decode
    pre = eng.prefill(toks[:32]).kv
    tail = eng.forward_with_kv(toks[32:], pre)
    torch.testing.assert_close(tail, ref[32:], atol=2e-4, rtol=1e-4)
    a = eng.generate(toks, SamplingParams(max_tokens=8, ignore_eos=True))
    b = eng.generate(toks, SamplingParams(max_tokens=8, ignore_eos=True), prefix_kv=pre)
    assert a.token_ids == b.token_ids


def test_prefix_kv_gives_same_logits_and_kv(tiny_engine: Any) -> None:
    toks = _tokens(300, seed=2)
    full = tiny_engine.prefill(toks)
    assert full.kv.start == 0 and full.kv.length == 300
    assert [c.shape[3] for c in full.kv.chunks()] == [128, 128, 44]
    pre = KVCache.from_chunks(full.kv.chunks()[:2])
    part = tiny_engine.prefill(toks, prefix_kv=pre)
    assert part.num_cached == 256 and part.kv.start == 256 and part.kv.length == 44
    torch.testing.assert_close(part.logits_last, full.logits_last, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(
        part.kv.to_tensor(), full.kv.to_tensor()[:, :, :, 256:], atol=1e-5, rtol=1e-5
    )
    # joined back, the chunks line up with a full recompute's
    joined = KVCache.cat([pre, part.kv])
    assert joined.length == 300 and len(joined.chunks()) == 3


def test_prefix_covering_whole_prompt_recomputes_last_token(tiny_engine: Any) -> None:
    toks = _tokens(128, seed=4)
    full = tiny_engine.prefill(toks)
    again = tiny_engine.prefill(toks, prefix_kv=full.kv)
    assert again.num_cached == 127 and again.kv.start == 127 and again.kv.length == 1
    torch.testing.assert_close(again.logits_last, full.logits_last, atol=1e-5, rtol=1e-5)


def test_forward_with_kv_is_teacher_forcing(tiny_engine: Any) -> None:
    toks = _tokens(200, seed=5)
    ref = tiny_engine.prefill(toks, all_logits=True).logits
    kv = tiny_engine.prefill(toks[:128]).kv
    out = tiny_engine.forward_with_kv(toks[128:], kv)
    assert out.shape == (72, tiny_engine.config.vocab)
    torch.testing.assert_close(out, ref[128:], atol=1e-5, rtol=1e-5)
    # a lossy KV changes the logits, but only a little (injection really uses the KV)
    noisy = KVCache.from_tensor(kv.to_tensor() + 0.01 * torch.randn(kv.shape))
    out2 = tiny_engine.forward_with_kv(toks[128:], noisy)
    assert 0 < (out2 - out).abs().max() < 1.0


def test_bf16_kv_chunks_are_uint16_views(tiny_dirs: Callable[[str], Path]) -> None:
    import numpy as np

    eng = load_engine(str(tiny_dirs("llama")), dtype="bfloat16", device="cpu")
    res = eng.prefill(_tokens(150, seed=6))
    arrays = res.kv.chunks()
    assert [a.dtype for a in arrays] == [np.uint16, np.uint16]
    assert arrays[0].shape == (2, 2, 2, 128, 16) and arrays[0].flags.c_contiguous
    # zero-copy both ways: the arrays view the engine's tensors, from_chunks views the arrays
    t0 = res.kv.tensors()[0]
    assert arrays[0].ctypes.data == t0.data_ptr()
    ro = arrays[0].copy()
    ro.setflags(write=False)  # as ray.get returns it
    back = KVCache.from_chunks([ro])
    assert back.dtype == torch.bfloat16 and back.tensors()[0].data_ptr() == ro.ctypes.data
    assert torch.equal(back.tensors()[0], t0)


def test_continuous_batching_matches_one_at_a_time(tiny_engine: Any) -> None:
    prompts = [_tokens(n, seed=10 + n) for n in (5, 40, 130, 17, 64)]
    lengths = [12, 3, 9, 20, 6]
    params = [SamplingParams(max_tokens=m, ignore_eos=True) for m in lengths]
    alone = [tiny_engine.generate(p, sp).token_ids for p, sp in zip(prompts, params, strict=True)]
    sched = BatchScheduler(tiny_engine, max_batch=3)
    rids = [sched.add(p, sp) for p, sp in zip(prompts[:3], params[:3], strict=True)]
    steps, batch_sizes, late = 0, [], False
    got: dict[str, list[int]] = {}
    while sched.has_work:
        outs = sched.step()
        steps += 1
        batch_sizes.append(sched.num_active)
        for o in outs:
            if o.token_id is not None:
                got.setdefault(o.request_id, []).append(o.token_id)
        if steps == 2 and not late:  # join between steps while others run
            rids += [sched.add(p, sp) for p, sp in zip(prompts[3:], params[3:], strict=True)]
            late = True
    assert [tuple(got[r]) for r in rids] == alone
    assert max(batch_sizes) == 3  # never over max_batch, and really batched
    assert steps < sum(lengths)  # tokens of different requests shared forward steps


def test_a_failing_admission_fails_only_its_request(tiny_engine: Any) -> None:
    sched = BatchScheduler(tiny_engine, max_batch=4)
    good = sched.add(_tokens(10, seed=1), SamplingParams(max_tokens=3, ignore_eos=True))
    # right geometry and length, but values that cannot be read (a meta tensor has no data)
    kv = tiny_engine.prefill(_tokens(12, seed=2)).kv
    bad_kv = KVCache([torch.empty(kv.shape, device="meta")])
    bad = sched.add(_tokens(12, seed=2), SamplingParams(max_tokens=3), prefix_kv=bad_kv)
    outs = []
    while sched.has_work:
        outs += sched.step()
    failed = [o for o in outs if o.request_id == bad]
    assert len(failed) == 1 and failed[0].finish_reason == "error" and failed[0].error
    assert sum(o.token_id is not None for o in outs if o.request_id == good) == 3


def test_seeded_sampling_is_reproducible_and_batch_independent(tiny_engine: Any) -> None:
    p = _tokens(20, seed=7)
    sp = SamplingParams(
        max_tokens=16, temperature=0.9, top_p=0.9, top_k=50, seed=1234, ignore_eos=True
    )
    a = tiny_engine.generate(p, sp).token_ids
    b = tiny_engine.generate_batch(
        [p, _tokens(30, seed=8)], [sp, SamplingParams(max_tokens=5, temperature=1.0, seed=9)]
    )
    assert b[0].token_ids == a
    c = tiny_engine.generate(
        p, SamplingParams(max_tokens=16, temperature=0.9, seed=99, ignore_eos=True)
    )
    assert c.token_ids != a
    greedy = tiny_engine.generate(p, SamplingParams(max_tokens=16, ignore_eos=True)).token_ids
    top1 = tiny_engine.generate(
        p, SamplingParams(max_tokens=16, temperature=2.0, top_k=1, seed=5, ignore_eos=True)
    )
    assert top1.token_ids == greedy


def test_stop_token_stop_string_and_max_tokens(tiny_engine: Any) -> None:
    p = _tokens(20, seed=7)
    free = tiny_engine.generate(p, SamplingParams(max_tokens=12, ignore_eos=True))
    assert len(free.token_ids) == 12 and free.finish_reason == "length"
    stop_id = free.token_ids[5]
    first = free.token_ids.index(stop_id)
    cut = tiny_engine.generate(p, SamplingParams(max_tokens=12, stop_token_ids=[stop_id]))
    assert cut.token_ids == free.token_ids[:first] and cut.finish_reason == "stop"
    text = tiny_engine.tokenizer.decode(list(free.token_ids))
    if len(text) >= 6:
        s = text[3:5]
        out = tiny_engine.generate(p, SamplingParams(max_tokens=12, stop=[s], ignore_eos=True))
        assert out.finish_reason == "stop" and out.text == text[: text.find(s)]


def test_streaming_deltas_add_up(tiny_engine: Any) -> None:
    p = [ord(c) for c in "hello there"]
    outs = list(tiny_engine.stream(p, SamplingParams(max_tokens=10, ignore_eos=True)))
    assert outs[-1].finished and all(not o.finished for o in outs[:-1])
    final = tiny_engine.generate(p, SamplingParams(max_tokens=10, ignore_eos=True))
    assert "".join(o.text for o in outs) == final.text
    assert [o.token_id for o in outs] == list(final.token_ids)
