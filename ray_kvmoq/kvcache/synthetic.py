"""Synthetic KV shaped and distributed like a small Llama's (for tests and model-free benches).

Keys get a per-channel offset and scale with a few large outlier channels per head (post-RoPE
keys of Llama-family models look like this; it is what makes per-token scaling lossy), values
are near-Gaussian with per-layer scale. Deterministic in ``seed``. Not a substitute for real KV
in quality gates; the model-based harness is ``ray_kvmoq.bench.quality``.
"""

from __future__ import annotations

import numpy as np


def synthetic_kv(
    *,
    num_layers: int = 30,
    num_kv_heads: int = 3,
    tokens: int = 128,
    head_dim: int = 64,
    seed: int = 0,
) -> np.ndarray:
    """A float32 ``[L, 2, H, T, D]`` chunk with Llama-like K/V statistics."""
    rng = np.random.default_rng(seed)
    shape = (num_layers, num_kv_heads, tokens, head_dim)
    ch_scale = rng.lognormal(0.0, 0.6, size=(num_layers, num_kv_heads, 1, head_dim))
    outliers = rng.random((num_layers, num_kv_heads, 1, head_dim)) < 0.06
    ch_scale = np.where(outliers, ch_scale * 8.0, ch_scale)
    ch_mean = rng.normal(0.0, 1.0, size=(num_layers, num_kv_heads, 1, head_dim)) * ch_scale
    # slowly varying per-token structure (positions / topics), shared across channels
    drift = np.cumsum(rng.normal(0, 0.15, size=(num_layers, num_kv_heads, tokens, 1)), axis=2)
    k = ch_mean + ch_scale * (rng.standard_normal(shape) * 0.8 + 0.3 * np.tanh(drift))
    layer_scale = np.linspace(0.3, 2.0, num_layers).reshape(num_layers, 1, 1, 1)
    v = layer_scale * rng.standard_normal(shape) * rng.lognormal(0, 0.3, (1, 1, 1, head_dim))
    return np.stack((k, v), axis=1).astype(np.float32)
