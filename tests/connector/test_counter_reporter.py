"""The connector's counters reach the figures board even when the engine makes no more steps.

vLLM asks a connector for its stats once per step; an engine that falls idle asks no more. The
board (what ``kvmoq bench`` and the app tests read) must still get the counts made after the last
step: a publish finishing on the publisher thread, an abort.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import torch

from ray_kvmoq.connector.metadata import SaveSpec
from ray_kvmoq.connector.stats import ConnectorCounters, CounterReporter
from ray_kvmoq.connector.worker import WorkerSide, _Gathered
from ray_kvmoq.kvcache.naming import kv_namespace, prompt_id


def _wait_for(cond: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def test_counts_within_the_period_are_sent_once_it_ends_and_unchanged_counts_never() -> None:
    counters = ConnectorCounters()
    sent: list[dict[str, int]] = []
    reporter = CounterReporter(counters, sent.append, period_s=0.3)
    reporter.poke()
    assert len(sent) == 1 and sent[0]["groups_saved"] == 0  # the first change goes at once
    counters.add(groups_saved=2)
    reporter.poke()
    assert len(sent) == 1  # within the period: left to the timer
    assert _wait_for(lambda: len(sent) == 2)
    assert sent[1]["groups_saved"] == 2
    time.sleep(0.5)
    reporter.poke()  # nothing new since
    assert len(sent) == 2


class _HeldBridge:
    """A relay bridge whose publish waits until the test lets it finish."""

    def __init__(self) -> None:
        self.release = threading.Event()

    def digest_key(self) -> None:
        return None

    def publish_group(self, *args: Any, **kwargs: Any) -> None:
        assert self.release.wait(10)


def test_a_publish_that_ends_after_the_last_step_reaches_the_board_with_no_further_step() -> None:
    bridge: Any = _HeldBridge()
    side = WorkerSide(bridge=bridge, make_layout=lambda d, dtype: None, block_size=16)  # type: ignore[arg-type,return-value]
    sent: list[dict[str, int]] = []
    reporter = CounterReporter(side.counters, sent.append, period_s=0.2)
    side.on_count = reporter.poke  # as MoqtKVConnector wires its worker side
    try:
        spec = SaveSpec(
            req_id="r1",
            namespace=kv_namespace("m", prompt_id(b"salt", list(range(128)))),
            track=b"BF16",
            group_id=0,
            block_ids=(0,),
            start=0,
            end=128,
            chunk_hash=b"h" * 16,
            end_of_track=False,
        )
        chunk = torch.zeros(2, 2, 1, 128, 64, dtype=torch.bfloat16)  # [L, 2, H, T, D]
        side._publisher.submit(side._publish, _Gathered(spec=spec, chunk=chunk))
        reporter.poke()  # the request's last step: the publish is still running
        assert sent[-1]["groups_saved"] == 0
        bridge.release.set()  # the publish ends; vLLM asks for no more stats
        assert _wait_for(lambda: sent[-1]["groups_saved"] == 1), sent
    finally:
        bridge.release.set()
        side.shutdown()
