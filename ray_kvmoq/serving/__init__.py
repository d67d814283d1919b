"""ray_kvmoq.serving: Ray Serve LLM apps with the MoQT KV layer.

The engine is vLLM and the OpenAI layer is Ray Serve LLM's; this package adds the parts they
do not have (DESIGN.md):

* ``app`` / ``graph``: typed app arguments and the builder (``serve run apps/local.yaml``):
  ``LLMConfig`` s with :class:`~ray_kvmoq.connector.MoqtKVConnector`, the node relays, the KV
  directory and the figures board, combined or PD graphs;
* ``router`` / ``costmodel`` / ``prompts``: the KV router (where each prefix's groups are, what
  a pull costs vs recompute, measured on the running cluster);
* ``server``: Ray Serve LLM server subclasses (prefill probe, routing stats, connector counters);
* ``backend``: the connector's Ray Serve LLM backend (engine-process setup, concurrent PD);
* ``ingress`` / ``tenants``: API keys → tenant salts, ``/health``, ``/metrics``;
* ``metrics``: the router's Prometheus metrics.

Public names are imported lazily (the package import stays light: no Ray, no vLLM).
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["AppArgs", "KVRouter", "ReplicaArgs", "TenantTable", "build", "build_pd"]

_WHERE = {
    "AppArgs": "app",
    "KVRouter": "router",
    "ReplicaArgs": "app",
    "TenantTable": "tenants",
    "build": "app",
    "build_pd": "app",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
