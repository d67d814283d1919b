"""The benches' private two-node cluster: each node's engines get their own half of the cores."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from ray_kvmoq.bench.cluster import BIND_ENV, core_halves


def test_core_halves_split_the_cores_into_a_head_half_and_an_other_half() -> None:
    assert core_halves([1, 0]) == ("0", "1")
    assert core_halves([0, 1, 2, 3, 4, 5, 6, 7]) == ("0,1,2,3", "4,5,6,7")
    assert core_halves([0, 2, 5]) == ("0", "2,5")  # an odd count: the other node gets one more
    assert core_halves([3]) is None  # one core cannot be split


_PROBE = f"""
import json, os, ray
from ray_kvmoq.bench.cluster import two_node_cluster
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as On

@ray.remote(num_cpus=0)
def bind():
    return os.environ.get({BIND_ENV!r})

with two_node_cluster(store_bytes=80 << 20, num_cpus=1, split_cores=True) as (head, other):
    got = [ray.get(bind.options(scheduling_strategy=On(n, soft=False)).remote()) for n in (head, other)]
    driver = os.environ.get({BIND_ENV!r})
print("RESULT", json.dumps({{"nodes": got, "driver_after": os.environ.get({BIND_ENV!r})}}))
"""


@pytest.mark.slow
def test_each_node_of_a_split_cluster_hands_its_workers_its_own_core_binding() -> None:
    """A worker on each node (as a Serve replica, and the vLLM engine it spawns, would be) sees
    its node's half in ``VLLM_CPU_OMP_THREADS_BIND``; the driver's environment is restored."""
    env = {k: v for k, v in os.environ.items() if k != BIND_ENV}
    proc = subprocess.run(
        [sys.executable, "-c", _PROBE], env=env, capture_output=True, text=True, timeout=240
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    res = json.loads(line.removeprefix("RESULT "))
    halves = core_halves(sorted(os.sched_getaffinity(0)))
    assert res["nodes"] == (list(halves) if halves else [None, None])
    assert res["driver_after"] is None
