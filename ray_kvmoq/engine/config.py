"""Model configuration for the Llama family (Llama, Mistral, Qwen2, SmolLM2).

One frozen dataclass, ``ModelConfig``, read from a Hugging Face ``config.json`` dict
(``from_hf_dict``) or from GGUF metadata (``from_gguf_fields``). It is the only place that knows
the per-architecture differences: Qwen2 has q/k/v biases, Mistral a sliding window, Llama 3 a
"llama3" RoPE scaling. Anything else is refused with ``UnsupportedModelError`` naming the field,
so a checkpoint never runs with silently wrong maths.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from .errors import UnsupportedModelError

__all__ = ["SUPPORTED_ARCHITECTURES", "ModelConfig"]

# HF architecture name -> model_type; all share the decoder in model.py.
SUPPORTED_ARCHITECTURES: dict[str, str] = {
    "LlamaForCausalLM": "llama",
    "MistralForCausalLM": "mistral",
    "Qwen2ForCausalLM": "qwen2",
}
_ROPE_TYPES = ("default", "linear", "llama3")


@dataclass(frozen=True, kw_only=True)
class ModelConfig:
    """Shapes and hyper-parameters of a Llama-family decoder."""

    model_type: str = "llama"
    """One of ``llama``, ``mistral``, ``qwen2``."""
    vocab_size: int
    """Rows of the embedding and of the LM head."""
    hidden_size: int
    """Width of the residual stream."""
    intermediate_size: int
    """Width of the SwiGLU MLP."""
    num_layers: int
    """Decoder layers."""
    num_heads: int
    """Query heads."""
    num_kv_heads: int
    """Key/value heads (GQA when fewer than ``num_heads``)."""
    head_dim: int
    """Per-head width (``hidden_size // num_heads`` unless the checkpoint says otherwise)."""
    max_context: int
    """Longest sequence (prompt + generated tokens) accepted."""
    rms_norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    rope_theta: float = 10000.0
    """RoPE base frequency."""
    rope_scaling: dict[str, Any] | None = field(default=None, hash=False)
    """HF ``rope_scaling``: ``{"rope_type": "linear"|"llama3", "factor": ..., ...}`` or None."""
    attention_bias: bool = False
    """q/k/v projections carry a bias (Qwen2: always)."""
    o_bias: bool = False
    """The output projection carries a bias (Llama ``attention_bias``, not Qwen2)."""
    mlp_bias: bool = False
    """The MLP projections carry biases."""
    tie_word_embeddings: bool = False
    """The LM head reuses the embedding matrix."""
    sliding_window: int | None = None
    """Mistral-style attention window (None: full attention)."""
    bos_token_id: int | None = None
    """Begin-of-sequence id from the checkpoint, if any."""
    eos_token_ids: tuple[int, ...] = ()
    """End-of-sequence ids from the checkpoint."""

    def __post_init__(self) -> None:
        if self.model_type not in SUPPORTED_ARCHITECTURES.values():
            raise UnsupportedModelError(
                f"model_type {self.model_type!r} is not supported; supported: "
                f"{sorted(SUPPORTED_ARCHITECTURES.values())}"
            )
        if self.num_heads % self.num_kv_heads:
            raise UnsupportedModelError(
                f"num_attention_heads={self.num_heads} is not a multiple of "
                f"num_key_value_heads={self.num_kv_heads}"
            )
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("rope_type", self.rope_scaling.get("type"))
            if kind not in _ROPE_TYPES:
                raise UnsupportedModelError(
                    f"rope_scaling type {kind!r} is not supported; supported: {list(_ROPE_TYPES)}"
                )

    @property
    def kv_bytes_per_token(self) -> int:
        """Bytes of K and V per token at 2 bytes a value (FP16/BF16), all layers."""
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim * 2

    @property
    def num_parameters(self) -> int:
        """Parameter count (embeddings counted once when tied)."""
        h, f, d = self.hidden_size, self.intermediate_size, self.head_dim
        attn = h * d * (self.num_heads * 2 + self.num_kv_heads * 2)
        per_layer = attn + 3 * h * f + 2 * h
        head = 0 if self.tie_word_embeddings else self.vocab_size * h
        return self.vocab_size * h + self.num_layers * per_layer + h + head

    def to_hf_dict(self) -> dict[str, Any]:
        """A ``config.json`` dict that transformers reads back as the same model."""
        arch = {v: k for k, v in SUPPORTED_ARCHITECTURES.items()}[self.model_type]
        out: dict[str, Any] = {
            "architectures": [arch],
            "model_type": self.model_type,
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "intermediate_size": self.intermediate_size,
            "num_hidden_layers": self.num_layers,
            "num_attention_heads": self.num_heads,
            "num_key_value_heads": self.num_kv_heads,
            "head_dim": self.head_dim,
            "max_position_embeddings": self.max_context,
            "rms_norm_eps": self.rms_norm_eps,
            "rope_theta": self.rope_theta,
            "rope_scaling": self.rope_scaling,
            "tie_word_embeddings": self.tie_word_embeddings,
            "hidden_act": "silu",
            "torch_dtype": "float32",
        }
        if self.model_type == "llama":
            out["attention_bias"] = self.o_bias
            out["mlp_bias"] = self.mlp_bias
        if self.model_type in ("mistral", "qwen2"):
            out["sliding_window"] = self.sliding_window
        if self.model_type == "qwen2":
            out["use_sliding_window"] = self.sliding_window is not None
            out["max_window_layers"] = self.num_layers
        if self.bos_token_id is not None:
            out["bos_token_id"] = self.bos_token_id
        if self.eos_token_ids:
            eos = list(self.eos_token_ids)
            out["eos_token_id"] = eos[0] if len(eos) == 1 else eos
        return out

    def summary(self) -> dict[str, Any]:
        """Plain dict of every field (JSON-serialisable)."""
        return asdict(self)

    @classmethod
    def from_hf_dict(cls, cfg: dict[str, Any]) -> ModelConfig:
        """Read an HF ``config.json``; raise ``UnsupportedModelError`` for other architectures."""
        archs = cfg.get("architectures") or []
        model_type = cfg.get("model_type")
        known = [a for a in archs if a in SUPPORTED_ARCHITECTURES]
        if known:
            model_type = SUPPORTED_ARCHITECTURES[known[0]]
        elif archs or model_type not in SUPPORTED_ARCHITECTURES.values():
            raise UnsupportedModelError(
                f"unknown architecture {archs or model_type!r}; supported: "
                f"{sorted(SUPPORTED_ARCHITECTURES)}"
            )
        if cfg.get("hidden_act", "silu") != "silu":
            raise UnsupportedModelError(f"hidden_act {cfg['hidden_act']!r} is not supported")
        n_heads = int(cfg["num_attention_heads"])
        head_dim = cfg.get("head_dim") or cfg["hidden_size"] // n_heads
        rope_theta, scaling = _rope_from_hf(cfg)
        eos = cfg.get("eos_token_id")
        eos_ids = tuple(eos) if isinstance(eos, list) else (() if eos is None else (int(eos),))
        window = cfg.get("sliding_window")
        if model_type == "qwen2" and not cfg.get("use_sliding_window", False):
            window = None
        llama_bias = bool(cfg.get("attention_bias", False))
        return cls(
            model_type=str(model_type),
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=int(cfg["hidden_size"]),
            intermediate_size=int(cfg["intermediate_size"]),
            num_layers=int(cfg["num_hidden_layers"]),
            num_heads=n_heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or n_heads),
            head_dim=int(head_dim),
            max_context=int(cfg.get("max_position_embeddings", 4096)),
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_scaling=scaling,
            attention_bias=model_type == "qwen2" or llama_bias,
            o_bias=model_type == "llama" and llama_bias,
            mlp_bias=bool(cfg.get("mlp_bias", False)),
            tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            sliding_window=int(window) if window else None,
            bos_token_id=cfg.get("bos_token_id"),
            eos_token_ids=eos_ids,
        )

    @classmethod
    def from_gguf_fields(
        cls, meta: dict[str, Any], *, has_output: bool, vocab_size: int | None = None
    ) -> ModelConfig:
        """Read GGUF metadata (``{key: value}``); ``has_output`` says whether ``output.weight``
        exists (otherwise the embeddings are tied); ``vocab_size`` is the embedding's row count
        (the metadata's own count otherwise)."""
        arch = meta.get("general.architecture")
        if arch not in ("llama", "qwen2"):
            raise UnsupportedModelError(
                f"unknown GGUF architecture {arch!r}; supported: ['llama', 'qwen2']"
            )

        def get(key: str, default: Any = None) -> Any:
            return meta.get(f"{arch}.{key}", default)

        n_heads = int(get("attention.head_count"))
        hidden = int(get("embedding_length"))
        head_dim = int(get("attention.key_length", hidden // n_heads))
        vocab = vocab_size or get("vocab_size") or len(meta.get("tokenizer.ggml.tokens", []))
        scaling: dict[str, Any] | None = None
        kind = get("rope.scaling.type")
        if kind == "linear":
            scaling = {"rope_type": "linear", "factor": float(get("rope.scaling.factor"))}
        elif kind not in (None, "none"):
            raise UnsupportedModelError(f"GGUF rope.scaling.type {kind!r} is not supported")
        eos = meta.get("tokenizer.ggml.eos_token_id")
        return cls(
            model_type="qwen2" if arch == "qwen2" else "llama",
            vocab_size=int(vocab),
            hidden_size=hidden,
            intermediate_size=int(get("feed_forward_length")),
            num_layers=int(get("block_count")),
            num_heads=n_heads,
            num_kv_heads=int(get("attention.head_count_kv", n_heads)),
            head_dim=head_dim,
            max_context=int(get("context_length", 4096)),
            rms_norm_eps=float(get("attention.layer_norm_rms_epsilon", 1e-5)),
            rope_theta=float(get("rope.freq_base", 10000.0)),
            rope_scaling=scaling,
            attention_bias=arch == "qwen2",
            tie_word_embeddings=not has_output,
            bos_token_id=meta.get("tokenizer.ggml.bos_token_id"),
            eos_token_ids=() if eos is None else (int(eos),),
        )


def _rope_from_hf(cfg: dict[str, Any]) -> tuple[float, dict[str, Any] | None]:
    """(theta, scaling) from either the transformers-4 (``rope_theta`` + ``rope_scaling``) or the
    transformers-5 (``rope_parameters``) spelling."""
    params = cfg.get("rope_parameters") or {}
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    scaling = cfg.get("rope_scaling") or None
    if scaling is None and params.get("rope_type", "default") != "default":
        scaling = {k: v for k, v in params.items() if k != "rope_theta"}
    if scaling is not None:
        scaling = dict(scaling)
        scaling.setdefault("rope_type", scaling.get("type"))
        if scaling["rope_type"] == "default":
            scaling = None
    return theta, scaling
