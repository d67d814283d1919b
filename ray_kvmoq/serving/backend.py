"""The MoQT connector's Ray Serve LLM backend: engine-process setup and the PD hand-off.

Ray Serve LLM keeps one *connector backend* per vLLM connector name (its
``KVConnectorBackendFactory``). Ours does two things:

* ``setup()`` runs in each LLM replica before vLLM starts, and exports what the connector
  needs in vLLM's child processes (EngineCore, Worker: plain spawned processes that join the
  cluster themselves): ``RAY_ADDRESS`` and ``KVMOQ_NODE_IP`` (the replica's node, so they
  attach to that node's raylet and object store).
* The PD protocol, with ``concurrent_handoff``: the decode replica starts decoding *at the same
  time* as it sends the prompt to prefill. Prefill (``do_remote_decode``: a producer for this
  request) publishes every group of the prompt's track as soon as the chunk is computed; decode
  (``{"kvmoq": {"follow": true}}``) loads the groups the directory already knows by chunk hash
  and follows the prompt's own track for the rest — MoQT's subscribe-before-produce, so the
  transfer overlaps the prefill instead of following it. Whatever does not arrive in time is
  recomputed by decode, so a lost prefill costs time, never the answer.

Register it once per cluster (:func:`register_backend`, done by the app builder).
"""

from __future__ import annotations

import logging
import os
from typing import Any

from ray.llm._internal.serve.engines.vllm.kv_transfer.base import (
    BaseConnectorBackend,
    clamp_request_to_single_token,
)

__all__ = ["CONNECTOR_NAME", "MoqtConnectorBackend", "register_backend"]

log = logging.getLogger(__name__)

CONNECTOR_NAME = "MoqtKVConnector"
"""vLLM connector name (``kv_transfer_config.kv_connector``) the backend is registered under."""


class MoqtConnectorBackend(BaseConnectorBackend):
    """Ray Serve LLM backend of :class:`~ray_kvmoq.connector.MoqtKVConnector`."""

    requires_peer_binding = False
    concurrent_handoff = True

    def setup(self) -> None:
        """Export the cluster address and this node's IP for vLLM's child processes."""
        import ray

        ctx = ray.get_runtime_context()
        os.environ["RAY_ADDRESS"] = ctx.gcs_address
        os.environ["KVMOQ_NODE_IP"] = ray.util.get_node_ip_address()
        log.info(
            "MoQT connector: engine processes join %s from %s",
            ctx.gcs_address,
            os.environ["KVMOQ_NODE_IP"],
        )

    def prepare_prefill_request(self, *, request: Any, peer: dict[str, Any] | None) -> Any:
        """Prefill produces this prompt's track for a remote decode (one token, no stream)."""
        prefill = request.model_copy(deep=True)
        prefill.kv_transfer_params = {"do_remote_decode": True, "do_remote_prefill": False}
        clamp_request_to_single_token(prefill)
        return prefill

    def prepare_decode_request(
        self, *, request: Any, peer: dict[str, Any] | None, prefill_response: Any
    ) -> Any:
        """Decode follows the prompt's track while prefill publishes it."""
        decode = request.model_copy(deep=True)
        decode.kv_transfer_params = {"kvmoq": {"follow": True}}
        return decode


def register_backend() -> None:
    """Register the backend under :data:`CONNECTOR_NAME` (idempotent; needs Ray initialised
    or it is queued until then)."""
    from ray.llm._internal.serve.engines.vllm.kv_transfer.factory import (
        KVConnectorBackendFactory,
    )

    if not KVConnectorBackendFactory.is_registered(CONNECTOR_NAME):
        KVConnectorBackendFactory.register_backend(
            CONNECTOR_NAME, f"{__name__}:MoqtConnectorBackend"
        )
