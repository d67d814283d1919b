"""OpenAI-compatible HTTP ingress: the request handling, independent of how tokens are produced.

:class:`IngressCore` turns HTTP requests into :class:`~.jobs.Job` s and the replicas' event
streams into OpenAI responses (whole or SSE); a :class:`Backend` produces the events — through
Serve handles in production (``deployments.py``), or directly from a
:class:`~.worker.ReplicaCore` in tests. :func:`make_app` builds the FastAPI routes.

Invariants:
- Every error reply, including FastAPI's own (bad JSON, 404, 405) and failures inside replicas,
  is an OpenAI error body; a stream that fails after it started ends with an SSE ``error`` event
  and ``[DONE]`` instead of a silently truncated answer.
- ``usage.prompt_tokens_details.cached_tokens`` = prompt tokens whose KV was reused (local or
  remote), as reported by the replica that ran prefill.
- TTFT is measured from request arrival to the first generated token leaving the backend; ITL
  between consecutive token events.
"""

from __future__ import annotations

import abc
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from ray_kvmoq.kvcache.naming import chunk_hashes, prompt_id

from .jobs import DoneEvent, Event, Job, KVStats, TokenEvent
from .kvplane import short_hash
from .metrics import CONTENT_TYPE, ServingMetrics
from .openai_api import (
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    ChatMessageOut,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    ModelCard,
    ModelList,
    OpenAIError,
    Tenant,
    TenantTable,
    Usage,
    new_id,
    now_s,
    parse_request,
    sse,
)
from .router import RoutingHint
from .textstream import TextStream


class Backend(abc.ABC):
    """Produces a job's events (tokens, then one :class:`DoneEvent`)."""

    @abc.abstractmethod
    def stream(self, job: Job, hint: RoutingHint) -> AsyncIterator[Event]:
        """The events of ``job``; ``hint`` is for the router."""

    async def health(self) -> bool:
        """True when the backend can take requests."""
        return True


class LocalBackend(Backend):
    """Events straight from an in-process :class:`~.worker.ReplicaCore` (tests; no Serve)."""

    def __init__(self, core: Any) -> None:
        self.core = core

    async def stream(self, job: Job, hint: RoutingHint) -> AsyncIterator[Event]:
        """Combined prefill + decode in this process."""
        async for ev in self.core.generate(job):
            yield ev


@dataclass(frozen=True, kw_only=True)
class IngressSettings:
    """Static facts and limits."""

    model_name: str
    """Name in KV track namespaces and chunk hashes."""
    served_names: tuple[str, ...]
    """Names accepted in ``model`` (the first is listed by ``/v1/models``)."""
    max_context: int
    """Prompt + generated tokens limit."""
    chunk_size: int = 128
    """Tokens per KV chunk."""
    default_max_tokens: int = 256
    """Chat completions without a limit."""


@dataclass
class _Outcome:
    text: str
    n_tokens: int
    finish: str
    stats: KVStats


class IngressCore:
    """Request handling shared by the Serve ingress and the tests."""

    def __init__(
        self,
        *,
        tokenizer: Any,
        backend: Backend,
        settings: IngressSettings,
        tenants: TenantTable | None = None,
        metrics: ServingMetrics | None = None,
    ) -> None:
        self.tok = tokenizer
        self.backend = backend
        self.s = settings
        self.tenants = tenants or TenantTable()
        self.metrics = metrics or ServingMetrics()

    # ---- request → job -----------------------------------------------------------------------

    def _check_model(self, name: str) -> None:
        if name not in self.s.served_names:
            raise OpenAIError(
                f"The model `{name}` does not exist. Available: {', '.join(self.s.served_names)}.",
                status=404,
                param="model",
                code="model_not_found",
            )

    def make_job(
        self,
        tenant: Tenant,
        req: CompletionRequest | ChatCompletionRequest,
        tokens: list[int],
        limit: int,
    ) -> tuple[Job, RoutingHint]:
        """Validate the length, salt the hashes, build the job and the router's hint."""
        received = time.perf_counter()
        if not tokens:
            raise OpenAIError("The prompt is empty.", param="prompt", code="invalid_value")
        vocab_ok = all(isinstance(t, int) and t >= 0 for t in tokens)
        if not vocab_ok:
            raise OpenAIError(
                "Token ids must be non-negative.", param="prompt", code="invalid_value"
            )
        if len(tokens) + limit > self.s.max_context:
            raise OpenAIError(
                f"This model's maximum context length is {self.s.max_context} tokens. However, you "
                f"requested {len(tokens) + limit} tokens ({len(tokens)} in the prompt, {limit} for "
                "the completion). Please reduce the prompt or max_tokens.",
                param="messages" if isinstance(req, ChatCompletionRequest) else "prompt",
                code="context_length_exceeded",
            )
        t = tenant.with_cache_salt(req.cache_salt)
        hashes = tuple(chunk_hashes(t.salt, self.s.model_name, tokens, self.s.chunk_size))
        job = Job(
            request_id=new_id("cmpl"),
            tokens=tuple(tokens),
            hashes=hashes,
            prompt_id=prompt_id(t.salt, tokens),
            max_tokens=limit,
            temperature=req.temperature,
            top_p=req.top_p,
            seed=req.seed,
            reuse=req.kv_reuse,
            received_at=received,
        )
        hint = RoutingHint(
            hashes=[short_hash(h) for h in hashes],
            prompt_tokens=len(tokens),
            policy=req.routing or "kv",
            reuse=req.kv_reuse,
        )
        return job, hint

    def completion_job(self, tenant: Tenant, req: CompletionRequest) -> tuple[Job, RoutingHint]:
        """Job of a ``/v1/completions`` request."""
        self._check_model(req.model)
        if isinstance(req.prompt, str):
            tokens = list(self.tok.encode(req.prompt))
        else:
            tokens = list(req.prompt)
        return self.make_job(tenant, req, tokens, req.max_tokens or 16)

    def chat_job(self, tenant: Tenant, req: ChatCompletionRequest) -> tuple[Job, RoutingHint]:
        """Job of a ``/v1/chat/completions`` request."""
        self._check_model(req.model)
        msgs = [{"role": m.role, "content": m.text()} for m in req.messages]
        tokens = list(self.tok.apply_chat_template(msgs))
        return self.make_job(tenant, req, tokens, req.token_limit(self.s.default_max_tokens))

    # ---- events → text -----------------------------------------------------------------------

    async def _deltas(
        self, job: Job, hint: RoutingHint, stop: list[str]
    ) -> AsyncIterator[tuple[str, _Outcome | None]]:
        """(text delta, None) per token batch, then ("", outcome) once."""
        t0 = job.received_at or time.perf_counter()
        last: float | None = None
        ts = TextStream(self.tok.decode, stop)
        finish, stats = "length", KVStats()
        gen = self.backend.stream(job, hint)
        try:
            async for ev in gen:
                if isinstance(ev, TokenEvent):
                    now = time.perf_counter()
                    if last is None:
                        self.metrics.ttft.observe(now - t0)
                    else:
                        self.metrics.itl.observe(now - last)
                    last = now
                    delta = ts.feed(ev.ids)
                    if delta:
                        yield delta, None
                    if ts.stopped:
                        finish = "stop"
                        break
                elif isinstance(ev, DoneEvent):
                    if ev.finish_reason == "error":
                        raise OpenAIError(
                            f"Generation failed: {ev.error}", status=500, type="server_error"
                        )
                    finish, stats = ev.finish_reason, ev.stats
        finally:
            await _aclose(gen)
        tail = ts.finish()
        if tail:
            yield tail, None
        self._record(job, ts.token_count, stats)
        yield "", _Outcome(text="", n_tokens=ts.token_count, finish=_finish(finish), stats=stats)

    def _record(self, job: Job, n_out: int, stats: KVStats) -> None:
        m = self.metrics
        m.prompt_tokens.inc(len(job.tokens))
        m.completion_tokens.inc(n_out)
        m.record_reuse(local=stats.reused_local, remote=stats.reused_remote)
        m.record_kv_bytes(zero_copy=stats.bytes_zero_copy, moqt=stats.bytes_moqt)
        m.record_fallbacks(list(stats.fallbacks))

    async def run_whole(self, job: Job, hint: RoutingHint, stop: list[str]) -> _Outcome:
        """Collect the whole answer."""
        parts: list[str] = []
        outcome: _Outcome | None = None
        async for delta, out in self._deltas(job, hint, stop):
            parts.append(delta)
            outcome = out or outcome
        assert outcome is not None
        outcome.text = "".join(parts)
        return outcome

    # ---- endpoints ---------------------------------------------------------------------------

    async def completions(self, tenant: Tenant, body: object) -> Response:
        """``POST /v1/completions``."""
        req = parse_request(CompletionRequest, body)
        job, hint = self.completion_job(tenant, req)
        model, rid, created = req.model, job.request_id, now_s()
        if req.stream:
            return _sse(self._completion_events(job, hint, req, model, rid, created))
        out = await self.run_whole(job, hint, req.stop_list())
        resp = CompletionResponse(
            id=rid,
            created=created,
            model=model,
            choices=[CompletionChoice(text=out.text, finish_reason=_finish(out.finish))],
            usage=Usage.of(len(job.tokens), out.n_tokens, out.stats.cached_tokens),
        )
        return _json(resp.model_dump(), headers=_kv_headers(out.stats))

    async def _completion_events(
        self,
        job: Job,
        hint: RoutingHint,
        req: CompletionRequest,
        model: str,
        rid: str,
        created: int,
    ) -> AsyncIterator[str]:
        async for delta, out in self._deltas(job, hint, req.stop_list()):
            if out is None:
                yield sse(
                    CompletionResponse(
                        id=rid, created=created, model=model, choices=[CompletionChoice(text=delta)]
                    )
                )
                continue
            choice = CompletionChoice(text="", finish_reason=_finish(out.finish))
            yield sse(CompletionResponse(id=rid, created=created, model=model, choices=[choice]))
            if req.include_usage():
                usage = Usage.of(len(job.tokens), out.n_tokens, out.stats.cached_tokens)
                yield sse(
                    CompletionResponse(
                        id=rid, created=created, model=model, choices=[], usage=usage
                    )
                )
        yield sse("[DONE]")

    async def chat(self, tenant: Tenant, body: object) -> Response:
        """``POST /v1/chat/completions``."""
        req = parse_request(ChatCompletionRequest, body)
        job, hint = self.chat_job(tenant, req)
        rid = "chat" + job.request_id
        model, created = req.model, now_s()
        if req.stream:
            return _sse(self._chat_events(job, hint, req, rid, created))
        out = await self.run_whole(job, hint, req.stop_list())
        resp = ChatCompletionResponse(
            id=rid,
            created=created,
            model=model,
            choices=[
                ChatChoice(
                    message=ChatMessageOut(content=out.text), finish_reason=_finish(out.finish)
                )
            ],
            usage=Usage.of(len(job.tokens), out.n_tokens, out.stats.cached_tokens),
        )
        return _json(resp.model_dump(), headers=_kv_headers(out.stats))

    async def _chat_events(
        self, job: Job, hint: RoutingHint, req: ChatCompletionRequest, rid: str, created: int
    ) -> AsyncIterator[str]:
        def chunk(delta: ChatDelta, finish: str | None = None, usage: Usage | None = None) -> str:
            choices = (
                []
                if usage
                else [
                    ChatChunkChoice(delta=delta, finish_reason=_finish(finish) if finish else None)
                ]
            )
            return sse(
                ChatCompletionChunk(
                    id=rid, created=created, model=req.model, choices=choices, usage=usage
                )
            )

        yield chunk(ChatDelta(role="assistant", content=""))
        async for delta, out in self._deltas(job, hint, req.stop_list()):
            if out is None:
                yield chunk(ChatDelta(content=delta))
                continue
            yield chunk(ChatDelta(), finish=out.finish)
            if req.include_usage():
                yield chunk(
                    ChatDelta(),
                    usage=Usage.of(len(job.tokens), out.n_tokens, out.stats.cached_tokens),
                )
        yield sse("[DONE]")

    def models(self) -> Response:
        """``GET /v1/models``."""
        cards = [ModelCard(id=n, created=0) for n in self.s.served_names[:1]]
        return _json(ModelList(data=cards).model_dump())


def _finish(reason: str | None) -> Any:
    return "stop" if reason in ("stop", "abort") else "length"


def _kv_headers(stats: KVStats) -> dict[str, str]:
    return {
        "x-kvmoq-prefill-node": stats.prefill_node,
        "x-kvmoq-decode-node": stats.decode_node,
        "x-kvmoq-kv-bytes-moqt": str(stats.bytes_moqt),
        "x-kvmoq-fallbacks": ",".join(stats.fallbacks),
    }


async def _aclose(gen: AsyncIterator[Event]) -> None:
    close = getattr(gen, "aclose", None)
    if close is not None:
        try:
            await close()
        except Exception:  # the stream is over either way
            pass


def _json(
    body: dict[str, Any], status: int = 200, headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(body, status_code=status, headers=headers)


def _sse(events: AsyncIterator[str]) -> StreamingResponse:
    async def guarded() -> AsyncIterator[str]:
        try:
            async for e in events:
                yield e
        except OpenAIError as exc:
            yield f"data: {json.dumps(exc.body())}\n\n"
            yield sse("[DONE]")
        except Exception as exc:  # a replica died mid-stream: say so, never truncate silently
            err = OpenAIError(f"Generation failed: {exc}", status=500, type="server_error")
            yield f"data: {json.dumps(err.body())}\n\n"
            yield sse("[DONE]")

    return StreamingResponse(
        guarded(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"}
    )


def error_response(exc: OpenAIError) -> JSONResponse:
    """The JSON reply of an :class:`OpenAIError`."""
    headers = {"WWW-Authenticate": "Bearer"} if exc.status == 401 else None
    return JSONResponse(exc.body(), status_code=exc.status, headers=headers)


async def handle_generate(core: IngressCore, request: Request, which: str) -> Response:
    """``POST /v1/completions`` (``which="completions"``) or ``/v1/chat/completions``."""
    try:
        tenant = core.tenants.resolve(request.headers.get("authorization"))
        raw = await request.body()
        try:
            body = json.loads(raw or b"null")
        except ValueError:
            raise OpenAIError(
                "We could not parse the JSON body of your request.", code="invalid_json"
            ) from None
        handler = core.completions if which == "completions" else core.chat
        resp = await handler(tenant, body)
    except OpenAIError as exc:
        core.metrics.requests.labels(which, str(exc.status)).inc()
        return error_response(exc)
    except Exception as exc:
        core.metrics.requests.labels(which, "500").inc()
        return error_response(
            OpenAIError(f"Internal error: {exc}", status=500, type="server_error")
        )
    core.metrics.requests.labels(which, str(resp.status_code)).inc()
    return resp


async def handle_models(core: IngressCore, request: Request) -> Response:
    """``GET /v1/models``."""
    try:
        core.tenants.resolve(request.headers.get("authorization"))
    except OpenAIError as exc:
        return error_response(exc)
    return core.models()


async def handle_health(core: IngressCore) -> Response:
    """``GET /health``."""
    ok = await core.backend.health()
    return JSONResponse({"status": "ok" if ok else "unavailable"}, status_code=200 if ok else 503)


def handle_metrics(core: IngressCore) -> Response:
    """``GET /metrics`` (Prometheus text format)."""
    return Response(core.metrics.render(), media_type=CONTENT_TYPE)


def install_error_handlers(app: FastAPI) -> None:
    """Make FastAPI's own errors (404, 405, validation) OpenAI-shaped."""

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> Response:
        kind = "not_found" if exc.status_code == 404 else "invalid_request_error"
        return error_response(OpenAIError(str(exc.detail), status=exc.status_code, type=kind))

    @app.exception_handler(RequestValidationError)
    async def validation_error(request: Request, exc: RequestValidationError) -> Response:
        return error_response(OpenAIError(str(exc), status=400))


def make_app(core: IngressCore) -> FastAPI:
    """A FastAPI app serving ``core`` (tests and ``kvmoq`` without Serve)."""
    app = FastAPI(title="ray_kvmoq", docs_url=None, redoc_url=None)
    install_error_handlers(app)

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        return await handle_generate(core, request, "completions")

    @app.post("/v1/chat/completions")
    async def chat(request: Request) -> Response:
        return await handle_generate(core, request, "chat")

    @app.get("/v1/models")
    async def models(request: Request) -> Response:
        return await handle_models(core, request)

    @app.get("/health")
    async def health() -> Response:
        return await handle_health(core)

    @app.get("/metrics")
    async def metrics() -> Response:
        return handle_metrics(core)

    return app
