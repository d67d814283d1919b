"""The router's cost model: seconds to first token for a request on a candidate replica.

    cost = recompute_tokens × prefill_s_per_token
         + remote_bytes × moqt_s_per_byte          (KV pulled from another node's relay)
         + local_bytes × local_s_per_byte          (same node: zero-copy, nearly free)
         + queue_len × service_s                   (requests ahead of this one)

Pure functions over plain numbers; no Ray, no I/O except :func:`load_figures` /
:func:`record_measurement`, which read and write the figures file.

Where the figures come from: the benches measure them and write them to a JSON file
(``$KVMOQ_COSTS`` or ``~/.cache/ray_kvmoq/costs.json``). Schema (every key optional, unknown keys
ignored; a section's keys override flat keys)::

    {"prefill_s_per_token": 4.6e-4, "moqt_s_per_byte": 1.25e-8, "local_s_per_byte": 1.6e-12,
     "service_s": 0.5, "kv_bytes_per_token": 23040,
     "engine":    {"prefill_s_per_token": ..., "kv_bytes_per_token": ..., "service_s": ...},
     "transport": {"moqt_s_per_byte": ..., "local_s_per_byte": ...}}

Missing figures fall back to :data:`DEFAULT_FIGURES`, each measured on the 2-core CI-class machine
(shared/docs/runtime-notes.md §2c and transport-notes.md) and cited beside it.

Invariants: a plan never reuses the prompt's last token (its logits are needed for the first
generated token), never pulls more chunks than are available contiguously from chunk 0, and pulls
remote chunks only when that is cheaper than recomputing them.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

CHUNK_TOKENS = 128
"""Tokens per KV chunk (= one MoQT group), DESIGN.md."""


@dataclass(frozen=True, kw_only=True)
class CostFigures:
    """Measured unit costs; ``source`` says where they came from."""

    prefill_s_per_token: float
    """Seconds of prefill compute per prompt token."""
    moqt_s_per_byte: float
    """Seconds per KV byte pulled from another node's relay over MoQT."""
    local_s_per_byte: float
    """Seconds per KV byte read from the same node's object store (zero-copy)."""
    service_s: float
    """Seconds one queued request holds a replica before the next one starts."""
    kv_bytes_per_token: float
    """KV bytes per token as stored on the relays (all layers, K and V)."""
    source: str = "defaults"
    """``defaults`` or the path of the figures file."""


DEFAULT_FIGURES = CostFigures(
    # SmolLM2-135M bf16 prefill of 2048 tokens in 0.94 s on 2 CPU cores (runtime-notes §2c).
    prefill_s_per_token=0.94 / 2048,
    # aioquic 1.7.2 with 16 KB datagrams: 76–106 MB/s on loopback (transport-notes); take 80 MB/s.
    moqt_s_per_byte=1 / 80e6,
    # Same-node ray.get of 256 MB is zero-copy in ~0.4 ms (transport-notes).
    local_s_per_byte=0.4e-3 / 256e6,
    # One prefill of a ~1k-token prompt on CPU (runtime-notes §2c: 512 tok 0.20 s, 2048 0.94 s).
    service_s=0.45,
    # SmolLM2: 30 layers × 2 × 3 KV heads × 64 dims × 2 bytes (FP16/BF16 track).
    kv_bytes_per_token=30 * 2 * 3 * 64 * 2,
)
"""Fallback figures, each measured on the CI-class machine (sources inline)."""

_FIGURE_KEYS = tuple(f.name for f in fields(CostFigures) if f.name != "source")


def default_costs_path() -> Path:
    """``$KVMOQ_COSTS`` if set, else ``~/.cache/ray_kvmoq/costs.json``."""
    env = os.environ.get("KVMOQ_COSTS")
    return Path(env) if env else Path.home() / ".cache" / "ray_kvmoq" / "costs.json"


def _flatten(data: dict[str, Any]) -> dict[str, float]:
    out: dict[str, float] = {}
    for key in _FIGURE_KEYS:
        if isinstance(data.get(key), int | float):
            out[key] = float(data[key])
    for section in ("engine", "transport", "serve"):
        sub = data.get(section)
        if isinstance(sub, dict):
            for key in _FIGURE_KEYS:
                if isinstance(sub.get(key), int | float):
                    out[key] = float(sub[key])
    return {k: v for k, v in out.items() if math.isfinite(v) and v >= 0}


def load_figures(path: Path | None = None) -> CostFigures:
    """Figures from the JSON file at ``path`` (default :func:`default_costs_path`) over defaults.

    A missing or unreadable file gives :data:`DEFAULT_FIGURES` (``source="defaults"``).
    """
    path = path or default_costs_path()
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return DEFAULT_FIGURES
    if not isinstance(data, dict):
        return DEFAULT_FIGURES
    found = _flatten(data)
    if not found:
        return DEFAULT_FIGURES
    return replace(DEFAULT_FIGURES, **found, source=str(path))


def record_measurement(section: str, values: dict[str, float], path: Path | None = None) -> Path:
    """Merge ``values`` into ``section`` of the figures file (benches call this); returns the path."""
    path = path or default_costs_path()
    try:
        data = json.loads(path.read_text())
        if not isinstance(data, dict):
            data = {}
    except (OSError, ValueError):
        data = {}
    sub = data.setdefault(section, {})
    sub.update({k: float(v) for k, v in values.items()})
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)
    return path


@dataclass(frozen=True, kw_only=True)
class PrefixPlan:
    """How a prompt's prefix will be obtained on one replica, and what that costs."""

    local_chunks: int
    """Chunks read from the same node (zero-copy)."""
    remote_chunks: int
    """Chunks pulled from another node over MoQT (after the local ones)."""
    recompute_tokens: int
    """Prompt tokens computed by prefill."""
    cost_s: float
    """Estimated seconds to first token, queueing included."""

    @property
    def reused_chunks(self) -> int:
        """Chunks not recomputed."""
        return self.local_chunks + self.remote_chunks


def reusable_chunks(prompt_tokens: int, chunk_tokens: int = CHUNK_TOKENS) -> int:
    """Full chunks that may be reused: the last prompt token is always recomputed."""
    return max(0, (prompt_tokens - 1) // chunk_tokens)


def plan_prefix(
    figures: CostFigures,
    *,
    prompt_tokens: int,
    local_chunks: int,
    available_chunks: int,
    queue_len: int = 0,
    chunk_tokens: int = CHUNK_TOKENS,
    allow_remote: bool = True,
) -> PrefixPlan:
    """The cheapest plan for a prompt on a replica.

    ``local_chunks``: leading chunks held on the replica's node; ``available_chunks``: leading
    chunks held anywhere (≥ local). Remote chunks are pulled only if cheaper than recomputing.
    """
    limit = reusable_chunks(prompt_tokens, chunk_tokens)
    local = min(local_chunks, limit)
    avail = max(local, min(available_chunks, limit)) if allow_remote else local
    extra = avail - local
    chunk_bytes = chunk_tokens * figures.kv_bytes_per_token
    pull_s = extra * chunk_bytes * figures.moqt_s_per_byte
    recompute_extra_s = extra * chunk_tokens * figures.prefill_s_per_token
    remote = extra if extra and pull_s < recompute_extra_s else 0
    recompute = prompt_tokens - (local + remote) * chunk_tokens
    cost = (
        recompute * figures.prefill_s_per_token
        + remote * chunk_bytes * figures.moqt_s_per_byte
        + local * chunk_bytes * figures.local_s_per_byte
        + max(0, queue_len) * figures.service_s
    )
    return PrefixPlan(
        local_chunks=local, remote_chunks=remote, recompute_tokens=recompute, cost_s=cost
    )


def leading_hits(request_hashes: list[str], held: set[str] | frozenset[str]) -> int:
    """How many of ``request_hashes`` (chained chunk hashes, in order) are held, from chunk 0."""
    n = 0
    for h in request_hashes:
        if h not in held:
            break
        n += 1
    return n
