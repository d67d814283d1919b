"""The connector's threads run on the cores vLLM's engine threads leave spare."""

from __future__ import annotations

import os
import threading
from typing import Any

import pytest

from ray_kvmoq.connector.cores import BIND_ENV, _parse_list, pin_thread, spare_cores, spare_of


def test_spare_cores_are_the_allowed_ones_no_bound_thread_uses() -> None:
    # OpenMP threads on 0 and 1, threads that inherited thread 0's binding, free threads
    masks = [{0}, {1}, {0}, {0}, {0, 1, 2, 3}]
    assert spare_of({0, 1, 2, 3}, masks) == {2, 3}


def test_no_spare_core_when_the_engine_binds_every_allowed_core() -> None:
    assert spare_of({0, 1}, [{0}, {1}, {0, 1}]) == frozenset()


def test_threads_free_to_run_anywhere_leave_every_core_spare() -> None:
    assert spare_of({0, 1, 2}, [{0, 1, 2}, {0, 1, 2}]) == {0, 1, 2}


def test_the_kernels_cpu_list_format_is_parsed() -> None:
    assert _parse_list("0-2,5,7-8\n") == {0, 1, 2, 5, 7, 8}
    assert _parse_list("3") == {3}


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two cores")
def test_a_bound_thread_takes_its_core_out_of_the_spare_set_and_a_pinned_thread_runs_there(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BIND_ENV, raising=False)  # vLLM's automatic binding
    cores = sorted(os.sched_getaffinity(0))
    engine_core, rest = cores[0], frozenset(cores[1:])
    bound, release = threading.Event(), threading.Event()
    seen: dict[str, object] = {}

    def engine_thread() -> None:  # like vLLM's OpenMP thread 0
        os.sched_setaffinity(0, {engine_core})
        bound.set()
        release.wait(10)

    def connector_thread() -> None:
        pin_thread(seen["spare"])  # type: ignore[arg-type]
        seen["mask"] = os.sched_getaffinity(0)

    t = threading.Thread(target=engine_thread)
    t.start()
    try:
        assert bound.wait(10)
        seen["spare"] = spare_cores()
        assert seen["spare"] == rest
        c = threading.Thread(target=connector_thread)
        c.start()
        c.join(10)
        assert seen["mask"] == rest
        assert os.sched_getaffinity(0) == set(cores)  # the calling thread itself is untouched
        # an explicit binding is the operator's layout: the other cores may be another engine's
        monkeypatch.setenv(BIND_ENV, str(engine_core))
        assert spare_cores() == frozenset()
    finally:
        release.set()
        t.join(10)


def test_pinning_to_no_cores_leaves_the_thread_where_it_was() -> None:
    before = os.sched_getaffinity(0)
    pin_thread(frozenset())
    assert os.sched_getaffinity(0) == before


def test_the_worker_side_joins_ray_on_its_own_thread_before_registration_returns() -> None:
    """vLLM's start-up seeds and draws from ``random`` on the registering thread; a join running
    beside it drew the seeded GCS subscriber ids (0.6 of a core of GCS busy loop with two
    engines), so registration waits for the join."""
    import time

    import torch

    from ray_kvmoq.connector.worker import WorkerSide

    class _SlowBridge:
        joined_on: str | None = None

        def relay(self) -> None:
            time.sleep(0.3)
            self.joined_on = threading.current_thread().name

    bridge: Any = _SlowBridge()
    side = WorkerSide(bridge=bridge, make_layout=lambda d, dtype: None, block_size=16)  # type: ignore[arg-type,return-value]
    try:
        side.register_kv_caches({"model.layers.0.attn": torch.zeros(4, 2, 16, 128)})
        assert bridge.joined_on is not None and bridge.joined_on.startswith("kvmoq-publish")
    finally:
        side.shutdown()
