"""KV codec quality on real KV: teacher-forced agreement with the uncompressed run.

Protocol (../shared/docs/kv-payload.md §4.1, Tier 1): prefill a ``prefix``-token slice of the
shipped public-domain text once; for every codec, encode the prefix's KV chunk by chunk
(128-token groups; AC's codebook calibrated on the first group, as a live publisher would),
decode it, and teacher-force the next ``continuation`` tokens on the decoded KV. Against the
run on the original KV we report top-1 agreement, mean KL(ref ‖ codec) in nats per token, and
per-layer relative L2 error of K and V. The engine is loaded once by the caller.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from importlib import resources

import numpy as np
import torch

from ..engine import Engine, KVCache
from ..kvcache import TRACK_NAMES, KVGeometry, OutDType, build_codebook, get_codec

TEXT_RESOURCE = "pride_and_prejudice_ch1-2.txt"


def load_text() -> str:
    """The shipped public-domain text (provenance lines starting with ``#`` removed)."""
    raw = resources.files("ray_kvmoq.data").joinpath(TEXT_RESOURCE).read_text("utf-8")
    return "\n".join(line for line in raw.splitlines() if not line.startswith("#"))


@dataclass(frozen=True, kw_only=True)
class CodecQuality:
    """Quality of one codec on one (prefix, continuation)."""

    name: str
    """Track name (``Int8``...)."""
    top1: float
    """Fraction of continuation positions whose argmax matches the uncompressed run."""
    kl: float
    """Mean KL(reference ‖ codec) over continuation positions, nats per token."""
    rel_l2_k: list[float] = field(repr=False)
    """Per layer ‖K̂ − K‖ / ‖K‖."""
    rel_l2_v: list[float] = field(repr=False)
    """Per layer ‖V̂ − V‖ / ‖V‖."""
    bytes_per_token: float
    """Mean object payload size (header and scales included; AC codebook amortised)."""

    @property
    def worst_rel_l2(self) -> tuple[float, float]:
        """(worst K layer, worst V layer)."""
        return max(self.rel_l2_k), max(self.rel_l2_v)


def text_tokens(engine: Engine, needed: int) -> list[int]:
    """The first ``needed`` token ids of the shipped text."""
    ids = engine.tokenizer.encode(load_text(), add_special_tokens=False)
    if len(ids) < needed:
        raise ValueError(f"shipped text has {len(ids)} tokens, {needed} needed")
    return ids[:needed]


def _kl_top1(ref: torch.Tensor, got: torch.Tensor) -> tuple[float, float]:
    lp_ref = torch.log_softmax(ref.float(), dim=-1)
    lp_got = torch.log_softmax(got.float(), dim=-1)
    kl = (lp_ref.exp() * (lp_ref - lp_got)).sum(dim=-1).mean().item()
    top1 = (ref.argmax(dim=-1) == got.argmax(dim=-1)).float().mean().item()
    return float(kl), float(top1)


def _rel_l2(orig: np.ndarray, dec: np.ndarray) -> tuple[list[float], list[float]]:
    out: list[list[float]] = [[], []]
    for kv in (0, 1):
        a = orig[:, kv].reshape(orig.shape[0], -1)
        d = dec[:, kv].reshape(orig.shape[0], -1) - a
        out[kv] = (
            np.linalg.norm(d, axis=1) / np.maximum(np.linalg.norm(a, axis=1), 1e-30)
        ).tolist()
    return out[0], out[1]


def _bf16_to_f32(chunk: np.ndarray) -> np.ndarray:
    if chunk.dtype == np.uint16:
        return (chunk.astype(np.uint32) << 16).view(np.float32)
    return chunk.astype(np.float32)


def measure_quality(
    engine: Engine,
    *,
    prefix: int = 512,
    continuation: int = 256,
    codecs: Iterable[str | bytes] = TRACK_NAMES,
    progress: Callable[[str], None] | None = None,
) -> dict[str, CodecQuality]:
    """Run the protocol for each codec; keys are track names."""
    say = progress or (lambda _msg: None)
    tokens = text_tokens(engine, prefix + continuation)
    c = engine.config
    geo = KVGeometry(num_layers=c.num_layers, num_kv_heads=c.num_kv_heads, head_dim=c.head_dim)
    t0 = time.perf_counter()
    kv = engine.prefill(tokens[:prefix]).kv
    chunks = kv.chunks()
    cont = tokens[prefix:]
    ref = engine.forward_with_kv(cont, kv)
    say(f"prefill {prefix} + reference {continuation}: {time.perf_counter() - t0:.1f} s")
    out_dtype: OutDType = "bf16" if c.dtype == "bfloat16" else "float32"
    orig32 = np.concatenate([_bf16_to_f32(ch) for ch in chunks], axis=3)
    out: dict[str, CodecQuality] = {}
    for name in codecs:
        codec = get_codec(name)
        t1 = time.perf_counter()
        codebook = build_codebook(chunks[0]) if codec.needs_codebook else None
        decoded, nbytes = [], 0
        for ch in chunks:
            objs = codec.encode_chunk(ch, codebook=codebook)
            nbytes += sum(map(len, objs))
            decoded.append(codec.decode_objects(objs, geo, dtype=out_dtype, codebook=codebook))
        if codebook is not None:
            nbytes += len(codebook)
        logits = engine.forward_with_kv(cont, KVCache.from_chunks(decoded))
        kl, top1 = _kl_top1(ref, logits)
        rk, rv = _rel_l2(orig32, np.concatenate([_bf16_to_f32(d) for d in decoded], axis=3))
        tn = codec.track_name.decode()
        out[tn] = CodecQuality(
            name=tn, top1=top1, kl=kl, rel_l2_k=rk, rel_l2_v=rv, bytes_per_token=nbytes / prefix
        )
        say(f"{tn}: top-1 {top1:.2%}, KL {kl:.2e} ({time.perf_counter() - t1:.1f} s)")
    return out
