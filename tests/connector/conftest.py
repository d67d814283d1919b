"""Fixtures for the connector tests: real vLLM engines (CPU, SmolLM2) with the MoQT connector.

Two engines for the whole package, each in a Ray actor on its own Ray node of the shared test
cluster (head, and 127.0.0.2), each with ``kv_both``: engine starts cost ~30–60 s here, so every
connector test shares them (and they are stopped before the serving tests start theirs). Each test isolates its prompts with its own ``cache_salt`` (a fresh
tenant), so one test's published groups never satisfy another's lookups.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from tests.conftest import RayTestCluster

RAY_NAMESPACE = "kvmoq"
CLUSTER_SECRET = bytes(range(32))
"""The engines' cluster secret (so KV payload digests are keyed, as in every deployment)."""


@dataclass
class Engines:
    """The session's two engines and what the tests need to reach around them."""

    a: Any
    """EngineHost actor on the head node."""
    b: Any
    """EngineHost actor on 127.0.0.2."""
    a_node: str
    b_node: str
    relays: dict[str, Any]
    """Node id → RelayActor."""
    tokens: list[int]
    """The shipped public-domain text, tokenized (prompts are slices of it)."""
    model: str
    """KV namespace model field of both engines."""


NO_REUSE = {"kvmoq": {"load": False, "publish": False}}
"""The reference: this request recomputes everything and publishes nothing."""


def _gen(host: Any, prompts: list[list[int]], **kw: Any) -> list[Any]:
    import ray

    return list(ray.get(host.generate.remote(prompts, **kw), timeout=300))


def _flush(host: Any) -> None:
    """Wait until the groups ``host`` published so far are in the directory (publishing is
    asynchronous; without this a lookup right after the request could miss them)."""
    import ray

    ray.get(host.flush.remote(), timeout=120)


def _metrics(host: Any) -> dict[str, float]:
    import ray

    return dict(ray.get(host.metrics.remote(), timeout=60))


def _delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
    return after.get(key, 0.0) - before.get(key, 0.0)


def _start_engine(node_id: str, kv: dict[str, Any] | None = None, **engine_kwargs: Any) -> Any:
    """An EngineHost actor on ``node_id``: the built-in model, ``kv_both`` with the connector
    (``kv``: another ``kv_transfer_config``), the package's cluster secret; ``engine_kwargs`` go
    to vLLM."""
    from ray_kvmoq.connector import kv_transfer_config
    from ray_kvmoq.connector.host import start_engine
    from ray_kvmoq.engine.loader import cached_builtin_dir

    # publish_threshold=1: these tests drive the load and publish paths, so every chunk is
    # published as computed; the admission rule (default 2) is tested in
    # test_publish_admission.py, test_first_sight_engine.py and through the app in tests/serving
    if kv is None:
        kv = kv_transfer_config("kv_both", load_timeout_s=20.0, publish_threshold=1)
    env = {"KVMOQ_CLUSTER_SECRET": CLUSTER_SECRET.hex()}
    return start_engine(node_id, str(cached_builtin_dir()), kv, env=env, **engine_kwargs)


def _stop_engine(h: Any) -> None:
    """Shut the engine down (bounded), then kill its actor."""
    import ray

    try:
        ray.get(h.shutdown.remote(), timeout=60)
    except Exception:
        pass
    ray.kill(h)


@pytest.fixture(scope="package")
def fp32_engine(engines: Engines) -> Iterator[Any]:
    """A float32 engine on the head node, for the codec quality gates: shared/docs/kv-payload.md
    defines them on an fp32 reference (bf16 arithmetic alone flips near-tied top-1 tokens)."""
    h = _start_engine(engines.a_node, dtype="float32")
    try:
        yield h
    finally:
        _stop_engine(h)


@pytest.fixture(scope="package")
def prefix_cache_engine(engines: Engines) -> Iterator[Any]:
    """A bf16 engine on the head node with vLLM's own prefix cache on: the shape-matched
    reference for greedy equality. On CPUs whose bf16 kernels are not batch-invariant (AMX),
    recomputing a whole prompt and computing its suffix over cached KV round differently, so a
    loaded prefix can only be held to what vLLM's own prefix cache gives for the same prompts.
    Same connector config as the engines under test (vLLM's CPU thread binding depends on it),
    driven with loading and publishing off."""
    h = _start_engine(engines.a_node, enable_prefix_caching=True, kv_cache_gib=0.25)
    try:
        yield h
    finally:
        _stop_engine(h)


def fresh_salt() -> str:
    """A tenant salt no other test uses."""
    return f"test-{uuid.uuid4().hex}"


@pytest.fixture(scope="package")
def engines(ray_cluster: RayTestCluster) -> Iterator[Engines]:
    import ray

    from ray_kvmoq.bench.quality import load_text
    from ray_kvmoq.relay.actor import start_relays

    relays = start_relays(namespace=RAY_NAMESPACE)
    b_node = ray_cluster.node_ids["127.0.0.2"]
    a = _start_engine(ray_cluster.head_node_id)
    b = _start_engine(b_node)
    tokens = ray.get(a.tokenize.remote(load_text()))
    model = ray.get(a.kv_model.remote())
    assert ray.get(b.kv_model.remote()) == model
    try:
        yield Engines(
            a=a,
            b=b,
            a_node=ray_cluster.head_node_id,
            b_node=b_node,
            relays=relays,
            tokens=tokens,
            model=model,
        )
    finally:
        for h in (a, b):
            _stop_engine(h)
