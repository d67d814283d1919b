"""Typed application arguments and the Serve app builders.

``serve run apps/local.yaml`` (or ``serve run ray_kvmoq.serving.app:build mode=combined``) calls
:func:`build` with the config's ``args`` validated into :class:`AppArgs` (Ray 2.60 builders with a
pydantic-annotated parameter, runtime-notes §3.2). ``app`` is a default-built application for
``serve build``.

Modes:
- ``combined``: one ``LLMServer`` deployment does prefill and decode (one-node setups, CI); the
  router places requests by where their prefix KV is.
- ``pd``: ``PrefillServer`` and ``DecodeServer`` deployments; prefill publishes KV groups to its
  node's relay as they finish, decode pulls them through its own node's relay (MoQT between
  nodes) and streams tokens. Both are placed by the KV router (prefix reuse for prefill, KV
  locality for decode).
"""

# No "from __future__ import annotations": Ray reads the builder's parameter annotation at
# run time to validate `args` into AppArgs (a string annotation would be skipped).

import os
import secrets
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from ray.serve import Application


class ReplicaArgs(BaseModel):
    """Placement and scale of one deployment."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int = Field(default=1, ge=1)
    """Replicas of the deployment."""
    num_cpus: float = Field(default=1.0, ge=0)
    """CPUs per replica (also the torch threads of its engine, at least 1)."""
    num_gpus: float = Field(default=0.0, ge=0)
    """GPUs per replica (the engine runs on CUDA when > 0)."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom resources per replica (e.g. ``{"prefill": 0.01}`` to pin to prefill nodes)."""
    max_ongoing_requests: int = Field(default=16, ge=1)
    """Requests a replica accepts at once."""
    max_replicas_per_node: int | None = Field(default=None, ge=1)
    """At most this many replicas on one node (1 spreads them)."""


class AppArgs(BaseModel):
    """Arguments of :func:`build` (the ``args:`` of a Serve config)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    """None: the built-in SmolLM2-135M-Instruct; else a ``.gguf`` file or a local HF directory."""
    served_model_name: str | None = None
    """Name clients use in ``model`` (default: the model's own name)."""
    mode: Literal["combined", "pd"] = "combined"
    """``combined`` (one deployment) or ``pd`` (prefill and decode deployments)."""
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    """Engine dtype (KV travels losslessly as the matching track)."""
    device: str | None = None
    """``cpu`` / ``cuda`` (None: CUDA when the replica has a GPU)."""
    max_batch: int = Field(default=8, ge=1)
    """Sequences decoded together per replica."""
    server: ReplicaArgs = Field(default_factory=ReplicaArgs)
    """The combined-mode ``LLMServer``."""
    prefill: ReplicaArgs = Field(default_factory=ReplicaArgs)
    """The PD-mode ``PrefillServer``."""
    decode: ReplicaArgs = Field(default_factory=ReplicaArgs)
    """The PD-mode ``DecodeServer``."""
    ingress: ReplicaArgs = Field(
        default_factory=lambda: ReplicaArgs(num_cpus=0.5, max_ongoing_requests=256)
    )
    """The HTTP ingress."""
    relay: bool = True
    """Share KV through the per-node relays (False: each replica keeps its own KV, combined only)."""
    relay_budget_mb: int = Field(default=1024, ge=16)
    """Each node relay's cache budget."""
    relay_datagram_size: int = Field(default=1452, ge=1200, le=65527)
    """QUIC datagram size between node relays. 1452 fits any Ethernet path; use 9000 on
    jumbo-frame cluster links (about 10x the MoQT pull rate of 1452, `kvmoq bench relay`)."""
    kv_codec: str = "auto"
    """KV track compression (``auto``: the lossless track matching ``dtype``)."""
    kv_timeout_s: float = Field(default=10.0, gt=0)
    """A KV fetch slower than this falls back to recomputing."""
    api_keys: dict[str, str] = Field(default_factory=dict)
    """API key → tenant name (empty: no authentication, one ``public`` tenant)."""
    tenant_secret: str | None = None
    """Secret that tenant salts derive from (default: ``$KVMOQ_TENANT_SECRET``, else a random
    one per deployment, so KV names can never be predicted from token ids across deployments;
    set it to keep prefix reuse across redeploys)."""
    default_max_tokens: int = Field(default=256, ge=1)
    """Chat completions without a token limit."""
    routing_stats_period_s: float = Field(default=1.0, gt=0)
    """How often the router polls replicas' KV holdings and queues."""
    costs_path: str | None = None
    """Cost figures file (default ``~/.cache/ray_kvmoq/costs.json``)."""

    def codec(self) -> str:
        """The KV track name to publish (resolving ``auto``)."""
        if self.kv_codec != "auto":
            return self.kv_codec
        return {"bfloat16": "BF16", "float16": "FP16", "float32": "FP16"}[self.dtype]


def _router_config(args: AppArgs, deployment: str, decode: bool) -> dict[str, Any]:
    return {
        "request_router_class": "ray_kvmoq.serving.router:KVPlacementRouter",
        "request_router_kwargs": {
            "deployment": deployment,
            "decode": decode,
            "costs_path": args.costs_path,
        },
        "request_routing_stats_period_s": args.routing_stats_period_s,
        "request_routing_stats_timeout_s": 5.0,
    }


def _options(r: ReplicaArgs) -> dict[str, Any]:
    opts: dict[str, Any] = {
        "num_replicas": r.num_replicas,
        "max_ongoing_requests": r.max_ongoing_requests,
        "ray_actor_options": {
            "num_cpus": r.num_cpus,
            "num_gpus": r.num_gpus,
            "resources": dict(r.resources),
        },
    }
    if r.max_replicas_per_node is not None:
        opts["max_replicas_per_node"] = r.max_replicas_per_node
    return opts


def with_tenant_secret(conf: dict[str, Any]) -> dict[str, Any]:
    """``conf`` with a tenant secret: its own, ``$KVMOQ_TENANT_SECRET``, else a fresh random one
    (made once per build, so every replica of the deployment derives the same salts)."""
    secret = conf.get("tenant_secret") or os.environ.get("KVMOQ_TENANT_SECRET")
    return {**conf, "tenant_secret": secret or secrets.token_hex(32)}


def build(args: AppArgs) -> Application:
    """The serving application for ``args`` (see the module docstring)."""
    if not isinstance(args, AppArgs):  # called directly with a dict
        args = AppArgs.model_validate(args)
    from . import deployments as d

    # Serve's decorator returns Deployment objects; mypy sees the classes.
    Ingress: Any = d.Ingress
    LLMServer: Any = d.LLMServer
    PrefillServer: Any = d.PrefillServer
    DecodeServer: Any = d.DecodeServer
    conf = with_tenant_secret(args.model_dump())
    ingress = Ingress.options(**_options(args.ingress))
    if args.mode == "combined":
        server = LLMServer.options(
            **_options(args.server), request_router_config=_router_config(args, "server", False)
        ).bind(conf)
        return ingress.bind(conf, server, None)
    prefill = PrefillServer.options(
        **_options(args.prefill), request_router_config=_router_config(args, "prefill", False)
    ).bind(conf)
    decode = DecodeServer.options(
        **_options(args.decode), request_router_config=_router_config(args, "decode", True)
    ).bind(conf)
    return ingress.bind(conf, prefill, decode)


def build_pd(args: AppArgs) -> Application:
    """:func:`build` with ``mode="pd"``."""
    return build(args.model_copy(update={"mode": "pd"}))
