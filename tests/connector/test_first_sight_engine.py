"""Publishing on first sight, driven by a real vLLM engine's own prefix-cache evictions.

``test_publish_admission.py`` checks the rule with the scheduler side alone, told what vLLM's
cache holds. Here a real engine (CPU, SmolLM2-135M, bf16) with vLLM's prefix cache on and room
for about five of the prompts below decides it: the evicted repeats are the ones vLLM's own LRU
cache dropped, and the group published on first sight is loaded by the other node's engine over
MoQT.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.connector.conftest import (
    Engines,
    _delta,
    _flush,
    _gen,
    _metrics,
    _start_engine,
    _stop_engine,
    fresh_salt,
)

pytestmark = [pytest.mark.ray, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(900)]

C = 128
BYTES_PER_TOKEN = 23_040
"""SmolLM2-135M's bf16 KV: 30 layers × K and V × 3 heads × 64 dims × 2 bytes."""
CACHE_TOKENS = 6 * C
"""The engine's KV cache: room for two and a half of the 300-token requests below, so six of
them in turn leave nothing of the first two (vLLM evicts the least recently used blocks)."""


@pytest.fixture(scope="module")
def small_cache_engine(engines: Engines) -> Iterator[Any]:
    """An engine on the head node with vLLM's prefix cache on, a KV cache of ``CACHE_TOKENS``
    and the connector's default admission (second sight, first sight while evicting)."""
    from ray_kvmoq.connector import kv_transfer_config

    h = _start_engine(
        engines.a_node,
        kv=kv_transfer_config("kv_both", load_timeout_s=20.0),
        enable_prefix_caching=True,
        max_model_len=4 * C,
        kv_cache_gib=CACHE_TOKENS * BYTES_PER_TOKEN / (1 << 30),
    )
    try:
        yield h
    finally:
        _stop_engine(h)


def _settled(e: Engines, h: Any) -> dict[str, float]:
    """``h``'s counters once its queued publishes ran: vLLM takes the worker's counts along with
    a step's output, so a 20-token request (no whole chunk: nothing to publish or count) carries
    them after the flush."""
    _flush(h)
    _gen(h, [e.tokens[-30:-10]], cache_salt=fresh_salt(), max_tokens=1)
    return _metrics(h)


def test_a_real_engine_publishes_on_first_sight_once_its_own_cache_evicts_repeats(
    engines: Engines, small_cache_engine: Any
) -> None:
    e, h = engines, small_cache_engine
    salt = fresh_salt()
    # seven prompts of 2 whole chunks + a 40-token tail, no tokens in common
    prompts = [e.tokens[k * 300 : k * 300 + 2 * C + 40] for k in range(7)]
    assert all(len(p) == 2 * C + 40 for p in prompts)

    def run(p: list[int]) -> Any:  # one at a time, so each is scheduled after the last
        return _gen(h, [p], cache_salt=salt, max_tokens=4)[0]

    start = _settled(e, h)
    for p in prompts[:6]:  # first sights: 1,800 tokens through a cache of 768
        assert run(p).num_cached_tokens == 0
    first_sights = _settled(e, h)
    assert _delta(first_sights, start, "kvmoq_groups_saved") == 0  # nothing published yet

    # the first two prompts come back: vLLM's cache dropped them (nothing cached), so both are
    # evicted repeats, 4 chunks against 12 first-sight chunks (>= FIRST_SIGHT_PAYS = 0.2)
    for p in prompts[:2]:
        assert run(p).num_cached_tokens == 0
    repeats = _settled(e, h)
    assert _delta(repeats, first_sights, "kvmoq_chunks_evicted_seen") == 4
    assert _delta(repeats, first_sights, "kvmoq_groups_saved") == 4  # second sights publish

    # a new prompt is now published as it is computed, on its first sight
    assert run(prompts[6]).num_cached_tokens == 0
    new = _settled(e, h)
    assert _delta(new, repeats, "kvmoq_groups_saved") == 2
    assert _delta(new, repeats, "kvmoq_requests_first_sight") == 1

    # and the other node's engine loads those two groups over MoQT instead of computing them
    other_tail = e.tokens[-50:-10]
    got = _gen(e.b, [prompts[6][: 2 * C] + other_tail], cache_salt=salt, max_tokens=4)[0]
    assert got.num_cached_tokens == 2 * C
