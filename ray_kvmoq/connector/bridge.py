"""The way from a vLLM process to its node's relay and the cluster's KV directory.

vLLM runs the connector in its own processes (the scheduler in ``EngineCore``, the workers in
their processes). Those are not Ray workers unless vLLM's Ray executor made them, so the
bridge joins the Ray cluster itself on first use (``ray.init`` with the node's IP, so a process
on node N attaches to N's raylet and reads N's object store zero-copy) and finds — or starts —
the node's ``RelayActor`` by name in the relays' Ray namespace. Inside a Ray worker it reuses
the existing connection.

Everything here is synchronous and bounded by a timeout: the scheduler's lookups are answered
from this process's copy of the directory, or polled with :meth:`RelayBridge.poll_lookup` while
that copy is not current (never blocking the engine loop), the worker's loader and
publisher threads call :meth:`get_group` and :meth:`publish_group`. A relay that died is looked up
again (the relays restart; see ``ray_kvmoq.relay.actor``) on the next call.

Environment (set by the serving layer for the engine processes it starts):
``KVMOQ_NODE_IP`` (the Ray node's IP; needed when several Ray nodes share one machine) and
``RAY_ADDRESS``.
"""

from __future__ import annotations

import logging
import os
import random
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from ray_kvmoq.relay.actor import DirectoryFollower, follow_directory, relay_name, start_relays
from ray_kvmoq.relay.cache import CachedObject
from ray_kvmoq.relay.directory import Location
from ray_kvmoq.relay.packed import PackedGroup, unpack_group

from .config import ConnectorConfig
from .figures import FiguresSnapshot, figures_board

__all__ = ["BridgeError", "HandoffLost", "RelayBridge", "join_ray"]

_NOT_YET = {0x4, 0x6}
"""MoQT request error codes meaning "not there (yet)": TRACK_DOES_NOT_EXIST, NO_OBJECTS
(draft-14 §13.1.2, §13.1.5)."""

_GIVEN_UP_POLL_S = 0.1
"""How often a relay call that may be abandoned asks whether it is."""

_VIEW_RETRY_S = 5.0
"""How often :meth:`RelayBridge.directory_view` tries again to reach the relay after a failure."""

log = logging.getLogger(__name__)

Namespace = tuple[bytes, ...]


class BridgeError(RuntimeError):
    """The node relay could not be reached (no Ray, no relay, timeout)."""


class HandoffLost(RuntimeError):
    """A group that is not there yet will never be: its producer's hand-off was abandoned."""


def join_ray(address: str | None, namespace: str, node_ip: str | None = None) -> None:
    """``ray.init`` from a vLLM process, as a driver attached to ``node_ip``'s raylet.

    Ray names a driver's GCS error and log subscribers with bytes from Python's global
    ``random``, and vLLM seeds that generator with the same seed (0 unless configured) in every
    engine. Two engines' processes would then join with the same subscriber ids, and the GCS
    answers each one's long poll at once to serve the other's: a busy loop that took 0.55 of a
    core in the GCS and 0.39 in the two drivers here (docs/benchmarks.md, Serving).
    So the generator is reseeded from the OS for ``ray.init`` and then put back,
    leaving vLLM's seeded sequence exactly where it was.
    """
    import ray

    kwargs: dict[str, Any] = {"_node_ip_address": node_ip} if node_ip else {}
    state = random.getstate()
    random.seed()  # from os.urandom: this process's subscriber ids are its own
    try:
        ray.init(
            address=address,
            namespace=namespace,
            log_to_driver=False,
            configure_logging=False,
            **kwargs,
        )
    finally:
        random.setstate(state)


class _Answered:
    """A lookup answered from the local copy of the directory
    (see :meth:`RelayBridge.start_lookup`)."""

    __slots__ = ("chain",)

    def __init__(self, chain: list[list[Location]]) -> None:
        self.chain = chain


class RelayBridge:
    """This process's handle on its node relay (see the module docstring)."""

    def __init__(self, conf: ConnectorConfig) -> None:
        self.conf = conf
        self._lock = threading.Lock()
        self._relay: Any = None
        self.node_id: str = ""
        self._board: Any = None
        self._figures = FiguresSnapshot()
        self._figures_ref: Any = None
        self._figures_at = 0.0
        self._key: bytes | None = None
        self._key_known = False
        self._follower: DirectoryFollower | None = None
        self._view_tried_at = -_VIEW_RETRY_S

    # ---- connection ------------------------------------------------------------------------

    def relay(self) -> Any:
        """The node relay's actor handle (joining Ray and starting the relay if needed)."""
        with self._lock:
            if self._relay is None:
                self._relay = self._connect()
            return self._relay

    def forget_relay(self) -> None:
        """Drop the cached handle (the relay died); the next call looks it up again."""
        with self._lock:
            self._relay = None

    def _connect(self) -> Any:
        import ray

        if not ray.is_initialized():
            join_ray(self.conf.address(), self.conf.ray_namespace, os.environ.get("KVMOQ_NODE_IP"))
        self.node_id = str(ray.get_runtime_context().get_node_id())
        name = relay_name(self.node_id)
        try:
            return ray.get_actor(name, namespace=self.conf.ray_namespace)
        except ValueError:
            pass
        log.info("no KV relay on node %s yet: starting one", self.node_id)
        handles = start_relays(
            node_ids=[self.node_id],
            budget_bytes=self.conf.relay_budget_mb << 20,
            namespace=self.conf.ray_namespace,
            network={"transport_options": {"max_datagram_size": self.conf.relay_datagram_size}},
        )
        return handles[self.node_id]

    def _call(
        self,
        method: str,
        *args: Any,
        timeout_s: float,
        relay_timeout_s: float | None = None,
        given_up: Callable[[], bool] | None = None,
        **kwargs: Any,
    ) -> Any:
        """``relay.method(*args, **kwargs)``, waited for at most ``timeout_s``; a
        ``relay_timeout_s`` is passed on as the method's own ``timeout_s``. ``given_up``
        (asked every ``_GIVEN_UP_POLL_S``) ends the wait with :class:`HandoffLost`; the relay
        call itself runs on to its own timeout."""
        import ray

        if relay_timeout_s is not None:
            kwargs["timeout_s"] = relay_timeout_s
        until = time.monotonic() + timeout_s
        try:
            ref = getattr(self.relay(), method).remote(*args, **kwargs)
            if given_up is None:
                return ray.get(ref, timeout=timeout_s)
            while True:
                left = until - time.monotonic()
                ready, _ = ray.wait([ref], timeout=max(0.0, min(_GIVEN_UP_POLL_S, left)))
                if ready:
                    return ray.get(ready[0])
                if given_up():
                    raise HandoffLost(f"relay {method}: its producer's hand-off was abandoned")
                if left <= 0:
                    raise ray.exceptions.GetTimeoutError()
        except ray.exceptions.GetTimeoutError:
            raise TimeoutError(f"relay {method}: no answer in {timeout_s:.1f} s") from None
        except ray.exceptions.RayActorError:
            self.forget_relay()
            raise

    def digest_key(self) -> bytes | None:
        """The cluster's payload-digest key: from ``$KVMOQ_CLUSTER_SECRET`` (hex), else the
        secret stored in the cluster's GCS (``kvmoq cluster-secret``), else None (unkeyed
        digests). Read once."""
        if not self._key_known:
            from ray_kvmoq.kvcache.integrity import digest_key
            from ray_kvmoq.relay.actor import read_cluster_secret

            env = os.environ.get("KVMOQ_CLUSTER_SECRET")
            if env:
                secret: bytes | None = bytes.fromhex(env)
            else:
                self.relay()  # joins Ray
                secret = read_cluster_secret()
            self._key = digest_key(secret) if secret else None
            self._key_known = True
            log.info("KV payload digests: %s", "keyed (cluster secret)" if self._key else "unkeyed")
        return self._key

    # ---- scheduler side --------------------------------------------------------------------

    def start_lookup(self, hashes: Sequence[bytes]) -> Any:
        """Look up the longest known prefix of ``hashes``: answered at once from this process's
        copy of the directory while it is current (:func:`~ray_kvmoq.relay.actor.follow_directory`),
        else asked of the directory through the node relay (returns a ref to poll)."""
        relay = self.relay()
        follower = self.directory_view()
        if follower is not None and follower.live:
            return _Answered(follower.longest_prefix(hashes))
        return relay.longest_prefix.remote(list(hashes))

    def directory_view(self) -> DirectoryFollower | None:
        """This process's copy of the directory, started on the first call (joining Ray);
        None when ``directory_view`` or ``load`` is off, or the relay cannot be reached (tried
        again at most every ``_VIEW_RETRY_S``: the scheduler calls this every step)."""
        if self._follower is not None or not (self.conf.directory_view and self.conf.load):
            return self._follower
        if time.monotonic() - self._view_tried_at < _VIEW_RETRY_S:
            return None
        self._view_tried_at = time.monotonic()
        try:
            self.relay()
        except Exception as exc:
            log.debug("no directory view yet: %s", exc)
            return None
        self._follower = follow_directory(self.conf.ray_namespace)
        return self._follower

    def poll_lookup(self, ref: Any) -> list[list[Location]] | None:
        """The lookup's answer if it is there, else None (without waiting)."""
        import ray

        if isinstance(ref, _Answered):
            return ref.chain
        ready, _ = ray.wait([ref], timeout=0)
        if not ready:
            return None
        try:
            return list(ray.get(ready[0]))
        except ray.exceptions.RayActorError:
            self.forget_relay()
            raise

    # ---- worker side -----------------------------------------------------------------------

    def get_group(
        self,
        namespace: Namespace,
        track: bytes,
        group_id: int,
        *,
        timeout_s: float,
        wait_s: float = 0.0,
        given_up: Callable[[], bool] | None = None,
    ) -> list[CachedObject]:
        """The objects of one group through the node relay (zero-copy views on this node; the
        relay pulls the group over MoQT first if another node has it).

        ``wait_s``: a group that does not exist yet anywhere (its producer is still publishing,
        e.g. a PD prefill that just answered) is asked for again every 20 ms for this long.
        ``given_up``: the group's producer may be gone (a PD hand-off whose prefill failed);
        the wait — for the track to appear, or for a group its relay does not have yet — ends
        with :class:`HandoffLost` as soon as ``given_up()`` says so.
        """
        import ray

        deadline = time.monotonic() + timeout_s
        wait_until = time.monotonic() + min(wait_s, timeout_s)
        while True:
            remaining = max(0.05, deadline - time.monotonic())
            try:
                # The relay's own timeout ends the pull; ours only bounds the call around it.
                ref = self._call(
                    "get_group_ref",
                    namespace,
                    track,
                    group_id,
                    timeout_s=remaining + 1.0,
                    relay_timeout_s=remaining,
                    given_up=given_up,
                )
                packed = ray.get(ref, timeout=max(0.05, deadline - time.monotonic()))
                return unpack_group(packed)
            except ray.exceptions.GetTimeoutError:
                raise TimeoutError(f"group {group_id}: not readable in {timeout_s:.1f} s") from None
            except Exception as exc:
                if _relay_code(exc) not in _NOT_YET or time.monotonic() >= wait_until:
                    raise
                if given_up is not None and given_up():
                    raise HandoffLost(
                        f"group {group_id}: not published, and its producer's hand-off was "
                        "abandoned (the prefill failed)"
                    ) from exc
            time.sleep(0.02)

    def prefetch(
        self, namespace: Namespace, track: bytes, group_ids: Sequence[int], *, timeout_s: float
    ) -> Any:
        """Have the node relay pull ``group_ids`` of a track from another node in one pipelined
        batch (never waits; returns the call's ref, or None if it could not be sent). Reads of
        those groups with :meth:`get_group` then wait only for their own group."""
        try:
            return self.relay().prefetch.remote(
                namespace, track, list(group_ids), timeout_s=timeout_s
            )
        except Exception as exc:  # the reads that follow fail and say why
            log.debug("cannot prefetch %d groups: %s", len(group_ids), exc)
            return None

    def publish_group(
        self,
        namespace: Namespace,
        track: bytes,
        group_id: int,
        objects: Sequence[CachedObject] | PackedGroup,
        *,
        chunk_hash: bytes | None,
        end_of_track: bool = False,
        timeout_s: float = 30.0,
    ) -> None:
        """Publish one complete group on the node relay (and index it by ``chunk_hash``)."""
        self._call(
            "publish_group",
            namespace,
            track,
            group_id,
            objects if isinstance(objects, PackedGroup) else list(objects),
            end_of_track=end_of_track,
            chunk_hash=chunk_hash,
            timeout_s=timeout_s,
        )

    def end_track(self, namespace: Namespace, track: bytes, last_group: int) -> None:
        """Mark a track complete after ``last_group``."""
        self._call("end_track", namespace, track, last_group, timeout_s=30.0)

    def flush_directory(self, timeout_s: float = 30.0) -> None:
        """Wait until the directory has seen every group published on the node relay so far."""
        self._call("flush_directory", timeout_s=timeout_s)

    # ---- measured figures ------------------------------------------------------------------

    def report(self, kind: str, value: float, weight: int = 1) -> None:
        """Send a measurement of this node to the figures board (never waits)."""
        try:
            self.relay()  # joins Ray, learns the node id
            if self._board is None:
                self._board = figures_board(self.conf.ray_namespace)
            self._board.report.remote(kind, self.node_id, value, weight)
        except Exception as exc:  # figures are advisory: never fail a request over them
            log.debug("cannot report %s: %s", kind, exc)

    def report_counters(self, source: str, counters: dict[str, int]) -> None:
        """Send this connector side's cumulative counters to the board (never waits)."""
        try:
            self.relay()
            if self._board is None:
                self._board = figures_board(self.conf.ray_namespace)
            self._board.report_counters.remote(source, self.node_id, counters)
        except Exception as exc:
            log.debug("cannot report counters: %s", exc)

    def figures(self, max_age_s: float = 5.0) -> FiguresSnapshot:
        """The last figures read from the board; a refresh is started (not waited for) when
        they are older than ``max_age_s``."""
        import ray

        try:
            if self._figures_ref is not None:
                ready, _ = ray.wait([self._figures_ref], timeout=0)
                if ready:
                    self._figures = FiguresSnapshot.from_dict(ray.get(ready[0]))
                    self._figures_ref = None
            if self._figures_ref is None and time.monotonic() - self._figures_at > max_age_s:
                self.relay()
                if self._board is None:
                    self._board = figures_board(self.conf.ray_namespace)
                self._figures_ref = self._board.snapshot.remote()
                self._figures_at = time.monotonic()
        except Exception as exc:
            log.debug("cannot read the figures board: %s", exc)
            self._figures_ref = None
        return self._figures

    def stats(self) -> dict[str, int]:
        """The node relay's counters."""
        return dict(self._call("stats", timeout_s=10.0))


def _relay_code(exc: BaseException) -> int | None:
    """The MoQT error code of a relay error, also when Ray wrapped it in a RayTaskError."""
    for e in (exc, getattr(exc, "cause", None), exc.__cause__):
        code = getattr(e, "error_code", None)
        if isinstance(code, int):
            return code
    return None
