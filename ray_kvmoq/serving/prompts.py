"""A request's prompt as the token ids vLLM will compute, and their chained chunk hashes.

The router must name a prompt's chunks exactly as the connector will (the hashes are over
token ids), before vLLM has seen the request. It uses the model's own Hugging Face tokenizer
and chat template the way vLLM's OpenAI layer does: chat messages are rendered with the
template (``add_generation_prompt=True``) and tokenized without extra special tokens; a text
completion prompt is tokenized with them; a token-id prompt is taken as is. A prompt it cannot
tokenize is routed without KV information (power of two choices), never refused here: the
engine validates requests.
"""

from __future__ import annotations

import functools
import logging
import threading
import types
from typing import Any

from ray_kvmoq.kvcache.naming import chunk_hashes

__all__ = ["PromptKeys", "prompt_keys", "request_tokens", "warm_tokenizer"]

log = logging.getLogger(__name__)


_LOADING = threading.Lock()


def _tokenizer(model_dir: str) -> Any:
    """``model_dir``'s tokenizer, loaded once: a request that comes while the router's start-up
    thread loads it waits for that load instead of running a second one (seconds each)."""
    with _LOADING:
        return _load_tokenizer(model_dir)


@functools.lru_cache(maxsize=4)
def _load_tokenizer(model_dir: str) -> Any:
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(model_dir)


def warm_tokenizer(model_dir: str) -> None:
    """Load ``model_dir``'s tokenizer and compile its chat template now (together most of a
    second) so the first request does not wait for them; a failure is left for
    :func:`request_tokens` to meet (and route without KV information)."""
    try:
        _tokenizer(model_dir)
    except Exception as exc:
        log.debug("cannot load the tokenizer of %s: %s", model_dir, exc)
        return
    request_tokens(types.SimpleNamespace(messages=[{"role": "user", "content": "hi"}]), model_dir)


def _text(content: Any) -> str:
    """Message content as text (OpenAI content parts: the text parts, in order)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            p.get("text", "") if isinstance(p, dict) else getattr(p, "text", "") or ""
            for p in content
        )
    return "" if content is None else str(content)


def request_tokens(request: Any, model_dir: str) -> list[int] | None:
    """The prompt token ids of an OpenAI chat or completion request (None if unknown)."""
    try:
        tok = _tokenizer(model_dir)
        messages = getattr(request, "messages", None)
        if messages is not None:
            msgs = [
                {
                    "role": (m.get("role") if isinstance(m, dict) else m.role),
                    "content": _text(m.get("content") if isinstance(m, dict) else m.content),
                }
                for m in messages
            ]
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
            return list(tok(text, add_special_tokens=False)["input_ids"])
        prompt = getattr(request, "prompt", None)
        if isinstance(prompt, list) and prompt and isinstance(prompt[0], int):
            return list(prompt)
        if isinstance(prompt, list) and len(prompt) == 1:
            prompt = prompt[0]
        if isinstance(prompt, str):
            return list(tok(prompt)["input_ids"])
    except Exception as exc:  # routing hint only: the engine validates the request itself
        log.debug("cannot tokenize the request for routing: %s", exc)
    return None


class PromptKeys:
    """A prompt's token count and chained chunk hashes."""

    __slots__ = ("hashes", "tokens")

    def __init__(self, tokens: int, hashes: list[bytes]) -> None:
        self.tokens = tokens
        self.hashes = hashes


def prompt_keys(
    request: Any, *, model_dir: str, kv_model: str, salt: str, chunk_size: int
) -> PromptKeys | None:
    """The request's :class:`PromptKeys` under tenant ``salt`` (the request's ``cache_salt``
    wins), or None when the prompt cannot be tokenized."""
    ids = request_tokens(request, model_dir)
    if ids is None:
        return None
    s = getattr(request, "cache_salt", None) or salt
    return PromptKeys(len(ids), chunk_hashes(s.encode(), kv_model, ids, chunk_size))
