"""The Serve graph of an app (:func:`build_app`) and what the cluster needs first
(:func:`prepare_cluster`).

``prepare_cluster`` runs in the driver that builds the app (``serve run`` connects it to the
cluster): it makes sure the cluster has a secret (relays authenticate each other, KV digests
are keyed; ``kvmoq cluster-secret``), registers the connector's Ray Serve LLM backend, starts
one relay per alive node
plus the KV directory and the figures board (detached: they outlive replica restarts; a node
that joins later gets its relay from the first connector that runs there), and probes the
pull speed between two nodes' relays so the first routing decisions have a measured figure.

``build_app`` turns :class:`~.app.AppArgs` into Ray Serve LLM ``LLMConfig`` s and deployments:
our server classes, the KV router on every engine deployment, the connector in every engine,
and our ingress in front.
"""

from __future__ import annotations

import logging
import os
import secrets
import time
import uuid
from typing import Any

from ray.serve import Application

from ray_kvmoq.connector import kv_transfer_config
from ray_kvmoq.connector.extension import WORKER_EXTENSION
from ray_kvmoq.connector.identity import model_fingerprint, namespace_model_name
from ray_kvmoq.kvcache.layout import KVGeometry
from ray_kvmoq.kvcache.registry import get_codec

from .app import RAY_NAMESPACE, AppArgs, ReplicaArgs, model_geometry
from .engine_args import CPU_STEP_BUDGET, step_budget
from .prefill_wait import PREFILL_TIMEOUT_KEY

__all__ = ["build_app", "kv_model_name", "prepare_cluster", "probe_pulls"]

log = logging.getLogger(__name__)

_PROBE_BYTES = 8 << 20


def kv_model_name(args: AppArgs) -> str:
    """The KV namespace model field of the app's engines: served name + weights fingerprint."""
    fp = model_fingerprint(str(args.model_dir()), dtype=args.dtype, kv_cache_dtype="auto")
    return namespace_model_name(args.name(), fp)


def bytes_per_token(args: AppArgs) -> float:
    """Encoded KV bytes per token of the app's track."""
    n_l, n_h, d = model_geometry(args.model_dir())
    geo = KVGeometry(num_layers=n_l, num_kv_heads=n_h, head_dim=d)
    size = get_codec(args.codec()).object_size(geo)
    return float(size) if size else float(get_codec("FP16").object_size(geo) or 0) / 5.0


def prepare_cluster(args: AppArgs) -> None:
    """Backend registration, relays, directory, figures board, a pull probe (driver side)."""
    import ray

    from ray_kvmoq.connector.figures import figures_board
    from ray_kvmoq.relay.actor import read_cluster_secret, start_relays, write_cluster_secret

    from .backend import register_backend

    if not ray.is_initialized():
        ray.init(address="auto")
    if not os.environ.get("KVMOQ_CLUSTER_SECRET") and read_cluster_secret() is None:
        # secure by default: relays authenticate each other and KV digests are keyed
        write_cluster_secret(secrets.token_bytes(32))
        log.info("stored a new cluster secret in the cluster's GCS")
    register_backend()
    relays = start_relays(
        namespace=RAY_NAMESPACE,
        budget_bytes=args.relay_budget_mb << 20,
        network={"transport_options": {"max_datagram_size": args.relay_datagram_size}},
    )
    figures_board(RAY_NAMESPACE)
    if len(relays) >= 2:
        try:
            probe_pulls(relays)
        except Exception as exc:  # the connectors measure real pulls anyway
            log.warning("relay pull probe failed: %s", exc)


def probe_pulls(
    relays: dict[str, Any], nbytes: int = _PROBE_BYTES, namespace: str = RAY_NAMESPACE
) -> dict[str, float]:
    """Every relay pulls ``nbytes`` from the next one round the ring over MoQT (after a small
    pull that opens the session, so the handshake is not timed), and each pulling node's
    seconds per byte go to the figures board in ``namespace``; returns node id → s/byte.

    Every node then starts with a pull figure of its own, measured on a warm session, instead
    of the other nodes' median; the connectors refine them with real pulls."""
    import ray

    from ray_kvmoq.connector.figures import figures_board

    ids = list(relays)
    board = figures_board(namespace)
    timed = [bytes(64 << 10) for _ in range(max(1, nbytes >> 16))]
    out: dict[str, float] = {}
    for i, dst_id in enumerate(ids):
        src_id = ids[(i + 1) % len(ids)]
        ns = ("kvmoq-probe", uuid.uuid4().hex)
        src = relays[src_id]
        for g, objects in enumerate(([bytes(1024)], timed)):
            done = src.publish_group.remote(ns, "probe", g, objects, end_of_track=g == 1)
            ray.get(done, timeout=60)
        _timed_pull(relays[dst_id], ns, 0)  # opens the session
        out[dst_id] = _timed_pull(relays[dst_id], ns, 1) / sum(map(len, timed))
        ray.get(
            board.report.remote("pull_s_per_byte", dst_id, out[dst_id], provisional=True),
            timeout=30,
        )
        log.info("relay pull probe %s <- %s: %.0f MB/s", dst_id[:8], src_id[:8], 1e-6 / out[dst_id])
    return out


def _timed_pull(relay: Any, ns: tuple[str, str], group: int) -> float:
    """Seconds for ``relay`` to have group ``group`` of the probe track in its object store."""
    import ray

    t0 = time.perf_counter()
    ref = relay.get_group_ref.remote(ns, "probe", group, wait_s=5.0, timeout_s=60.0)
    ray.get(ray.get(ref, timeout=90), timeout=60)
    return time.perf_counter() - t0


def _gpu(args: AppArgs, r: ReplicaArgs) -> bool:
    return args.device == "gpu" or (args.device == "auto" and r.num_gpus > 0)


def _llm_config(args: AppArgs, r: ReplicaArgs, role: str, deployment: str) -> Any:
    from ray.serve.llm import LLMConfig

    gpu = _gpu(args, r)
    kv_model = kv_model_name(args)
    extra: dict[str, Any] = {
        "codec": args.codec(),
        "model_name": kv_model,
        "ray_namespace": RAY_NAMESPACE,
        "load_timeout_s": args.kv_timeout_s,
        "publish_threshold": args.kv_publish_threshold,
        "publish_when_evicting": args.kv_publish_when_evicting,
        "relay_budget_mb": args.relay_budget_mb,
        "relay_datagram_size": args.relay_datagram_size,
    }
    if not args.kv_reuse:
        extra.update(load=False, publish=False)
    engine: dict[str, Any] = {
        "dtype": args.dtype,
        "max_model_len": args.max_model_len,
        "enable_prefix_caching": args.prefix_caching and args.kv_reuse,
        "enable_prompt_tokens_details": True,
        # OpenAI ``tools`` with ``tool_choice="auto"`` (vLLM's default tool-call parser for
        # Hermes-style <tool_call> output; override in engine_kwargs for other model families)
        "enable_auto_tool_choice": True,
        "tool_call_parser": "hermes",
        "kv_transfer_config": kv_transfer_config(role, **extra),
        "worker_extension_cls": WORKER_EXTENSION,
    }
    if not gpu:
        engine["enforce_eager"] = True  # vLLM's compiled CPU mode: slower start, wrong text here
        engine["kv_cache_memory_bytes"] = int(args.kv_cache_gib * (1 << 30))
        # vLLM's 2,048-token CPU steps stall every stream for seconds (engine_args.py)
        budget = args.engine_kwargs.get("max_num_batched_tokens", CPU_STEP_BUDGET)
        engine.update(step_budget(budget))
    engine.update(args.engine_kwargs)
    bundle: dict[str, float] = {"CPU": r.num_cpus}
    if gpu:
        bundle["GPU"] = max(r.num_gpus, 1.0)
    bundle.update(r.resources)
    deployment_config: dict[str, Any] = {
        "num_replicas": r.num_replicas,
        "max_ongoing_requests": r.max_ongoing_requests,
        "max_queued_requests": r.max_queued_requests,
        "ray_actor_options": {"num_cpus": 0},  # the engine's bundle holds the CPUs
        "request_router_config": {
            "request_router_class": "ray_kvmoq.serving.router:KVRouter",
            "request_router_kwargs": {
                "kv_model": kv_model,
                "model_dir": str(args.model_dir()),
                "chunk_size": 128,
                "bytes_per_token": bytes_per_token(args),
                "codec": args.codec(),
                "deployment": deployment,
                "ray_namespace": RAY_NAMESPACE,
                "engine_prefix_cache": engine["enable_prefix_caching"],
                "kv_reuse": args.kv_reuse,
            },
        },
    }
    env = {"HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    if not gpu:
        env.update(cpu_reserved_cores_env())
    experimental: dict[str, Any] = {}
    if role == "kv_consumer":
        experimental[PREFILL_TIMEOUT_KEY] = args.pd_prefill_timeout_s
    return LLMConfig(
        model_loading_config={"model_id": args.name(), "model_source": str(args.model_dir())},
        engine_kwargs=engine,
        experimental_configs=experimental,
        placement_group_config={"bundles": [bundle]},
        deployment_config=deployment_config,
        runtime_env={"env_vars": env},
    )


RESERVED_CPU_ENV = "VLLM_CPU_NUM_OF_RESERVED_CPU"


def cpu_reserved_cores_env() -> dict[str, str]:
    """What vLLM's CPU backend reserves for an engine with our connector: one core, as without
    a connector, unless ``$VLLM_CPU_NUM_OF_RESERVED_CPU`` says otherwise.

    With any ``kv_transfer_config`` vLLM reserves a second core (for NIXL's transfer threads,
    which our connector does not have). On a 2-core node that reserves every core, so vLLM
    reserves none and binds its OpenMP threads to all of them; two engines' spinning threads
    then share two cores with their schedulers (measured: TPOT 3.8x stock's at 2 replicas)."""
    return {RESERVED_CPU_ENV: os.environ.get(RESERVED_CPU_ENV, "1")}


def build_app(args: AppArgs) -> Application:
    """The Serve application graph for ``args``."""
    from ray import serve
    from ray.llm._internal.serve.core.configs.openai_api_models import to_model_metadata
    from ray.llm._internal.serve.core.ingress.ingress import make_fastapi_ingress
    from ray.llm._internal.serve.core.server.builder import build_llm_deployment

    from .ingress import ENDPOINTS, KVIngress
    from .server import KVDecodeServer, KVLLMServer, KVPrefillServer

    if args.mode == "combined":
        cfg = _llm_config(args, args.server, "kv_both", "server")
        front = build_llm_deployment(cfg, deployment_cls=KVLLMServer)
    else:
        pcfg = _llm_config(args, args.prefill, "kv_producer", "prefill")
        dcfg = _llm_config(args, args.decode, "kv_consumer", "decode")
        prefill = build_llm_deployment(pcfg, name_prefix="Prefill:", deployment_cls=KVPrefillServer)
        front = build_llm_deployment(
            dcfg,
            name_prefix="Decode:",
            bind_kwargs={"prefill_server": prefill},
            deployment_cls=KVDecodeServer,
        )
        cfg = dcfg
    ingress_cls = make_fastapi_ingress(KVIngress, endpoint_map=ENDPOINTS)
    opts: dict[str, Any] = {
        "num_replicas": args.ingress.num_replicas,
        "max_ongoing_requests": args.ingress.max_ongoing_requests,
        "max_queued_requests": args.ingress.max_queued_requests,
        "ray_actor_options": {
            "num_cpus": args.ingress.num_cpus,
            "resources": args.ingress.resources,
        },
    }
    ingress: Any = serve.deployment(ingress_cls, name="OpenAiIngress", **opts)
    return ingress.bind(
        llm_deployments={cfg.model_id: front},
        model_cards={cfg.model_id: to_model_metadata(cfg.model_id, cfg)},
        api_keys=dict(args.api_keys),
        tenant_secret=args.tenant_secret,
        routing=cfg.deployment_config["request_router_config"]["request_router_kwargs"],
    )
