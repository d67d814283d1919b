"""The streaming batcher: the first output goes out at once, later ones at most once per
interval, the end and errors at once, and a consumer that stops cancels the read."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Iterable

import pytest
from ray.llm._internal.serve.utils.batcher import Batcher

from ray_kvmoq.serving.batching import LeadingEdgeBatcher

LONG_MS = 10_000  # an interval no test waits out


async def _gated(items: list[list[int]], gates: list[asyncio.Event]) -> AsyncGenerator[int, None]:
    """Yield each group of ``items`` back to back, waiting for the next gate between groups."""
    for i, group in enumerate(items):
        if i:
            await gates[i - 1].wait()
        for item in group:
            yield item


async def test_the_first_output_goes_out_without_waiting_an_interval() -> None:
    gate = asyncio.Event()
    stream = LeadingEdgeBatcher(_gated([[1], [2]], [gate]), LONG_MS).stream()
    assert await asyncio.wait_for(anext(stream), 2) == [1]
    gate.set()
    await stream.aclose()


async def test_ray_serve_llms_ticker_holds_the_first_output_for_an_interval() -> None:
    """The behaviour this module replaces, so the test above is not vacuous."""
    gate = asyncio.Event()
    stream = Batcher(_gated([[1], [2]], [gate]), interval_ms=LONG_MS).stream()
    with pytest.raises(TimeoutError):
        await asyncio.wait_for(anext(stream), 0.5)
    gate.set()


async def test_outputs_ready_together_go_out_as_one_list() -> None:
    stream = LeadingEdgeBatcher(_gated([[1, 2, 3]], []), LONG_MS).stream()
    assert [batch async for batch in stream] == [[1, 2, 3]]


async def test_outputs_within_an_interval_of_the_last_list_wait_for_its_end_and_merge() -> None:
    gates = [asyncio.Event(), asyncio.Event(), asyncio.Event()]
    stream = LeadingEdgeBatcher(_gated([[1], [2], [3], [4]], gates), 300).stream()
    loop = asyncio.get_running_loop()
    assert await anext(stream) == [1]
    sent = loop.time()
    gates[0].set()  # 2 arrives within the interval: held ...
    await asyncio.sleep(0.05)
    gates[1].set()  # ... so 3 joins it
    assert await anext(stream) == [2, 3]
    assert loop.time() - sent >= 0.25  # not before the interval ended (timer slack aside)
    gates[2].set()
    assert [batch async for batch in stream] == [[4]]


async def test_an_output_after_a_quiet_interval_goes_out_at_once() -> None:
    gate = asyncio.Event()
    stream = LeadingEdgeBatcher(_gated([[1], [2]], [gate]), 100).stream()
    assert await anext(stream) == [1]
    await asyncio.sleep(0.2)  # longer than the interval: nothing held 2 back
    gate.set()
    assert await asyncio.wait_for(anext(stream), 0.09) == [2]


async def test_the_end_of_the_stream_flushes_without_waiting_the_interval() -> None:
    gate = asyncio.Event()
    stream = LeadingEdgeBatcher(_gated([[1], [2]], [gate]), LONG_MS).stream()
    assert await anext(stream) == [1]
    gate.set()  # 2 and the end arrive within the (long) interval
    rest = await asyncio.wait_for(_collect(stream), 2)
    assert rest == [[2]]


async def test_the_generators_error_reaches_the_consumer_after_what_came_before() -> None:
    async def failing() -> AsyncGenerator[int, None]:
        yield 1
        raise ValueError("engine died")

    got: list[list[int]] = []
    with pytest.raises(ValueError, match="engine died"):
        async for batch in LeadingEdgeBatcher(failing(), LONG_MS).stream():
            got.append(list(batch))
    assert got == [[1]]


async def test_a_consumer_that_stops_cancels_the_read_task() -> None:
    gate = asyncio.Event()  # never set: the generator would wait for good
    batcher = LeadingEdgeBatcher(_gated([[1], [2]], [gate]), LONG_MS)
    stream = batcher.stream()
    assert await anext(stream) == [1]
    await stream.aclose()
    await asyncio.sleep(0)
    assert batcher.read_task.cancelled() or batcher.read_task.done()


@pytest.mark.parametrize(("interval_ms", "expected"), [(0, [[1], [2], [3]]), (None, [[1, 2, 3]])])
async def test_interval_0_and_none_keep_batchers_meaning(
    interval_ms: float | None, expected: list[list[int]]
) -> None:
    stream = LeadingEdgeBatcher(_gated([[1, 2, 3]], []), interval_ms).stream()
    assert [list(batch) async for batch in stream] == expected


async def _collect(stream: AsyncGenerator[Iterable[int], None]) -> list[list[int]]:
    return [list(batch) async for batch in stream]
