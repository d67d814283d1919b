"""Continuous batching: the active sequences of a replica advance together, one forward per token.

``BatchScheduler.step()`` is the unit of work (``Engine.generate`` / ``stream`` /
``generate_batch`` drive it):

1. admit waiting requests while slots are free — each is prefilled alone (reusing its prefix KV)
   and its first token sampled from the prefill logits;
2. run **one** batched decode forward for every sequence that was already active, each at its
   own position;
3. sample, detokenize, check stop conditions; finished sequences leave and free their slot.

Requests join and leave only between steps. ``add`` and ``abort`` may be called from any thread.

KV layout: one slot cache ``[L, 2, B_max, H, T_cap, D]``. Active sequences always occupy slots
``0..n-1`` (a leaving sequence's slot is filled by moving the last one in), so the batch reads
``cache[:, :, :n]`` as a view. ``T_cap`` grows by doubling up to the context length. Positions
beyond a sequence's length are masked.
"""

from __future__ import annotations

import dataclasses
import itertools
import threading
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch

from .errors import InvalidRequestError
from .kv import KVCache
from .outputs import Completion, StepOutput
from .sampling import SamplingParams, greedy_tokens, make_generator, sample_token, stop_ids

if TYPE_CHECKING:
    from .engine import Engine

__all__ = ["BatchScheduler"]

_ids = itertools.count()


@dataclass
class _Seq:
    request_id: str
    prompt: list[int]
    params: SamplingParams
    prefix_kv: KVCache | None
    stops: frozenset[int]
    generator: torch.Generator
    output: list[int] = field(default_factory=list)
    text: str = ""
    sent: int = 0
    length: int = 0  # tokens whose KV is in the slot cache
    num_cached: int = 0


class _DecodeState:
    """KVState for one decode step of ``n`` sequences at positions ``pos``."""

    def __init__(self, cache: torch.Tensor, pos: torch.Tensor, window: int | None) -> None:
        n = pos.shape[0]
        self.cache, self.pos = cache, pos
        self.rows = torch.arange(n, device=pos.device)
        span = int(pos.max()) + 1
        k_pos = torch.arange(span, device=pos.device)[None, :]
        mask = k_pos <= pos[:, None]
        if window is not None:
            mask &= k_pos > pos[:, None] - window
        self.mask = mask.view(n, 1, 1, span)
        self.n, self.span = n, span

    def update(
        self, layer: int, k: torch.Tensor, v: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor | None, bool]:
        kc, vc = self.cache[layer, 0], self.cache[layer, 1]
        kc[self.rows, :, self.pos] = k[:, :, 0]
        vc[self.rows, :, self.pos] = v[:, :, 0]
        return kc[: self.n, :, : self.span], vc[: self.n, :, : self.span], self.mask, False


class BatchScheduler:
    """Continuous batching over one ``Engine``; see the module docstring."""

    def __init__(self, engine: Engine, *, max_batch: int = 8) -> None:
        if max_batch < 1:
            raise ValueError(f"max_batch must be ≥ 1, got {max_batch}")
        self.engine = engine
        self.max_batch = max_batch
        """Most sequences decoded together."""
        self._waiting: deque[_Seq] = deque()
        self._active: list[_Seq] = []
        self._aborted: set[str] = set()
        self._finished: dict[str, Completion] = {}
        self._lock = threading.Lock()
        self._cache: torch.Tensor | None = None

    # ------------------------------------------------------------------ control (any thread)
    def add(
        self,
        prompt: Sequence[int],
        params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        prefix_kv: KVCache | None = None,
    ) -> str:
        """Queue a request (token ids); raise ``InvalidRequestError`` now if it cannot run.
        Returns its request id."""
        prompt = list(prompt)
        self.engine.check_tokens(prompt)
        if prefix_kv is not None:
            self.engine._check_prefix(prefix_kv)
            if prefix_kv.length > len(prompt):
                raise InvalidRequestError(
                    f"prefix KV covers {prefix_kv.length} tokens, the prompt has {len(prompt)}"
                )
        params = params or SamplingParams()
        rid = request_id or f"req-{next(_ids)}"
        seq = _Seq(
            request_id=rid,
            prompt=prompt,
            params=params,
            prefix_kv=prefix_kv,
            stops=stop_ids(params, self.engine.eos_token_ids),
            generator=make_generator(params),
        )
        with self._lock:
            if any(s.request_id == rid for s in (*self._waiting, *self._active)):
                raise InvalidRequestError(f"request id {rid!r} is already running")
            self._waiting.append(seq)
        return rid

    def abort(self, request_id: str) -> None:
        """End a request at the next step (its last output has ``finish_reason="abort"``)."""
        with self._lock:
            self._aborted.add(request_id)

    @property
    def has_work(self) -> bool:
        """True while any request waits or runs."""
        return bool(self._waiting or self._active)

    @property
    def num_active(self) -> int:
        """Sequences currently decoding."""
        return len(self._active)

    @property
    def num_waiting(self) -> int:
        """Requests not yet admitted."""
        return len(self._waiting)

    def pop_finished(self) -> dict[str, Completion]:
        """Completions of requests that finished since the last call."""
        with self._lock:
            out, self._finished = self._finished, {}
        return out

    # ------------------------------------------------------------------ the step
    def step(self) -> list[StepOutput]:
        """Admit, decode one token for every active sequence, retire; return this step's outputs."""
        outputs: list[StepOutput] = []
        with self._lock:
            aborted, self._aborted = self._aborted, set()
            admit: list[_Seq] = []
            for seq in [s for s in self._waiting if s.request_id in aborted]:
                self._waiting.remove(seq)
                outputs.append(self._finish(seq, None, "abort"))
            while self._waiting and len(self._active) + len(admit) < self.max_batch:
                admit.append(self._waiting.popleft())
        for seq in [s for s in self._active if s.request_id in aborted]:
            outputs.append(self._retire(seq, None, "abort"))
        decoding = list(self._active)
        for seq in admit:
            outputs.append(self._admit(seq))
        if decoding:
            outputs.extend(self._decode(decoding))
        return outputs

    def _admit(self, seq: _Seq) -> StepOutput:
        eng = self.engine
        try:
            res = eng.prefill(seq.prompt, seq.prefix_kv)
        except Exception as exc:  # one bad request (e.g. a malformed KV) fails alone
            return self._finish(seq, None, "error", f"{type(exc).__name__}: {exc}")
        seq.prefix_kv = None
        seq.num_cached = res.num_cached
        assert res.full_kv is not None
        slot = len(self._active)
        self._ensure_capacity(len(seq.prompt) + 1)
        assert self._cache is not None
        self._cache[:, :, slot, :, : len(seq.prompt)].copy_(res.full_kv)
        seq.length = len(seq.prompt)
        self._active.append(seq)
        token = sample_token(res.logits_last.cpu(), seq.params, seq.generator)
        return self._advance(seq, token)

    def _decode(self, seqs: list[_Seq]) -> list[StepOutput]:
        eng = self.engine
        assert all(s is self._active[i] for i, s in enumerate(seqs))
        self._ensure_capacity(max(s.length for s in seqs) + 1)
        assert self._cache is not None
        dev = eng.device
        ids = torch.tensor([[s.output[-1]] for s in seqs], dtype=torch.long, device=dev)
        pos = torch.tensor([s.length for s in seqs], dtype=torch.long, device=dev)
        with eng.lock, torch.inference_mode():
            state = _DecodeState(self._cache, pos, eng.model_config.sliding_window)
            logits = eng.model(ids, pos[:, None], state, None)[:, -1].cpu()
        for s in seqs:
            s.length += 1
        greedy = greedy_tokens(logits) if any(s.params.greedy for s in seqs) else []
        outs = []
        for i, s in enumerate(seqs):
            tok = greedy[i] if s.params.greedy else sample_token(logits[i], s.params, s.generator)
            outs.append(self._advance(s, tok))
        return outs

    def _advance(self, seq: _Seq, token: int) -> StepOutput:
        """Record ``token`` for ``seq``; retire it when a stop condition holds."""
        p = seq.params
        if token in seq.stops:  # a stop token is not part of the output
            return self._retire(seq, None, "stop")
        seq.output.append(token)
        text = self.engine.tokenizer.decode(seq.output)
        reason = None
        for s in p.stop:
            i = text.find(s, max(0, seq.sent - len(s)))
            if i >= 0:
                text, reason = text[:i], "stop"
        seq.text = text
        if reason is None and (
            len(seq.output) >= p.max_tokens or seq.length + 1 >= self.engine.config.max_context
        ):
            reason = "length"
        if reason is not None:
            return self._retire(seq, token, reason)
        hold = _held_back(text, p.stop)
        delta = text[seq.sent : len(text) - hold] if len(text) - hold > seq.sent else ""
        seq.sent += len(delta)
        return self._output(seq, token, delta, None)

    def _retire(self, seq: _Seq, token: int | None, reason: str) -> StepOutput:
        i = self._active.index(seq)
        last = self._active.pop()
        if last is not seq:
            assert self._cache is not None
            self._active[i] = last
            self._cache[:, :, i, :, : last.length].copy_(
                self._cache[:, :, len(self._active), :, : last.length]
            )
        return self._finish(seq, token, reason)

    def _finish(
        self, seq: _Seq, token: int | None, reason: str, error: str | None = None
    ) -> StepOutput:
        delta = seq.text[seq.sent :]
        seq.sent = len(seq.text)
        with self._lock:
            self._finished[seq.request_id] = Completion(
                request_id=seq.request_id,
                prompt_token_ids=tuple(seq.prompt),
                token_ids=tuple(seq.output),
                text=seq.text,
                finish_reason=reason,
            )
        out = self._output(seq, token, delta, reason)
        return out if error is None else dataclasses.replace(out, error=error)

    def _output(self, seq: _Seq, token: int | None, delta: str, reason: str | None) -> StepOutput:
        return StepOutput(
            request_id=seq.request_id,
            token_id=token,
            text=delta,
            finished=reason is not None,
            finish_reason=reason,
            num_prompt_tokens=len(seq.prompt),
            num_generated=len(seq.output),
            num_cached=seq.num_cached,
        )

    def _ensure_capacity(self, tokens: int) -> None:
        c = self.engine.config
        cur = self._cache.shape[4] if self._cache is not None else 0
        if tokens <= cur:
            return
        cap = min(c.max_context, max(tokens, 2 * cur, 256))
        cap = min(c.max_context, -(-cap // 128) * 128)
        shape = (c.num_layers, 2, self.max_batch, c.num_kv_heads, cap, c.head_dim)
        new = torch.zeros(shape, dtype=self.engine.dtype, device=self.engine.device)
        if self._cache is not None:
            new[..., :cur, :].copy_(self._cache)
        self._cache = new


def _held_back(text: str, stops: Sequence[str]) -> int:
    """Characters at the end of ``text`` not to stream yet: an unfinished UTF-8 sequence, or a
    suffix that could be the start of a stop string."""
    hold = 1 if text.endswith("\ufffd") else 0
    for s in stops:
        for k in range(min(len(s) - 1, len(text)), 0, -1):
            if text.endswith(s[:k]):
                hold = max(hold, k)
                break
    return hold
