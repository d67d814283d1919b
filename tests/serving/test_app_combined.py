"""The combined app (Ray Serve LLM + vLLM + the MoQT KV layer) through the ``openai`` client.

One app for the module: ``apps/local.yaml`` scaled to two ``KVLLMServer`` replicas on two Ray
nodes of the shared test cluster (one ``engine_slot`` per node), the built-in SmolLM2 on vLLM's CPU backend, relays at 9000-byte
datagrams (loopback carries them; pulls then beat recompute on this machine, which the
cross-node test needs). API tests check Ray Serve LLM's behaviour through our ingress; the KV
tests check what our layer adds.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from ray_kvmoq.bench.quality import load_text
from tests.serving.conftest import app_args, deployed

pytestmark = [pytest.mark.ray, pytest.mark.model, pytest.mark.slow]

MODEL = "SmolLM2-135M-Instruct"


@pytest.fixture(scope="module")
def app(serve_http: str) -> Iterator[str]:
    args = app_args(
        "local.yaml",
        server={"num_replicas": 2, "num_cpus": 1, "resources": {"engine_slot": 1}},
        relay_datagram_size=9000,
        kv_timeout_s=30.0,
    )
    with deployed(serve_http, "combined", args) as base:
        yield base


def _client(base: str) -> Any:
    from openai import OpenAI

    return OpenAI(base_url=f"{base}/v1", api_key="none", timeout=300, max_retries=0)


def _system(words: int = 500) -> str:
    return " ".join(load_text().split()[:words])


def test_chat_completions_and_streaming_answer(app: str) -> None:
    c = _client(app)
    r = c.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "What is the capital of France?"}],
        temperature=0,
        max_tokens=16,
    )
    assert "Paris" in r.choices[0].message.content
    t = c.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=8, temperature=0)
    assert t.choices[0].text and t.usage.completion_tokens == 8
    chunks = list(
        c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "Count to five."}],
            max_tokens=12,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    assert text and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0


def test_tools_and_response_format_are_accepted(app: str) -> None:
    c = _client(app)
    tools = [
        {
            "type": "function",
            "function": {
                "name": "get_weather",
                "description": "Weather of a city",
                "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
            },
        }
    ]
    r = c.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Weather in Paris?"}],
        tools=tools,
        max_tokens=16,
    )
    assert r.choices[0].finish_reason in ("stop", "length", "tool_calls")
    j = c.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "Give a JSON object with a key a."}],
        response_format={"type": "json_object"},
        max_tokens=24,
        temperature=0,
    )
    assert j.choices[0].message.content is not None


def test_bad_requests_get_openai_errors(app: str) -> None:
    import httpx

    r = httpx.post(f"{app}/v1/chat/completions", json={"model": MODEL, "messages": []}, timeout=60)
    assert r.status_code == 400 and "message" in r.json()["error"]
    r = httpx.post(
        f"{app}/v1/chat/completions",
        json={"model": "no-such-model", "messages": [{"role": "user", "content": "hi"}]},
        timeout=60,
    )
    assert r.status_code == 404 and r.json()["error"]["message"]
    r = httpx.post(f"{app}/v1/completions", content=b"{not json", timeout=60,
                   headers={"content-type": "application/json"})  # fmt: skip
    assert 400 <= r.status_code < 500


def test_second_prompt_sharing_a_prefix_reports_cached_tokens_and_the_same_answer(
    app: str,
) -> None:
    c = _client(app)
    system = _system()
    ask = lambda q, salt=None: c.chat.completions.create(  # noqa: E731
        model=MODEL,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": q}],
        temperature=0,
        max_tokens=24,
        extra_body={"cache_salt": salt} if salt else None,
    )
    first = ask("Who is Mr. Bingley?")
    assert first.usage.prompt_tokens > 400
    second = ask("What does Mrs. Bennet want?")
    fresh = ask("What does Mrs. Bennet want?", salt=uuid.uuid4().hex)  # its own, empty cache
    assert second.usage.prompt_tokens_details.cached_tokens >= 256
    assert fresh.usage.prompt_tokens_details.cached_tokens == 0
    assert second.choices[0].message.content == fresh.choices[0].message.content


def _board() -> tuple[dict[str, Any], dict[str, Any]]:
    import ray

    from ray_kvmoq.connector.figures import figures_board
    from ray_kvmoq.relay.actor import relay_name

    counters = ray.get(figures_board().counters.remote(), timeout=30)
    relays = {}
    for n in ray.nodes():
        if n["Alive"]:
            try:
                r = ray.get_actor(relay_name(n["NodeID"]), namespace="kvmoq")
                relays[n["NodeID"]] = ray.get(r.stats.remote(), timeout=30)
            except ValueError:
                pass
    return counters, relays


def test_a_prefix_computed_on_one_node_is_pulled_over_moqt_by_a_replica_on_another(
    app: str,
) -> None:
    """One request computes a long prefix on whichever replica gets it; a burst of requests
    sharing it then keeps that replica busy, so the router sends some to the other replica,
    whose node relay pulls the prefix over MoQT (its upstream bytes and its engine's connector
    counters show it) instead of recomputing."""
    c = _client(app)
    system = _system(900)
    salt = uuid.uuid4().hex

    def ask(i: int) -> Any:
        return c.chat.completions.create(
            model=MODEL,
            messages=[{"role": "system", "content": system}, {"role": "user", "content": f"Q{i}?"}],
            temperature=0,
            max_tokens=48,
            extra_body={"cache_salt": salt, "ignore_eos": True},
        )

    ask(0)
    before_c, before_r = _board()
    with ThreadPoolExecutor(6) as pool:
        answers = list(pool.map(ask, range(1, 7)))
    import time

    time.sleep(3)  # connector counters reach the board every 2 s
    after_c, after_r = _board()
    assert all(a.usage.prompt_tokens_details.cached_tokens >= 256 for a in answers), [
        a.usage.prompt_tokens_details.cached_tokens for a in answers
    ]
    pulled = {n: after_r[n]["upstream_bytes"] - before_r.get(n, {}).get("upstream_bytes", 0)
              for n in after_r}  # fmt: skip
    remote_tokens = {
        src: v.get("tokens_matched_remote", 0)
        - before_c.get(src, {}).get("tokens_matched_remote", 0)
        for src, v in after_c.items()
    }
    assert max(pulled.values()) >= 2 * 128 * 23_052, json.dumps(pulled)
    assert max(remote_tokens.values()) >= 256, json.dumps(remote_tokens)
