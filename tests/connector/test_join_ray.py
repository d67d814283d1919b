"""How a vLLM process joins Ray: its GCS subscriber ids must not follow vLLM's seed.

Ray draws a driver's GCS error/log subscriber ids from Python's global ``random``; vLLM seeds it
alike in every engine. Each child here seeds ``random`` with 0 as vLLM does, records every
``random.getrandbits`` draw made while it joins the shared test cluster, and reports whether its
seeded sequence survived. Real Ray, real processes, no vLLM.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from tests.conftest import RayTestCluster

pytestmark = [pytest.mark.ray, pytest.mark.timeout(300)]

_CHILD = r"""
import json, random, sys

random.seed(0)  # what vLLM's set_random_seed does in every engine
drawn = []
_draw = random.getrandbits

def recording(k):
    v = _draw(k)
    drawn.append(v)
    return v

random.getrandbits = recording
if sys.argv[2] == "join_ray":
    from ray_kvmoq.connector.bridge import join_ray

    join_ray(sys.argv[1], "kvmoq-join-test", "127.0.0.1")
else:
    import ray

    ray.init(address=sys.argv[1], namespace="kvmoq-join-test", log_to_driver=False,
             configure_logging=False, _node_ip_address="127.0.0.1")
random.getrandbits = _draw
after = random.random()
random.seed(0)
print(json.dumps({"drawn": drawn, "seeded_sequence_kept": after == random.random()}))
"""


def _join_twice(address: str, how: str) -> list[dict[str, Any]]:
    procs = [
        subprocess.run(
            [sys.executable, "-c", _CHILD, address, how],
            capture_output=True,
            text=True,
            timeout=120,
        )
        for _ in range(2)
    ]
    for p in procs:
        assert p.returncode == 0, p.stderr[-3000:]
    return [json.loads(p.stdout.strip().splitlines()[-1]) for p in procs]


def test_two_processes_seeded_alike_join_ray_with_their_own_subscriber_ids(
    ray_cluster: RayTestCluster,
) -> None:
    plain = _join_twice(ray_cluster.address, "ray.init")
    if not plain[0]["drawn"]:
        pytest.skip("this Ray no longer draws subscriber ids from Python's random")
    # the hazard is real: plain ray.init after the same seed draws the same ids in both
    assert plain[0]["drawn"] == plain[1]["drawn"]
    ours = _join_twice(ray_cluster.address, "join_ray")
    assert len(ours[0]["drawn"]) == len(plain[0]["drawn"])
    assert ours[0]["drawn"] != ours[1]["drawn"]
    assert ours[0]["drawn"] != plain[0]["drawn"]
    # and vLLM's seeded sequence is where it was before the join
    assert all(o["seeded_sequence_kept"] for o in ours)
