"""Tokenizer: a ``tokenizers.Tokenizer`` plus the special ids and chat template a model needs.

Built from GGUF metadata (byte-level BPE, ``tokenizer.ggml.model = gpt2``; runtime-notes §2d —
same ids as transformers' own GGUF conversion) or from a local ``tokenizer.json`` with its
``tokenizer_config.json``. ``save(dir)`` writes both files, so a converted model directory reads
back through ``from_dir`` (and through transformers' ``AutoTokenizer``).

The chat template is rendered with jinja2 the way transformers does (sandboxed, ``trim_blocks``
and ``lstrip_blocks``), and the rendered text is tokenized without adding special tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

from tokenizers import AddedToken, decoders, models, pre_tokenizers
from tokenizers import Tokenizer as HFTokenizer

from .errors import ModelLoadError, UnsupportedModelError

__all__ = ["Tokenizer"]

# Tokens that end a turn in common chat formats; added to the EOS ids when they are special.
_END_TOKENS = ("<|endoftext|>", "<|im_end|>", "<|eot_id|>", "<|end_of_text|>", "</s>")
# GGUF ``tokenizer.ggml.pre`` -> pre-tokenizer split regex (llama.cpp's llama-vocab.cpp).
_LLAMA3_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
_QWEN2_RE = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)


class Tokenizer:
    """Text <-> token ids for one model, with its chat template and end-of-sequence ids."""

    def __init__(
        self,
        tokenizer: HFTokenizer,
        *,
        bos_token: str | None = None,
        eos_token: str | None = None,
        chat_template: str | None = None,
        add_bos: bool = False,
        extra_eos_ids: Sequence[int] = (),
    ) -> None:
        self.backend = tokenizer
        """The underlying ``tokenizers.Tokenizer``."""
        self.bos_token = bos_token
        """Begin-of-sequence token text, if the model has one."""
        self.eos_token = eos_token
        """The main end-of-sequence token text."""
        self.chat_template = chat_template
        """Jinja chat template, or None (then ``apply_chat_template`` uses a ChatML fallback)."""
        self.add_bos = add_bos
        """``encode`` prepends BOS when ``add_special_tokens`` is true."""
        self.bos_token_id = tokenizer.token_to_id(bos_token) if bos_token else None
        """Id of ``bos_token``."""
        eos: list[int] = []
        for t in (eos_token, *_END_TOKENS):
            i = tokenizer.token_to_id(t) if t else None
            if i is not None and i not in eos and (t == eos_token or self._is_special(t)):
                eos.append(i)
        eos.extend(i for i in extra_eos_ids if i not in eos)
        self.eos_token_ids: tuple[int, ...] = tuple(eos)
        """Ids that end generation (the model's EOS plus special end-of-turn tokens)."""

    def _is_special(self, token: str | None) -> bool:
        return any(
            a.content == token and a.special
            for a in self.backend.get_added_tokens_decoder().values()
        )

    @property
    def vocab_size(self) -> int:
        """Number of ids, added tokens included."""
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @cached_property
    def special_ids(self) -> frozenset[int]:
        """Ids of special (control) tokens."""
        return frozenset(i for i, a in self.backend.get_added_tokens_decoder().items() if a.special)

    # ------------------------------------------------------------------ text <-> ids
    def encode(self, text: str, *, add_special_tokens: bool = True) -> list[int]:
        """Token ids of ``text``; with ``add_special_tokens`` the tokenizer's post-processor runs
        (e.g. Llama 3's BOS) and a BOS is prepended if ``add_bos`` asks for one. Special-token
        text such as ``<|im_start|>`` maps to its single id."""
        ids: list[int] = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        bos = self.bos_token_id
        if add_special_tokens and self.add_bos and bos is not None and ids[:1] != [bos]:
            ids = [bos, *ids]
        return ids

    def decode(self, ids: Sequence[int], *, skip_special_tokens: bool = True) -> str:
        """Text of ``ids`` (special tokens dropped unless ``skip_special_tokens`` is false)."""
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def render_chat(
        self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """The chat template applied to ``messages`` (``[{"role": ..., "content": ...}]``)."""
        for m in messages:
            if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
                raise ValueError(f"chat messages need 'role' and 'content': got {m!r}")
        template = self.chat_template or _CHATML
        return _render(
            template,
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
        )

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of the rendered chat (as transformers' ``apply_chat_template(tokenize=True)``)."""
        text = self.render_chat(messages, add_generation_prompt=add_generation_prompt)
        return self.encode(text, add_special_tokens=False)

    # ------------------------------------------------------------------ construction / files
    @classmethod
    def from_gguf_metadata(cls, meta: Mapping[str, Any]) -> Tokenizer:
        """Build from GGUF ``tokenizer.*`` metadata (byte-level BPE only)."""
        kind = meta.get("tokenizer.ggml.model")
        if kind != "gpt2":
            raise UnsupportedModelError(
                f"GGUF tokenizer.ggml.model {kind!r} is not supported (only byte-level BPE "
                "'gpt2'); point the engine at an HF directory with tokenizer.json instead"
            )
        tokens: list[str] = list(meta["tokenizer.ggml.tokens"])
        types: list[int] = list(meta.get("tokenizer.ggml.token_type", [1] * len(tokens)))
        merges = [tuple(m.split(" ", 1)) for m in meta.get("tokenizer.ggml.merges", [])]
        tk = HFTokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges))
        tk.pre_tokenizer = _pre_tokenizer(str(meta.get("tokenizer.ggml.pre", "default")))
        tk.decoder = decoders.ByteLevel()
        tk.add_special_tokens(
            [AddedToken(t, special=True) for t, ty in zip(tokens, types, strict=True) if ty == 3]
        )
        tk.add_tokens(
            [AddedToken(t, special=False) for t, ty in zip(tokens, types, strict=True) if ty == 4]
        )

        def name(key: str) -> str | None:
            i = meta.get(f"tokenizer.ggml.{key}_token_id")
            return tokens[int(i)] if i is not None and 0 <= int(i) < len(tokens) else None

        return cls(
            tk,
            bos_token=name("bos"),
            eos_token=name("eos"),
            chat_template=meta.get("tokenizer.chat_template"),
            add_bos=bool(meta.get("tokenizer.ggml.add_bos_token", False)),
        )

    @classmethod
    def from_dir(cls, path: str | Path, *, extra_eos_ids: Sequence[int] = ()) -> Tokenizer:
        """Load ``tokenizer.json`` (+ ``tokenizer_config.json``, ``chat_template.jinja``)."""
        d = Path(path)
        if not (d / "tokenizer.json").is_file():
            raise ModelLoadError(f"{d} has no tokenizer.json")
        tk = HFTokenizer.from_file(str(d / "tokenizer.json"))
        cfg: dict[str, Any] = {}
        if (d / "tokenizer_config.json").is_file():
            cfg = json.loads((d / "tokenizer_config.json").read_text())
        template = cfg.get("chat_template")
        if (d / "chat_template.jinja").is_file():
            template = (d / "chat_template.jinja").read_text()
        if isinstance(template, list):  # [{"name": "default", "template": ...}, ...]
            template = next((t["template"] for t in template if t.get("name") == "default"), None)
        return cls(
            tk,
            bos_token=_token_text(cfg.get("bos_token")),
            eos_token=_token_text(cfg.get("eos_token")),
            chat_template=template,
            add_bos=bool(cfg.get("add_bos_token", False)),
            extra_eos_ids=extra_eos_ids,
        )

    def save(self, path: str | Path) -> None:
        """Write ``tokenizer.json`` and ``tokenizer_config.json`` into directory ``path``."""
        d = Path(path)
        d.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(d / "tokenizer.json"))
        cfg = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "add_bos_token": self.add_bos,
            "chat_template": self.chat_template,
            "clean_up_tokenization_spaces": False,
        }
        (d / "tokenizer_config.json").write_text(json.dumps(cfg, indent=1))


def _token_text(tok: Any) -> str | None:
    if isinstance(tok, dict):
        return str(tok.get("content"))
    return None if tok is None else str(tok)


def _pre_tokenizer(pre: str) -> pre_tokenizers.PreTokenizer:
    byte_level = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    if pre in ("llama-bpe", "llama3", "smaug-bpe"):
        split = pre_tokenizers.Split(_regex(_LLAMA3_RE), behavior="isolated")
        return pre_tokenizers.Sequence([split, byte_level])
    if pre == "qwen2":
        split = pre_tokenizers.Split(_regex(_QWEN2_RE), behavior="isolated")
        return pre_tokenizers.Sequence([split, byte_level])
    gpt2 = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if pre in ("smollm", "starcoder", "refact"):
        return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), gpt2])
    return gpt2


def _regex(pattern: str) -> Any:
    from tokenizers import Regex

    return Regex(pattern)


_CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content']"
    " + '<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}"
    "{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def _render(template: str, **variables: Any) -> str:
    from jinja2.exceptions import TemplateError
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    def raise_exception(message: str) -> None:
        raise TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.globals["raise_exception"] = raise_exception
    return env.from_string(template).render(**variables)
