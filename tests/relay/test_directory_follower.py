"""A reader's local copy of the KV directory (:class:`DirectoryFollower`) against a real
``kvmoq_directory`` actor on the shared Ray cluster: a change shows long before the poll
interval (a long poll), the copy says when it is not live, and it rebuilds itself from a
restarted directory. The KV router ranks from it without asking the directory."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

pytestmark = pytest.mark.ray

NS = (b"moq://kvcache.moq.arpa/v1/", b"m", b"follow")


def _until(cond: Callable[[], bool], timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


@pytest.fixture
def directory(ray_cluster: Any) -> Iterator[tuple[Any, str]]:
    """A directory actor of its own (a fresh Ray namespace), restartable once."""
    import ray

    from ray_kvmoq.relay.actor import DIRECTORY_NAME, DirectoryActor
    from ray_kvmoq.relay.directory import NodeInfo

    namespace = f"follow-{uuid.uuid4().hex[:8]}"
    actor = DirectoryActor.options(  # type: ignore[attr-defined]
        name=DIRECTORY_NAME, namespace=namespace, max_restarts=1
    ).remote()
    ray.get(actor.register_node.remote(NodeInfo(node_id="A", host="127.0.0.1", port=1)))
    yield actor, namespace
    ray.kill(actor, no_restart=True)


def _add(actor: Any, gid: int, h: bytes, node: str = "A") -> None:
    import ray

    ray.get(actor.add_groups.remote(node, NS, b"BF16", [gid], {gid: h}))


def test_a_follower_sees_changes_before_its_poll_interval_and_rebuilds_from_a_restarted_directory(
    directory: tuple[Any, str],
) -> None:
    """With a 30 s poll, each add and eviction shows within 10 s (the pending watch answers
    when the change arrives); killing the directory makes the copy not live, and the restarted
    (empty) directory's snapshot replaces it, after which its changes show again."""
    import ray

    from ray_kvmoq.relay.actor import DirectoryFollower
    from ray_kvmoq.relay.directory import NodeInfo

    actor, namespace = directory
    _add(actor, 0, b"h0")
    follower = DirectoryFollower(namespace, poll_s=30.0)
    try:
        assert follower.wait_live(30.0)
        assert [[loc.node_id for loc in locs] for locs in follower.longest_prefix([b"h0"])] == [
            ["A"]
        ]
        epoch = follower.view.epoch
        for gid in (1, 2, 3):
            answers = follower.answers
            _add(actor, gid, b"h%d" % gid)
            assert _until(
                lambda g=gid: len(follower.longest_prefix([b"h0", b"h1", b"h2", b"h3"])) == g + 1,
                10.0,
            )
            assert follower.answers > answers
        ray.get(actor.remove_groups.remote("A", NS, b"BF16", [1]))
        assert _until(lambda: len(follower.longest_prefix([b"h0", b"h1"])) == 1, 10.0)

        ray.kill(actor, no_restart=False)  # Ray restarts it empty, under a new epoch
        assert _until(lambda: not follower.live, 30.0)
        assert _until(lambda: follower.live and follower.view.epoch != epoch, 60.0)
        assert follower.longest_prefix([b"h0"]) == [] and len(follower.view) == 0
        ray.get(actor.register_node.remote(NodeInfo(node_id="B", host="127.0.0.1", port=2)))
        _add(actor, 0, b"h0", node="B")
        assert _until(lambda: len(follower.longest_prefix([b"h0"])) == 1, 10.0)
    finally:
        follower.stop()


def test_the_router_ranks_from_a_current_copy_and_asks_the_directory_when_it_is_not(
    directory: tuple[Any, str],
) -> None:
    """A router in a driver process (this test) starts no copy of its own; given a current
    one, it answers holders without a directory call (its direct path would raise here); once
    the copy stops, the same answer comes from the directory itself."""
    from ray_kvmoq.engine.loader import cached_builtin_dir
    from ray_kvmoq.relay.actor import DirectoryFollower
    from ray_kvmoq.serving.router import KVRouter

    actor, namespace = directory
    _add(actor, 0, b"h0")
    _add(actor, 1, b"h1")
    r = KVRouter.__new__(KVRouter)
    r.initialize_state(
        kv_model="m",
        model_dir=str(cached_builtin_dir()),
        bytes_per_token=1.0,
        ray_namespace=namespace,
    )
    assert r._follower is None  # a driver: see serving.router._directory_view
    r._follower = DirectoryFollower(namespace)
    assert r._follower.wait_live(30.0)

    class _NoCalls:
        @property
        def longest_prefix(self) -> Any:
            raise AssertionError("the router asked the directory")

    r._directory = _NoCalls()
    expected = [frozenset({"A"}), frozenset({"A"})]
    assert asyncio.run(r._holders([b"h0", b"h1", b"h9"])) == expected
    r._follower.stop()
    r._directory = None  # the real directory actor, looked up by name
    assert asyncio.run(r._holders([b"h0", b"h1", b"h9"])) == expected


_SHUTDOWN_SCRIPT = """
import sys, time
import ray
ray.init(address=sys.argv[1], include_dashboard=False, log_to_driver=False)
from ray_kvmoq.relay.actor import DirectoryFollower
follower = DirectoryFollower("no-such-namespace", poll_s=1.0)  # retries every 0.2..5 s
time.sleep(1.0)
ray.shutdown()
time.sleep(6.0)  # longer than the follower's longest backoff
print("initialized", ray.is_initialized(), "alive", follower._thread.is_alive(), flush=True)
"""


def test_a_follower_ends_when_ray_shuts_down_in_its_process_and_never_starts_it_again(
    ray_cluster: Any,
) -> None:
    """Ray's APIs start Ray when it is not running: a follower still retrying after
    ``ray.shutdown()`` would start it again behind the caller's back (a test session's
    teardown then found a driver attached to the cluster it was shutting down)."""
    import os
    import subprocess
    import sys

    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    done = subprocess.run(
        [sys.executable, "-c", _SHUTDOWN_SCRIPT, ray_cluster.address],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "initialized False alive False" in done.stdout, done.stdout[-2000:]
