"""End to end on the shared 3-node Ray cluster: PD serving with real SmolLM2, prefill on
127.0.0.2, decode on 127.0.0.3, KV between them over MoQT through the node relays.

One Serve app for the module (deploying is the expensive part); requests go through Serve's
HTTP proxy with the ``openai`` client, httpx and curl, like a user's would.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from ray_kvmoq.serving.app import AppArgs, ReplicaArgs, build
from ray_kvmoq.serving.relayplane import RAY_NAMESPACE

pytestmark = [pytest.mark.slow, pytest.mark.model, pytest.mark.ray]

MODEL = "SmolLM2-135M-Instruct"
DOC = (
    "Rivers shape the land they cross. Over thousands of years a river carves valleys, "
    "drops silt on its plains, and builds deltas where it meets the sea. "
) * 9


@pytest.fixture(scope="module")
def pd_app(serve_http: str, ray_cluster: Any) -> Iterator[str]:
    from ray import serve

    args = AppArgs(
        mode="pd",
        prefill=ReplicaArgs(num_cpus=1, resources={"kvnode1": 0.01}),
        decode=ReplicaArgs(num_cpus=1, resources={"kvnode2": 0.01}),
        ingress=ReplicaArgs(num_cpus=0),
        kv_timeout_s=30.0,
        routing_stats_period_s=0.5,
    )
    serve.run(build(args), name="pd", route_prefix="/pd")
    try:
        yield serve_http + "/pd"
    finally:
        serve.delete("pd")


def _relay_stats(ray_cluster: Any, ip: str) -> dict[str, int]:
    import ray

    from ray_kvmoq.relay.actor import relay_name

    actor = ray.get_actor(relay_name(ray_cluster.node_ids[ip]), namespace=RAY_NAMESPACE)
    return dict(ray.get(actor.stats.remote(), timeout=30))


def _chat(q: str, **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": DOC + q}],
        "max_tokens": 8,
        "temperature": 0,
    }
    body.update(extra)
    return body


def test_openai_client_gets_an_answer(pd_app: str) -> None:
    from openai import OpenAI

    client = OpenAI(base_url=pd_app + "/v1", api_key="none", timeout=300)
    assert [m.id for m in client.models.list().data] == [MODEL]
    out = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        max_tokens=12,
        temperature=0,
    )
    assert "Paris" in (out.choices[0].message.content or "")
    assert out.usage is not None and out.usage.completion_tokens > 0


def test_shared_prefix_reused_and_kv_moved_over_moqt(pd_app: str, ray_cluster: Any) -> None:
    before = _relay_stats(ray_cluster, "127.0.0.3")
    with httpx.Client(base_url=pd_app, timeout=300) as c:
        first = c.post("/v1/chat/completions", json=_chat("Summarise this."))
        assert first.status_code == 200, first.text
        prefill_node = first.headers["x-kvmoq-prefill-node"]
        decode_node = first.headers["x-kvmoq-decode-node"]
        assert prefill_node == ray_cluster.node_ids["127.0.0.2"]
        assert decode_node == ray_cluster.node_ids["127.0.0.3"]
        reused = c.post("/v1/chat/completions", json=_chat("What do rivers build?")).json()
        plain = c.post(
            "/v1/chat/completions", json=_chat("What do rivers build?", kv_reuse=False)
        ).json()
        metrics = c.get("/metrics").text
    assert reused["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256
    assert plain["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert reused["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    after = _relay_stats(ray_cluster, "127.0.0.3")
    # The decode node's relay pulled the prompts' KV from the prefill node's relay over MoQT.
    assert after["upstream_bytes"] > before["upstream_bytes"]
    assert after["upstream_fetches"] + after["upstream_subscriptions"] > (
        before["upstream_fetches"] + before["upstream_subscriptions"]
    )
    assert 'kvmoq_kv_bytes_moved_total{path="moqt"}' in metrics
    assert 'kvmoq_router_decisions_total{deployment="prefill"' in metrics
    assert 'kvmoq_router_decisions_total{deployment="decode"' in metrics


def test_malformed_requests_get_openai_errors(pd_app: str) -> None:
    import openai

    client = openai.OpenAI(base_url=pd_app + "/v1", api_key="none", timeout=60)
    with pytest.raises(openai.NotFoundError) as nf:
        client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    assert nf.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as br:
        client.completions.create(model=MODEL, prompt="x", max_tokens=0)
    assert br.value.param == "max_tokens"
    r = httpx.post(pd_app + "/v1/completions", content=b"{oops", timeout=60)
    assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"


def test_streaming_with_curl(pd_app: str) -> None:
    curl = shutil.which("curl")
    if curl is None:
        pytest.skip("curl is not installed")
    body = {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 6, "stream": True}
    out = subprocess.run(
        [curl, "-sN", pd_app + "/v1/completions", "-H", "Content-Type: application/json",
         "-d", json.dumps({**body, "temperature": 0})],
        capture_output=True, text=True, timeout=300, check=True,
    )  # fmt: skip
    lines = [line for line in out.stdout.splitlines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    assert "".join(e["choices"][0]["text"] for e in events).strip()
    assert events[-1]["choices"][0]["finish_reason"] in ("stop", "length")


def test_relay_killed_mid_request_still_answers(pd_app: str, ray_cluster: Any) -> None:
    import ray

    from ray_kvmoq.relay.actor import relay_name

    body = _chat("Where do deltas form?", max_tokens=6)
    with httpx.Client(base_url=pd_app, timeout=300) as c:
        expected = c.post(
            "/v1/chat/completions", json={**body, "kv_reuse": False, "cache_salt": "ref"}
        ).json()["choices"][0]["message"]["content"]

        def kill() -> None:
            for ip in ("127.0.0.2", "127.0.0.3"):
                actor = ray.get_actor(relay_name(ray_cluster.node_ids[ip]), namespace=RAY_NAMESPACE)
                ray.kill(actor, no_restart=True)

        # Stream, and kill both node relays once the request is in flight (headers are sent as
        # soon as the ingress has routed it, before prefill finishes).
        with c.stream(
            "POST", "/v1/chat/completions", json={**body, "stream": True, "cache_salt": "kill"}
        ) as r:
            assert r.status_code == 200
            killer = threading.Thread(target=kill)
            killer.start()
            lines = [line for line in r.iter_lines() if line.startswith("data: ")]
            killer.join()
        text = "".join(
            (json.loads(line[6:])["choices"] or [{"delta": {}}])[0]["delta"].get("content") or ""
            for line in lines[:-1]
        )
        assert "error" not in lines[-2]
        assert text == expected
        # And the next request (relays gone or restarted) is still right.
        again = c.post("/v1/chat/completions", json={**body, "cache_salt": "after"}).json()
        assert again["choices"][0]["message"]["content"] == expected
