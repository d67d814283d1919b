"""The PD app: Ray Serve LLM's prefill/decode pattern with the KV moved as MoQT tracks.

Prefill runs on a node of this module's own (127.0.0.4, added to the shared cluster and removed
at the end), decode on 127.0.0.2. Decode sends each prompt to prefill and at
once follows the prompt's track (our connector backend's concurrent hand-off); prefill publishes
the track group by group. The tests check that decode's KV really came over MoQT from the other
node (its relay's upstream bytes, its connector's loaded tokens), that the answer equals the
prefill engine answering alone, and that losing prefill mid-request — its replica killed, or its
whole node (the raylet killed) — still ends with that answer, never a hang.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from ray_kvmoq.bench.quality import load_text
from tests.serving.conftest import app_args, deployed
from tests.serving.test_app_combined import MODEL, _board, _client

# 900 s: the first test also pays for starting the shared vLLM engines (minutes on 2 busy cores)
pytestmark = [pytest.mark.ray, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(900)]

APP = "pd"


PREFILL_TIMEOUT_S = 60.0
"""How long decode waits for its prefill (``pd_prefill_timeout_s``), and so follows its track:
decode gives up on a prefill unfinished by then. On a slow 2-core CI machine a 769-token
prefill behind the other tests' engines took over 20 s."""
KV_TIMEOUT_S = 90.0
"""A follow's own bound (``kv_timeout_s``), longer than ``PREFILL_TIMEOUT_S``: a follow ended by
the lost prefill's report (``handoffs_abandoned``) is told from one that timed out."""


@pytest.fixture(scope="module")
def prefill_node(ray_cluster: Any) -> Iterator[Any]:
    """A node for the prefill replica alone (127.0.0.4): the last test kills its raylet."""
    cluster = ray_cluster.cluster
    node = cluster.add_node(
        num_cpus=4,
        node_ip_address="127.0.0.4",
        object_store_memory=200 << 20,
        resources={"pd_prefill_node": 1},
    )
    cluster.wait_for_nodes()
    try:
        yield node
    finally:
        if node in cluster.worker_nodes:
            cluster.remove_node(node, allow_graceful=False)


@pytest.fixture(scope="module")
def pd_app(serve_http: str, prefill_node: Any) -> Iterator[str]:
    args = app_args(
        "pd.yaml",
        prefill={"num_replicas": 1, "num_cpus": 1, "resources": {"pd_prefill_node": 0.5}},
        decode={"num_replicas": 1, "num_cpus": 1, "resources": {"kvnode1": 0.5}},
        # the ingress off the prefill node: the node-loss test kills that node, and an ingress
        # replica there would take the in-flight request with it (the client sees a 500)
        ingress={"num_cpus": 0.25, "resources": {"kvnode_head": 0.01}},
        relay_datagram_size=9000,
        kv_timeout_s=KV_TIMEOUT_S,
        pd_prefill_timeout_s=PREFILL_TIMEOUT_S,
    )
    with deployed(serve_http, APP, args) as base:
        yield base


def _messages(question: str, words: int = 600) -> list[dict[str, str]]:
    return [
        {"role": "system", "content": " ".join(load_text().split()[:words])},
        {"role": "user", "content": question},
    ]


def _prefill_alone(
    question: str, max_tokens: int, words: int = 600, salt: str | None = None
) -> str:
    """The prefill deployment answering by itself (no PD hand-off): the reference (its own
    cache salt unless given)."""
    from ray import serve
    from ray.llm._internal.serve.core.configs.openai_api_models import ChatCompletionRequest

    handle = serve.get_deployment_handle(f"Prefill:{MODEL}", app_name=APP)
    req = ChatCompletionRequest(
        model=MODEL,
        messages=_messages(question, words),
        temperature=0,
        max_tokens=max_tokens,
        cache_salt=salt or uuid.uuid4().hex,
    )
    for chunk in handle.options(stream=True).chat.remote(req, None):
        return str(chunk.choices[0].message.content)
    raise AssertionError("no answer from the prefill deployment")


def _gained(before: dict[str, Any], after: dict[str, Any], node: str, key: str) -> int:
    """How much connector counter ``key`` grew, summed over the engines on ``node`` (the
    figures board's counters before and after)."""
    return sum(
        v.get(key, 0) - before.get(src, {}).get(key, 0)
        for src, v in after.items()
        if v.get("node_id") == node
    )


def _decode_node() -> str:
    import ray

    return next(n["NodeID"] for n in ray.nodes() if n["NodeManagerAddress"] == "127.0.0.2")


def _question_one_past_a_chunk(base: str, words: int = 600) -> str:
    """A question that makes the chat prompt one token longer than a whole number of 128-token
    chunks (the built-in model's tokenizer and chat template, as vLLM applies them)."""
    from types import SimpleNamespace

    from ray_kvmoq.engine.loader import cached_builtin_dir
    from ray_kvmoq.serving.prompts import request_tokens

    filler = load_text().split()[words : words + 300]
    model_dir = str(cached_builtin_dir())
    for k in range(len(filler)):
        q = " ".join([base, *filler[:k]])
        toks = request_tokens(SimpleNamespace(messages=_messages(q, words)), model_dir)
        assert toks is not None
        if len(toks) % 128 == 1:
            return q
    raise AssertionError("no question length gave a prompt one past a chunk")


def _references(question: str, max_tokens: int, words: int = 600) -> tuple[str, str]:
    """The prefill engine's own greedy answers both ways decode may compute a prompt that is one
    past a chunk: in full (it fell back to recompute), then from its own prefix cache, which
    holds all but the last token (it loaded the rest). They are equal where the CPU's bf16
    kernels round both alike (README, known issue)."""
    salt = uuid.uuid4().hex
    full = _prefill_alone(question, max_tokens, words, salt=salt)
    return full, _prefill_alone(question, max_tokens, words, salt=salt)


def test_decode_answers_from_kv_pulled_over_moqt_from_the_prefill_node(pd_app: str) -> None:
    """PD: the decode replica (on the other node) loads the whole prompt's KV over MoQT and
    computes one token, and answers exactly as the prefill replica does when its own prefix
    cache holds the prompt all but its last token — the same computation, so the same greedy
    answer on any CPU. (Against a full recompute, greedy answers may part after some tokens on
    CPUs whose bf16 kernels round a one-token step differently: README, known issue.)"""
    q = _question_one_past_a_chunk("Who is Mr. Bingley?")
    _, ref = _references(q, 24)  # the prefix-cache answer computes the last token, as decode will
    node = _decode_node()
    before_c, before_r = _board()
    r = _client(pd_app).chat.completions.create(
        model=MODEL, messages=_messages(q), temperature=0, max_tokens=24,
        extra_body={"cache_salt": uuid.uuid4().hex},
    )  # fmt: skip
    prompt = r.usage.prompt_tokens
    assert prompt % 128 == 1, prompt
    assert r.choices[0].message.content == ref

    deadline = time.monotonic() + 30  # connector counters reach the board every 2 s
    while True:
        after_c, after_r = _board()
        loaded = _gained(before_c, after_c, node, "tokens_loaded")
        if loaded >= prompt - 1 or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    keys = ("tokens_matched_remote", "load_errors", "lookup_timeouts", "pulls_declined")
    why = {"tokens_loaded": loaded, **{k: _gained(before_c, after_c, node, k) for k in keys}}
    pulled = after_r[node]["upstream_bytes"] - before_r[node]["upstream_bytes"]
    assert pulled >= (prompt - 128) * 23_052, (pulled, why, _pd_stats())
    assert why["tokens_loaded"] >= prompt - 1, json.dumps(after_c)


def _post_in_thread(
    base: str, question: str, words: int, salt: str | None = None
) -> tuple[threading.Thread, dict[str, Any]]:
    """A chat request on its own thread (its own cache salt unless given); its status, body and
    time land in the dict."""
    import httpx

    result: dict[str, Any] = {}

    def call() -> None:
        t0 = time.monotonic()
        try:
            resp = httpx.post(
                f"{base}/v1/chat/completions",
                json={"model": MODEL, "messages": _messages(question, words), "temperature": 0,
                      "max_tokens": 16, "cache_salt": salt or uuid.uuid4().hex},
                timeout=300,
            )  # fmt: skip
        except httpx.HTTPError as err:  # no HTTP answer at all: the assertions say so
            result.update(status=None, error=repr(err), took=time.monotonic() - t0)
            return
        try:
            body = resp.json()
        except ValueError:  # not JSON: keep the text for the assertion message
            body = {"text": resp.text[:2000]}
        result.update(status=resp.status_code, body=body, took=time.monotonic() - t0)

    t = threading.Thread(target=call)
    t.start()
    return t, result


def _prefill_replica() -> Any:
    import ray

    name = next(
        a["name"] for a in ray.util.list_named_actors(all_namespaces=True)
        if a["namespace"] == "serve" and f"Prefill:{MODEL}" in a["name"]
    )  # fmt: skip
    return ray.get_actor(name, namespace="serve")


def _pd_stats() -> dict[str, int]:
    from ray import serve

    handle = serve.get_deployment_handle(f"Decode:{MODEL}", app_name=APP)
    return dict(handle.pd_stats.remote().result(timeout_s=60))


def _counters() -> dict[str, Any]:
    """The connector counters on the figures board, by source (not the relays' stats: a dead
    node's relay would hold up ``_board``)."""
    import ray

    from ray_kvmoq.connector.figures import figures_board

    return dict(ray.get(figures_board().counters.remote(), timeout=30))


def _lost(before: dict[str, int], after: dict[str, int]) -> int:
    return sum(after[k] - before.get(k, 0) for k in after)


def test_losing_the_prefill_replica_mid_request_still_ends_with_the_answer(pd_app: str) -> None:
    """The prefill replica killed while a request is in flight: the request still ends 200 with
    the prefill engine's own answer (computed in full, or from its cache but the last token: the
    two ways decode may have computed it — recomputing what did not arrive, or loading it all),
    and decode either loaded the whole track before the kill or counted its fallback."""
    import ray

    q = _question_one_past_a_chunk("What does Mrs. Bennet want?")
    refs = set(_references(q, 16))
    node = _decode_node()
    before_c, _ = _board()
    before_pd = _pd_stats()
    t, result = _post_in_thread(pd_app, q, 600)
    time.sleep(0.3)  # the request is in flight: prefill is computing, decode following
    assert t.is_alive(), "the request ended before the kill"
    ray.kill(_prefill_replica(), no_restart=False)
    t.join(timeout=240)
    assert not t.is_alive(), "the request hung after prefill died"
    time.sleep(3)  # connector counters reach the board every 2 s
    after_c, _ = _board()

    def on_decode(key: str) -> int:
        return _gained(before_c, after_c, node, key)

    assert result["status"] == 200, result
    assert result["body"]["choices"][0]["message"]["content"] in refs
    prompt = int(result["body"]["usage"]["prompt_tokens"])
    fell_back = on_decode("load_errors") + _lost(before_pd, _pd_stats())
    assert on_decode("tokens_loaded") >= prompt - 1 or fell_back >= 1, (result, fell_back)


def _process_tree(actor: Any) -> list[int]:
    """PIDs of an actor's worker process and its children (vLLM's engine processes)."""
    import ray

    pid = int(ray.get(actor.__ray_call__.remote(lambda _: __import__("os").getpid()), timeout=60))
    import psutil

    return [pid, *(c.pid for c in psutil.Process(pid).children(recursive=True))]


def test_losing_the_prefill_node_mid_request_still_answers_and_decode_stops_waiting(
    pd_app: str, prefill_node: Any
) -> None:
    """The prefill node's raylet killed while a request is in flight (asserted: the request had
    not ended; afterwards the GCS marks the node dead, the directory drops its relay, and every
    process of the prefill replica is gone). No prefill replica can be placed any more, so Ray
    Serve LLM's hand-off would wait for one forever; decode stops waiting after
    ``pd_prefill_timeout_s`` and tells its connector, which stops following the dead track
    (``handoffs_abandoned``: before its ``kv_timeout_s`` ran out) and recomputes. The request
    still ends 200 with the reference answer, decode counted the lost prefill, the decode
    node's relay and the directory kept their incarnations (the directory's epoch), and a later
    request with the same prompt reuses its prefix (``cached_tokens``). Last in the module: the
    prefill deployment stays unplaceable."""
    import psutil
    import ray

    from ray_kvmoq.relay.actor import DIRECTORY_NAME, relay_name

    words = 1500  # ~2000 tokens: seconds of prefill
    q = _question_one_past_a_chunk("Why does Mr. Darcy refuse to dance?", words)
    refs = set(_references(q, 16, words))
    victim_node = next(
        n["NodeID"] for n in ray.nodes() if n["NodeManagerAddress"] == "127.0.0.4" and n["Alive"]
    )
    pids = _process_tree(_prefill_replica())
    directory = ray.get_actor(DIRECTORY_NAME, namespace="kvmoq")
    decode_relay = ray.get_actor(relay_name(_decode_node()), namespace="kvmoq")
    kept = ray.get([directory.epoch.remote(), decode_relay.get_incarnation.remote()])
    before_pd = _pd_stats()
    before_c = _counters()

    salt = uuid.uuid4().hex
    t, result = _post_in_thread(pd_app, q, words, salt)
    time.sleep(0.5)  # routed: prefill computing on 127.0.0.4, decode following its track
    assert t.is_alive(), "the request ended before the kill"
    prefill_node.kill_raylet()
    killed_at = time.monotonic()
    t.join(timeout=PREFILL_TIMEOUT_S + 240)
    assert not t.is_alive(), "the request hung after the prefill node died"
    assert result["status"] == 200, result
    assert result["body"]["choices"][0]["message"]["content"] in refs
    # decode follows the dead track until pd_prefill_timeout_s gives the prefill up, then
    # recomputes the ~2,000 tokens
    assert result["took"] < PREFILL_TIMEOUT_S + 180, result["took"]
    assert _lost(before_pd, _pd_stats()) >= 1, _pd_stats()
    time.sleep(3)  # connector counters reach the board every 2 s
    abandoned = _gained(before_c, _counters(), _decode_node(), "handoffs_abandoned")
    assert abandoned >= 1, "decode's connector did not stop following the lost prefill's track"

    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        dead = not any(n["NodeID"] == victim_node and n["Alive"] for n in ray.nodes())
        dropped = victim_node not in {i.node_id for i in ray.get(directory.nodes.remote())}
        if dead and dropped:
            break
        time.sleep(1.0)
    assert dead and dropped, {"node dead in the GCS": dead, "relay dropped": dropped}
    # a Ray worker exits when it loses its raylet, and vLLM's engine process when it loses
    # its parent; on a loaded 2-core machine that once took longer than 60 s
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and any(psutil.pid_exists(p) for p in pids):
        time.sleep(1.0)
    left = [p for p in pids if psutil.pid_exists(p)]
    for p in left:  # stop what the test started, by PID, before failing on it
        psutil.Process(p).kill()
    assert not left, f"prefill replica processes outlived their node: {left}"
    assert ray.get([directory.epoch.remote(), decode_relay.get_incarnation.remote()]) == kept

    t, again = _post_in_thread(pd_app, q, words, salt)
    t.join(timeout=240)
    assert not t.is_alive() and again["status"] == 200, again
    cached = int(again["body"]["usage"]["prompt_tokens_details"]["cached_tokens"] or 0)
    assert cached >= 256, again["body"]["usage"]
    print(
        f"node lost: answered in {result['took']:.1f} s; the next request in {again['took']:.1f} s "
        f"({time.monotonic() - killed_at:.0f} s after the kill) with {cached} cached tokens"
    )
