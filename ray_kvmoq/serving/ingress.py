"""The OpenAI ingress: Ray Serve LLM's, plus tenants, ``/health`` and ``/metrics``.

Everything OpenAI (chat and text completions, streaming, tools, ``response_format``, logprobs,
``n``, usage with ``prompt_tokens_details.cached_tokens``, errors in OpenAI's format, models,
tokenize) is Ray Serve LLM's ``OpenAiIngress`` over vLLM's own OpenAI layer. This subclass adds
what the KV layer needs in front of it:

* API keys → tenants (:mod:`.tenants`): a request's ``cache_salt`` becomes its tenant's salt
  (narrowed by the client's own ``cache_salt``), so no tenant can hit, or learn about, another
  tenant's prefixes; with keys configured a missing or wrong key is a 401;
* ``GET /health`` (200 once every model deployment answers) and ``GET /metrics`` (Prometheus:
  the KV router's decisions, which run in this process);
* the KV router made ready while the ingress starts (``routing``: its
  ``request_router_kwargs``, see :func:`.router.warm_up`), not on the first request.
"""

# No "from __future__ import annotations": FastAPI reads these handlers' annotations at run time.

import asyncio
from typing import Any

from fastapi import HTTPException, Request
from ray.llm._internal.serve.core.configs.openai_api_models import (
    ChatCompletionRequest,
    CompletionRequest,
    OpenAIHTTPException,
)
from ray.llm._internal.serve.core.ingress.ingress import DEFAULT_ENDPOINTS, OpenAiIngress
from starlette.responses import JSONResponse, Response

from .metrics import CONTENT_TYPE, process_metrics
from .router import warm_up
from .tenants import AuthError, TenantTable

__all__ = ["ENDPOINTS", "KVIngress"]

ENDPOINTS = {
    **DEFAULT_ENDPOINTS,
    "health": lambda app: app.get("/health"),
    "metrics": lambda app: app.get("/metrics"),
}
"""Ray Serve LLM's routes plus ``/health`` and ``/metrics``."""


class KVIngress(OpenAiIngress):
    """``OpenAiIngress`` with tenants (see the module docstring)."""

    def __init__(
        self,
        llm_deployments: dict[str, Any],
        model_cards: dict[str, Any],
        *,
        api_keys: dict[str, str] | None = None,
        tenant_secret: str,
        routing: dict[str, Any] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(llm_deployments, model_cards, **kwargs)
        self._tenants = TenantTable(api_keys, secret=tenant_secret)
        if routing is not None:  # the KV router runs in this process: ready it now
            warm_up(routing)

    async def _get_model_id(self, model: str | None) -> str:
        """Ray Serve LLM raises FastAPI ``HTTPException`` s here, which FastAPI answers as
        ``{"detail": ...}``; clients expect OpenAI's ``{"error": {...}}``."""
        try:
            return await super()._get_model_id(model)
        except HTTPException as exc:
            kind = "NotFoundError" if exc.status_code == 404 else "BadRequestError"
            raise OpenAIHTTPException(
                status_code=exc.status_code, message=str(exc.detail), type=kind
            ) from None

    def _salt(self, body: Any, request: Request) -> None:
        try:
            tenant = self._tenants.resolve(request.headers.get("authorization"))
        except AuthError as exc:
            raise OpenAIHTTPException(
                status_code=401, message=str(exc), type="AuthenticationError"
            ) from None
        body.cache_salt = tenant.cache_salt(body.cache_salt)

    async def chat(self, body: ChatCompletionRequest, request: Request) -> Response:
        """OpenAI chat completions, under the caller's tenant."""
        self._salt(body, request)
        return await super().chat(body, request)

    async def completions(self, body: CompletionRequest, request: Request) -> Response:
        """OpenAI text completions, under the caller's tenant."""
        self._salt(body, request)
        return await super().completions(body, request)

    async def health(self) -> Response:
        """200 when every model deployment answers a health check, else 503."""
        try:
            await asyncio.wait_for(
                asyncio.gather(
                    *(h.check_health.remote() for h in self._default_serve_handles.values())
                ),
                timeout=30,
            )
        except Exception as exc:
            return JSONResponse({"status": "unavailable", "reason": str(exc)}, status_code=503)
        return JSONResponse({"status": "ok"})

    async def metrics(self) -> Response:
        """Prometheus metrics of this process (the KV router's decisions)."""
        return Response(process_metrics().render(), media_type=CONTENT_TYPE)
