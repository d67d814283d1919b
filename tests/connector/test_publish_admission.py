"""The admission rule for publishing (``publish_threshold``, ``connector/sightings.py``), on the
scheduler side without an engine: requests and scheduler outputs carry the fields vLLM fills,
the directory answers at once."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from ray_kvmoq.connector.config import ConnectorConfig, ConnectorConfigError
from ray_kvmoq.connector.scheduler import SchedulerSide
from ray_kvmoq.connector.sightings import Sightings

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


def _side(threshold: int | None = None, *, producer: bool = False) -> tuple[SchedulerSide, _Bridge]:
    conf = ConnectorConfig() if threshold is None else ConnectorConfig(publish_threshold=threshold)
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
    side, _ = _side()
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
    s.mark_held([b"e", b"zz"])  # an unknown hash is ignored
    assert s.held(b"e") and not s.held(b"zz") and s.first_not_held([b"e", b"f"]) == 1


@pytest.mark.parametrize("bad", [0, -1, 1001, 1.5, True])
def test_a_bad_publish_threshold_fails_the_config_naming_the_key(bad: Any) -> None:
    with pytest.raises(ConnectorConfigError, match="publish_threshold"):
        ConnectorConfig.from_extra({"publish_threshold": bad})
