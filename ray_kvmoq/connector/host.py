"""A vLLM engine with the MoQT KV connector, hosted in a Ray actor pinned to one node.

The tests and ``kvmoq bench connector`` need engines on chosen Ray nodes (two nodes on one
machine included). :class:`EngineHost` is a plain class around ``vllm.LLM`` that prepares what
the connector needs in vLLM's child processes before the engine starts — ``RAY_ADDRESS`` (they
join the cluster themselves) and ``KVMOQ_NODE_IP`` (so they attach to *this* node's raylet and
read its object store) — and answers in plain dicts. :func:`start_engine` runs it as a Ray actor
on a given node and waits until the engine is up. Serving uses Ray Serve LLM instead
(``ray_kvmoq.serving``); this is the same engine without the HTTP layer.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from .extension import WORKER_EXTENSION

__all__ = ["EngineHost", "GenerateResult", "start_engine"]


@dataclass(frozen=True, kw_only=True)
class GenerateResult:
    """One prompt's outcome."""

    token_ids: list[int]
    """Generated token ids."""
    text: str
    """Generated text."""
    prompt_tokens: int
    """Prompt length in tokens."""
    num_cached_tokens: int
    """Prompt tokens vLLM did not compute (its own prefix cache plus the connector's loads)."""
    kv_transfer_params: dict[str, Any] | None
    """What the connector returned when the request finished (producers)."""
    prompt_top1: list[int | None] | None
    """With ``prompt_logprobs``: entry ``i`` is the engine's top-1 prediction for prompt token
    ``i`` (None where vLLM did not compute position ``i-1``, e.g. loaded KV, and for ``i=0``)."""


class EngineHost:
    """``vllm.LLM`` with ``kv_transfer_config`` (see the module docstring)."""

    def __init__(
        self,
        model: str,
        kv_transfer_config: dict[str, Any] | None,
        *,
        ray_address: str | None = None,
        node_ip: str | None = None,
        kv_cache_gib: float = 1.0,
        env: dict[str, str] | None = None,
        **engine_kwargs: Any,
    ) -> None:
        os.environ.update(env or {})  # e.g. KVMOQ_CLUSTER_SECRET for vLLM's processes
        if ray_address:
            os.environ["RAY_ADDRESS"] = ray_address
        if node_ip:
            os.environ["KVMOQ_NODE_IP"] = node_ip
        from vllm import LLM

        kwargs: dict[str, Any] = {
            "dtype": "bfloat16",
            "max_model_len": 4096,
            "enforce_eager": True,
            "enable_prefix_caching": False,
            "disable_log_stats": False,
            "kv_cache_memory_bytes": int(kv_cache_gib * (1 << 30)),
            "worker_extension_cls": WORKER_EXTENSION,
        }
        kwargs.update(engine_kwargs)
        self.llm = LLM(model=model, kv_transfer_config=kv_transfer_config, **kwargs)

    def ready(self) -> bool:
        """True once constructed (the actor's constructor loaded the engine)."""
        return True

    def kv_model(self) -> str:
        """The model field of this engine's KV namespaces (what the connector computes)."""
        from .config import ConnectorConfig
        from .connector import kv_model_name

        vc = self.llm.llm_engine.vllm_config
        extra = vc.kv_transfer_config.kv_connector_extra_config if vc.kv_transfer_config else {}
        return kv_model_name(vc, ConnectorConfig.from_extra(extra))

    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` (the engine's tokenizer, no special tokens added)."""
        return list(self.llm.get_tokenizer().encode(text, add_special_tokens=False))

    def generate(
        self,
        prompts: list[str] | list[list[int]],
        *,
        max_tokens: int = 16,
        kv_params: dict[str, Any] | None = None,
        prompt_logprobs: bool = False,
        cache_salt: str | None = None,
    ) -> list[GenerateResult]:
        """Greedy generation; ``kv_params`` becomes each request's ``kv_transfer_params``."""
        from vllm import SamplingParams

        extra = {"kv_transfer_params": kv_params} if kv_params is not None else None
        sp = SamplingParams(
            max_tokens=max_tokens,
            temperature=0.0,
            # top-1 alternatives of the prompt positions vLLM computes; loaded KV still counts
            # (vLLM would otherwise skip every cache for a prompt_logprobs request)
            prompt_logprobs=1 if prompt_logprobs else None,
            skip_reading_prefix_cache=False,
            # vLLM's detokenizer trips over the placeholder ids it leaves at prompt positions
            # it did not compute (OverflowError in convert_ids_list_to_tokens)
            detokenize=not prompt_logprobs,
            extra_args=extra,
        )
        inputs: list[Any] = [{"prompt_token_ids": p} if isinstance(p, list) else p for p in prompts]
        if cache_salt is not None:
            inputs = [
                {**(i if isinstance(i, dict) else {"prompt": i}), "cache_salt": cache_salt}
                for i in inputs
            ]
        outs = self.llm.generate(inputs, sp, use_tqdm=False)
        return [_result(o) for o in outs]

    def flush(self, timeout_s: float = 60.0) -> None:
        """Return once every group published so far is on the node relay and in the directory
        (publishing is asynchronous: a lookup right after a request may not see its groups)."""
        self.llm.collective_rpc("kvmoq_flush", args=(timeout_s,))

    def metrics(self) -> dict[str, float]:
        """The connector's ``vllm:kvmoq_*`` counters and vLLM's external prefix-cache counters
        (cumulative since the engine started)."""
        out: dict[str, float] = {}
        for m in self.llm.get_metrics():
            name = m.name
            if "kvmoq" in name or "external_prefix_cache" in name:
                out[name.removeprefix("vllm:")] = float(getattr(m, "value", 0) or 0)
        return out

    def shutdown(self) -> None:
        """Stop the engine's processes."""
        engine = getattr(self.llm, "llm_engine", None)
        closer = getattr(engine, "shutdown", None)
        if callable(closer):
            closer()


def _result(o: Any) -> GenerateResult:
    top1: list[int | None] | None = None
    cached = int(o.num_cached_tokens or 0)
    if o.prompt_logprobs is not None:
        # Entry i predicts prompt token i from position i-1; vLLM fills the positions it did not
        # compute (loaded KV) with placeholders, so only i > num_cached_tokens is real.
        top1 = [
            max(lp.items(), key=lambda kv: kv[1].logprob)[0] if lp and i > cached else None
            for i, lp in enumerate(o.prompt_logprobs)
        ]
    return GenerateResult(
        token_ids=list(o.outputs[0].token_ids),
        text=o.outputs[0].text,
        prompt_tokens=len(o.prompt_token_ids or []),
        num_cached_tokens=cached,
        kv_transfer_params=o.kv_transfer_params,
        prompt_top1=top1,
    )


def start_engine(
    node_id: str,
    model: str,
    kv_transfer_config: dict[str, Any] | None,
    *,
    timeout_s: float = 600.0,
    **kwargs: Any,
) -> Any:
    """An :class:`EngineHost` actor on Ray node ``node_id``, started and ready."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    ip = next(n["NodeManagerAddress"] for n in ray.nodes() if n["NodeID"] == node_id)
    actor_cls: Any = ray.remote(num_cpus=0, max_restarts=0)(EngineHost)
    handle = actor_cls.options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False)
    ).remote(
        model,
        kv_transfer_config,
        ray_address=ray.get_runtime_context().gcs_address,
        node_ip=ip,
        **kwargs,
    )
    ray.get(handle.ready.remote(), timeout=timeout_s)
    return handle
