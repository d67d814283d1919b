"""Sampling parameters and the token sampler.

``SamplingParams`` validates itself on construction (``InvalidSamplingParamsError`` names the
field). Temperature 0 is greedy (argmax, ties to the lowest id, as ``torch.argmax``). Otherwise
logits are divided by the temperature, then top-k, then top-p (nucleus; the most likely token is
always kept) filter them, and one token is drawn from a per-request ``torch.Generator`` seeded
with ``seed`` — so a seeded request gives the same tokens whatever else shares its batch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from .errors import InvalidSamplingParamsError

__all__ = ["SamplingParams", "make_generator", "sample_token"]


@dataclass(frozen=True, kw_only=True)
class SamplingParams:
    """How to pick tokens and when to stop."""

    max_tokens: int = 256
    """Most tokens to generate (≥ 1). Generation also stops at the model's context length."""
    temperature: float = 0.0
    """0 = greedy; otherwise the softmax temperature (> 0)."""
    top_p: float = 1.0
    """Nucleus sampling mass in (0, 1]; 1 disables it."""
    top_k: int = 0
    """Keep only the k most likely tokens; 0 disables it."""
    seed: int | None = None
    """Seed of this request's generator (None: a random seed)."""
    stop: Sequence[str] = field(default=())
    """Stop strings (stored as a tuple): generation ends before the first occurrence, which is
    not part of the text."""
    stop_token_ids: Sequence[int] = field(default=())
    """Extra token ids that end generation (the model's EOS ids always do, see ``ignore_eos``)."""
    ignore_eos: bool = False
    """Keep generating past EOS (benchmarks)."""

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        else:
            object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "stop_token_ids", tuple(self.stop_token_ids))
        _check(
            isinstance(self.max_tokens, int) and self.max_tokens >= 1,
            f"max_tokens must be an integer ≥ 1, got {self.max_tokens!r}",
        )
        t = self.temperature
        _check(
            isinstance(t, int | float) and t >= 0 and t == t and t != float("inf"),
            f"temperature must be a finite number ≥ 0, got {t!r}",
        )
        _check(
            isinstance(self.top_p, int | float) and 0 < self.top_p <= 1,
            f"top_p must be in (0, 1], got {self.top_p!r}",
        )
        _check(
            isinstance(self.top_k, int) and self.top_k >= 0,
            f"top_k must be an integer ≥ 0 (0 = off), got {self.top_k!r}",
        )
        _check(
            self.seed is None or (isinstance(self.seed, int) and self.seed >= 0),
            f"seed must be a non-negative integer or None, got {self.seed!r}",
        )
        _check(
            all(isinstance(s, str) and s for s in self.stop),
            f"stop strings must be non-empty strings, got {self.stop!r}",
        )
        _check(
            all(isinstance(i, int) and i >= 0 for i in self.stop_token_ids),
            f"stop_token_ids must be non-negative integers, got {self.stop_token_ids!r}",
        )

    @property
    def greedy(self) -> bool:
        """True when tokens are picked by argmax."""
        return self.temperature == 0


def _check(ok: bool, message: str) -> None:
    if not ok:
        raise InvalidSamplingParamsError(message)


def make_generator(params: SamplingParams, device: torch.device | str = "cpu") -> torch.Generator:
    """A generator seeded with ``params.seed`` (or fresh entropy)."""
    g = torch.Generator(device=device)
    seed = params.seed if params.seed is not None else int.from_bytes(os.urandom(8), "little") >> 1
    g.manual_seed(seed)
    return g


def sample_token(logits: torch.Tensor, params: SamplingParams, generator: torch.Generator) -> int:
    """One token id from float32 ``logits`` [V] under ``params``."""
    if params.greedy:
        return int(torch.argmax(logits))
    x = logits.float() / float(params.temperature)
    if params.top_k and params.top_k < x.shape[-1]:
        kth = torch.topk(x, params.top_k).values[-1]
        x = x.masked_fill(x < kth, float("-inf"))
    if params.top_p < 1.0:
        sorted_x, order = torch.sort(x, descending=True)
        probs = torch.softmax(sorted_x, dim=-1)
        # drop a token when the mass before it already reaches top_p; the first always stays
        drop = (torch.cumsum(probs, dim=-1) - probs) >= params.top_p
        x = x.scatter(0, order, sorted_x.masked_fill(drop, float("-inf")))
    probs = torch.softmax(x, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def greedy_tokens(logits: torch.Tensor) -> list[int]:
    """Argmax per row of ``logits`` [n, V]."""
    return [int(i) for i in torch.argmax(logits, dim=-1).tolist()]


def stop_ids(params: SamplingParams, eos_ids: Sequence[int]) -> frozenset[int]:
    """Ids that end a request: ``stop_token_ids`` plus EOS unless ``ignore_eos``."""
    ids = set(params.stop_token_ids)
    if not params.ignore_eos:
        ids.update(eos_ids)
    return frozenset(ids)
