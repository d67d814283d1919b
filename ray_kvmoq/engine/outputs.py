"""Results handed to callers of generation: one ``StepOutput`` per produced token (streaming)
and one ``Completion`` per finished request."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Completion", "StepOutput"]


@dataclass(frozen=True, kw_only=True)
class StepOutput:
    """One request's progress in one scheduler step."""

    request_id: str
    """The request this belongs to."""
    token_id: int | None
    """The token produced in this step and appended to the output; None when the step ended
    the request without one (a stop token, which is never part of the output, or an abort)."""
    text: str
    """New text since the previous output (may be empty while a UTF-8 sequence or a possible
    stop string is held back)."""
    finished: bool
    """True on the request's last output."""
    finish_reason: str | None = None
    """When finished: ``stop``, ``length``, ``abort`` or ``error``."""
    num_prompt_tokens: int = 0
    """Prompt length."""
    num_generated: int = 0
    """Tokens generated so far, this one included."""
    num_cached: int = 0
    """Prompt tokens whose KV was injected rather than computed."""
    error: str | None = None
    """The error message when ``finish_reason == "error"``."""


@dataclass(frozen=True, kw_only=True)
class Completion:
    """A finished generation."""

    request_id: str
    """Caller's id (or a generated one)."""
    prompt_token_ids: tuple[int, ...]
    """The prompt as run."""
    token_ids: tuple[int, ...]
    """Generated ids (a stop token is not included)."""
    text: str
    """Generated text, cut before a stop string."""
    finish_reason: str
    """``stop`` (EOS, stop token or stop string), ``length`` (max_tokens or context), ``abort``."""
