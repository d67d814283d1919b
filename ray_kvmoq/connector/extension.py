"""Methods the connector adds to vLLM's workers (``engine_kwargs.worker_extension_cls``).

vLLM's ``collective_rpc("<method>")`` calls them in every worker process, where the worker side
of the connector lives; the engine hosts and the serving layer use them to drain publishing
before a measurement, to read the worker's counters, and to end a PD follow whose prefill
failed.
"""

from __future__ import annotations

from typing import Any

__all__ = ["WORKER_EXTENSION", "ConnectorWorkerExtension"]

WORKER_EXTENSION = f"{__name__}.ConnectorWorkerExtension"
"""The ``worker_extension_cls`` value that adds these methods."""


def _connector() -> Any:
    from vllm.distributed.kv_transfer import get_kv_transfer_group

    from .connector import MoqtKVConnector

    connector = get_kv_transfer_group()
    if not isinstance(connector, MoqtKVConnector):
        raise TypeError(f"the engine's KV connector is {type(connector).__name__}")
    return connector


class ConnectorWorkerExtension:
    """Mixed into vLLM's worker class by ``worker_extension_cls``."""

    def kvmoq_flush(self, timeout_s: float) -> None:
        """Drain the connector's publisher, then wait for the directory to catch up."""
        connector = _connector()
        connector.worker.flush(timeout_s)
        connector.bridge.flush_directory(timeout_s)

    def kvmoq_abandon_handoff(self, handoff: str) -> None:
        """PD hand-off ``handoff`` lost its prefill: stop following its track."""
        _connector().worker.abandon_handoff(handoff)

    def kvmoq_counters(self) -> dict[str, int]:
        """The worker side's counters since the engine started."""
        return dict(_connector().counters())
