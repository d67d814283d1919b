"""Engine fixtures: seeded tiny random checkpoints (HF directories written by transformers) and
the real SmolLM2, loaded once per session (the bf16 cache makes loads after the first fast).

``ray_kvmoq.engine`` is imported before anything imports torch, so its ``OMP_WAIT_POLICY``
default applies to this test process (see ``ray_kvmoq/engine/_env.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import ray_kvmoq.engine  # noqa: F401  (first torch import goes through it)

TINY_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")


def write_byte_tokenizer(d: Path) -> None:
    """A byte-level BPE without merges: ids 0..255 are bytes, then the ChatML specials."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    alphabet = pre_tokenizers.ByteLevel.alphabet()
    byte_chars = sorted(alphabet, key=lambda ch: ord(ch))
    vocab = {ch: i for i, ch in enumerate(byte_chars)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tk.add_special_tokens([AddedToken(t, special=True) for t in TINY_SPECIALS])
    tk.save(str(d / "tokenizer.json"))
    cfg = {
        "eos_token": "<|im_end|>",
        "bos_token": None,
        "tokenizer_class": "PreTrainedTokenizerFast",
    }
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))


def make_tiny_checkpoint(d: Path, arch: str = "llama", seed: int = 0, **overrides: Any) -> Path:
    """Write a seeded random HF checkpoint of ``arch`` (llama | qwen2 | mistral) into ``d``."""
    import torch
    import transformers

    common: dict[str, Any] = dict(
        vocab_size=320,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        rms_norm_eps=1e-5,
        initializer_range=0.15,
        bos_token_id=256,
        eos_token_id=258,
    )
    cls: Any
    cfg_cls: Any
    if arch == "llama":
        common |= dict(
            tie_word_embeddings=True,
            rope_theta=10000.0,
            rope_scaling={
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 64,
            },
        )
        cls, cfg_cls = transformers.LlamaForCausalLM, transformers.LlamaConfig
    elif arch == "qwen2":
        common |= dict(tie_word_embeddings=False, rope_theta=1000000.0)
        cls, cfg_cls = transformers.Qwen2ForCausalLM, transformers.Qwen2Config
    elif arch == "mistral":
        common |= dict(
            tie_word_embeddings=False,
            sliding_window=None,
            head_dim=32,
            rope_scaling={"rope_type": "linear", "factor": 2.0},
        )
        cls, cfg_cls = transformers.MistralForCausalLM, transformers.MistralConfig
    else:
        raise ValueError(arch)
    common |= overrides
    torch.manual_seed(seed)
    model = cls(cfg_cls(**common))
    if arch == "qwen2":  # HF initialises biases to zero; make them matter
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0, 0.5)
    d.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(d))
    write_byte_tokenizer(d)
    return d


@pytest.fixture(scope="session")
def tiny_dirs(tmp_path_factory: pytest.TempPathFactory) -> Callable[[str], Path]:
    """``tiny_dirs(arch)`` -> the directory of a seeded tiny checkpoint (written once)."""
    made: dict[str, Path] = {}

    def get(arch: str) -> Path:
        if arch not in made:
            made[arch] = make_tiny_checkpoint(tmp_path_factory.mktemp(f"tiny-{arch}"), arch)
        return made[arch]

    return get


@pytest.fixture(scope="session")
def tiny_engine(tiny_dirs: Callable[[str], Path]) -> Any:
    """The tiny Llama (GQA, llama3 RoPE scaling, tied embeddings) in float32."""
    from ray_kvmoq.engine import load_engine

    return load_engine(str(tiny_dirs("llama")), dtype="float32", device="cpu")


@pytest.fixture(scope="session")
def smollm2() -> Iterator[Any]:
    """The built-in SmolLM2-135M-Instruct, bf16 on CPU."""
    from ray_kvmoq.engine import load_engine

    yield load_engine(dtype="bfloat16", device="cpu")


@pytest.fixture(scope="session")
def smollm2_fp32() -> Iterator[Any]:
    """The built-in SmolLM2-135M-Instruct, float32 on CPU."""
    from ray_kvmoq.engine import load_engine

    yield load_engine(dtype="float32", device="cpu")
