"""Shared test fixtures.

One multi-node Ray cluster per test session (``ray_cluster``), started lazily by the first test
that asks for it: the head on the host IP plus two worker nodes on 127.0.0.2 and 127.0.0.3
(runtime-notes §4). Each node has one ``engine_slot`` resource: a Serve LLM deployment that asks
for it gets at most one replica per node. Everything it starts is stopped by ``cluster.shutdown()`` — never ``ray stop``.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # ~/.ray/auth_token is shared machine-wide
os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@dataclass
class RayTestCluster:
    """The session's Ray cluster: ``address``, node ids by role, and the underlying Cluster."""

    cluster: Any
    address: str
    head_node_id: str
    node_ids: dict[str, str]  # "127.0.0.2" -> node id, ...
    temp_dir: str


def _last_core() -> str | None:
    """The cores for 127.0.0.2's vLLM engines: this process's last one (None under 2 cores, or
    where the user set ``VLLM_CPU_OMP_THREADS_BIND`` already).

    vLLM's own binding ("auto") knows nothing of the other nodes on this machine and puts every
    engine on core 0: a PD test's prefill and decode engines then share one core and a 769-token
    prefill took ~25 s. 127.0.0.2 gets the last core, as a second real node would bring its own;
    the others keep vLLM's binding (``kvmoq bench serve`` splits alike). The node's raylet
    passes the variable to every worker it starts."""
    from ray_kvmoq.bench.cluster import BIND_ENV

    cpus = sorted(os.sched_getaffinity(0))
    return str(cpus[-1]) if len(cpus) >= 2 and BIND_ENV not in os.environ else None


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayTestCluster]:
    import ray
    from ray.cluster_utils import Cluster

    from ray_kvmoq.bench.cluster import BIND_ENV, scoped_env

    temp_dir = tempfile.mkdtemp(prefix="rkq", dir="/tmp")  # short: unix socket paths ≤ 107 bytes
    # Cluster.add_node writes /tmp/ray/ray_current_cluster even with a private temp dir, and fails
    # on a fresh machine where /tmp/ray does not exist yet.
    os.makedirs("/tmp/ray", exist_ok=True)
    store = 200 << 20
    cluster = Cluster(
        initialize_head=True,
        head_node_args=dict(
            num_cpus=4,
            include_dashboard=False,
            object_store_memory=store,
            temp_dir=temp_dir,
            resources={"kvnode_head": 1, "engine_slot": 1},
        ),
    )
    try:
        for i, ip in enumerate(("127.0.0.2", "127.0.0.3")):
            with scoped_env(BIND_ENV, _last_core() if ip == "127.0.0.2" else None):
                cluster.add_node(
                    num_cpus=4,
                    node_ip_address=ip,
                    object_store_memory=store,
                    resources={f"kvnode{i + 1}": 1, "engine_slot": 1},
                )
        cluster.wait_for_nodes()
        ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
        nodes = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
        head_id = next(
            n["NodeID"] for n in ray.nodes() if "node:__internal_head__" in n["Resources"]
        )
        yield RayTestCluster(
            cluster=cluster,
            address=cluster.address,
            head_node_id=head_id,
            node_ids=nodes,
            temp_dir=temp_dir,
        )
    finally:
        try:
            from ray import serve

            if ray.is_initialized():
                serve.shutdown()
        except Exception:
            pass
        ray.shutdown()
        cluster.shutdown()
