"""Typed app arguments and the Serve app builder: Ray Serve LLM with the MoQT KV layer.

``serve run apps/local.yaml`` (or ``serve run ray_kvmoq.serving.app:build``) calls :func:`build`
with the config's ``args`` validated into :class:`AppArgs`. The app is Ray Serve LLM's: vLLM
replicas (``LLMServer``) behind its OpenAI ingress. The KV layer adds, per replica, the
:class:`~ray_kvmoq.connector.MoqtKVConnector` in ``engine_kwargs.kv_transfer_config`` (prefix KV
from and to the node relays), :class:`~.router.KVRouter` as the deployment's request router,
and our server/ingress subclasses (:mod:`.server`, :mod:`.ingress`); and, once per build, the node
relays and the KV directory (detached: they outlive replicas), the figures board, and Ray
Serve LLM's connector backend (:mod:`.backend`: PD hand-off, engine-process setup).

Modes:

* ``combined`` — one deployment of ``KVLLMServer`` replicas; prefixes computed anywhere are
  reused everywhere (zero-copy on the node, pulled over MoQT from other nodes when that beats
  recomputing them);
* ``pd`` — ``Prefill:`` and ``Decode:`` deployments (Ray Serve LLM's PD orchestration): decode
  sends the prompt to prefill and at once starts following the prompt's KV track, which
  prefill publishes group by group.
"""

# No "from __future__ import annotations": Ray reads the builder's parameter annotation at run time
# to validate `args` into AppArgs (a string annotation would be skipped).

import json
import logging
import os
import secrets
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from ray.serve import Application

from .prefill_wait import DEFAULT_PREFILL_TIMEOUT_S

log = logging.getLogger(__name__)

RAY_NAMESPACE = "kvmoq"
"""Ray namespace of the relays, the directory and the figures board."""


class ReplicaArgs(BaseModel):
    """Placement and scale of one deployment."""

    model_config = ConfigDict(extra="forbid")

    num_replicas: int = Field(default=1, ge=1)
    """Replicas of the deployment."""
    num_cpus: float = Field(default=1.0, ge=0)
    """CPUs of each replica's engine (its placement-group bundle)."""
    num_gpus: float = Field(default=0.0, ge=0)
    """GPUs of each replica's engine (the engine runs on CUDA when > 0)."""
    resources: dict[str, float] = Field(default_factory=dict)
    """Custom resources of each replica's engine bundle: ``{"prefill": 0.01}`` pins replicas
    to nodes that have that resource; a resource every node has exactly one unit of spreads
    them one per node (Serve's ``max_replicas_per_node`` does not apply to placement groups).
    For the ingress: the replica's own resources (e.g. keep it on the head node)."""
    max_ongoing_requests: int = Field(default=64, ge=1)
    """Requests a replica accepts at once (Serve queues the rest in the caller, bounded by
    ``max_queued_requests``)."""
    max_queued_requests: int = Field(default=256, ge=-1)
    """Requests waiting for a replica before new ones are refused with 503 (-1: unbounded)."""


class AppArgs(BaseModel):
    """Arguments of :func:`build` (the ``args:`` of a Serve config)."""

    model_config = ConfigDict(extra="forbid")

    model: str | None = None
    """None: the built-in SmolLM2-135M-Instruct; else a local Hugging Face checkpoint directory
    (config.json, *.safetensors, tokenizer) present on every node."""
    served_model_name: str | None = None
    """Name clients use in ``model`` (default: the model directory's name)."""
    mode: Literal["combined", "pd"] = "combined"
    """``combined`` (one deployment) or ``pd`` (prefill and decode deployments)."""
    dtype: Literal["bfloat16", "float16", "float32"] = "bfloat16"
    """Engine dtype (the KV track is its lossless match unless ``kv_codec`` says otherwise)."""
    device: Literal["auto", "cpu", "gpu"] = "auto"
    """``auto``: GPU when the replicas ask for GPUs, else CPU (vLLM's CPU backend)."""
    max_model_len: int = Field(default=4096, ge=128)
    """Longest prompt + output, in tokens."""
    kv_cache_gib: float = Field(default=1.0, gt=0)
    """CPU only: KV cache size of each engine."""
    prefix_caching: bool = True
    """vLLM's own prefix cache inside each engine (the connector adds the cluster's)."""
    kv_reuse: bool = True
    """False: no KV reuse at all (no prefix cache, the connector neither loads nor publishes)."""
    engine_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Extra vLLM engine arguments (override ours)."""
    server: ReplicaArgs = Field(default_factory=ReplicaArgs)
    """The combined-mode deployment."""
    prefill: ReplicaArgs = Field(default_factory=ReplicaArgs)
    """The PD-mode prefill deployment."""
    decode: ReplicaArgs = Field(default_factory=ReplicaArgs)
    """The PD-mode decode deployment."""
    ingress: ReplicaArgs = Field(default_factory=lambda: ReplicaArgs(num_cpus=0.25))
    """The HTTP ingress (``num_cpus`` is the ingress replica's own)."""
    relay_budget_mb: int = Field(default=1024, ge=16)
    """Each node relay's cache budget."""
    relay_datagram_size: int = Field(default=1452, ge=1200, le=65527)
    """QUIC datagram size between node relays: 1452 fits any Ethernet path; 9000 on jumbo-frame
    links."""
    kv_codec: str = "auto"
    """KV track compression (``auto``: the lossless track of ``dtype``)."""
    kv_publish_threshold: int = Field(default=2, ge=1, le=1000)
    """An engine publishes a prompt chunk the n-th time it sees it (2: on the second sight, so
    a prompt seen once costs no publishing; 1: every chunk as soon as it is computed, worth it
    where the shared prefixes outgrow the engines' KV memory, as a prefix evicted before its
    second sight is otherwise in no relay). PD prefill replicas publish every chunk, as decode
    loads it."""
    kv_publish_when_evicting: bool = True
    """An engine publishes on first sight while its prefix cache evicts chunks before they come
    back (at least one evicted repeat per five first-sight chunks over the last minutes), and
    at ``kv_publish_threshold`` otherwise: so first-sight publishing is on where prefixes
    outgrow the engines' KV memory and off where prompts are one-off. False: the threshold
    always."""
    kv_timeout_s: float = Field(default=10.0, gt=0)
    """A KV load slower than this is recomputed."""
    pd_prefill_timeout_s: float = Field(default=DEFAULT_PREFILL_TIMEOUT_S, gt=0)
    """PD: how long decode waits for its remote prefill to finish (a prefill lost with its node
    may otherwise wait for a replacement replica forever). Then, or as soon as the prefill
    fails, decode stops following its track too, and recomputes what had not arrived."""
    api_keys: dict[str, str] = Field(default_factory=dict)
    """API key → tenant name (empty: no authentication, one ``public`` tenant)."""
    tenant_secret: str | None = None
    """Secret that tenant salts derive from (default ``$KVMOQ_TENANT_SECRET``, else a random
    one per build; set it to keep prefix reuse across redeploys)."""

    def model_dir(self) -> Path:
        """The checkpoint directory (converting the built-in model once if needed)."""
        if self.model is None or self.model.lower() in ("smollm2", "builtin"):
            from ray_kvmoq.engine.loader import cached_builtin_dir

            return Path(cached_builtin_dir())
        p = Path(self.model).expanduser()
        if not (p / "config.json").is_file():
            raise ValueError(
                f"model {self.model!r} is not a Hugging Face checkpoint directory (no "
                "config.json); give a local directory, or leave model unset for the built-in "
                "SmolLM2"
            )
        return p

    def name(self) -> str:
        """The served model name."""
        if self.served_model_name:
            return self.served_model_name
        if self.model is None:
            from ray_kvmoq.engine.loader import BUILTIN_MODEL

            return BUILTIN_MODEL
        return self.model_dir().name

    def codec(self) -> str:
        """The KV track name to publish (resolving ``auto``)."""
        if self.kv_codec != "auto":
            return self.kv_codec
        return "BF16" if self.dtype == "bfloat16" else "FP16"


def with_tenant_secret(args: AppArgs) -> AppArgs:
    """``args`` with a tenant secret: its own, ``$KVMOQ_TENANT_SECRET``, else a fresh random one
    (made once per build, so every ingress replica derives the same salts)."""
    secret = args.tenant_secret or os.environ.get("KVMOQ_TENANT_SECRET") or secrets.token_hex(32)
    return args.model_copy(update={"tenant_secret": secret})


def build(args: AppArgs) -> Application:
    """The serving application for ``args`` (see the module docstring)."""
    if not isinstance(args, AppArgs):  # called directly with a dict
        args = AppArgs.model_validate(args)
    from . import graph

    args = with_tenant_secret(args)
    graph.prepare_cluster(args)
    return graph.build_app(args)


def build_pd(args: AppArgs) -> Application:
    """:func:`build` with ``mode="pd"``."""
    if not isinstance(args, AppArgs):
        args = AppArgs.model_validate(args)
    return build(args.model_copy(update={"mode": "pd"}))


def model_geometry(model_dir: Path) -> tuple[int, int, int]:
    """(layers, KV heads, head size) from a checkpoint's ``config.json``."""
    cfg = json.loads((model_dir / "config.json").read_text())
    heads = int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or int(cfg["hidden_size"]) // heads)
    return int(cfg["num_hidden_layers"]), int(cfg.get("num_key_value_heads", heads)), head_dim
