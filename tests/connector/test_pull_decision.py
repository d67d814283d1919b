"""The scheduler side's pull-or-recompute rule (``SchedulerSide._worth_loading``), without an
engine: the figures come from a board snapshot, the clock is the real monotonic one."""

from __future__ import annotations

import time
from typing import Any

from ray_kvmoq.connector.config import ConnectorConfig
from ray_kvmoq.connector.figures import Figures, FiguresSnapshot
from ray_kvmoq.connector.metadata import GroupSource
from ray_kvmoq.connector.scheduler import _PULL_PROBE_S, SchedulerSide, _Req

BPT = 23_052.0  # SmolLM2 BF16 bytes per token
NS = (b"moq://kvcache.moq.arpa/v1/", b"m", b"p")


class _Board:
    """What ``_worth_loading`` reads of the relay bridge: this node and the board's figures."""

    node_id = "B"

    def __init__(self, pull_s_per_byte: float, prefill_s_per_token: float) -> None:
        f = Figures()
        f.report("pull_s_per_byte", "B", pull_s_per_byte)
        f.report("prefill_s_per_token", "B", prefill_s_per_token)
        self.snapshot: FiguresSnapshot = f.snapshot()

    def figures(self) -> FiguresSnapshot:
        return self.snapshot


def _side(pull_s_per_byte: float, prefill_s_per_token: float = 1e-3) -> SchedulerSide:
    """A scheduler side on node B whose board holds these two figures."""
    board: Any = _Board(pull_s_per_byte, prefill_s_per_token)
    return SchedulerSide(
        ConnectorConfig(), bridge=board, model="m", block_size=16, kv_dtype="bfloat16",
        producer=True, consumer_only=False, bytes_per_token={b"BF16": BPT},
    )  # fmt: skip


def _remote_req(groups: int) -> _Req:
    st = _Req(
        req_id="r", tokens=[1] * (groups * 128 + 10), salt=b"", codec=b"BF16", namespace=NS,
        hashes=[b"h"] * groups, load_allowed=True, publish_allowed=True, producer=True,
        remote=None,
    )  # fmt: skip
    st.sources = [GroupSource(namespace=NS, track=b"BF16", group_id=k, local=False)
                  for k in range(groups)]  # fmt: skip
    return st


def test_a_pull_faster_than_recompute_loads_every_remote_group() -> None:
    side = _side(1e-8)  # 23 KB/token at 100 MB/s: 0.23 ms/token < 1 ms/token
    assert side._worth_loading(_remote_req(3), known=3, num_computed=0) == 3
    assert side.counters.totals()["pulls_declined"] == 0


def test_a_slow_pull_is_declined_but_probed_once_per_period_so_the_figure_can_recover() -> None:
    side = _side(2e-7)  # 23 KB/token at 5 MB/s: 4.6 ms/token > 1 ms/token
    st = _remote_req(3)
    assert side._worth_loading(st, known=3, num_computed=0) == 3  # the probe: pulled anyway
    for _ in range(5):  # then declined, until the period is over
        assert side._worth_loading(st, known=3, num_computed=0) == 0
    side._last_probe -= _PULL_PROBE_S
    assert side._worth_loading(st, known=3, num_computed=0) == 3  # the next probe
    totals = side.counters.totals()
    assert (totals["pulls_probed"], totals["pulls_declined"]) == (2, 5)


class _LookupBridge:
    """Records directory lookups; the answer never comes (a lookup in flight)."""

    node_id = "B"

    def __init__(self) -> None:
        self.lookups: list[list[bytes]] = []

    def start_lookup(self, hashes: list[bytes]) -> object:
        self.lookups.append(list(hashes))
        return object()

    def poll_lookup(self, ref: object) -> None:
        return None

    def directory_view(self) -> None:
        return None  # no copy of the directory: lookups are round trips


class _Request:
    """The fields of vLLM's ``Request`` the scheduler side reads."""

    def __init__(self, req_id: str, tokens: int) -> None:
        self.request_id = req_id
        self.prompt_token_ids = list(range(tokens))
        self.cache_salt = None
        self.kv_transfer_params = None


def _lookup_side(*, producer: bool) -> tuple[SchedulerSide, _LookupBridge]:
    bridge = _LookupBridge()
    side = SchedulerSide(
        ConnectorConfig(), bridge=bridge, model="m", block_size=16, kv_dtype="bfloat16",  # type: ignore[arg-type]
        producer=producer, consumer_only=False, bytes_per_token={b"BF16": BPT},
    )  # fmt: skip
    return side, bridge


def test_a_prompt_whose_whole_chunks_vllm_already_caches_answers_at_once_without_a_lookup() -> None:
    side, bridge = _lookup_side(producer=False)
    req: Any = _Request("r", 8 * 128 + 64)  # 8 whole chunks + a 64-token tail
    # this engine published them before
    side._sightings.mark_held(side._state(req, 8 * 128).hashes, time.monotonic())
    assert side.get_num_new_matched_tokens(req, num_computed_tokens=8 * 128) == (0, False)
    assert bridge.lookups == []
    assert side._reqs["r"].next_save == 8  # the cached chunks are not published again
    assert side.counters.totals()["lookups_skipped"] == 1


def test_a_prompt_with_an_uncached_whole_chunk_or_a_producer_prompt_still_looks_up() -> None:
    side, bridge = _lookup_side(producer=False)
    req: Any = _Request("r", 8 * 128 + 64)
    assert side.get_num_new_matched_tokens(req, num_computed_tokens=7 * 128) == (None, False)
    assert len(bridge.lookups) == 1 and len(bridge.lookups[0]) == 8
    producer, pbridge = _lookup_side(producer=True)  # its kv_transfer_params name each group
    req = _Request("p", 8 * 128 + 64)
    assert producer.get_num_new_matched_tokens(req, num_computed_tokens=8 * 128) == (None, False)
    assert len(pbridge.lookups) == 1
    assert producer.counters.totals().get("lookups_skipped", 0) == 0


class _AnsweringBridge(_LookupBridge):
    """Answers every lookup in the call that polls it first (as the directory copy does):
    nothing is held anywhere."""

    def poll_lookup(self, ref: object) -> list[Any]:  # type: ignore[override]
        return []


def test_a_lookup_answered_in_the_step_that_made_it_plans_at_once_and_is_counted() -> None:
    """With an answer in the same call the request is planned (computed: nothing held) at
    once, not held back a step, and ``lookups_answered_at_once`` counts it; a lookup still in
    flight asks vLLM to come back and is not counted."""
    side, _ = _lookup_side(producer=False)
    side.bridge = _AnsweringBridge()
    req: Any = _Request("r", 8 * 128 + 64)
    assert side.get_num_new_matched_tokens(req, num_computed_tokens=0) == (0, False)
    assert side.counters.totals()["lookups_answered_at_once"] == 1
    waiting, _ = _lookup_side(producer=False)
    assert waiting.get_num_new_matched_tokens(req, num_computed_tokens=0) == (None, False)
    assert waiting.counters.totals()["lookups_answered_at_once"] == 0
