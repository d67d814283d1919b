"""A Llama-family decoder in plain torch, with Hugging Face parameter names.

``CausalLM`` holds exactly the parameters of transformers' ``LlamaForCausalLM`` /
``Qwen2ForCausalLM`` / ``MistralForCausalLM`` (``model.embed_tokens.weight``,
``model.layers.N.self_attn.q_proj.weight``, ..., ``lm_head.weight``), so an HF ``state_dict``
loads with ``load_state_dict`` and the maths can be checked against transformers.

The model owns no KV cache. Each forward gets a ``KVState`` that decides where this step's keys
and values go and what each query may attend to:

* ``PrefillState``: one sequence; optional prefix KV; the new K/V are written into one
  ``[L, 2, H, P+T, D]`` buffer (prefix copied in first), so the prefill's whole KV ends up in one
  place without a per-layer ``cat``.
* ``BatchDecodeState`` (in ``scheduler.py``): one new token for each of ``n`` sequences, written
  at each sequence's own position into a slot cache.

Invariants: keys are stored **post-RoPE** (kv-payload.md §5.1); RoPE tables are computed in
float32 exactly as transformers does and cast to the compute dtype; RMSNorm runs in float32.
"""

from __future__ import annotations

import math
from typing import Protocol

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig

__all__ = ["CausalLM", "KVState", "PrefillState", "rope_inv_freq"]


class KVState(Protocol):
    """Where a forward step stores K/V, and the mask its queries use."""

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
        """Store ``k``/``v`` ([B, H, T, D], post-RoPE) for ``layer``; return (all keys, all values,
        boolean attention mask or None, is_causal)."""
        ...


def rope_inv_freq(config: ModelConfig) -> torch.Tensor:
    """Inverse RoPE frequencies (float32), with linear or llama3 scaling, as transformers has."""
    d = config.head_dim
    exps = torch.arange(0, d, 2, dtype=torch.int64).to(torch.float) / d
    inv = 1.0 / (config.rope_theta**exps)
    sc = config.rope_scaling
    if sc is None:
        return inv
    factor = float(sc["factor"])
    if sc["rope_type"] == "linear":
        return inv / factor
    low, high = float(sc["low_freq_factor"]), float(sc["high_freq_factor"])
    old = float(sc["original_max_position_embeddings"])
    wavelen = 2 * math.pi / inv
    llama = torch.where(wavelen > old / low, inv / factor, inv)
    smooth = (old / wavelen - low) / (high - low)
    smoothed = (1 - smooth) * llama / factor + smooth * llama
    medium = ~(wavelen < old / high) * ~(wavelen > old / low)
    return torch.where(medium, smoothed, llama)


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


class RMSNorm(nn.Module):
    """Root-mean-square norm, computed in float32 like transformers' ``LlamaRMSNorm``."""

    def __init__(self, dim: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        dtype = x.dtype
        h = x.to(torch.float32)
        h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * h.to(dtype)


class Attention(nn.Module):
    """Grouped-query attention with RoPE; K/V go to the step's ``KVState``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h, d = cfg.hidden_size, cfg.head_dim
        self.num_heads, self.num_kv_heads, self.head_dim = cfg.num_heads, cfg.num_kv_heads, d
        self.q_proj = nn.Linear(h, cfg.num_heads * d, bias=cfg.attention_bias)
        self.k_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.attention_bias)
        self.v_proj = nn.Linear(h, cfg.num_kv_heads * d, bias=cfg.attention_bias)
        self.o_proj = nn.Linear(cfg.num_heads * d, h, bias=cfg.o_bias)
        self.scale = d**-0.5

    def forward(
        self,
        x: torch.Tensor,
        cos: torch.Tensor,
        sin: torch.Tensor,
        kv: KVState,
        layer: int,
    ) -> torch.Tensor:
        b, t, _ = x.shape
        q = self.q_proj(x).view(b, t, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(b, t, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        keys, values, mask, causal = kv.update(layer, k, v)
        if t == 1 and not causal:
            out = self._attend_one(q, keys, values, mask)
            return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))
        out = F.scaled_dot_product_attention(
            q,
            keys,
            values,
            attn_mask=mask,
            is_causal=causal,
            scale=self.scale,
            enable_gqa=self.num_heads != self.num_kv_heads,
        )
        return self.o_proj(out.transpose(1, 2).reshape(b, t, -1))

    def _attend_one(
        self, q: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, mask: torch.Tensor | None
    ) -> torch.Tensor:
        """Attention for a single query per sequence (decode): the query heads of a group share
        their K/V head through a reshape, not a copy; softmax in float32. On CPU this is ~5x
        faster than ``scaled_dot_product_attention`` with ``enable_gqa`` for batched decode."""
        b, hkv, s, d = keys.shape
        g = self.num_heads // hkv
        qg = q.reshape(b, hkv, g, d)
        scores = torch.matmul(qg, keys.transpose(-1, -2)).float() * self.scale
        if mask is not None:
            scores = scores.masked_fill(~mask.view(b, 1, 1, s), float("-inf"))
        probs = torch.softmax(scores, dim=-1).to(values.dtype)
        return torch.matmul(probs, values).reshape(b, self.num_heads, 1, d)


class MLP(nn.Module):
    """SwiGLU feed-forward block."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        h, f = cfg.hidden_size, cfg.intermediate_size
        self.gate_proj = nn.Linear(h, f, bias=cfg.mlp_bias)
        self.up_proj = nn.Linear(h, f, bias=cfg.mlp_bias)
        self.down_proj = nn.Linear(f, h, bias=cfg.mlp_bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


class DecoderLayer(nn.Module):
    """Pre-norm attention + pre-norm MLP, each with a residual."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.self_attn = Attention(cfg)
        self.mlp = MLP(cfg)
        self.input_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)

    def forward(
        self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, kv: KVState, layer: int
    ) -> torch.Tensor:
        x = x + self.self_attn(self.input_layernorm(x), cos, sin, kv, layer)
        return x + self.mlp(self.post_attention_layernorm(x))


class _Backbone(nn.Module):
    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
        self.layers = nn.ModuleList(DecoderLayer(cfg) for _ in range(cfg.num_layers))
        self.norm = RMSNorm(cfg.hidden_size, cfg.rms_norm_eps)


class CausalLM(nn.Module):
    """The decoder plus LM head; parameter names match transformers' ``*ForCausalLM``."""

    def __init__(self, cfg: ModelConfig) -> None:
        super().__init__()
        self.config = cfg
        self.model = _Backbone(cfg)
        self.lm_head = nn.Linear(cfg.hidden_size, cfg.vocab_size, bias=False)
        if cfg.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight
        self.inv_freq: torch.Tensor
        self.register_buffer("inv_freq", rope_inv_freq(cfg), persistent=False)

    def rope(
        self, positions: torch.Tensor, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """cos/sin tables [B, 1, T, D] for integer ``positions`` [B, T]."""
        inv = self.inv_freq.to(device=positions.device, dtype=torch.float)
        freqs = positions[..., None].float() * inv
        emb = torch.cat((freqs, freqs), dim=-1)
        return emb.cos().to(dtype)[:, None], emb.sin().to(dtype)[:, None]

    def forward(
        self,
        input_ids: torch.Tensor,
        positions: torch.Tensor,
        kv: KVState,
        logits_index: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Run ``input_ids`` [B, T] at ``positions`` [B, T]; return float32 logits.

        ``logits_index`` (a 1-D index into T) limits the LM head to those positions (prefill
        usually wants only the last); None computes logits for every position.
        """
        x = self.model.embed_tokens(input_ids)
        cos, sin = self.rope(positions, x.dtype)
        for i, layer in enumerate(self.model.layers):
            x = layer(x, cos, sin, kv, i)
        if logits_index is not None:
            x = x[:, logits_index]
        return self.lm_head(self.model.norm(x)).float()


class PrefillState:
    """KV handling for one sequence: ``T`` new tokens after ``P`` tokens of prefix KV.

    ``buffer`` is ``[L, 2, H, P+T, D]``; ``prefix`` (if given) must already be copied into
    ``buffer[..., :P, :]``. The forward writes each layer's new K/V into ``buffer[..., P:, :]``.
    """

    def __init__(self, buffer: torch.Tensor, prefix_len: int, window: int | None = None) -> None:
        self.buffer = buffer
        self.prefix_len = prefix_len
        total = buffer.shape[3]
        new = total - prefix_len
        self.mask: torch.Tensor | None = None
        self.causal = prefix_len == 0 and (window is None or total <= window)
        if not self.causal:
            q_pos = torch.arange(prefix_len, total, device=buffer.device)[:, None]
            k_pos = torch.arange(total, device=buffer.device)[None, :]
            mask = k_pos <= q_pos
            if window is not None:
                mask &= k_pos > q_pos - window
            self.mask = mask.view(1, 1, new, total)

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
        p = self.prefix_len
        buf = self.buffer[layer]
        buf[0, :, p:].copy_(k[0])
        buf[1, :, p:].copy_(v[0])
        if p == 0:
            return k, v, self.mask, self.causal
        return buf[0][None], buf[1][None], self.mask, self.causal
