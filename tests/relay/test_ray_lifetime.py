"""Relay and directory lifetime on the shared cluster: they outlive the process that created
them, come back after ``ray.kill(..., no_restart=False)``, and the directory is rebuilt from
the relays when it restarts empty. ``start_relays`` is idempotent but for the budget, which it
sets (and a restarted relay keeps)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable
from typing import Any

import pytest

pytestmark = [pytest.mark.ray, pytest.mark.slow]

RAY_NS = "kvmoq_lifetime_test"
PREFIX = "kvmoq_life_"
NS = ["moq://kvcache.moq.arpa/v1/", "m", "life"]

_CREATOR = """
import sys, ray
from ray_kvmoq.relay.actor import start_relays
ray.init(address=sys.argv[1], namespace=sys.argv[2], include_dashboard=False, log_to_driver=False)
relays = start_relays(node_ids=[sys.argv[3]], name_prefix=sys.argv[4], namespace=sys.argv[2],
                      network={"listen": False})
print("started", len(relays), flush=True)
"""


def _wait_for(cond: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Poll ``cond`` (an actor that is restarting counts as "not yet")."""
    import ray

    deadline = time.monotonic() + timeout
    while True:
        try:
            if cond():
                return
        except ray.exceptions.ActorUnavailableError:
            pass
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def _hash_nodes(directory: Any, chunk_hash: bytes) -> list[str]:
    import ray

    return [loc.node_id for loc in ray.get(directory.lookup_hash.remote(chunk_hash), timeout=30)]


def test_relays_and_directory_survive_their_creator_restarts_and_rebuild(
    ray_cluster: Any,
) -> None:
    import ray

    from ray_kvmoq.relay.actor import DIRECTORY_NAME, relay_name, start_relays

    node = ray_cluster.node_ids["127.0.0.2"]
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    args = [sys.executable, "-c", _CREATOR, ray_cluster.address, RAY_NS, node, PREFIX]
    done = subprocess.run(args, env=env, capture_output=True, text=True, timeout=180)
    assert done.returncode == 0 and "started 1" in done.stdout, done.stderr[-2000:]
    relay = directory = None
    try:
        # the creator has exited: both actors are still there (detached)
        relay = ray.get_actor(relay_name(node, PREFIX), namespace=RAY_NS)
        directory = ray.get_actor(DIRECTORY_NAME, namespace=RAY_NS)
        ray.get(relay.publish_group.remote(NS, "t", 0, [b"a" * 1000], chunk_hash=b"life0"))
        ray.get(relay.flush_directory.remote(), timeout=30)
        assert _hash_nodes(directory, b"life0") == [node]

        # start_relays again: the same actors, nothing restarted
        first = ray.get(relay.get_incarnation.remote(), timeout=30)
        again = start_relays(node_ids=[node], name_prefix=PREFIX, namespace=RAY_NS)
        assert ray.get(again[node].get_incarnation.remote(), timeout=30) == first

        # the directory dies and restarts empty: the relay re-announces what it holds
        ray.kill(directory, no_restart=False)
        _wait_for(lambda: _hash_nodes(directory, b"life0") == [node], "the directory rebuild")

        # the relay dies and restarts: its objects died with it, the directory forgets them,
        # and a group published again is found again
        ray.kill(relay, no_restart=False)
        _wait_for(
            lambda: ray.get(relay.get_incarnation.remote(), timeout=30) != first, "relay restart"
        )
        _wait_for(lambda: _hash_nodes(directory, b"life0") == [], "the directory to forget")
        assert ray.get(relay.lookup.remote(NS, "t"), timeout=30)["groups"] == []
        ray.get(relay.publish_group.remote(NS, "t", 0, [b"b" * 1000], chunk_hash=b"life0"))
        ray.get(relay.flush_directory.remote(), timeout=30)
        assert _hash_nodes(directory, b"life0") == [node]

        # start_relays with another budget resizes the running relay (evicting what no longer
        # fits, the directory told), and the relay keeps that budget when it restarts
        start_relays(node_ids=[node], name_prefix=PREFIX, namespace=RAY_NS, budget_bytes=500)
        ray.get(relay.flush_directory.remote(), timeout=30)
        st = ray.get(relay.stats.remote(), timeout=30)
        assert (st["budget_bytes"], st["bytes_cached"]) == (500, 0), st
        assert _hash_nodes(directory, b"life0") == []
        second = ray.get(relay.get_incarnation.remote(), timeout=30)
        ray.kill(relay, no_restart=False)
        _wait_for(
            lambda: ray.get(relay.get_incarnation.remote(), timeout=30) != second, "relay restart"
        )
        assert ray.get(relay.stats.remote(), timeout=30)["budget_bytes"] == 500
    finally:
        for h in (relay, directory):
            if h is not None:
                ray.kill(h)


def test_the_directory_and_the_figures_board_live_on_the_head_node_and_restart_there(
    ray_cluster: Any,
) -> None:
    """Cluster singletons sit on the head (which holds the GCS): losing a worker node never
    takes them down. Created from a driver, and again after a restart."""
    import ray

    from ray_kvmoq.connector.figures import figures_board
    from ray_kvmoq.relay.actor import get_directory

    def node_of(actor: Any) -> str:
        get_node = lambda _: ray.get_runtime_context().get_node_id()  # noqa: E731
        return str(ray.get(actor.__ray_call__.remote(get_node), timeout=60))

    ns = "kvmoq_head_test"
    actors = [get_directory(namespace=ns), figures_board(ns)]
    try:
        for actor in actors:
            assert node_of(actor) == ray_cluster.head_node_id
            ray.kill(actor, no_restart=False)
            _wait_for(lambda a=actor: node_of(a) == ray_cluster.head_node_id, "a restart")
    finally:
        for actor in actors:
            ray.kill(actor)


def test_start_relays_restarts_a_relay_running_with_another_cluster_secret(
    ray_cluster: Any,
) -> None:
    """A relay reads the cluster secret when it starts. After the GCS secret changes (created
    late, or rotated), ``start_relays`` restarts the relays that run with the old one, so every
    relay of the cluster sends and checks tokens with the same key."""
    import ray

    from ray_kvmoq.relay.actor import (
        read_cluster_secret,
        relay_name,
        start_relays,
        write_cluster_secret,
    )

    ns, prefix, node = "kvmoq_secret_test", "kvmoq_sec_", ray_cluster.node_ids["127.0.0.2"]
    saved = read_cluster_secret()
    relay = None
    try:
        write_cluster_secret(b"a" * 32)
        relay = start_relays(node_ids=[node], name_prefix=prefix, namespace=ns)[node]
        first = ray.get([relay.security_id.remote(), relay.get_incarnation.remote()], timeout=60)
        again = start_relays(node_ids=[node], name_prefix=prefix, namespace=ns)[node]
        assert ray.get([again.security_id.remote(), again.get_incarnation.remote()]) == first

        write_cluster_secret(b"b" * 32)  # rotated
        start_relays(node_ids=[node], name_prefix=prefix, namespace=ns)
        sid, inc = ray.get([relay.security_id.remote(), relay.get_incarnation.remote()])
        assert sid not in (None, first[0]) and inc != first[1]
        assert relay_name(node, prefix) in {a["name"] for a in ray.util.list_named_actors(True)}
    finally:
        if saved is not None:
            write_cluster_secret(saved)
        if relay is not None:
            ray.kill(relay)


def test_the_directory_forgets_a_killed_relay_before_its_pending_beat_would_answer(
    ray_cluster: Any,
) -> None:
    """The directory's watchdog keeps one long ``beat`` call pending on each relay, answered
    every ``watchdog_s`` (10 s), not a ping a second. A relay killed for good fails that call as
    soon as Ray knows, so its node leaves the directory before the beat would have answered."""
    import ray

    from ray_kvmoq.relay.actor import WATCHDOG_S, get_directory, start_relays

    ns, prefix, node = "kvmoq_beat_test", "kvmoq_beat_", ray_cluster.node_ids["127.0.0.2"]
    directory = get_directory(namespace=ns)
    relay = None
    try:
        relay = start_relays(
            node_ids=[node], name_prefix=prefix, namespace=ns, network={"listen": False}
        )[node]

        def registered() -> bool:
            return node in [n.node_id for n in ray.get(directory.nodes.remote(), timeout=30)]

        _wait_for(registered, "the relay to register")
        time.sleep(1.0)  # its beat is pending now
        ray.kill(relay)
        t0 = time.monotonic()
        _wait_for(lambda: not registered(), "the directory to forget the killed relay", WATCHDOG_S)
        assert time.monotonic() - t0 < WATCHDOG_S
    finally:
        for h in (relay, directory):
            if h is not None:
                ray.kill(h)
