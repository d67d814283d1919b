"""``Engine``: a loaded model with prefill-with-prefix-KV, teacher forcing and generation.

All forward passes of one engine are serialised by a lock, so a Ray Serve replica may call
``prefill`` from one thread while a ``BatchScheduler.step`` runs in another without the two
fighting over the same cores.

Prefill contract: ``prefill(tokens, prefix_kv)`` runs ``tokens[P:]`` where ``P = len(prefix_kv)``
(the KV of ``tokens[:P]``, obtained elsewhere: a relay, another replica, a codec's lossy
reconstruction). At least one token is always computed — if the prefix covers the whole prompt,
its last token is recomputed — so the result always has next-token logits. ``result.kv`` is the
KV of the computed tokens only (``result.kv.start == result.num_cached``), chunked on 128-token
boundaries of absolute positions.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import torch

from .config import ModelConfig
from .errors import EmptyPromptError, InvalidRequestError, PromptTooLongError
from .kv import KVCache, _parse_dtype
from .loader import LoadedModel, load_model
from .model import CausalLM, PrefillState
from .outputs import Completion, StepOutput
from .sampling import SamplingParams
from .scheduler import BatchScheduler
from .tokenizer import Tokenizer

__all__ = ["Engine", "EngineConfig", "PrefillResult", "Prompt", "load_engine"]

Prompt = str | Sequence[int] | Sequence[Mapping[str, str]]
"""Plain text, token ids, or chat messages (``[{"role": "user", "content": "..."}]``)."""

_DTYPE_NAMES = {torch.float32: "float32", torch.bfloat16: "bfloat16", torch.float16: "float16"}


@dataclass(frozen=True, kw_only=True)
class EngineConfig:
    """What callers (serving, codecs) need to know about the model's KV."""

    num_layers: int
    """Decoder layers (L of a KV chunk)."""
    num_kv_heads: int
    """KV heads (H of a KV chunk)."""
    head_dim: int
    """Head width (D of a KV chunk)."""
    vocab: int
    """Vocabulary size (logit width)."""
    max_context: int
    """Longest sequence, prompt plus generated tokens."""
    dtype: str
    """Compute and KV dtype: ``float32``, ``bfloat16`` or ``float16``."""
    chunk_size: int = 128
    """Tokens per KV chunk / MoQT group."""

    @property
    def kv_values_per_token(self) -> int:
        """K and V values per token over all layers (L·2·H·D)."""
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim


@dataclass(frozen=True, kw_only=True)
class PrefillResult:
    """Outcome of ``Engine.prefill``."""

    logits_last: torch.Tensor
    """float32 [vocab] logits after the last prompt token."""
    kv: KVCache
    """KV of the computed tokens (positions ``num_cached .. len(tokens)-1``)."""
    num_cached: int
    """Prompt tokens whose KV came from ``prefix_kv`` (not recomputed)."""
    num_tokens: int
    """Prompt length."""
    logits: torch.Tensor | None = None
    """float32 [T_new, vocab] logits of every computed token, when asked for."""
    full_kv: torch.Tensor | None = field(default=None, repr=False)
    """The whole prompt's KV, ``[L, 2, H, num_tokens, D]`` in the engine dtype (prefix included)."""


class Engine:
    """A loaded model: ``prefill``, ``forward_with_kv``, ``generate``/``stream``."""

    def __init__(self, loaded: LoadedModel, *, device: torch.device) -> None:
        self.model: CausalLM = loaded.model
        """The torch module (HF parameter names)."""
        self.model_config: ModelConfig = loaded.model.config
        """Full architecture description."""
        self.tokenizer: Tokenizer = loaded.tokenizer
        """Text <-> ids, chat template, EOS ids."""
        self.model_name: str = loaded.name
        """Name used in KV track namespaces."""
        self.source: str = loaded.source
        """File or directory the weights came from."""
        self.device = device
        """Where the model runs."""
        self.dtype: torch.dtype = next(loaded.model.parameters()).dtype
        """Compute and KV dtype."""
        mc = self.model_config
        self.config = EngineConfig(
            num_layers=mc.num_layers,
            num_kv_heads=mc.num_kv_heads,
            head_dim=mc.head_dim,
            vocab=mc.vocab_size,
            max_context=mc.max_context,
            dtype=_DTYPE_NAMES[self.dtype],
        )
        """KV geometry and limits."""
        eos = list(self.tokenizer.eos_token_ids) + list(mc.eos_token_ids)
        self.eos_token_ids: tuple[int, ...] = tuple(dict.fromkeys(eos))
        """Ids that end generation unless ``ignore_eos``."""
        self.lock = threading.RLock()
        """Held during every forward pass."""

    def __repr__(self) -> str:
        return f"Engine({self.model_name!r}, dtype={self.config.dtype}, device={self.device})"

    # ------------------------------------------------------------------ prompts
    def encode_prompt(self, prompt: Prompt) -> list[int]:
        """Token ids of a text prompt, chat messages (chat template applied) or ids (checked)."""
        if isinstance(prompt, str):
            ids = self.tokenizer.encode(prompt)
        elif len(prompt) and all(isinstance(m, Mapping) for m in prompt):
            ids = self.tokenizer.apply_chat_template(prompt)  # type: ignore[arg-type]
        else:
            ids = list(prompt)  # type: ignore[arg-type]
        self.check_tokens(ids)
        return ids

    def check_tokens(self, tokens: Sequence[int], *, room: int = 1) -> None:
        """Raise ``InvalidRequestError`` unless ``tokens`` is a runnable prompt leaving ``room``
        positions of context free."""
        if len(tokens) == 0:
            raise EmptyPromptError("the prompt is empty: give at least one token")
        limit = self.config.max_context - room
        if len(tokens) > limit:
            raise PromptTooLongError(
                f"the prompt has {len(tokens)} tokens but the model's context is "
                f"{self.config.max_context}; at most {limit} prompt tokens fit"
            )
        vocab = self.config.vocab
        for t in tokens:
            if not isinstance(t, int) or not 0 <= t < vocab:
                raise InvalidRequestError(f"token id {t!r} is not in 0..{vocab - 1}")

    def _check_prefix(self, prefix_kv: KVCache) -> None:
        c = self.config
        l_, _, h, _, d = prefix_kv.shape
        if (l_, h, d) != (c.num_layers, c.num_kv_heads, c.head_dim):
            raise InvalidRequestError(
                f"prefix KV has (layers, kv_heads, head_dim) = {(l_, h, d)}, the model needs "
                f"{(c.num_layers, c.num_kv_heads, c.head_dim)}"
            )
        if prefix_kv.start != 0:
            raise InvalidRequestError(f"prefix KV must start at position 0, not {prefix_kv.start}")

    # ------------------------------------------------------------------ forward passes
    def prefill(
        self,
        tokens: Sequence[int],
        prefix_kv: KVCache | None = None,
        *,
        all_logits: bool = False,
    ) -> PrefillResult:
        """Run the prompt ``tokens``, reusing ``prefix_kv`` for its first ``len(prefix_kv)``
        tokens; return the last logits and the KV of the tokens computed (see module doc)."""
        tokens = list(tokens)
        self.check_tokens(tokens)
        p = 0
        if prefix_kv is not None:
            self._check_prefix(prefix_kv)
            if prefix_kv.length > len(tokens):
                raise InvalidRequestError(
                    f"prefix KV covers {prefix_kv.length} tokens but the prompt has {len(tokens)}"
                )
            p = min(prefix_kv.length, len(tokens) - 1)
            if p < prefix_kv.length:
                prefix_kv = prefix_kv.prefix(p) if p else None
        logits, full = self._run(tokens[p:], prefix_kv if p else None, all_logits=all_logits)
        new_kv = KVCache.from_tensor(full[:, :, :, p:], start=p, chunk_size=self.config.chunk_size)
        return PrefillResult(
            logits_last=logits[-1],
            kv=new_kv,
            num_cached=p,
            num_tokens=len(tokens),
            logits=logits if all_logits else None,
            full_kv=full,
        )

    def forward_with_kv(self, tokens: Sequence[int], kv: KVCache) -> torch.Tensor:
        """Teacher forcing: run continuation ``tokens`` after the context whose KV is ``kv``
        (positions ``0 .. len(kv)-1``, possibly a lossy reconstruction); return float32 logits
        [len(tokens), vocab], row i predicting the token after ``tokens[i]``."""
        tokens = list(tokens)
        self._check_prefix(kv)
        self.check_tokens([0] * (kv.length + len(tokens)), room=0)
        self.check_tokens(tokens, room=0)
        logits, _ = self._run(tokens, kv, all_logits=True)
        return logits

    def _run(
        self, new_tokens: list[int], prefix: KVCache | None, *, all_logits: bool
    ) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        p = prefix.length if prefix is not None else 0
        total = p + len(new_tokens)
        with self.lock, torch.inference_mode():
            buf = torch.empty(
                (c.num_layers, 2, c.num_kv_heads, total, c.head_dim),
                dtype=self.dtype,
                device=self.device,
            )
            if prefix is not None:
                prefix.copy_into(buf[:, :, :, :p])
            state = PrefillState(buf, p, self.model_config.sliding_window)
            ids = torch.tensor([new_tokens], dtype=torch.long, device=self.device)
            pos = torch.arange(p, total, device=self.device)[None]
            index = None if all_logits else torch.tensor([len(new_tokens) - 1], device=self.device)
            logits = self.model(ids, pos, state, index)[0]
        return logits, buf

    # ------------------------------------------------------------------ generation
    def stream(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        prefix_kv: KVCache | None = None,
    ) -> Iterator[StepOutput]:
        """Generate for one prompt, yielding a ``StepOutput`` per token as it is produced."""
        sched = BatchScheduler(self, max_batch=1)
        rid = sched.add(self.encode_prompt(prompt), params or SamplingParams(), prefix_kv=prefix_kv)
        while sched.has_work:
            yield from (o for o in sched.step() if o.request_id == rid)

    def generate(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        prefix_kv: KVCache | None = None,
    ) -> Completion:
        """Generate for one prompt and return the finished ``Completion``."""
        return self.generate_batch([prompt], params, prefix_kvs=[prefix_kv])[0]

    def generate_batch(
        self,
        prompts: Sequence[Prompt],
        params: SamplingParams | Sequence[SamplingParams] | None = None,
        *,
        prefix_kvs: Sequence[KVCache | None] | None = None,
        max_batch: int = 8,
    ) -> list[Completion]:
        """Generate for several prompts with continuous batching; results in prompt order."""
        if params is None or isinstance(params, SamplingParams):
            plist = [params or SamplingParams()] * len(prompts)
        else:
            plist = list(params)
        kvs = list(prefix_kvs) if prefix_kvs is not None else [None] * len(prompts)
        if len(plist) != len(prompts) or len(kvs) != len(prompts):
            raise InvalidRequestError("prompts, params and prefix_kvs must have the same length")
        sched = BatchScheduler(self, max_batch=max_batch)
        rids = [
            sched.add(self.encode_prompt(p), sp, prefix_kv=kv)
            for p, sp, kv in zip(prompts, plist, kvs, strict=True)
        ]
        done: dict[str, Completion] = {}
        while sched.has_work:
            sched.step()
            done.update(sched.pop_finished())
        return [done[r] for r in rids]


def load_engine(
    model: str | None = None,
    *,
    dtype: str | torch.dtype = "bfloat16",
    device: str | None = None,
    num_threads: int | None = None,
) -> Engine:
    """Load ``model`` (None: the built-in SmolLM2-135M-Instruct; or a ``.gguf`` file or a local
    HF directory) in ``dtype`` on ``device`` (None: CUDA when present, else CPU).

    ``num_threads`` sets ``torch.set_num_threads`` (process-wide); None leaves it alone, so Ray's
    ``OMP_NUM_THREADS`` per replica applies.
    """
    if num_threads is not None:
        if num_threads < 1:
            raise ValueError(f"num_threads must be ≥ 1, got {num_threads}")
        torch.set_num_threads(num_threads)
    dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    dt = _parse_dtype(dtype)
    if dev.type == "cpu" and dt == torch.float16:
        raise InvalidRequestError("float16 on CPU is not supported; use bfloat16 or float32")
    loaded = load_model(model, dtype=dt, device=str(dev))
    return Engine(loaded, device=dev)
