"""Faults under the connector: whatever goes wrong with a group, vLLM recomputes it, the answer
is the answer without reuse, and the connector counts the load error.

Each case plants a prefix's groups (real KV, copied from a run under another tenant) where the
fault happens — a corrupted copy in the directory, a directory entry whose group is gone, a
relay on 127.0.0.3 that stops serving or dies while bytes are in flight — and asks engine B
(127.0.0.2) or A for the prompt under the tenant those groups were planted for.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import pytest

from tests.connector.conftest import (
    NO_REUSE,
    RAY_NAMESPACE,
    Engines,
    _delta,
    _flush,
    _gen,
    _metrics,
    fresh_salt,
)

# 900 s: the first test also pays for starting the shared vLLM engines (minutes on 2 busy cores)
pytestmark = [pytest.mark.ray, pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(900)]

C = 128
TRACK = b"BF16"


def _real_groups(e: Engines, prompt: list[int], n: int) -> list[list[Any]]:
    """The BF16 objects of the prompt's first ``n`` groups, computed by engine A."""
    import ray

    from ray_kvmoq.kvcache.naming import kv_namespace, prompt_id
    from ray_kvmoq.relay.packed import unpack_group

    salt = fresh_salt()
    _gen(e.a, [prompt], cache_salt=salt, max_tokens=1)
    _flush(e.a)
    ns = kv_namespace(e.model, prompt_id(salt.encode(), prompt))
    relay = e.relays[e.a_node]
    out = []
    for g in range(n):
        ref = ray.get(relay.get_group_ref.remote(ns, TRACK, g), timeout=60)
        out.append(list(unpack_group(ray.get(ref, timeout=60))))
    return out


def _plant(relay: Any, e: Engines, salt: str, prompt: list[int], groups: list[list[Any]]) -> None:
    """Publish ``groups`` on ``relay`` as the prompt's groups for tenant ``salt``."""
    import ray

    from ray_kvmoq.kvcache.naming import chunk_hashes, kv_namespace, prompt_id

    ns = kv_namespace(e.model, prompt_id(salt.encode(), prompt))
    hashes = chunk_hashes(salt.encode(), e.model, prompt)
    for g, objs in enumerate(groups):
        ray.get(relay.publish_group.remote(ns, TRACK, g, objs, chunk_hash=hashes[g]), timeout=60)
    ray.get(relay.flush_directory.remote(), timeout=60)


def _side_relay(e: Engines, **network: Any) -> Any:
    """A second relay on 127.0.0.3 (its own directory key), for faults no other test sees."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from ray_kvmoq.relay.actor import RelayActor, get_directory

    node3 = next(n["NodeID"] for n in ray.nodes() if n["NodeManagerAddress"] == "127.0.0.3")
    relay = RelayActor.options(  # type: ignore[attr-defined]
        num_cpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node3, soft=False)
    ).remote(
        directory=get_directory(namespace=RAY_NAMESPACE),
        relay_id=f"fault-{uuid.uuid4().hex[:8]}",
        network=network,
        data_planes=0,
    )
    ray.get(relay.start.remote(), timeout=60)
    return relay


def _corrupt(objs: list[Any], index: int) -> list[Any]:
    from dataclasses import replace

    bad = bytearray(objs[index].payload)
    bad[len(bad) // 2] ^= 0x40
    return [replace(o, payload=bytes(bad)) if i == index else o for i, o in enumerate(objs)]


def test_corrupted_object_is_never_used_and_the_prompt_is_recomputed(engines: Engines) -> None:
    e = engines
    prompt = e.tokens[100 : 100 + 2 * C + 30]
    groups = _real_groups(e, prompt, 2)
    salt = fresh_salt()
    _plant(e.relays[e.a_node], e, salt, prompt, [_corrupt(groups[0], 77), groups[1]])
    ref = _gen(e.a, [prompt], cache_salt=salt, kv_params=NO_REUSE, max_tokens=16)[0]
    before = _metrics(e.a)
    got = _gen(e.a, [prompt], cache_salt=salt, max_tokens=16)[0]
    after = _metrics(e.a)
    assert got.token_ids == ref.token_ids
    assert _delta(after, before, "kvmoq_digest_errors") == 1
    assert _delta(after, before, "kvmoq_load_errors") == 1
    assert _delta(after, before, "kvmoq_tokens_loaded") == 0  # group 0 failed: nothing after it


@pytest.mark.parametrize("forger_key", [None, b"not the cluster key".ljust(32, b".")])
def test_forged_object_with_a_recomputed_digest_is_refused_and_counted(
    engines: Engines, forger_key: bytes | None
) -> None:
    """A relay (or anyone on the path) that swaps a payload and recomputes its digest — unkeyed,
    or keyed with a key that is not the cluster's — is caught: digests are keyed."""
    from dataclasses import replace

    from ray_kvmoq.kvcache.integrity import attach_digest

    e = engines
    prompt = e.tokens[250 : 250 + 2 * C + 9]
    groups = _real_groups(e, prompt, 2)
    o = groups[0][3]
    fake = bytearray(o.payload)
    fake[-1] ^= 1
    forged = replace(o, payload=bytes(fake), extensions=(attach_digest(bytes(fake), forger_key),))
    salt = fresh_salt()
    _plant(
        e.relays[e.a_node], e, salt, prompt, [[*groups[0][:3], forged, *groups[0][4:]], groups[1]]
    )
    ref = _gen(e.a, [prompt], cache_salt=salt, kv_params=NO_REUSE, max_tokens=16)[0]
    before = _metrics(e.a)
    got = _gen(e.a, [prompt], cache_salt=salt, max_tokens=16)[0]
    after = _metrics(e.a)
    assert got.token_ids == ref.token_ids
    assert _delta(after, before, "kvmoq_digest_errors") == 1
    assert _delta(after, before, "kvmoq_tokens_loaded") == 0


def test_group_gone_between_lookup_and_load_is_recomputed(engines: Engines) -> None:
    """The directory says the head relay has the groups; the relay has none of them (as after
    an eviction the directory has not heard about yet)."""
    import ray

    from ray_kvmoq.kvcache.naming import chunk_hashes, kv_namespace, prompt_id
    from ray_kvmoq.relay.actor import get_directory

    e = engines
    prompt = e.tokens[400 : 400 + 2 * C + 11]
    salt = fresh_salt()
    ns = kv_namespace(e.model, prompt_id(salt.encode(), prompt))
    hashes = chunk_hashes(salt.encode(), e.model, prompt)
    directory = get_directory(namespace=RAY_NAMESPACE)
    ray.get(directory.add_groups.remote(e.a_node, ns, TRACK, [0, 1], {0: hashes[0], 1: hashes[1]}))
    ref = _gen(e.a, [prompt], cache_salt=salt, kv_params=NO_REUSE, max_tokens=16)[0]
    before = _metrics(e.a)
    got = _gen(e.a, [prompt], cache_salt=salt, max_tokens=16)[0]
    after = _metrics(e.a)
    assert got.token_ids == ref.token_ids
    assert _delta(after, before, "kvmoq_tokens_matched_local") == 2 * C  # the plan was a load
    assert _delta(after, before, "kvmoq_load_errors") == 1
    assert _delta(after, before, "kvmoq_tokens_loaded") == 0


def test_source_relay_that_stopped_serving_before_the_load_is_recomputed(engines: Engines) -> None:
    """Groups planted on a relay on 127.0.0.3 whose MoQT server then closes: engine B's relay
    cannot pull them, the load fails, B recomputes."""
    import ray

    e = engines
    prompt = e.tokens[700 : 700 + 2 * C + 5]
    groups = _real_groups(e, prompt, 2)
    side = _side_relay(e)
    salt = fresh_salt()
    _plant(side, e, salt, prompt, groups)
    ray.get(side.shutdown.remote(), timeout=60)  # alive for the directory, gone for MoQT
    ref = _gen(e.b, [prompt], cache_salt=salt, kv_params=NO_REUSE, max_tokens=16)[0]
    before = _metrics(e.b)
    got = _gen(e.b, [prompt], cache_salt=salt, max_tokens=16)[0]
    after = _metrics(e.b)
    ray.kill(side)
    assert got.token_ids == ref.token_ids
    assert _delta(after, before, "kvmoq_tokens_matched_remote") == 2 * C
    assert _delta(after, before, "kvmoq_load_errors") == 1
    assert _delta(after, before, "kvmoq_tokens_loaded") == 0


def test_source_relay_killed_while_bytes_are_in_flight_is_recomputed(engines: Engines) -> None:
    """8 groups (23.6 MB) on a relay on 127.0.0.3 with small datagrams; it is killed once engine
    B's relay has received some but not all of them (asserted from B's relay counters)."""
    import ray

    e = engines
    prompt = e.tokens[: 8 * C + 20]
    groups = _real_groups(e, prompt, 8)
    total = sum(len(o.payload) for objs in groups for o in objs)
    relay_b = e.relays[e.b_node]
    for _attempt in range(3):
        side = _side_relay(e, transport_options={"max_datagram_size": 1200})
        salt = fresh_salt()
        _plant(side, e, salt, prompt, groups)
        ref = _gen(e.b, [prompt], cache_salt=salt, kv_params=NO_REUSE, max_tokens=16)[0]
        before = _metrics(e.b)
        start = ray.get(relay_b.stats.remote())["upstream_bytes"]
        pending = e.b.generate.remote([prompt], cache_salt=salt, max_tokens=16)
        moved, deadline = 0, time.monotonic() + 60
        while time.monotonic() < deadline:
            moved = ray.get(relay_b.stats.remote())["upstream_bytes"] - start
            if moved > 0:
                break
            time.sleep(0.005)
        ray.kill(side, no_restart=True)
        at_kill = ray.get(relay_b.stats.remote())["upstream_bytes"] - start
        got = ray.get(pending, timeout=300)[0]
        after = _metrics(e.b)
        if 0 < at_kill < total:
            break
    else:
        pytest.fail(
            f"could not kill the relay mid-transfer in 3 tries (moved {at_kill} of {total})"
        )
    assert got.token_ids == ref.token_ids
    assert _delta(after, before, "kvmoq_load_errors") == 1
    assert _delta(after, before, "kvmoq_tokens_loaded") < 8 * C


@pytest.mark.parametrize("published", [0, 1])
def test_follow_of_an_abandoned_handoff_stops_at_the_first_missing_group_keeps_the_rest_and_recomputes(
    engines: Engines, published: int
) -> None:
    """PD decode follows a prompt's track (``follow`` with a ``handoff`` id) whose producer
    published ``published`` of its 4 groups and then failed, and decode's server reported the
    hand-off lost (``kvmoq_abandon_handoff``; here before the request, the "when they start"
    case). The groups the directory knew load as usual; the load stops at the first group it
    was waiting for with ``HandoffLost`` — counted as ``handoffs_abandoned``, which only a
    report can cause: otherwise the load waits out its 20 s ``load_timeout_s`` and fails as a
    timeout — and vLLM recomputes from there."""
    import ray

    e = engines
    prompt = e.tokens[400 : 400 + 3 * C + 21]
    salt = fresh_salt()
    if published:
        _plant(e.relays[e.a_node], e, salt, prompt, _real_groups(e, prompt, published))
    handoff = uuid.uuid4().hex
    ray.get(
        e.b.__ray_call__.remote(
            lambda host: host.llm.collective_rpc("kvmoq_abandon_handoff", args=(handoff,))
        ),
        timeout=60,
    )
    ref = _gen(e.b, [prompt], cache_salt=salt, kv_params=NO_REUSE, max_tokens=16)[0]
    follow = {"kvmoq": {"follow": True, "handoff": handoff}}
    before = _metrics(e.b)
    got = _gen(e.b, [prompt], cache_salt=salt, kv_params=follow, max_tokens=16)[0]
    after = _metrics(e.b)
    moved = {k: _delta(after, before, k) for k in after if k.startswith("kvmoq_")}
    assert moved["kvmoq_handoffs_abandoned"] == 1, moved
    assert moved["kvmoq_load_errors"] == 1, moved
    assert moved["kvmoq_tokens_loaded"] == published * C, moved
    if published:  # a loaded prefix: later greedy tokens may part on some CPUs (README)
        assert got.token_ids[0] == ref.token_ids[0], (got.token_ids, ref.token_ids)
    else:
        assert got.token_ids == ref.token_ids


def test_killed_relay_and_directory_come_back_and_reuse_resumes_within_30_s(
    engines: Engines,
) -> None:
    """The head node's relay and the directory are killed (Ray restarts them: they are detached
    and restartable, owned by no replica). Within 30 s of the kill a prompt computed by engine A
    is loaded again by engine B on the other node over MoQT — a cache hit through the restarted
    relay and the rebuilt directory — and B's first token is the one B computes without reuse."""
    import ray

    from ray_kvmoq.relay.actor import get_directory

    e = engines
    relay_a = e.relays[e.a_node]
    first = ray.get(relay_a.get_incarnation.remote(), timeout=30)
    ray.kill(get_directory(namespace=RAY_NAMESPACE), no_restart=False)
    ray.kill(relay_a, no_restart=False)
    t0 = time.monotonic()
    prompt = e.tokens[1800 : 1800 + 2 * C + 9]
    attempts, last = 0, {}
    while True:
        attempts += 1
        salt = fresh_salt()
        try:
            restarted = ray.get(relay_a.get_incarnation.remote(), timeout=10) != first
        except ray.exceptions.RayActorError:
            restarted = False
        if restarted:
            _gen(e.a, [prompt], cache_salt=salt, max_tokens=1)
            _flush(e.a)
            before = _metrics(e.b)
            got = _gen(e.b, [prompt], cache_salt=salt, max_tokens=16)[0]
            after = _metrics(e.b)
            last = {k: _delta(after, before, k) for k in after if k.startswith("kvmoq_")}
            if last["kvmoq_tokens_loaded"] == 2 * C:
                break
        assert time.monotonic() - t0 < 30, (
            f"no reuse 30 s after the kill ({attempts} tries): {last}"
        )
        time.sleep(0.5)
    assert got.num_cached_tokens == 2 * C
    ref = _gen(e.b, [prompt], cache_salt=fresh_salt(), kv_params=NO_REUSE, max_tokens=16)[0]
    # later greedy tokens may part on CPUs whose bf16 kernels round a loaded prefix differently
    # from a full recompute (README, known issue)
    assert got.token_ids[0] == ref.token_ids[0], (got.token_ids, ref.token_ids)
