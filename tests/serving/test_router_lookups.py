"""The KV router's lookups on the request path: the directory answer for a hot prefix is reused
for a second, the figures board is read in the background, and the tokenizer loads before the
first request (none of them may add a round trip, or seconds, to a request's first token)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from ray_kvmoq.serving import router as router_mod
from ray_kvmoq.serving.router import KVRouter


class _Loc:
    def __init__(self, node_id: str, track: bytes = b"BF16") -> None:
        self.node_id = node_id
        self.track = track


class _Directory:
    """Answers ``longest_prefix`` with the holders it was given, counting calls."""

    def __init__(self, holders: dict[bytes, list[str]]) -> None:
        self.holders = holders
        self.calls = 0
        self.longest_prefix = self

    def remote(self, hashes: list[bytes]) -> Any:
        self.calls += 1
        chain = []
        for h in hashes:
            if not self.holders.get(h):
                break
            chain.append([_Loc(n) for n in self.holders[h]])

        async def answer() -> list[list[_Loc]]:
            return chain

        return answer()


class _StuckBoard:
    """A figures board whose ``snapshot`` never answers."""

    def __init__(self) -> None:
        self.calls = 0
        self.snapshot = self

    def remote(self) -> Any:
        self.calls += 1
        return asyncio.get_running_loop().create_future()


def _router(directory: Any = None, board: Any = None) -> KVRouter:
    r = KVRouter.__new__(KVRouter)
    # a local directory with no tokenizer in it: its start-up load fails at once, offline
    r.initialize_state(
        kv_model="m",
        model_dir=str(Path(__file__).parent),
        bytes_per_token=1.0,
        directory_view=False,
    )
    r._directory = directory
    r._board = board
    return r


def test_a_complete_directory_answer_is_reused_for_a_second_and_a_partial_one_is_asked_again(
    monkeypatch: Any,
) -> None:
    d = _Directory({b"h0": ["n1"], b"h1": ["n1", "n2"]})
    r = _router(d)
    now = [100.0]
    monkeypatch.setattr(router_mod.time, "monotonic", lambda: now[0])

    async def go() -> None:
        full = await r._holders([b"h0", b"h1"])
        assert full == [frozenset({"n1"}), frozenset({"n1", "n2"})]
        assert await r._holders([b"h0", b"h1"]) == full and d.calls == 1
        now[0] += 1.01  # older than a second: asked again
        assert await r._holders([b"h0", b"h1"]) == full and d.calls == 2
        partial = [b"h0", b"h1", b"h2"]  # h2 held nowhere: may appear any moment
        assert await r._holders(partial) == [frozenset({"n1"}), frozenset({"n1", "n2"})]
        assert await r._holders(partial) is not None and d.calls == 4
        d.holders[b"h2"] = ["n2"]
        assert (await r._holders(partial))[2] == frozenset({"n2"})

    asyncio.run(go())


def test_a_failed_directory_lookup_routes_without_kv_information_and_is_not_cached() -> None:
    class _Broken:
        longest_prefix = None

    r = _router(_Broken())
    assert asyncio.run(r._holders([b"h0"])) == []
    assert r._directory is None  # looked up again next time


def test_rankings_never_wait_for_the_figures_board_and_start_one_read_at_a_time() -> None:
    board = _StuckBoard()
    r = _router(board=board)

    async def go() -> None:
        r._refresh_figures()  # returns at once although the board never answers
        await asyncio.sleep(0)
        assert board.calls == 1
        r._figures_at = 0.0  # due again, but the first read is still in flight
        r._refresh_figures()
        await asyncio.sleep(0)
        assert board.calls == 1
        assert r._figures_task is not None
        await asyncio.wait_for(r._figures_task, 2.0)  # the read gives up after its timeout
        assert r._board is None  # looked up again on the next read
        r._board = board
        r._figures_at = 0.0
        r._refresh_figures()
        await asyncio.sleep(0)
        assert board.calls == 2

    asyncio.run(go())


def test_the_tokenizer_loads_in_the_background_when_the_router_starts() -> None:
    """The built-in model's real tokenizer: the router's start leaves it loaded (a thread named
    ``kvmoq-tokenizer``), so the first request finds it in the cache instead of loading it."""
    from ray_kvmoq.engine.loader import cached_builtin_dir
    from ray_kvmoq.serving import prompts

    model_dir = str(cached_builtin_dir())
    prompts._load_tokenizer.cache_clear()
    r = KVRouter.__new__(KVRouter)
    r.initialize_state(kv_model="m", model_dir=model_dir, bytes_per_token=1.0, directory_view=False)
    for t in threading.enumerate():
        if t.name == "kvmoq-tokenizer":
            t.join(60.0)
    assert prompts._load_tokenizer.cache_info().currsize == 1
    hits = prompts._load_tokenizer.cache_info().hits
    prompts._tokenizer(model_dir)
    assert prompts._load_tokenizer.cache_info().hits == hits + 1  # already loaded


def test_engines_without_reuse_get_no_affinity_and_no_directory_lookups() -> None:
    """Reuse off (bench row c): the router neither asks the directory nor remembers where a
    prefix went, so every ranking is ``pow2``; with reuse on, the same prompt's second ranking
    follows the first to its replica's engine cache."""
    from types import SimpleNamespace

    from ray_kvmoq.connector.figures import FiguresSnapshot
    from ray_kvmoq.engine.loader import cached_builtin_dir
    from ray_kvmoq.serving.costmodel import Candidate
    from ray_kvmoq.serving.router import rank

    model_dir = str(cached_builtin_dir())
    request = SimpleNamespace(prompt=list(range(1, 8 * 128 + 40)), max_tokens=4)
    figures = FiguresSnapshot(values={"prefill_s_per_token": {"A": 1e-3, "B": 1e-3}})

    def second_outcome(**flags: bool) -> tuple[str, int]:
        d = _Directory({})
        r = KVRouter.__new__(KVRouter)
        r.initialize_state(
            kv_model="m", model_dir=model_dir, bytes_per_token=1.0, directory_view=False, **flags
        )
        r._directory = d
        view = asyncio.run(r._view(request))
        assert view is not None and view.prompt_tokens == 8 * 128 + 39
        sent_to = {"A": frozenset(view.hashes), "B": frozenset()}
        cands = [Candidate(key=k, node_id=k, queue_len=0, recent=sent_to[k]) for k in "AB"]
        return rank(view, cands, figures, r._rng)[1], d.calls

    assert second_outcome() == ("cost", 1)
    assert second_outcome(engine_prefix_cache=False, kv_reuse=False) == ("pow2", 0)
