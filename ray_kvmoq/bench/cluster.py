"""A private two-node Ray cluster on this machine for the benches (head + 127.0.0.2).

Both nodes share the machine's cores; the second node has its own IP, raylet and object store,
so bytes between them really cross a node boundary (over loopback). Each node has one
``engine_slot`` resource, so an LLM deployment asking for it gets one replica per node. Everything it starts is
stopped by ``cluster.shutdown()`` — never ``ray stop``, which would kill other users' Ray.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["stdout_to_stderr", "two_node_cluster"]


@contextmanager
def stdout_to_stderr() -> Iterator[None]:
    """Point file descriptor 1 at stderr while a bench runs, then restore it.

    Processes started meanwhile (Ray's raylets, ``vllm bench serve``) inherit fd 1 and would
    otherwise write their lines (``(raylet) Task ... failed``) into the ``--json`` object the
    bench prints on stdout once it is done."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)


@contextmanager
def two_node_cluster(
    *, store_bytes: int, num_cpus: int = 4, namespace: str | None = None
) -> Iterator[tuple[str, str]]:
    """Start the cluster and connect this process; yields (head node id, 127.0.0.2's node id).

    While it runs, fd 1 points at stderr (:func:`stdout_to_stderr`): print results after it."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.makedirs("/tmp/ray", exist_ok=True)  # Cluster.add_node writes its address file there
    print("starting a 2-node Ray cluster (head + 127.0.0.2)", file=sys.stderr, flush=True)
    with stdout_to_stderr():
        cluster: Any = Cluster(
            initialize_head=True,
            head_node_args=dict(
                num_cpus=num_cpus,
                include_dashboard=False,
                object_store_memory=store_bytes,
                temp_dir=tempfile.mkdtemp(prefix="rkb", dir="/tmp"),
                resources={"engine_slot": 1},
            ),
        )
        try:
            cluster.add_node(
                num_cpus=num_cpus,
                node_ip_address="127.0.0.2",
                object_store_memory=store_bytes,
                resources={"engine_slot": 1},
            )
            cluster.wait_for_nodes()
            ray.init(address=cluster.address, namespace=namespace, log_to_driver=False)
            nodes = {n["NodeManagerAddress"]: n["NodeID"] for n in ray.nodes() if n["Alive"]}
            other = nodes.pop("127.0.0.2")
            yield next(iter(nodes.values())), other
        finally:
            ray.shutdown()
            cluster.shutdown()
