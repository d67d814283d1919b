"""``KVDecodeServer``'s bound on the remote prefill (no Serve, no engine: the wrapper alone).

Ray Serve LLM awaits the prefill response before it ends a PD decode response; these check that
the stream decode hands it passes a healthy prefill through unchanged, ends quietly (counted,
cancelled) when the prefill fails or outlives its timeout, and never hides an ``ErrorResponse``
chunk (a bad request is still the client's error). The end-to-end row, a prefill node lost
mid-request, is ``tests/serving/test_app_pd.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ray_kvmoq.serving.server import KVDecodeServer


class _Resp:
    """A prefill response stream: yields ``chunks``, then sleeps ``hang_s`` or raises ``exc``."""

    def __init__(self, chunks: list[Any], hang_s: float = 0.0, exc: Exception | None = None):
        self.chunks, self.hang_s, self.exc, self.cancelled = chunks, hang_s, exc, False

    def __aiter__(self) -> AsyncIterator[Any]:
        return self._gen()

    async def _gen(self) -> AsyncIterator[Any]:
        for c in self.chunks:
            yield c
        if self.hang_s:
            await asyncio.sleep(self.hang_s)
        if self.exc is not None:
            raise self.exc

    def cancel(self) -> None:
        self.cancelled = True


def _drain(resp: _Resp, timeout_s: float) -> tuple[list[Any], dict[str, int], float]:
    server = object.__new__(KVDecodeServer)

    async def run() -> tuple[list[Any], dict[str, int], float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        got = []
        async for c in server._bounded_prefill(resp, timeout_s):
            got.append(c)
        return got, await server.pd_stats(), loop.time() - t0

    return asyncio.run(run())


def test_a_healthy_prefill_passes_through_unchanged_and_counts_nothing() -> None:
    resp = _Resp(["a", "b"])
    got, stats, _ = _drain(resp, 5.0)
    assert got == ["a", "b"] and not resp.cancelled
    assert stats == {"prefill_timeouts": 0, "prefill_failures": 0}


def test_a_prefill_that_outlives_its_timeout_is_cancelled_and_counted() -> None:
    resp = _Resp(["a"], hang_s=60.0)
    got, stats, took = _drain(resp, 0.3)
    assert got == ["a"] and resp.cancelled and took < 5.0
    assert stats == {"prefill_timeouts": 1, "prefill_failures": 0}


def test_a_failed_prefill_ends_the_stream_quietly_and_is_counted() -> None:
    resp = _Resp(["a"], exc=RuntimeError("ActorDiedError: the prefill replica's node died"))
    got, stats, _ = _drain(resp, 5.0)
    assert got == ["a"] and resp.cancelled
    assert stats == {"prefill_timeouts": 0, "prefill_failures": 1}


def test_an_error_response_chunk_from_prefill_still_reaches_the_orchestrator() -> None:
    from ray.llm._internal.serve.core.configs.openai_api_models import ErrorResponse

    err = ErrorResponse(
        error={"message": "prompt too long", "type": "BadRequestError", "code": 400}
    )
    got, stats, _ = _drain(_Resp([err]), 5.0)
    assert got == [err] and stats["prefill_failures"] == 0
