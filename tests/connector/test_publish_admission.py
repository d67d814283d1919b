"""The admission rule for publishing (``publish_threshold``, ``connector/sightings.py``), on the
scheduler side without an engine: requests and scheduler outputs carry the fields vLLM fills,
the directory answers at once."""

from __future__ import annotations

from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pytest

from ray_kvmoq.connector.config import ConnectorConfig, ConnectorConfigError
from ray_kvmoq.connector.scheduler import SchedulerSide
from ray_kvmoq.connector.sightings import FIRST_SIGHT_PAYS, HELD_TRUSTED_S, Sightings

C = 128


class _Bridge:
    """A directory that knows nothing; figures that say nothing."""

    node_id = "A"

    def __init__(self) -> None:
        self.lookups = 0

    def start_lookup(self, hashes: list[bytes]) -> object:
        self.lookups += 1
        return object()

    def poll_lookup(self, ref: object) -> list[Any]:
        return []

    def figures(self) -> Any:
        return SimpleNamespace(get=lambda *a: None)

    def directory_view(self) -> None:
        return None

    def report(self, kind: str, value: float, steps: int) -> None:
        pass


def _side(
    threshold: int | None = None, *, producer: bool = False, when_evicting: bool = True
) -> tuple[SchedulerSide, _Bridge]:
    threshold = ConnectorConfig.publish_threshold if threshold is None else threshold
    conf = ConnectorConfig(publish_threshold=threshold, publish_when_evicting=when_evicting)
    bridge = _Bridge()
    side = SchedulerSide(
        conf, bridge=bridge, model="m", block_size=16, kv_dtype="bfloat16",  # type: ignore[arg-type]
        producer=producer, consumer_only=False,
    )  # fmt: skip
    return side, bridge


def _request(req_id: str, tokens: list[int]) -> Any:
    return SimpleNamespace(
        request_id=req_id, prompt_token_ids=tokens, cache_salt=None, kv_transfer_params=None
    )


def _step(side: SchedulerSide, req: Any, cached: int) -> list[Any]:
    """Schedule ``req`` whole in one step, vLLM's prefix cache holding ``cached`` tokens:
    the saves that step's metadata carries."""
    while (got := side.get_num_new_matched_tokens(req, cached))[0] is None:
        pass
    assert got == (0, False)
    n = len(req.prompt_token_ids)
    blocks = list(range(100, 100 + -(-n // 16)))
    out = SimpleNamespace(
        scheduled_new_reqs=[
            SimpleNamespace(req_id=req.request_id, block_ids=(blocks,), num_computed_tokens=cached)
        ],
        scheduled_cached_reqs=SimpleNamespace(
            req_ids=[], new_block_ids=[], resumed_req_ids=set(), num_computed_tokens=[]
        ),
        num_scheduled_tokens={req.request_id: n - cached},
    )
    saves = side.build_connector_meta(out).saves  # type: ignore[arg-type]
    side.forget([req.request_id])
    return saves


PROMPT = list(range(8 * C + 64))  # 8 whole chunks and a 64-token tail


def test_a_prompt_seen_once_publishes_nothing_and_its_second_sight_publishes_it_from_the_cache() -> (
    None
):
    side, bridge = _side()  # the default: publish on the second sight
    assert side.conf.publish_threshold == 2
    assert _step(side, _request("r1", PROMPT), cached=0) == []
    assert side.counters.totals()["groups_not_admitted"] == 8
    # the second sight: vLLM's prefix cache holds the 8 chunks (no directory round trip), and
    # they are published from its blocks in this very step, as whole groups 0..7
    saves = _step(side, _request("r2", PROMPT), cached=8 * C)
    assert [(s.group_id, s.start, s.end) for s in saves] == [
        (k, k * C, (k + 1) * C) for k in range(8)
    ]
    assert all(len(s.block_ids) == -(-len(PROMPT) // 16) for s in saves)
    assert saves[-1].end_of_track and not any(s.end_of_track for s in saves[:-1])
    assert bridge.lookups == 1  # only the first sight asked the directory
    # the third sight publishes nothing again
    assert _step(side, _request("r3", PROMPT), cached=8 * C) == []


def test_a_second_sight_the_engine_no_longer_caches_computes_and_publishes_it() -> None:
    side, _ = _side()
    _step(side, _request("r1", PROMPT), cached=0)
    saves = _step(side, _request("r2", PROMPT), cached=0)  # evicted from vLLM's cache meanwhile
    assert [s.group_id for s in saves] == list(range(8))


def test_a_longer_prompt_publishes_only_the_leading_chunks_seen_before() -> None:
    side, _ = _side(when_evicting=False)
    _step(side, _request("r1", PROMPT[: 3 * C + 5]), cached=0)  # 3 chunks seen once
    saves = _step(side, _request("r2", PROMPT), cached=0)
    assert [s.group_id for s in saves] == [0, 1, 2]  # chunks 3..7 are on their first sight
    assert not any(s.end_of_track for s in saves)  # the track may grow on a later sight


def test_threshold_1_publishes_every_chunk_as_it_is_computed() -> None:
    side, _ = _side(1)
    saves = _step(side, _request("r1", PROMPT), cached=0)
    assert [s.group_id for s in saves] == list(range(8))
    assert side.counters.totals().get("groups_not_admitted", 0) == 0


def test_a_pd_producer_publishes_every_chunk_and_the_tail_on_first_sight() -> None:
    side, _ = _side(producer=True)  # decode loads what prefill publishes: no admission rule
    saves = _step(side, _request("r1", PROMPT), cached=0)
    assert [(s.group_id, s.end) for s in saves] == [*((k, (k + 1) * C) for k in range(8)),
                                                    (8, len(PROMPT))]  # fmt: skip
    assert saves[-1].end_of_track


def test_sightings_admit_leading_chunks_at_the_threshold_and_stay_within_capacity() -> None:
    s = Sightings(threshold=3, capacity=4)
    assert s.sight([b"a", b"b"]) == 0
    assert s.sight([b"a", b"b", b"c"]) == 0
    assert s.sight([b"a", b"b", b"c"]) == 2  # c has been seen twice only
    assert s.sight([b"a", b"x", b"c"]) == 1  # leading chunks only: x breaks the chain
    s.sight([b"d", b"e", b"f"])
    assert len(s) == 4  # the least recently seen went first
    assert s.sight([b"f"]) == 0  # f: two sightings of three
    s.mark_held([b"e", b"zz"], now=0.0)  # an unknown hash is ignored
    assert s.held(b"e") and not s.held(b"zz") and s.first_not_held([b"e", b"f"]) == 1


def test_a_current_directory_copy_overrules_held_marks_older_than_the_trust_window() -> None:
    s = Sightings(threshold=1)
    s.sight([b"a", b"b", b"c"])
    s.mark_held([b"a", b"b"], now=100.0)
    nowhere: Callable[[bytes], bool] = lambda h: False  # noqa: E731
    listed_c: Callable[[bytes], bool] = lambda h: h == b"c"  # noqa: E731
    # without a copy of the directory a mark never expires
    assert s.first_not_held([b"a", b"b", b"c"], now=1e9) == 2
    # a young mark outweighs a copy that does not list the chunk yet (a publish on its way)
    assert s.first_not_held([b"a", b"b"], listed=nowhere, now=100.0 + HELD_TRUSTED_S - 0.1) == 2
    # an old mark does not: the copy says no relay holds it any more
    assert s.first_not_held([b"a", b"b"], listed=nowhere, now=100.0 + HELD_TRUSTED_S) == 0
    # a chunk never marked here counts as held when the copy lists it (another engine's)
    assert s.held(b"c", listed=listed_c) and not s.held(b"c")


class _View:
    """A current copy of the directory that lists exactly ``held``."""

    live = True

    def __init__(self) -> None:
        self.held: set[bytes] = set()

    def holds(self, h: bytes) -> bool:
        return h in self.held


def test_a_chunk_a_relay_evicted_is_published_again_from_the_cache_on_its_next_sight(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import ray_kvmoq.connector.scheduler as scheduler

    clock = [1000.0]
    monkeypatch.setattr(scheduler, "time", SimpleNamespace(monotonic=lambda: clock[0]))
    side, bridge = _side()
    view = _View()
    bridge.directory_view = lambda: view  # type: ignore[method-assign]
    _step(side, _request("r1", PROMPT), cached=0)
    assert [s.group_id for s in _step(side, _request("r2", PROMPT), cached=8 * C)] == list(range(8))
    # the publish has not reached the copy yet: the engine's own word holds, nothing again
    clock[0] += 1.0
    assert _step(side, _request("r3", PROMPT), cached=8 * C) == []
    # the copy lists them (as the relay announced them): nothing, long after
    view.held = set(side._sightings._seen)
    clock[0] += 10 * HELD_TRUSTED_S
    assert _step(side, _request("r4", PROMPT), cached=8 * C) == []
    # the relay evicted groups 5..7 under its budget: the next sight publishes exactly those,
    # from vLLM's cache (no directory round trip), and the engine trusts its mark again
    hashes = side._state(_request("probe", PROMPT), 8 * C).hashes
    side.forget(["probe"])
    view.held -= set(hashes[5:])
    saves = _step(side, _request("r5", PROMPT), cached=8 * C)
    assert [s.group_id for s in saves] == [5, 6, 7]
    assert saves[-1].end_of_track
    assert bridge.lookups == 1  # the first sight's
    clock[0] += 1.0
    assert _step(side, _request("r6", PROMPT), cached=8 * C) == []


@pytest.mark.parametrize("bad", [0, -1, 1001, 1.5, True])
def test_a_bad_publish_threshold_fails_the_config_naming_the_key(bad: Any) -> None:
    with pytest.raises(ConnectorConfigError, match="publish_threshold"):
        ConnectorConfig.from_extra({"publish_threshold": bad})


def _other(n: int) -> list[int]:
    """A prompt of 8 whole chunks and a tail that shares no chunk with ``PROMPT`` or another n."""
    return [50_000 + 1_000 * n + t for t in range(8 * C + 64)]


def test_evicted_repeats_make_the_engine_publish_new_prompts_on_first_sight() -> None:
    side, _ = _side()
    _step(side, _request("r1", PROMPT), cached=0)
    assert _step(side, _request("o1", _other(1)), cached=0) == []  # no eviction seen yet
    # PROMPT comes back and vLLM's cache no longer holds it: 8 evicted repeats against 16
    # first-sight chunks is past FIRST_SIGHT_PAYS, so a new prompt publishes on first sight
    assert [s.group_id for s in _step(side, _request("r2", PROMPT), cached=0)] == list(range(8))
    assert FIRST_SIGHT_PAYS * 16 <= 8
    assert [s.group_id for s in _step(side, _request("o2", _other(2)), cached=0)] == list(range(8))
    assert _step(side, _request("short", _other(3)[: C - 1]), cached=0) == []  # no whole chunk
    totals = side.counters.totals()
    assert totals["chunks_evicted_seen"] == 8
    assert totals["requests_first_sight"] == 2  # r2 (its own chunks were repeats) and o2


def test_one_off_prompts_and_cached_repeats_never_switch_to_first_sight() -> None:
    side, _ = _side()
    for n in range(20):  # vLLM's random dataset: no prompt comes back
        assert _step(side, _request(f"o{n}", _other(n)), cached=0) == []
    # a repeat vLLM's cache still holds is no evicted repeat (published on its second sight)
    assert len(_step(side, _request("o0-again", _other(0)), cached=8 * C)) == 8
    assert _step(side, _request("new", _other(99)), cached=0) == []
    totals = side.counters.totals()
    assert totals.get("chunks_evicted_seen", 0) == 0
    assert totals.get("requests_first_sight", 0) == 0


def test_a_repeat_that_arrives_before_its_first_sight_was_scheduled_is_no_evicted_repeat() -> None:
    side, _ = _side()
    # two requests for the same new prompt in one scheduler pass: vLLM's cache holds neither
    # yet, as no step has computed the first
    for r in ("r1", "r2"):
        assert side.get_num_new_matched_tokens(_request(r, PROMPT), 0) == (0, False)
    assert side.counters.totals().get("chunks_evicted_seen", 0) == 0
    assert _step(side, _request("o1", _other(1)), cached=0) == []


def test_the_last_whole_chunk_vllm_must_compute_is_no_evicted_repeat() -> None:
    side, _ = _side()
    exact = PROMPT[: 8 * C]  # vLLM computes the last token, so it hits 7 chunks at most
    _step(side, _request("r1", exact), cached=0)
    _step(side, _request("r2", exact), cached=7 * C)
    assert side.counters.totals().get("chunks_evicted_seen", 0) == 0


def test_fixed_threshold_keeps_second_sight_publishing_whatever_the_engine_evicts() -> None:
    side, _ = _side(when_evicting=False)
    _step(side, _request("r1", PROMPT), cached=0)
    _step(side, _request("r2", PROMPT), cached=0)
    assert _step(side, _request("o1", _other(1)), cached=0) == []
    assert side.counters.totals()["chunks_evicted_seen"] == 8
    assert side.counters.totals().get("requests_first_sight", 0) == 0


def test_first_sight_publishing_ends_when_evicted_repeats_fall_below_a_fifth_of_first_sights() -> (
    None
):
    s = Sightings(threshold=2, when_evicting=True)
    t = 100.0  # one instant: no decay between the counts
    s.sight([b"a"], now=t)
    s.mark_cached([b"a", b"unknown"])  # an unknown hash is ignored
    assert s.threshold_at(t) == 2
    assert s.note_evicted([b"a"], now=t) == 1
    assert s.note_evicted([b"a"], now=t) == 0  # counted once until cached again
    assert s.threshold_at(t) == 1  # 1 evicted repeat, 1 first sight
    assert s.sight([b"b"], now=t) == 1  # a first sight admitted at once
    s.sight([bytes([i]) * 2 for i in range(3)], now=t)  # 5 first sights: 1 >= 0.2 * 5
    assert s.threshold_at(t) == 1
    assert s.sight([b"z"], now=t) == 1  # the 6th; 1 < 0.2 * 6 from here on
    assert s.threshold_at(t) == 2
    assert s.threshold_at(t + 1e4) == 2  # time alone decays both counts alike
    assert Sightings(threshold=2).threshold_at(t) == 2  # without when_evicting: fixed
