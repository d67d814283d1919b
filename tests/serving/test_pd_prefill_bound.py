"""``KVDecodeServer``'s bound on the remote prefill (:mod:`ray_kvmoq.serving.prefill_wait`: no
Serve, no engine, and no vLLM import in the test process).

Ray Serve LLM awaits the prefill response before it ends a PD decode response; these check that
the stream decode hands it passes a healthy prefill through unchanged, ends quietly (counted,
cancelled) when the prefill fails or outlives its timeout, and never drops a chunk (an
``ErrorResponse`` from a bad request still reaches the orchestrator, which shows it to the
client). The end-to-end row, a prefill node lost
mid-request, is ``tests/serving/test_app_pd.py``.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from ray_kvmoq.serving.prefill_wait import PrefillStats, bounded_prefill


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
    stats = PrefillStats()

    async def run() -> tuple[list[Any], float]:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        got = []
        async for c in bounded_prefill(resp, timeout_s, stats):
            got.append(c)
        return got, loop.time() - t0

    got, took = asyncio.run(run())
    return got, stats.as_dict(), took


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


class _ErrorChunk:
    """Stands for Ray Serve LLM's ``ErrorResponse`` (a chunk, not an exception)."""

    message = "prompt too long"


def test_an_error_chunk_from_prefill_is_passed_on_not_counted_as_a_lost_prefill() -> None:
    err = _ErrorChunk()
    got, stats, _ = _drain(_Resp([err]), 5.0)
    assert got == [err] and stats == {"prefill_timeouts": 0, "prefill_failures": 0}


def _drain_reporting(resp: _Resp, timeout_s: float, on_lost: Any) -> list[Any]:
    async def run() -> list[Any]:
        return [c async for c in bounded_prefill(resp, timeout_s, PrefillStats(), on_lost)]

    return asyncio.run(run())


def test_a_lost_prefill_is_reported_once_and_a_healthy_one_never() -> None:
    """``on_lost`` (decode's server ends its connector's follow of the track) runs once for a
    failed prefill and once for one that outlived its timeout, and never for a healthy one or
    an error chunk."""
    cases = {
        "failed": _Resp(["a"], exc=RuntimeError("ActorDiedError")),
        "timed out": _Resp(["a"], hang_s=60.0),
        "healthy": _Resp(["a", "b"]),
        "error chunk": _Resp([_ErrorChunk()]),
    }
    reported: dict[str, int] = {}
    for name, resp in cases.items():
        reported[name] = 0

        def lost(name: str = name) -> None:
            reported[name] += 1

        _drain_reporting(resp, 0.3, lost)
    assert reported == {"failed": 1, "timed out": 1, "healthy": 0, "error chunk": 0}


def test_a_report_that_raises_still_ends_the_stream_quietly() -> None:
    def broken() -> None:
        raise RuntimeError("the engine is gone")

    got = _drain_reporting(_Resp(["a"], exc=RuntimeError("ActorDiedError")), 5.0, broken)
    assert got == ["a"]
