"""ray_kvmoq.serving: Ray Serve prefill/decode deployments, the KV-placement router, OpenAI HTTP.

* ``app``: typed app arguments and the Serve builders (``serve run apps/local.yaml``).
* ``worker``: prefill with prefix reuse and live publishing, decode (plain class; no Ray).
* ``kvplane`` / ``relayplane``: where KV chunks are read and published (in-process, or the node
  relays as draft-shi-moq-kvcache tracks, pulled over MoQT between nodes).
* ``router`` / ``costmodel``: the Serve request router and its measured cost model.
* ``ingress`` / ``openai_api`` / ``textstream``: the OpenAI-compatible HTTP API.
* ``metrics``: Prometheus metrics; ``deployments``: the Serve shells.

Public names are imported lazily (the package import stays light: no Ray, no torch).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "AppArgs",
    "CostFigures",
    "IngressCore",
    "KVPlacementRouter",
    "KVPlane",
    "LocalKVPlane",
    "OpenAIError",
    "RelayKVPlane",
    "ReplicaArgs",
    "ReplicaCore",
    "ServingMetrics",
    "TenantTable",
    "build",
    "load_figures",
]

_WHERE = {
    "AppArgs": "app",
    "CostFigures": "costmodel",
    "IngressCore": "ingress",
    "KVPlacementRouter": "router",
    "KVPlane": "kvplane",
    "LocalKVPlane": "kvplane",
    "OpenAIError": "openai_api",
    "RelayKVPlane": "relayplane",
    "ReplicaArgs": "app",
    "ReplicaCore": "worker",
    "ServingMetrics": "metrics",
    "TenantTable": "openai_api",
    "build": "app",
    "load_figures": "costmodel",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
