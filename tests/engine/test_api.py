"""Public surface, parameter validation, KV containers and bad-input errors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
import torch

import ray_kvmoq.engine as engine_pkg
from ray_kvmoq.engine import (
    EmptyPromptError,
    InvalidRequestError,
    InvalidSamplingParamsError,
    KVCache,
    PromptTooLongError,
    SamplingParams,
)


def test_all_is_sorted_and_pinned() -> None:
    assert engine_pkg.__all__ == sorted(engine_pkg.__all__)
    assert engine_pkg.__all__ == [
        "BatchScheduler",
        "Completion",
        "EmptyPromptError",
        "Engine",
        "EngineConfig",
        "EngineError",
        "InvalidRequestError",
        "InvalidSamplingParamsError",
        "KVCache",
        "ModelConfig",
        "ModelLoadError",
        "PrefillResult",
        "Prompt",
        "PromptTooLongError",
        "SamplingParams",
        "StepOutput",
        "Tokenizer",
        "UnsupportedModelError",
        "load_engine",
    ]
    for name in engine_pkg.__all__:
        assert getattr(engine_pkg, name) is not None


def test_engine_does_not_import_ray() -> None:
    import subprocess
    import sys

    code = "import sys, ray_kvmoq.engine; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"max_tokens": 0}, "max_tokens"),
        ({"max_tokens": 2.5}, "max_tokens"),
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"top_k": -1}, "top_k"),
        ({"seed": -3}, "seed"),
        ({"stop": [""]}, "stop"),
        ({"stop_token_ids": [-1]}, "stop_token_ids"),
    ],
)
def test_sampling_params_reject_bad_values(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSamplingParamsError, match=field):
        SamplingParams(**kwargs)


def test_sampling_params_normalise_stop() -> None:
    sp = SamplingParams(stop="\n\n", stop_token_ids=[5, 6])
    assert sp.stop == ("\n\n",) and sp.stop_token_ids == (5, 6)
    assert SamplingParams().greedy and not SamplingParams(temperature=0.7).greedy
    assert issubclass(InvalidSamplingParamsError, ValueError)


def test_kvcache_chunk_boundaries() -> None:
    t = torch.arange(2 * 2 * 1 * 300 * 4, dtype=torch.float32).view(2, 2, 1, 300, 4)
    kv = KVCache.from_tensor(t)
    assert [c.shape[3] for c in kv.chunks()] == [128, 128, 44]
    assert torch.equal(kv.to_tensor(), t)
    # an unaligned start: the first chunk runs only to the next boundary
    tail = KVCache.from_tensor(t[:, :, :, 100:], start=100)
    assert [c.shape[3] for c in tail.chunks()] == [28, 128, 44]
    assert [c.shape[3] for c in kv.chunks(chunk_size=64)] == [64] * 4 + [44]
    assert kv.prefix(200).length == 200 and torch.equal(
        kv.prefix(200).to_tensor(), t[:, :, :, :200]
    )
    joined = KVCache.cat([kv.prefix(128), KVCache.from_tensor(t[:, :, :, 128:], start=128)])
    assert torch.equal(joined.to_tensor(), t)
    with pytest.raises(ValueError, match="boundaries"):
        KVCache([t[:, :, :, :100], t[:, :, :, 100:200]])
    with pytest.raises(ValueError, match="do not touch"):
        KVCache.cat([kv.prefix(128), kv.prefix(128)])
    with pytest.raises(TypeError, match="int32"):
        KVCache.from_chunks([np.zeros((1, 2, 1, 4, 2), dtype=np.int32)])


@pytest.mark.parametrize("dtype", ["bfloat16", "float16", "float32"])
def test_kvcache_pickles_out_of_band(dtype: str) -> None:
    import pickle

    t = torch.randn(2, 2, 3, 200, 8).to(getattr(torch, dtype))
    kv = KVCache.from_tensor(t, start=0)
    buffers: list[pickle.PickleBuffer] = []
    blob = pickle.dumps(kv, protocol=5, buffer_callback=buffers.append)
    assert len(buffers) == 2 and len(blob) < 2000  # the values travel out of band
    back = pickle.loads(blob, buffers=buffers)
    assert back.dtype == kv.dtype and back.start == 0 and back.length == 200
    assert torch.equal(back.to_tensor(), t)
    raw = np.frombuffer(memoryview(buffers[0]), dtype=np.uint8)
    assert back.tensors()[0].data_ptr() == raw.ctypes.data  # rebuilt on the buffer, no copy


def test_kvcache_float_chunks_are_cast_on_request() -> None:
    a = np.random.default_rng(0).standard_normal((2, 2, 1, 128, 4)).astype(np.float32)
    kv = KVCache.from_chunks([a])
    assert kv.dtype == torch.float32 and np.shares_memory(kv.chunks()[0], a)
    bf = KVCache.from_chunks([a], dtype="bfloat16")
    assert bf.dtype == torch.bfloat16 and bf.chunks()[0].dtype == np.uint16
    assert kv.nbytes == a.nbytes and bf.nbytes == a.nbytes // 2


def test_bad_requests_name_the_problem(tiny_engine: Any) -> None:
    eng = tiny_engine
    with pytest.raises(EmptyPromptError, match="empty"):
        eng.prefill([])
    with pytest.raises(EmptyPromptError):
        eng.generate("")
    too_long = [1] * eng.config.max_context
    with pytest.raises(PromptTooLongError, match=str(eng.config.max_context)):
        eng.prefill(too_long)
    with pytest.raises(PromptTooLongError):
        eng.generate(too_long)
    with pytest.raises(InvalidRequestError, match="token id"):
        eng.prefill([1, 2, eng.config.vocab])
    other = KVCache.from_tensor(torch.zeros(3, 2, 2, 4, 16))
    with pytest.raises(InvalidRequestError, match="layers"):
        eng.prefill([1, 2, 3, 4, 5], prefix_kv=other)
    kv = eng.prefill([1, 2, 3, 4, 5]).kv
    with pytest.raises(InvalidRequestError, match="covers 5"):
        eng.prefill([1, 2, 3], prefix_kv=kv)
    with pytest.raises(InvalidRequestError, match="position 0"):
        eng.prefill([1, 2, 3, 4, 5, 6, 7], prefix_kv=KVCache.from_tensor(kv.to_tensor(), start=2))
    with pytest.raises(ValueError, match="unknown dtype"):
        engine_pkg.load_engine("x", dtype="int8")


def test_generation_stops_at_context_end(tiny_engine: Any) -> None:
    n = tiny_engine.config.max_context
    out = tiny_engine.generate([3] * (n - 4), SamplingParams(max_tokens=50, ignore_eos=True))
    assert out.finish_reason == "length" and len(out.token_ids) == 4
