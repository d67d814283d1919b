"""ray_kvmoq.connector: vLLM's KV connector API over the node relays.

vLLM's scheduler asks this connector how many leading prompt tokens the cluster already holds
(the chained chunk hashes of draft-shi-moq-kvcache, looked up in the KV directory), and its
workers load those groups from this node's relay into the paged KV cache (zero-copy object-store
reads on the same node; the relay pulls over MoQT from another node) and publish each chunk as
one group of the prompt's track, once the engine has seen it ``publish_threshold`` times (by
default its second sight: a prompt seen once costs no publishing).

Modules (imports: vllm, torch, ``ray`` only in ``bridge.py``; relay, kvcache below):

    connector.py  MoqtKVConnector: engine checks, dispatch to the two sides
    scheduler.py  lookups, load plans, save plans, kv_transfer_params (EngineCore process)
    sightings.py  the admission rule for publishing: chunk hashes seen per engine (an LRU)
    worker.py     loads into / saves from the paged blocks, threads (worker processes)
    paged.py      vLLM's per-layer [B, H, N, 2D] caches ↔ [L, 2, H, T, D] chunks
    chunks.py     codec + digest of one group, AC codebooks
    bridge.py     joining Ray from vLLM's processes, the node relay's in-node API
    metadata.py   scheduler → worker metadata, producer → consumer kv_transfer_params
    config.py     kv_connector_extra_config, validated
    identity.py   the KV namespace's model field: served name + weights fingerprint
    stats.py      counters, vLLM connector stats, Prometheus

vLLM imports the connector class by module path (``kv_connector_module_path:
ray_kvmoq.connector``), so the name is resolved lazily here: importing this package alone pulls
in neither vLLM nor Ray.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["ConnectorConfig", "ConnectorConfigError", "MoqtKVConnector", "kv_transfer_config"]

_WHERE = {
    "ConnectorConfig": "config",
    "ConnectorConfigError": "config",
    "MoqtKVConnector": "connector",
}


def kv_transfer_config(role: str = "kv_both", **extra: Any) -> dict[str, Any]:
    """The ``kv_transfer_config`` dict that loads this connector (``extra``: its settings)."""
    if role not in ("kv_both", "kv_producer", "kv_consumer"):
        raise ValueError(f"kv_role must be kv_both, kv_producer or kv_consumer, got {role!r}")
    return {
        "kv_connector": "MoqtKVConnector",
        "kv_connector_module_path": __name__,
        "kv_role": role,
        "kv_load_failure_policy": "recompute",
        "kv_connector_extra_config": dict(extra),
    }


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
