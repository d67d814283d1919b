"""Streaming batches that never hold back a token the client could already have.

Ray Serve LLM's ``LLMServer`` merges a stream's outputs into one message per interval
(``stream_batching_interval_ms``, 50 ms by default), so each stream costs Serve at most one
message per interval. Its ``Batcher`` is a ticker: it drains its queue every interval counted
from the request's start, so the first token, ready after the prefill, waits for the next tick
(0–50 ms, 25 ms on average, added to every streamed TTFT), and so does every later token that
arrives after a quiet spell (decode steps slower than the interval: every token, under load).

:class:`LeadingEdgeBatcher` bounds the rate the same way and drops the wait: it sends what is
queued as soon as something arrives, unless a message went out less than an interval ago, in
which case it sends at that interval's end, together with whatever else arrived meanwhile. So
a stream still costs at most one message per interval, and a token waits only while the
previous message's interval runs. vLLM's own server sends every token at once; this is as close
as the rate bound allows.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Iterable
from typing import TypeVar

from ray.llm._internal.serve.utils.batcher import Batcher

__all__ = ["LeadingEdgeBatcher"]

T = TypeVar("T")


class LeadingEdgeBatcher(Batcher[T]):
    """Ray Serve LLM's ``Batcher`` with a leading-edge rate bound (see the module docstring).

    ``interval_ms`` 0 (every output alone) and None (one message at the end) behave as
    ``Batcher``'s."""

    def __init__(self, generator: AsyncGenerator[T, None], interval_ms: float | None) -> None:
        self._arrived = asyncio.Event()  # before Batcher starts the read task
        super().__init__(generator, interval_ms=interval_ms)

    async def read(self) -> None:
        """Queue every output as it comes, and say so (the read task)."""
        try:
            async for item in self.generator:
                self.queue.put_nowait(item)
                self._arrived.set()
        finally:
            self.done_event.set()
            self._arrived.set()

    async def stream(self) -> AsyncGenerator[Iterable[T], None]:
        """Yield the queued outputs as soon as any arrive, at most one list per interval."""
        interval = self.interval_s
        if not interval:  # 0 or None: Batcher's own behaviour
            async for batch in super().stream():
                yield batch
            return
        last_sent = -float("inf")
        try:
            while True:
                await self._arrived.wait()
                wait = last_sent + interval - time.monotonic()
                if wait > 0:  # the interval's end, or the stream's if that comes first
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self.done_event.wait(), wait)
                self._arrived.clear()
                results, is_done = self.check_done_and_drain()
                if results:
                    yield self._merge_results(results)
                    last_sent = time.monotonic()
                if is_done:
                    self.read_task.result()  # the generator's error, if any
                    return
        finally:
            if not self.read_task.done():
                self.read_task.cancel()
