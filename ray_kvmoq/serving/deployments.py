"""The Ray Serve deployments: thin shells over :class:`~.worker.ReplicaCore` and
:class:`~.ingress.IngressCore` (STYLE rule 9).

- ``LLMServer`` (combined mode): prefill + decode in one replica.
- ``PrefillServer`` / ``DecodeServer`` (PD mode): prefill yields a :class:`~.jobs.StartedEvent`
  naming its node before it computes anything, so the ingress can start decode at once; decode
  subscribes to the prompt's live KV track through its own node's relay.
- ``Ingress``: the OpenAI HTTP API (FastAPI through ``@serve.ingress``).

Every engine replica reports ``record_routing_stats()`` (node, queue, held chunk hashes) for
:class:`~.router.KVPlacementRouter`. Node relays are found or started by the replicas themselves
(``relayplane.ensure_node_relay``), so a plain ``serve run`` needs no extra driver step.
"""

# No "from __future__ import annotations": FastAPI must see real annotations on the ingress
# methods that Serve re-wraps (string annotations are resolved in the wrong namespace).

import asyncio
import os
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import ray
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from ray import serve

from ray_kvmoq.engine.aio import AsyncEngine
from ray_kvmoq.engine.engine import load_engine
from ray_kvmoq.engine.loader import BUILTIN_MODEL, cached_builtin_dir, load_model
from ray_kvmoq.engine.tokenizer import Tokenizer

from .ingress import (
    Backend,
    IngressCore,
    IngressSettings,
    handle_generate,
    handle_health,
    handle_metrics,
    handle_models,
    install_error_handlers,
)
from .jobs import DoneEvent, Event, Job, KVStats, StartedEvent
from .kvplane import KVPlane, LocalKVPlane
from .metrics import process_metrics
from .openai_api import TenantTable
from .router import MAX_HELD_REPORTED, RoutingHint
from .worker import ReplicaCore


def _node_id() -> str:
    return str(ray.get_runtime_context().get_node_id())


def _make_plane(conf: dict[str, Any]) -> KVPlane:
    if conf.get("relay", True):
        from .relayplane import RelayKVPlane

        return RelayKVPlane.for_this_node(
            codec=_codec(conf),
            budget_bytes=int(conf.get("relay_budget_mb", 1024)) << 20,
            datagram_size=int(conf.get("relay_datagram_size", 1452)),
        )
    return LocalKVPlane(budget_bytes=int(conf.get("relay_budget_mb", 1024)) << 20)


def _codec(conf: dict[str, Any]) -> str:
    codec = str(conf.get("kv_codec", "auto"))
    if codec != "auto":
        return codec
    return {"bfloat16": "BF16", "float16": "FP16"}.get(str(conf.get("dtype")), "FP16")


def _make_core(conf: dict[str, Any], role: str) -> ReplicaCore:
    ctx = ray.get_runtime_context()
    res = ctx.get_assigned_resources()
    threads = max(1, int(res.get("CPU", 1) or 1))
    device = conf.get("device") or ("cuda" if res.get("GPU") else "cpu")
    engine = load_engine(conf.get("model"), dtype=conf["dtype"], device=device, num_threads=threads)
    return ReplicaCore(
        AsyncEngine(engine, max_batch=int(conf.get("max_batch", 8))),
        _make_plane(conf),
        node_id=_node_id(),
        kv_timeout_s=float(conf.get("kv_timeout_s", 10.0)),
    )


class _EngineReplica:
    """Shared by the three engine deployments."""

    core: ReplicaCore

    def record_routing_stats(self) -> dict[str, Any]:
        """Polled by the router: node, queue length, chunk hashes held on this node."""
        return self.core.routing_stats(MAX_HELD_REPORTED)

    def info(self) -> dict[str, Any]:
        """Model facts the ingress needs."""
        e = self.core.engine
        return {
            "model_name": e.model_name,
            "max_context": e.config.max_context,
            "chunk_size": e.config.chunk_size,
            "node_id": self.core.node_id,
        }

    async def kv_snapshot(self) -> dict[str, Any]:
        """What this replica's node holds (``kvmoq inspect``)."""
        return await self.core.kv.snapshot()


@serve.deployment(name="LLMServer", health_check_period_s=10)
class LLMServer(_EngineReplica):
    """Combined mode: prefill with KV reuse, then decode, in one replica."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.core = _make_core(conf, "server")

    async def generate(
        self, job: Job, routing: dict[str, Any] | None = None
    ) -> AsyncIterator[Event]:
        """Stream the job's events."""
        async for ev in self.core.generate(job):
            yield ev


@serve.deployment(name="PrefillServer", health_check_period_s=10)
class PrefillServer(_EngineReplica):
    """PD mode: prefill, publishing each KV group to this node's relay as it is computed."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.core = _make_core(conf, "prefill")

    async def prefill(
        self, job: Job, routing: dict[str, Any] | None = None
    ) -> AsyncIterator[Event]:
        """``StartedEvent`` once KV starts flowing, then a ``DoneEvent`` with the reuse stats."""
        async for ev in self.core.prefill_stream(job):
            yield ev


@serve.deployment(name="DecodeServer", health_check_period_s=10)
class DecodeServer(_EngineReplica):
    """PD mode: pull the prompt's KV through this node's relay, then decode and stream."""

    def __init__(self, conf: dict[str, Any]) -> None:
        self.core = _make_core(conf, "decode")

    async def decode(
        self,
        job: Job,
        kv_node: str,
        reused_groups: int = 0,
        routing: dict[str, Any] | None = None,
    ) -> AsyncIterator[Event]:
        """Stream the job's tokens (recomputing whatever KV could not be had)."""
        async for ev in self.core.pull_and_decode(job, kv_node, reused_groups):
            yield ev


# ---- ingress ---------------------------------------------------------------------------------


def load_tokenizer(model: str | None) -> Tokenizer:
    """The tokenizer of ``model`` without loading weights when possible."""
    if model is None or model.lower() in ("smollm2", BUILTIN_MODEL.lower()):
        return Tokenizer.from_dir(cached_builtin_dir())
    p = Path(model).expanduser()
    if p.is_dir():
        return Tokenizer.from_dir(p)
    return load_model(p).tokenizer


class CombinedBackend(Backend):
    """Events from ``LLMServer.generate``."""

    def __init__(self, handle: Any) -> None:
        self._h = handle.options(method_name="generate", stream=True)

    async def stream(self, job: Job, hint: RoutingHint) -> AsyncIterator[Event]:
        """Route by ``hint`` and relay the replica's events."""
        async for ev in self._h.remote(job, routing=hint.to_dict()):
            yield ev


class PDBackend(Backend):
    """Prefill and decode on (possibly) different replicas and nodes."""

    def __init__(self, prefill: Any, decode: Any) -> None:
        self._p = prefill.options(method_name="prefill", stream=True)
        self._d = decode.options(method_name="decode", stream=True)

    async def stream(self, job: Job, hint: RoutingHint) -> AsyncIterator[Event]:
        """Start prefill, start decode on the prefill node's KV as soon as prefill has a node.

        If no prefill replica can start the job, decode computes the whole prompt itself.
        """
        pgen = self._p.remote(job, routing=hint.to_dict())
        reused = 0
        try:
            first = await pgen.__anext__()
            kv_node = first.node_id if isinstance(first, StartedEvent) else ""
            reused = first.reused_groups if isinstance(first, StartedEvent) else 0
        except Exception:
            kv_node = ""
        dhint = RoutingHint(
            prompt_tokens=len(job.tokens), kv_node=kv_node or None, policy=hint.policy
        )
        ptask = asyncio.create_task(_prefill_rest(pgen) if kv_node else _no_prefill())
        try:
            async for ev in self._d.remote(job, kv_node, reused, routing=dhint.to_dict()):
                if isinstance(ev, DoneEvent):
                    pre = await ptask
                    # Reuse counts come from prefill; transfers and fallbacks from both.
                    stats = KVStats(
                        reused_local=pre.stats.reused_local,
                        reused_remote=pre.stats.reused_remote,
                        prefill_node=pre.stats.prefill_node,
                    ).merged(
                        KVStats(
                            bytes_zero_copy=pre.stats.bytes_zero_copy + ev.stats.bytes_zero_copy,
                            bytes_moqt=pre.stats.bytes_moqt + ev.stats.bytes_moqt,
                            fallbacks=pre.stats.fallbacks + ev.stats.fallbacks,
                            decode_node=ev.stats.decode_node,
                        )
                    )
                    ev = DoneEvent(finish_reason=ev.finish_reason, stats=stats, error=ev.error)
                yield ev
        finally:
            if not ptask.done():
                ptask.cancel()


async def _prefill_rest(pgen: Any) -> DoneEvent:
    """The rest of a prefill stream: its final event (an error event if it broke off)."""
    done = DoneEvent(finish_reason="error", error="prefill ended early")
    try:
        async for ev in pgen:
            if isinstance(ev, DoneEvent):
                done = ev
    except Exception as exc:  # decode falls back on its own; keep the reason
        done = DoneEvent(finish_reason="error", error=str(exc))
    return done


async def _no_prefill() -> DoneEvent:
    return DoneEvent(finish_reason="error", error="no prefill replica")


_app = FastAPI(title="ray_kvmoq", docs_url=None, redoc_url=None)
install_error_handlers(_app)


@serve.deployment(name="Ingress", max_ongoing_requests=512)
@serve.ingress(_app)
class Ingress:
    """OpenAI-compatible HTTP API in front of the engine deployments."""

    def __init__(self, conf: dict[str, Any], server: Any, decode: Any) -> None:
        self._conf = conf
        self._info_handle = server
        backend: Backend = CombinedBackend(server) if decode is None else PDBackend(server, decode)
        secret = conf.get("tenant_secret") or os.environ.get("KVMOQ_TENANT_SECRET")
        if not secret:  # build() always sets one; every ingress replica must derive the same salts
            raise ValueError("no tenant_secret: deploy with ray_kvmoq.serving.app:build")
        self._core = IngressCore(
            tokenizer=load_tokenizer(conf.get("model")),
            backend=backend,
            settings=IngressSettings(model_name="", served_names=(), max_context=0),
            tenants=TenantTable(conf.get("api_keys") or {}, secret=secret),
            metrics=process_metrics(),
        )
        self._ready = False

    async def _core_ready(self) -> IngressCore:
        if not self._ready:
            info = await self._info_handle.options(method_name="info").remote()
            name = self._conf.get("served_model_name") or info["model_name"]
            names = tuple(dict.fromkeys([name, info["model_name"]]))
            self._core.s = IngressSettings(
                model_name=info["model_name"],
                served_names=names,
                max_context=int(info["max_context"]),
                chunk_size=int(info["chunk_size"]),
                default_max_tokens=int(self._conf.get("default_max_tokens", 256)),
            )
            self._ready = True
        return self._core

    @_app.post("/v1/completions")
    async def completions(self, request: Request) -> Response:
        """OpenAI text completions."""
        return await handle_generate(await self._core_ready(), request, "completions")

    @_app.post("/v1/chat/completions")
    async def chat(self, request: Request) -> Response:
        """OpenAI chat completions."""
        return await handle_generate(await self._core_ready(), request, "chat")

    @_app.get("/v1/models")
    async def models(self, request: Request) -> Response:
        """The served model."""
        return await handle_models(await self._core_ready(), request)

    @_app.get("/health")
    async def health(self) -> Response:
        """200 once the engine replicas answer, 503 before."""
        try:
            core = await asyncio.wait_for(self._core_ready(), 30)
        except Exception as exc:
            return JSONResponse({"status": "unavailable", "reason": str(exc)}, status_code=503)
        return await handle_health(core)

    @_app.get("/metrics")
    async def metrics(self) -> Response:
        """Prometheus metrics."""
        return handle_metrics(self._core)
