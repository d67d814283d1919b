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
  recomputed by decode, so a lost prefill costs time, never the answer. Each hand-off gets an
  id (``handoff``) by which decode's server tells its connector to stop following a track whose
  prefill failed (:class:`~.server.KVDecodeServer`).

Register it once per cluster (:func:`register_backend`, done by the app builder).
"""

from __future__ import annotations

import logging
import os
import uuid
from typing import Any

from ray.llm._internal.serve.engines.vllm.kv_transfer.base import (
    BaseConnectorBackend,
    clamp_request_to_single_token,
)

__all__ = ["CONNECTOR_NAME", "MoqtConnectorBackend", "handoff_id", "register_backend"]

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
        decode.kv_transfer_params = {"kvmoq": {"follow": True, "handoff": uuid.uuid4().hex}}
        return decode


def handoff_id(request: Any) -> str:
    """The hand-off id :meth:`MoqtConnectorBackend.prepare_decode_request` gave a decode
    request ("" for any other request)."""
    params = getattr(request, "kv_transfer_params", None) or {}
    ours = params.get("kvmoq") if isinstance(params, dict) else None
    handoff = ours.get("handoff") if isinstance(ours, dict) else None
    return handoff if isinstance(handoff, str) else ""


def register_backend() -> None:
    """Register the backend under :data:`CONNECTOR_NAME` in the connected cluster (idempotent;
    before ``ray.init`` it is queued until then).

    Ray Serve LLM's registry keeps it in the cluster's internal KV, where the replicas look it
    up, and also caches it in this process. Its ``is_registered`` answers from that cache, so a
    driver that deploys on a second cluster (a bench's fresh cluster per run, a restarted
    head) would skip registering there, and every replica would fall back to
    ``DefaultConnectorBackend``: no ``KVMOQ_NODE_IP`` for the engine processes, which then attach
    to the head node's raylet and use the head's relay from every node. So the cluster's own KV
    is what is checked.
    """
    from ray.experimental.internal_kv import _internal_kv_exists, _internal_kv_initialized
    from ray.llm._internal.serve.engines.vllm.kv_transfer.factory import (
        KVConnectorBackendFactory,
    )
    from ray.llm._internal.serve.utils.registry import _make_key

    in_cluster = _internal_kv_initialized() and _internal_kv_exists(
        _make_key(REGISTRY_CATEGORY, CONNECTOR_NAME)
    )
    if in_cluster:
        return
    KVConnectorBackendFactory.unregister_backend(CONNECTOR_NAME)  # this process's stale cache
    KVConnectorBackendFactory.register_backend(CONNECTOR_NAME, f"{__name__}:MoqtConnectorBackend")


REGISTRY_CATEGORY = "kv_connector_backend"
"""Ray Serve LLM's registry category for connector backends."""
