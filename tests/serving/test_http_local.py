"""The OpenAI HTTP API in-process (no Ray): real SmolLM2, combined prefill/decode, local KV reuse.

Exercises the same ``IngressCore`` and ``ReplicaCore`` the Serve deployments wrap, through
FastAPI with httpx's ASGI transport and through the ``openai`` client.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from ray_kvmoq.serving.ingress import IngressCore, IngressSettings, LocalBackend, make_app
from ray_kvmoq.serving.kvplane import LocalKVPlane
from ray_kvmoq.serving.openai_api import TenantTable

pytestmark = pytest.mark.model

DOC = (
    "The printing press was developed in the fifteenth century. It let workshops copy books "
    "quickly, spread literacy across Europe, and changed how science and religion were argued. "
) * 9
MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def engine() -> Any:
    from ray_kvmoq.engine.engine import load_engine

    return load_engine(None, num_threads=2)


@pytest.fixture
async def client(engine: Any) -> AsyncIterator[httpx.AsyncClient]:
    from ray_kvmoq.engine.aio import AsyncEngine
    from ray_kvmoq.serving.worker import ReplicaCore

    core = ReplicaCore(AsyncEngine(engine), LocalKVPlane())
    ingress = IngressCore(
        tokenizer=engine.tokenizer,
        backend=LocalBackend(core),
        settings=IngressSettings(
            model_name=engine.model_name, served_names=(MODEL,), max_context=2048
        ),
        tenants=TenantTable({"sk-a": "alice", "sk-b": "bob"}),
    )
    app = make_app(ingress)
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": "Bearer sk-a"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        yield c


def _chat(q: str, **extra: Any) -> dict[str, Any]:
    body = {
        "model": MODEL,
        "messages": [{"role": "user", "content": DOC + q}],
        "max_tokens": 8,
        "temperature": 0,
    }
    body.update(extra)
    return body


async def test_shared_prefix_is_reused_and_output_unchanged(client: httpx.AsyncClient) -> None:
    first = (await client.post("/v1/chat/completions", json=_chat("Summarise."))).json()
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    again = await client.post("/v1/chat/completions", json=_chat("Who built it?"))
    assert again.status_code == 200
    body = again.json()
    assert body["usage"]["prompt_tokens_details"]["cached_tokens"] >= 256
    plain = (
        await client.post("/v1/chat/completions", json=_chat("Who built it?", kv_reuse=False))
    ).json()
    assert plain["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert body["choices"][0]["message"]["content"] == plain["choices"][0]["message"]["content"]
    metrics = (await client.get("/metrics")).text
    assert 'kvmoq_reused_tokens_total{source="local"}' in metrics


async def test_tenants_do_not_share_kv(client: httpx.AsyncClient) -> None:
    await client.post("/v1/chat/completions", json=_chat("One."))
    bob = {"Authorization": "Bearer sk-b"}
    r = await client.post("/v1/chat/completions", json=_chat("Two."), headers=bob)
    assert r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    salted = await client.post("/v1/chat/completions", json=_chat("Two.", cache_salt="x"))
    assert salted.json()["usage"]["prompt_tokens_details"]["cached_tokens"] == 0


async def test_streaming_completion_sse(client: httpx.AsyncClient) -> None:
    body = {
        "model": MODEL,
        "prompt": "Once upon a time",
        "max_tokens": 6,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with client.stream("POST", "/v1/completions", json=body) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    assert lines[-1] == "data: [DONE]"
    events = [json.loads(line[6:]) for line in lines[:-1]]
    text = "".join(c["text"] for e in events for c in e["choices"])
    assert text.strip()
    assert events[-1]["usage"]["completion_tokens"] == 6
    whole = (await client.post("/v1/completions", json={**body, "stream": False})).json()
    assert whole["choices"][0]["text"] == text


async def test_streaming_chat_has_role_then_content(client: httpx.AsyncClient) -> None:
    async with client.stream("POST", "/v1/chat/completions", json=_chat("Hi.", stream=True)) as r:
        lines = [line async for line in r.aiter_lines() if line.startswith("data: ")]
    chunks = [json.loads(line[6:]) for line in lines[:-1]]
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert chunks[-1]["choices"][0]["finish_reason"] in ("stop", "length")
    assert all(c["object"] == "chat.completion.chunk" for c in chunks)


@pytest.mark.parametrize(
    ("kwargs", "status", "code"),
    [
        ({"content": b"{not json"}, 400, "invalid_json"),
        (
            {"json": {"messages": [{"role": "user", "content": "x"}]}},
            400,
            "missing_required_parameter",
        ),
        (
            {"json": {"model": "nope", "messages": [{"role": "user", "content": "x"}]}},
            404,
            "model_not_found",
        ),
        (
            {
                "json": {
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "x"}],
                    "max_tokens": 4000,
                }
            },
            400,
            "context_length_exceeded",
        ),
        ({"json": {"model": MODEL, "messages": []}}, 400, "invalid_value"),
    ],
)
async def test_malformed_requests_get_openai_errors(
    client: httpx.AsyncClient, kwargs: dict[str, Any], status: int, code: str
) -> None:
    r = await client.post("/v1/chat/completions", **kwargs)
    assert r.status_code == status
    err = r.json()["error"]
    assert err["code"] == code and err["type"] and err["message"]


async def test_auth_errors_and_routes(client: httpx.AsyncClient) -> None:
    r = await client.get("/v1/models", headers={"Authorization": "Bearer wrong"})
    assert r.status_code == 401 and r.json()["error"]["code"] == "invalid_api_key"
    assert (await client.get("/v1/models")).json()["data"][0]["id"] == MODEL
    assert (await client.get("/health")).json() == {"status": "ok"}
    missing = await client.get("/v1/nothing")
    assert missing.status_code == 404 and "error" in missing.json()


async def test_stop_strings_cut_the_answer(client: httpx.AsyncClient) -> None:
    body = {"model": MODEL, "prompt": "1, 2, 3, 4, 5,", "max_tokens": 12, "temperature": 0}
    full = (await client.post("/v1/completions", json=body)).json()["choices"][0]["text"]
    stop = full.strip()[:2] or ","
    cut = (await client.post("/v1/completions", json={**body, "stop": [stop]})).json()
    text = cut["choices"][0]["text"]
    assert stop not in text and cut["choices"][0]["finish_reason"] == "stop"
    assert full.startswith(text)


async def test_concurrent_same_prefix_waits_instead_of_recomputing(
    client: httpx.AsyncClient,
) -> None:
    import asyncio

    salt = {"cache_salt": "concurrent"}
    a, b = await asyncio.gather(
        client.post("/v1/chat/completions", json=_chat("First question?", **salt)),
        client.post("/v1/chat/completions", json=_chat("Second question?", **salt)),
    )
    cached = sorted(r.json()["usage"]["prompt_tokens_details"]["cached_tokens"] for r in (a, b))
    assert cached[0] == 0 and cached[1] >= 256


async def test_pd_logic_in_process(engine: Any) -> None:
    """Prefill publishes the track; decode reads it (or, without a prefill node, recomputes);
    both give the combined path's greedy tokens."""
    from ray_kvmoq.engine.aio import AsyncEngine
    from ray_kvmoq.kvcache.naming import chunk_hashes, prompt_id
    from ray_kvmoq.serving.jobs import DoneEvent, Job, TokenEvent
    from ray_kvmoq.serving.worker import ReplicaCore

    core = ReplicaCore(AsyncEngine(engine), LocalKVPlane(), node_id="n1", kv_timeout_s=30)
    tokens = engine.tokenizer.encode(DOC + " In short,")
    job = Job(
        request_id="pd",
        tokens=tuple(tokens),
        hashes=tuple(chunk_hashes(b"s", engine.model_name, tokens)),
        prompt_id=prompt_id(b"s", tokens),
        max_tokens=5,
    )

    async def run(gen: Any) -> tuple[list[int], DoneEvent]:
        ids: list[int] = []
        done = DoneEvent()
        async for ev in gen:
            if isinstance(ev, TokenEvent):
                ids += ev.ids
            elif isinstance(ev, DoneEvent):
                done = ev
        return ids, done

    combined, _ = await run(core.generate(job))
    events = [ev async for ev in core.prefill_stream(job)]
    assert [type(e).__name__ for e in events] == ["StartedEvent", "DoneEvent"]
    assert events[0].node_id == "n1" and events[1].finish_reason == "stop"
    reused = events[0].reused_groups
    assert reused == len(tokens) // 128  # the combined run left every full chunk behind
    pulled, done = await run(core.pull_and_decode(job, "n1", reused))
    assert pulled == combined and not done.stats.fallbacks
    assert done.stats.bytes_zero_copy > 0 and done.stats.bytes_moqt == 0
    alone, done = await run(core.pull_and_decode(job, ""))
    assert alone == combined and done.stats.fallbacks == ("prefill",)
