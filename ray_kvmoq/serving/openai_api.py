"""OpenAI-compatible request/response models, OpenAI-style errors, and API key → tenant mapping.

Design: pure pydantic models and functions, no FastAPI or Ray, so they are tested directly and
shared by the ingress, the bench client and the tests.

Invariants:
- Every error the HTTP layer returns has OpenAI's body shape
  ``{"error": {"message", "type", "param", "code"}}``; :class:`OpenAIError` carries the HTTP status
  and the body, and :func:`error_from_validation` turns a pydantic ``ValidationError`` into one
  (400, ``invalid_request_error``, ``param`` = the first offending field).
- Unknown request fields are ignored (as vLLM does), so clients that send newer OpenAI fields keep
  working; fields we cannot honour (``n > 1``, ``best_of``, ``logprobs``) are rejected, never
  silently dropped.
- A tenant's salt never leaves the server: it is folded into the chunk hashes and the prompt id
  (DESIGN.md, "KV data model"), so two tenants never share KV, and ``cache_salt`` (vLLM's per-request
  field) narrows sharing further within a tenant.
"""

from __future__ import annotations

import hashlib
import hmac
import time
import uuid
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

_M = TypeVar("_M", bound=BaseModel)

MAX_TOKENS_LIMIT = 8192
"""The largest ``max_tokens`` accepted (the built-in model's context length)."""


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


class OpenAIError(Exception):
    """An error answered with OpenAI's error body; ``status`` is the HTTP status code."""

    def __init__(
        self,
        message: str,
        *,
        status: int = 400,
        type: str = "invalid_request_error",
        param: str | None = None,
        code: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.status = status
        self.type = type
        self.param = param
        self.code = code

    def body(self) -> dict[str, Any]:
        """The JSON body: ``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {
                "message": self.message,
                "type": self.type,
                "param": self.param,
                "code": self.code,
            }
        }


def error_from_validation(exc: ValidationError) -> OpenAIError:
    """A 400 ``invalid_request_error`` naming the first invalid field of ``exc``."""
    errs = exc.errors()
    first = errs[0] if errs else {"loc": (), "msg": str(exc)}
    loc = [str(p) for p in first.get("loc", ()) if not isinstance(p, int)]
    param = ".".join(loc) or None
    msg = str(first.get("msg", "invalid request"))
    text = f"{param}: {msg}" if param else msg
    code = "missing_required_parameter" if first.get("type") == "missing" else "invalid_value"
    return OpenAIError(text, status=400, param=param, code=code)


def parse_request(model: type[_M], body: object) -> _M:
    """Validate a decoded JSON ``body`` into ``model``, raising :class:`OpenAIError` (400)."""
    if not isinstance(body, dict):
        raise OpenAIError("The request body must be a JSON object.", code="invalid_json")
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise error_from_validation(exc) from None


# --------------------------------------------------------------------------------------------
# requests
# --------------------------------------------------------------------------------------------


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` adds a final chunk carrying ``usage``."""

    model_config = ConfigDict(extra="ignore")
    include_usage: bool = False


class _Sampling(BaseModel):
    """Fields shared by completions and chat completions."""

    model_config = ConfigDict(extra="ignore")

    model: str = Field(min_length=1)
    max_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    temperature: float = Field(default=1.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    cache_salt: str | None = Field(default=None, max_length=256)
    """vLLM's per-request salt: only requests with the same salt (and tenant) share KV."""
    kv_reuse: bool = True
    """ray_kvmoq extension: ``false`` recomputes the whole prompt (the bench's baseline)."""
    routing: Literal["kv", "round_robin", "pow2"] | None = None
    """ray_kvmoq extension: override the router's policy for this request (benchmarks)."""

    @field_validator("stop")
    @classmethod
    def _stop_list(cls, v: str | list[str] | None) -> str | list[str] | None:
        if isinstance(v, list) and len(v) > 4:
            raise ValueError("at most 4 stop sequences")
        return v

    def stop_list(self) -> list[str]:
        """``stop`` as a list (possibly empty)."""
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else [s for s in self.stop if s]

    def include_usage(self) -> bool:
        """Whether a streamed answer ends with a usage chunk."""
        return bool(self.stream_options and self.stream_options.include_usage)


class CompletionRequest(_Sampling):
    """``POST /v1/completions``. ``prompt`` is a string or a list of token ids (one prompt)."""

    prompt: str | list[int] = Field(min_length=1)
    max_tokens: int | None = Field(default=16, ge=1, le=MAX_TOKENS_LIMIT)
    echo: bool = False
    best_of: int | None = Field(default=None, ge=1, le=1)
    logprobs: int | None = Field(default=None, le=0)
    suffix: str | None = None

    @field_validator("prompt", mode="before")
    @classmethod
    def _one_prompt(cls, v: object) -> object:
        if isinstance(v, list) and len(v) == 1 and isinstance(v[0], str | list):
            return v[0]
        if isinstance(v, list) and v and isinstance(v[0], str | list):
            raise ValueError("only one prompt per request is supported")
        return v

    @model_validator(mode="after")
    def _no_suffix_echo(self) -> CompletionRequest:
        if self.suffix:
            raise ValueError("suffix is not supported")
        if self.echo:
            raise ValueError("echo is not supported")
        return self


class TextPart(BaseModel):
    """One ``{"type": "text", "text": ...}`` part of a message's content."""

    model_config = ConfigDict(extra="ignore")
    type: Literal["text"]
    text: str


class ChatMessage(BaseModel):
    """A chat message; ``content`` is a string or a list of text parts."""

    model_config = ConfigDict(extra="ignore")
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None

    def text(self) -> str:
        """The message's text (parts joined)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text for p in self.content)


class ChatCompletionRequest(_Sampling):
    """``POST /v1/chat/completions``."""

    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(default=None, ge=1, le=MAX_TOKENS_LIMIT)
    logprobs: bool = False

    @model_validator(mode="after")
    def _check(self) -> ChatCompletionRequest:
        if self.logprobs:
            raise ValueError("logprobs is not supported")
        return self

    def token_limit(self, default: int) -> int:
        """``max_completion_tokens``, else ``max_tokens``, else ``default``."""
        return self.max_completion_tokens or self.max_tokens or default


# --------------------------------------------------------------------------------------------
# responses
# --------------------------------------------------------------------------------------------


class PromptTokensDetails(BaseModel):
    """``usage.prompt_tokens_details``: ``cached_tokens`` = prompt tokens whose KV was reused."""

    cached_tokens: int = 0


class Usage(BaseModel):
    """Token accounting of one request."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    prompt_tokens_details: PromptTokensDetails = Field(default_factory=PromptTokensDetails)

    @classmethod
    def of(cls, prompt: int, completion: int, cached: int) -> Usage:
        """Usage from the three counts."""
        return cls(
            prompt_tokens=prompt,
            completion_tokens=completion,
            total_tokens=prompt + completion,
            prompt_tokens_details=PromptTokensDetails(cached_tokens=cached),
        )


FinishReason = Literal["stop", "length"]


class CompletionChoice(BaseModel):
    """One choice of a (streamed or whole) text completion."""

    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: FinishReason | None = None


class CompletionResponse(BaseModel):
    """A text completion, or (``object="text_completion"`` too) one streamed chunk of it."""

    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ChatMessageOut(BaseModel):
    """The assistant message of a chat completion."""

    role: Literal["assistant"] = "assistant"
    content: str


class ChatChoice(BaseModel):
    """One choice of a chat completion."""

    index: int = 0
    message: ChatMessageOut
    logprobs: None = None
    finish_reason: FinishReason | None = None


class ChatCompletionResponse(BaseModel):
    """A whole chat completion."""

    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ChatDelta(BaseModel):
    """The increment carried by one streamed chat chunk."""

    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    """One choice of a streamed chat chunk."""

    index: int = 0
    delta: ChatDelta
    logprobs: None = None
    finish_reason: FinishReason | None = None


class ChatCompletionChunk(BaseModel):
    """One ``chat.completion.chunk`` of a streamed chat completion."""

    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    """One entry of ``GET /v1/models``."""

    id: str
    object: Literal["model"] = "model"
    created: int = 0
    owned_by: str = "ray_kvmoq"


class ModelList(BaseModel):
    """``GET /v1/models``."""

    object: Literal["list"] = "list"
    data: list[ModelCard]


def new_id(prefix: str) -> str:
    """A fresh response id such as ``cmpl-…`` or ``chatcmpl-…``."""
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now_s() -> int:
    """``created`` timestamps (seconds)."""
    return int(time.time())


def sse(payload: BaseModel | str) -> str:
    """One server-sent event line: ``data: <json>`` (or ``data: [DONE]``) and a blank line."""
    data = payload if isinstance(payload, str) else payload.model_dump_json(exclude_none=False)
    return f"data: {data}\n\n"


# --------------------------------------------------------------------------------------------
# tenants
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """Who a request belongs to, and the salt that keeps its KV apart from other tenants'."""

    name: str
    """The tenant's name (appears in logs and metrics, never the key)."""
    salt: bytes
    """Secret salt folded into chunk hashes and prompt ids (DESIGN.md)."""

    def with_cache_salt(self, cache_salt: str | None) -> Tenant:
        """This tenant narrowed by a request's ``cache_salt`` (same tenant, different salt)."""
        if not cache_salt:
            return self
        salt = hashlib.sha256(self.salt + b"\x00cache_salt\x00" + cache_salt.encode()).digest()
        return Tenant(name=self.name, salt=salt)


def derive_salt(secret: str, tenant: str) -> bytes:
    """The salt of ``tenant``: HMAC-SHA256(secret, tenant); stable across replicas and restarts."""
    return hmac.new(secret.encode(), b"kvmoq-tenant:" + tenant.encode(), hashlib.sha256).digest()


class TenantTable:
    """Maps API keys to tenants.

    With no keys configured, every request (with or without a key) is the tenant ``public``; with
    keys configured, a missing or unknown key is a 401 in OpenAI's format.
    """

    def __init__(self, api_keys: dict[str, str] | None = None, *, secret: str = "kvmoq") -> None:
        self._secret = secret
        self._by_key = {k: self._tenant(t) for k, t in (api_keys or {}).items()}
        self._public = self._tenant("public")

    def _tenant(self, name: str) -> Tenant:
        return Tenant(name=name, salt=derive_salt(self._secret, name))

    @property
    def auth_required(self) -> bool:
        """True when API keys are configured."""
        return bool(self._by_key)

    def resolve(self, authorization: str | None) -> Tenant:
        """The tenant of an ``Authorization: Bearer <key>`` header value."""
        if not self._by_key:
            return self._public
        key = ""
        if authorization and authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        tenant = self._by_key.get(key) if key else None
        if tenant is None:
            msg = "Missing API key." if not key else "Incorrect API key provided."
            raise OpenAIError(msg, status=401, code="invalid_api_key")
        return tenant
