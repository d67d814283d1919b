"""A private two-node Ray cluster on this machine for the benches (head + 127.0.0.2).

Both nodes share the machine's cores; the second node has its own IP, raylet and object store,
so bytes between them really cross a node boundary (over loopback). Each node has one
``engine_slot`` resource, so an LLM deployment asking for it gets one replica per node.
Everything it starts is stopped by ``cluster.shutdown()`` — never ``ray stop``, which would kill
other users' Ray.

Two real nodes would each bring their own cores; two nodes on one machine share them. vLLM's CPU
backend binds its OpenMP threads itself (``VLLM_CPU_OMP_THREADS_BIND=auto``) and, knowing nothing
of the other node, every engine on this machine picks the same cores: on 2 cores, both engines
of a 2-replica app bind to core 0 and the second core serves neither. With ``split_cores`` each
node's processes get ``VLLM_CPU_OMP_THREADS_BIND`` for their own half of the machine's cores
(:func:`core_halves`), as two real nodes would have.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ray_kvmoq.connector.cores import BIND_ENV

__all__ = ["BIND_ENV", "core_halves", "scoped_env", "stdout_to_stderr", "two_node_cluster"]


def core_halves(cpus: list[int]) -> tuple[str, str] | None:
    """The two nodes' core lists in ``VLLM_CPU_OMP_THREADS_BIND``'s form (``"0,1"``), the first
    half of ``cpus`` for the head and the second for the other node; None under 2 cores."""
    cpus = sorted(cpus)
    if len(cpus) < 2:
        return None
    half = len(cpus) // 2
    return ",".join(map(str, cpus[:half])), ",".join(map(str, cpus[half:]))


@contextmanager
def scoped_env(name: str, value: str | None) -> Iterator[None]:
    """``os.environ[name] = value`` while the block runs (processes started then inherit it)."""
    if value is None:
        yield
        return
    saved = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = saved


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
    *, store_bytes: int, num_cpus: int = 4, namespace: str | None = None, split_cores: bool = False
) -> Iterator[tuple[str, str]]:
    """Start the cluster and connect this process; yields (head node id, 127.0.0.2's node id).

    ``split_cores``: each node's vLLM engines bind to their own half of this process's cores
    (see the module docstring), unless ``$VLLM_CPU_OMP_THREADS_BIND`` is set already; the
    raylets pass their environment on to every worker they start. While it runs, fd 1 points
    at stderr (:func:`stdout_to_stderr`): print results after it."""
    import ray
    from ray.cluster_utils import Cluster

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    os.makedirs("/tmp/ray", exist_ok=True)  # Cluster.add_node writes its address file there
    halves = core_halves(list(os.sched_getaffinity(0))) if split_cores else None
    if BIND_ENV in os.environ:
        halves = None  # the user's own binding wins
    head_cores, other_cores = halves or (None, None)
    where = f"; engines on cores {head_cores} / {other_cores}" if halves else ""
    temp_dir = tempfile.mkdtemp(prefix="rkb", dir="/tmp")  # kept: its logs explain a bad run
    print(
        f"starting a 2-node Ray cluster (head + 127.0.0.2){where}; logs in {temp_dir}",
        file=sys.stderr,
        flush=True,
    )
    with stdout_to_stderr(), scoped_env(BIND_ENV, head_cores):
        cluster: Any = Cluster(
            initialize_head=True,
            head_node_args=dict(
                num_cpus=num_cpus,
                include_dashboard=False,
                object_store_memory=store_bytes,
                temp_dir=temp_dir,
                resources={"engine_slot": 1},
            ),
        )
        try:
            with scoped_env(BIND_ENV, other_cores):
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
