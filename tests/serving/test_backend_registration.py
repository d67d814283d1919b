"""The connector backend is registered in the cluster the driver is connected to, even when this
process registered it in an earlier cluster (Ray Serve LLM's registry caches it per process).

Without it every replica falls back to ``DefaultConnectorBackend`` ("Unsupported connector
backend: MoqtKVConnector" in its log): the engine processes get no ``KVMOQ_NODE_IP``, attach to
the head node's raylet and use the head's relay from every node. ``kvmoq bench serve`` hit this
on every run after its first (a fresh cluster each)."""

from __future__ import annotations

from typing import Any


def test_the_backend_is_registered_again_in_a_cluster_whose_kv_lacks_it(
    ray_cluster: Any,
) -> None:
    from ray.experimental.internal_kv import _internal_kv_del, _internal_kv_exists
    from ray.llm._internal.serve.engines.vllm.kv_transfer.factory import (
        KVConnectorBackendFactory,
    )
    from ray.llm._internal.serve.utils.registry import _make_key

    from ray_kvmoq.serving.backend import (
        CONNECTOR_NAME,
        REGISTRY_CATEGORY,
        MoqtConnectorBackend,
        register_backend,
    )

    key = _make_key(REGISTRY_CATEGORY, CONNECTOR_NAME)
    register_backend()
    assert _internal_kv_exists(key)
    _internal_kv_del(key)  # what a fresh cluster holds; this process's registry still has it
    assert KVConnectorBackendFactory.is_registered(CONNECTOR_NAME)  # the stale cache
    register_backend()
    assert _internal_kv_exists(key)
    register_backend()  # idempotent
    assert KVConnectorBackendFactory.get_backend_class(CONNECTOR_NAME) is MoqtConnectorBackend


def test_each_decode_request_gets_its_own_handoff_id_and_the_server_reads_it() -> None:
    """The id decode's server reports a lost prefill by (``kvmoq_abandon_handoff``) is stamped
    per request by ``prepare_decode_request`` and read back by ``handoff_id``."""
    from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionRequest

    from ray_kvmoq.serving.backend import MoqtConnectorBackend, handoff_id

    backend = MoqtConnectorBackend.__new__(MoqtConnectorBackend)  # no LLMConfig needed here
    req = ChatCompletionRequest(model="m", messages=[{"role": "user", "content": "hi"}])
    first, second = (
        backend.prepare_decode_request(request=req, peer=None, prefill_response=None)
        for _ in range(2)
    )
    assert first.kv_transfer_params["kvmoq"]["follow"] is True
    ids = {handoff_id(first), handoff_id(second)}
    assert len(ids) == 2 and all(len(i) == 32 for i in ids), ids
    assert handoff_id(req) == ""  # the client's request is not a hand-off
    assert req.kv_transfer_params is None
