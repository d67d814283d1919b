"""``AsyncEngine``: continuous batching driven from an asyncio loop (a Ray Serve replica).

All model work runs in one dedicated worker thread, one ``BatchScheduler.step()`` (or one
``prefill``) at a time, so the event loop is never blocked for longer than it takes to hand a
step over. A background task keeps stepping while any request is active and routes each
``StepOutput`` to its request's queue. A consumer that stops iterating (client gone, task
cancelled) aborts its request at the next step.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
from collections.abc import AsyncGenerator, Sequence
from typing import Any, TypeVar

from .engine import Engine, PrefillResult, Prompt
from .kv import KVCache
from .outputs import Completion, StepOutput
from .sampling import SamplingParams
from .scheduler import BatchScheduler

__all__ = ["AsyncEngine"]

T = TypeVar("T")


class AsyncEngine:
    """Async façade over an ``Engine`` with a continuous-batching loop."""

    def __init__(self, engine: Engine, *, max_batch: int = 8) -> None:
        self.engine = engine
        """The wrapped engine."""
        self.scheduler = BatchScheduler(engine, max_batch=max_batch)
        """The batch being decoded."""
        self._pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="kvmoq-engine")
        self._queues: dict[str, asyncio.Queue[StepOutput]] = {}
        self._loop_task: asyncio.Task[None] | None = None

    async def _call(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._pool, functools.partial(fn, *args, **kwargs))

    async def prefill(
        self, tokens: Sequence[int], prefix_kv: KVCache | None = None
    ) -> PrefillResult:
        """``Engine.prefill`` in the engine thread."""
        result: PrefillResult = await self._call(self.engine.prefill, tokens, prefix_kv)
        return result

    async def stream(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        prefix_kv: KVCache | None = None,
    ) -> AsyncGenerator[StepOutput, None]:
        """Yield this request's ``StepOutput``s as the batch produces them. Bad input raises
        ``InvalidRequestError`` before the first output."""
        tokens = self.engine.encode_prompt(prompt)
        queue: asyncio.Queue[StepOutput] = asyncio.Queue()
        rid = self.scheduler.add(tokens, params, request_id=request_id, prefix_kv=prefix_kv)
        self._queues[rid] = queue
        self._ensure_loop()
        finished = False
        try:
            while not finished:
                out = await queue.get()
                finished = out.finished
                yield out
        finally:
            if not finished:
                self.scheduler.abort(rid)

    async def generate(
        self,
        prompt: Prompt,
        params: SamplingParams | None = None,
        *,
        request_id: str | None = None,
        prefix_kv: KVCache | None = None,
    ) -> Completion:
        """Run one request to the end (batched with whatever else is running)."""
        tokens = self.engine.encode_prompt(prompt)
        ids: list[int] = []
        text, reason, rid = [], "abort", ""
        async for out in self.stream(tokens, params, request_id=request_id, prefix_kv=prefix_kv):
            rid = out.request_id
            text.append(out.text)
            if out.token_id is not None:
                ids.append(out.token_id)
            reason = out.finish_reason or reason
        return Completion(
            request_id=rid,
            prompt_token_ids=tuple(tokens),
            token_ids=tuple(ids),
            text="".join(text),
            finish_reason=reason,
        )

    def _ensure_loop(self) -> None:
        if self._loop_task is None or self._loop_task.done():
            self._loop_task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while self.scheduler.has_work:
            try:
                outputs: list[StepOutput] = await self._call(self.scheduler.step)
            except Exception as exc:  # a failed step fails its requests, never the loop silently
                outputs = self._fail_all(exc)
            self.scheduler.pop_finished()
            for out in outputs:
                q = self._queues.get(out.request_id)
                if q is not None:
                    q.put_nowait(out)  # the consumer holds its own reference to ``q``
                if out.finished:
                    self._queues.pop(out.request_id, None)

    def _fail_all(self, exc: Exception) -> list[StepOutput]:
        fresh = BatchScheduler(self.engine, max_batch=self.scheduler.max_batch)
        old, self.scheduler = self.scheduler, fresh
        del old
        return [
            StepOutput(
                request_id=rid,
                token_id=None,
                text="",
                finished=True,
                finish_reason="error",
                error=f"{type(exc).__name__}: {exc}",
            )
            for rid in list(self._queues)
        ]

    async def aclose(self) -> None:
        """Stop the loop task and the worker thread."""
        if self._loop_task is not None:
            self._loop_task.cancel()
            try:
                await self._loop_task
            except asyncio.CancelledError:
                pass
        self._pool.shutdown(wait=True)
