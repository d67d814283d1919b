"""vLLM engine arguments our apps set on CPU, kept Ray-free (the bench's CLI reads them).

The per-step token budget (``max_num_batched_tokens``) decides how long one engine step runs.
vLLM's default on its CPU backend is 2,048 tokens; there a step's time grows with its tokens
(~1.4 ms a prompt token for SmolLM2-135M on one core here), so a step that takes a long prompt
whole runs for seconds, every running stream stalls for it, and an aborted request waits for it.
Under load the steps grow to tens of seconds: with ``kvmoq bench serve`` on the 2-replica
shared-prefix row, stock Ray Serve LLM's TTFT was ~62 s at vLLM's default budget and ~0.3 s at
128 tokens, with TPOT 1.7 s vs 71 ms (docs/benchmarks.md). With 128, a long prompt is prefilled
in chunks (vLLM's chunked prefill) between the decode steps of the others.
"""

from __future__ import annotations

__all__ = ["CPU_STEP_BUDGET", "VLLM_CPU_MAX_NUM_SEQS", "step_budget"]

CPU_STEP_BUDGET = 128
"""Our apps' ``max_num_batched_tokens`` on CPU (an app's ``engine_kwargs`` may set another)."""

VLLM_CPU_MAX_NUM_SEQS = 128
"""vLLM's default ``max_num_seqs`` on its CPU backend (its engine log says so at start)."""


def step_budget(max_num_batched_tokens: int) -> dict[str, int]:
    """vLLM engine arguments for a per-step token budget. ``max_num_seqs`` follows it down
    where it would exceed it (vLLM refuses a budget smaller than the sequences it may batch)."""
    out = {"max_num_batched_tokens": max_num_batched_tokens}
    if max_num_batched_tokens < VLLM_CPU_MAX_NUM_SEQS:
        out["max_num_seqs"] = max_num_batched_tokens
    return out
