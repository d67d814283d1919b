"""Ray Serve LLM servers with the MoQT connector: thin subclasses of its ``LLMServer`` classes.

Ray Serve LLM runs the engine (vLLM, with :class:`~ray_kvmoq.connector.MoqtKVConnector` in its
``kv_transfer_config``) and the OpenAI pipeline; these classes add only what the KV layer needs
around it (:class:`KVServerMixin`):

* after the engine starts, a *prefill probe*: one 512-token prompt computed (no reuse) and
  timed, so the figures board knows this node's prefill speed before the first request (the
  connector keeps refreshing it from real traffic);
* ``kv_counters()`` / ``kv_flush()``: the connector worker's counters, and draining its
  publisher (tests, ``kvmoq inspect``), through vLLM's ``collective_rpc``;
* streamed outputs sent as soon as they are ready, at most one message per
  ``stream_batching_interval_ms`` as before (:class:`~.batching.LeadingEdgeBatcher`), instead
  of at the next tick of Ray Serve LLM's interval, which held every first token back by up to
  an interval (50 ms by default).

``KVLLMServer`` serves combined apps, ``KVPrefillServer`` / ``KVDecodeServer`` the PD roles
(Ray Serve LLM's PD orchestration, with our connector backend's concurrent hand-off). A decode
replica routes to prefill with :class:`~.router.KVRouter` in its own process, so it readies that
router while it starts (:func:`.router.warm_up`), as the ingress does for its own.

In that hand-off decode answers from whatever KV arrived in time and recomputes the rest, so the
remote prefill is only ever an optimisation. ``KVDecodeServer`` makes that hold when prefill
fails: Ray Serve LLM awaits the prefill response before it ends the decode response, and a
prefill whose replica (or node) died raises, or waits for a replacement replica without bound
when none can be placed. ``KVDecodeServer`` bounds that wait (``pd_prefill_timeout_s``) and
treats a failed prefill as a lost optimisation, not a failed request; ``pd_stats()`` counts
both cases. It also tells its connector at once (``kvmoq_abandon_handoff`` with the request's
hand-off id), so decode stops following a track that will never be finished and recomputes now,
instead of after ``kv_timeout_s``.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from typing import TYPE_CHECKING, Any, cast

from ray.llm._internal.serve.core.server.llm_server import LLMServer
from ray.llm._internal.serve.serving_patterns.prefill_decode.pd_server import (
    PDDecodeServer,
    PDPrefillServer,
)

from .backend import handoff_id
from .batching import LeadingEdgeBatcher
from .prefill_wait import (
    DEFAULT_PREFILL_TIMEOUT_S,
    PREFILL_TIMEOUT_KEY,
    PrefillStats,
    bounded_prefill,
)
from .router import warm_up

__all__ = ["KVDecodeServer", "KVLLMServer", "KVPrefillServer", "KVServerMixin"]

log = logging.getLogger(__name__)

_PROBE_TOKENS = 512


class KVServerMixin:
    """What every engine replica of the app adds to Ray Serve LLM's server."""

    engine: Any
    _llm_config: Any

    if TYPE_CHECKING:  # LLMServer's, which the servers below inherit

        def _get_batch_interval_ms(self, stream: bool = True) -> int: ...

    async def __init__(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[misc]  # Serve's async constructors
        await super().__init__(*args, **kwargs)  # type: ignore[misc]
        import ray

        self._kv_node_id = str(ray.get_runtime_context().get_node_id())
        try:
            await self._probe_prefill()
        except Exception as exc:  # the figures fill in from real traffic instead
            log.warning("prefill probe failed: %s", exc)

    async def _probe_prefill(self) -> None:
        """Time a 512-token prefill (no reuse, nothing published) and report s/token."""
        from vllm import SamplingParams

        from ray_kvmoq.connector.figures import figures_board

        client = self.engine._engine_client
        rng = random.Random(0)
        vocab = int(client.model_config.get_vocab_size())
        params = SamplingParams(
            max_tokens=1,
            extra_args={
                "kv_transfer_params": {"kvmoq": {"load": False, "publish": False, "probe": True}}
            },
        )
        took = []
        for _ in range(2):  # the first run also pays one-time warm-up
            ids = [rng.randrange(100, max(101, vocab - 100)) for _ in range(_PROBE_TOKENS)]
            t0 = time.perf_counter()
            async for _ in client.generate(
                {"prompt_token_ids": ids}, params, request_id=f"kvmoq-probe-{uuid.uuid4().hex}"
            ):
                pass
            took.append(time.perf_counter() - t0)
        s_per_token = min(took) / _PROBE_TOKENS
        figures_board().report.remote(
            "prefill_s_per_token", self._kv_node_id, s_per_token, provisional=True
        )
        log.info("prefill probe: %.2f ms per token on node %s", s_per_token * 1e3, self._kv_node_id)

    def _batch_output_stream(
        self, generator: AsyncGenerator[Any, None]
    ) -> AsyncGenerator[list[Any], None]:
        """Ray Serve LLM's streaming batches, sent on their leading edge (module docstring)."""
        batches = LeadingEdgeBatcher(generator, self._get_batch_interval_ms()).stream()
        return cast("AsyncGenerator[list[Any], None]", batches)  # lists, as Batcher's

    async def kv_counters(self) -> dict[str, int]:
        """The connector worker's counters since the engine started."""
        res = await self.engine.collective_rpc(method="kvmoq_counters", timeout=30.0)
        return dict(res[0]) if res else {}

    async def kv_flush(self) -> None:
        """Wait until every group this engine published is on its relay and in the directory."""
        await self.engine.collective_rpc(method="kvmoq_flush", timeout=60.0, args=(60.0,))


class KVLLMServer(KVServerMixin, LLMServer):
    """Combined prefill + decode replica."""


class KVPrefillServer(KVServerMixin, PDPrefillServer):
    """PD prefill replica: publishes each prompt's track as it computes it."""


class KVDecodeServer(KVServerMixin, PDDecodeServer):
    """PD decode replica: orchestrates prefill, follows the prompt's track, and never lets a
    failed or unplaceable prefill hold up or fail its answer (see the module docstring)."""

    _pd_stats: PrefillStats | None = None
    _handoff_tasks: set[asyncio.Task[Any]] | None = None

    async def __init__(self, *args: Any, **kwargs: Any) -> None:  # type: ignore[misc]  # Serve's async constructors
        await super().__init__(*args, **kwargs)
        # the KV router of this replica's handle to prefill runs in this process: ready its
        # tokenizer and directory copy now, not on the first request (same model and namespace
        # as this deployment's own router)
        router_config = (self._llm_config.deployment_config or {}).get("request_router_config")
        router_kwargs = (router_config or {}).get("request_router_kwargs") or {}
        if "model_dir" in router_kwargs:
            await asyncio.to_thread(warm_up, router_kwargs)

    def _concurrent_decode(  # the same call, with a bounded prefill stream
        self,
        method: str,
        decode_request: Any,
        prefill_resp: Any,
        raw_request_info: Any,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        configs = getattr(self._llm_config, "experimental_configs", None) or {}
        timeout_s = float(configs.get(PREFILL_TIMEOUT_KEY, DEFAULT_PREFILL_TIMEOUT_S))
        handoff = handoff_id(decode_request)
        bounded = bounded_prefill(
            prefill_resp,
            timeout_s,
            self._prefill_stats(),
            on_lost=(lambda: self._abandon_handoff(handoff)) if handoff else None,
        )
        gen: AsyncIterator[Any] = super()._concurrent_decode(
            method, decode_request, bounded, raw_request_info, **kwargs
        )
        return gen

    def _abandon_handoff(self, handoff: str) -> None:
        """Tell the engine's connector workers that ``handoff`` lost its prefill (in the
        background: the decode stream is not held up by it)."""
        task = asyncio.get_running_loop().create_task(
            self.engine.collective_rpc(
                method="kvmoq_abandon_handoff", timeout=30.0, args=(handoff,)
            )
        )
        if self._handoff_tasks is None:
            self._handoff_tasks = set()
        self._handoff_tasks.add(task)  # referenced until done
        task.add_done_callback(self._handoff_done)

    def _handoff_done(self, task: asyncio.Task[Any]) -> None:
        if self._handoff_tasks is not None:
            self._handoff_tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.warning(
                "could not end the connector's follow of a lost prefill (it ends after "
                "kv_timeout_s): %s",
                task.exception(),
            )

    def _prefill_stats(self) -> PrefillStats:
        if self._pd_stats is None:
            self._pd_stats = PrefillStats()
        return self._pd_stats

    async def pd_stats(self) -> dict[str, int]:
        """Remote prefills abandoned since the replica started: ``prefill_timeouts``,
        ``prefill_failures``."""
        return self._prefill_stats().as_dict()
