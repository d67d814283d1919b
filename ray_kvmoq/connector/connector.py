"""``MoqtKVConnector``: vLLM's KV connector API over the node relays (draft-shi-moq-kvcache tracks).

Load it with::

    kv_transfer_config = {
        "kv_connector": "MoqtKVConnector",
        "kv_connector_module_path": "ray_kvmoq.connector",
        "kv_role": "kv_both",                 # kv_producer (PD prefill) / kv_consumer (PD decode)
        "kv_load_failure_policy": "recompute",  # required: a failed load is recomputed
        "kv_connector_extra_config": {"codec": "auto"},   # see ray_kvmoq.connector.config
    }

vLLM builds one instance per role: the scheduler's (EngineCore process) and each worker's.
This class only checks the engine fits and routes each call to :class:`~.scheduler.SchedulerSide`
or :class:`~.worker.WorkerSide` (STYLE rule 8: scheduler-side and worker-side methods under
their banners). Roles: ``kv_both`` loads prefixes and publishes what it computes;
``kv_producer`` also publishes each prompt's partial last chunk and returns
``kv_transfer_params`` naming its groups; ``kv_consumer`` loads but publishes nothing.
A request can switch loading or publishing off (``kv_transfer_params={"kvmoq": {"load": false,
"publish": false}}``), pick another track compression (``{"kvmoq": {"codec": "Int8"}}``), or
load remote groups even where the measured pull is slower than recompute (``{"kvmoq": {"pull":
"always"}}``: benchmarks of the raw path), or mark itself a start-up probe (``{"kvmoq": {"probe":
true}}``: it times itself, and the scheduler's step clock skips the steps it runs in).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch
from vllm.distributed.kv_transfer.kv_connector.v1.base import (
    KVConnectorBase_V1,
    KVConnectorMetadata,
    KVConnectorRole,
    KVConnectorTransferResults,
)
from vllm.v1.metrics.cache_hit_source import CacheHitSource

from .bridge import RelayBridge
from .config import ConnectorConfig, ConnectorConfigError
from .identity import model_fingerprint, namespace_model_name
from .metadata import MoqtConnectorMetadata
from .paged import ChannelLayout, CpuLayout, PagedLayout
from .scheduler import SchedulerSide
from .stats import CounterReporter, MoqtConnectorStats, MoqtPromMetrics
from .worker import WorkerSide

if TYPE_CHECKING:
    from vllm.config import VllmConfig
    from vllm.forward_context import ForwardContext
    from vllm.v1.attention.backend import AttentionMetadata
    from vllm.v1.core.kv_cache_manager import KVCacheBlocks
    from vllm.v1.core.sched.output import SchedulerOutput
    from vllm.v1.kv_cache_interface import KVCacheConfig
    from vllm.v1.outputs import KVConnectorOutput
    from vllm.v1.request import Request

__all__ = ["MoqtKVConnector", "kv_model_name"]

_COUNTERS_PERIOD_S = 2.0
"""How often each side sends its cumulative counters to the figures board."""

log = logging.getLogger(__name__)


class MoqtKVConnector(KVConnectorBase_V1):
    """KV prefixes from, and KV chunks to, this node's MoQT relay (see the module docstring)."""

    _cache_hit_source = CacheHitSource.P2P

    def __init__(
        self,
        vllm_config: VllmConfig,
        role: KVConnectorRole,
        kv_cache_config: KVCacheConfig | None = None,
    ) -> None:
        super().__init__(
            vllm_config=vllm_config,
            role=role,
            kv_cache_config=kv_cache_config,  # type: ignore[arg-type]  # None in old callers
        )
        ktc = self._kv_transfer_config
        self.conf = ConnectorConfig.from_extra(ktc.kv_connector_extra_config)
        _check_engine(vllm_config)
        self.block_size = int(vllm_config.cache_config.block_size)
        self.bridge = RelayBridge(self.conf)
        self._engine_id = str(ktc.engine_id or id(self))
        self._sched: SchedulerSide | None = None
        self._worker: WorkerSide | None = None
        if role == KVConnectorRole.SCHEDULER:
            mc = vllm_config.model_config
            model = kv_model_name(vllm_config, self.conf)
            self._sched = SchedulerSide(
                self.conf,
                bridge=self.bridge,
                model=model,
                block_size=self.block_size,
                kv_dtype=str(mc.dtype),
                producer=ktc.kv_role == "kv_producer",
                consumer_only=ktc.kv_role == "kv_consumer",
                bytes_per_token=_bytes_per_token(vllm_config),
            )
            log.info("MoQT KV connector (scheduler): model %s, role %s", model, ktc.kv_role)
            counters, source = self._sched.counters, f"{self._engine_id}:scheduler"
        else:
            self._worker = WorkerSide(
                bridge=self.bridge,
                make_layout=_layout_factory(vllm_config, self.block_size),
                block_size=self.block_size,
                chunk_size=self.conf.chunk_size,
                load_timeout_s=self.conf.load_timeout_s,
            )
            counters, source = self._worker.counters, f"{self._engine_id}:worker"
        self._reporter = CounterReporter(
            counters,
            lambda totals: self.bridge.report_counters(source, totals),
            _COUNTERS_PERIOD_S,
        )
        """Sends this side's cumulative counters to the figures board (``CounterReporter``)."""
        if self._worker is not None:
            self._worker.on_count = self._reporter.poke  # publishes end on their own thread

    # ==============================
    # Worker-side methods
    # ==============================

    @property
    def worker(self) -> WorkerSide:
        """The worker half (raises on the scheduler's instance)."""
        if self._worker is None:
            raise RuntimeError("worker-side method called on the scheduler's connector")
        return self._worker

    def register_kv_caches(self, kv_caches: dict[str, torch.Tensor]) -> None:
        self.worker.register_kv_caches(kv_caches)

    def start_load_kv(self, forward_context: ForwardContext, **kwargs: Any) -> None:
        meta = self._get_connector_metadata()
        if isinstance(meta, MoqtConnectorMetadata):
            self.worker.start_load_kv(meta)

    def wait_for_layer_load(self, layer_name: str) -> None:
        return  # loads are whole-group (all layers): done in start_load_kv or on the loader

    def save_kv_layer(
        self,
        layer_name: str,
        kv_layer: torch.Tensor,
        attn_metadata: AttentionMetadata,
        **kwargs: Any,
    ) -> None:
        self.worker.save_kv_layer(layer_name, kv_layer)

    def wait_for_save(self) -> None:
        if self.has_connector_metadata():
            meta = self._get_connector_metadata()
            if isinstance(meta, MoqtConnectorMetadata):
                self.worker.wait_for_save(meta)

    def get_finished(self, finished_req_ids: set[str]) -> tuple[set[str] | None, set[str] | None]:
        done, _ = self.worker.take_finished()
        return None, done or None

    def get_transfer_results(self, finished_req_ids: set[str]) -> KVConnectorTransferResults:
        done, failed = self.worker.take_finished()
        return KVConnectorTransferResults(finished_recving=done, failed_recving=failed)

    def get_block_ids_with_load_errors(self) -> set[int]:
        return self.worker.take_bad_blocks()

    def get_kv_connector_stats(self) -> MoqtConnectorStats | None:
        side = self._worker or self._sched
        if side is None:
            return None
        self._reporter.poke()
        counts = side.counters.take()
        return MoqtConnectorStats(data=counts) if any(counts.values()) else None

    def shutdown(self) -> None:
        self._reporter.cancel()
        if self._worker is not None:
            self._worker.shutdown()

    # ==============================
    # Scheduler-side methods
    # ==============================

    @property
    def scheduler(self) -> SchedulerSide:
        """The scheduler half (raises on a worker's instance)."""
        if self._sched is None:
            raise RuntimeError("scheduler-side method called on a worker's connector")
        return self._sched

    def get_num_new_matched_tokens(
        self, request: Request, num_computed_tokens: int
    ) -> tuple[int | None, bool]:
        return self.scheduler.get_num_new_matched_tokens(request, num_computed_tokens)

    def update_state_after_alloc(
        self, request: Request, blocks: KVCacheBlocks, num_external_tokens: int
    ) -> None:
        self.scheduler.update_state_after_alloc(request, blocks, num_external_tokens)

    def build_connector_meta(self, scheduler_output: SchedulerOutput) -> KVConnectorMetadata:
        return self.scheduler.build_connector_meta(scheduler_output)

    def update_connector_output(self, connector_output: KVConnectorOutput) -> None:
        self.scheduler.update_connector_output(connector_output.failed_recving or ())

    def request_finished(
        self, request: Request, block_ids: list[int]
    ) -> tuple[bool, dict[str, Any] | None]:
        out = self.scheduler.request_finished(request)
        self._reporter.poke()  # an abort may be the engine's last event for a while
        return out

    # ==============================
    # Stats
    # ==============================

    @classmethod
    def build_kv_connector_stats(
        cls, data: dict[str, Any] | None = None
    ) -> MoqtConnectorStats | None:
        return MoqtConnectorStats(data=dict(data or {}))

    @classmethod
    def build_prom_metrics(
        cls,
        vllm_config: VllmConfig,
        metric_types: dict[type, type],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> MoqtPromMetrics:
        return MoqtPromMetrics(vllm_config, metric_types, labelnames, per_engine_labelvalues)

    def counters(self) -> dict[str, int]:
        """Counts since the process started (this instance's side)."""
        side = self._worker or self._sched
        return side.counters.totals() if side is not None else {}


def _layout_factory(
    vllm_config: VllmConfig, block_size: int
) -> Callable[[int, torch.dtype], PagedLayout]:
    """How this engine's paged caches are laid out (see ``paged.py``)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return lambda head_dim, dtype: ChannelLayout()
    from vllm.v1.attention.backends.cpu_attn import _get_attn_isa

    cache_dtype = str(vllm_config.cache_config.cache_dtype)

    def make(head_dim: int, dtype: torch.dtype) -> PagedLayout:
        isa = _get_attn_isa(dtype, block_size, head_dim, cache_dtype)
        return CpuLayout(isa, block_size, head_dim, dtype)

    return make


def _bytes_per_token(vllm_config: VllmConfig) -> dict[bytes, float]:
    """Encoded bytes per token of each track compression for this model's KV geometry."""
    from ray_kvmoq.kvcache.layout import KVGeometry
    from ray_kvmoq.kvcache.naming import TRACK_NAMES
    from ray_kvmoq.kvcache.registry import get_codec

    mc, pc = vllm_config.model_config, vllm_config.parallel_config
    geo = KVGeometry(
        num_layers=mc.get_num_layers(pc),
        num_kv_heads=mc.get_num_kv_heads(pc),
        head_dim=mc.get_head_size(),
    )
    fp16 = float(get_codec(b"FP16").object_size(geo) or 0)
    out = {}
    for name in TRACK_NAMES:
        size = get_codec(name).object_size(geo)
        # AC objects vary in size; 5x smaller than FP16 is what it measured on real KV
        # (docs/kv-payload-format.md §7), close enough for a pull-vs-recompute estimate.
        out[name] = float(size) if size else fp16 / 5.0
    return out


def kv_model_name(vllm_config: VllmConfig, conf: ConnectorConfig) -> str:
    """The KV namespace model field for this engine: ``<served name>@<weights fingerprint>``
    (or the configured ``model_name``)."""
    if conf.model_name:
        return conf.model_name
    mc = vllm_config.model_config
    served = mc.served_model_name or mc.model
    served = served[0] if isinstance(served, list | tuple) else served
    fingerprint = model_fingerprint(
        str(mc.model), dtype=str(mc.dtype), kv_cache_dtype=str(vllm_config.cache_config.cache_dtype)
    )
    return namespace_model_name(str(served), fingerprint)


def _check_engine(vllm_config: VllmConfig) -> None:
    """Refuse engine settings the connector cannot serve correctly, saying what to change."""
    ktc = vllm_config.kv_transfer_config
    assert ktc is not None
    if ktc.kv_load_failure_policy != "recompute":
        raise ConnectorConfigError(
            "MoqtKVConnector needs kv_transfer_config.kv_load_failure_policy='recompute' "
            "(a KV group that cannot be loaded is recomputed instead of failing the request)"
        )
    pc = vllm_config.parallel_config
    if pc.tensor_parallel_size != 1 or pc.pipeline_parallel_size != 1:
        raise ConnectorConfigError(
            "MoqtKVConnector publishes whole-model KV tracks: run with tensor_parallel_size=1 "
            "and pipeline_parallel_size=1"
        )
    cache_dtype = str(vllm_config.cache_config.cache_dtype)
    if cache_dtype != "auto":
        raise ConnectorConfigError(
            f"MoqtKVConnector needs kv_cache_dtype='auto' (got {cache_dtype!r}); pick a smaller "
            "track compression (kv_connector_extra_config.codec) to move fewer bytes instead"
        )
