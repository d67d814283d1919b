"""The connector's counters: vLLM connector stats, a Prometheus view, and a local snapshot.

Each side (scheduler, worker) counts into a :class:`ConnectorCounters`. vLLM collects worker
stats every step through ``get_kv_connector_stats`` and aggregates them across workers with
:class:`MoqtConnectorStats` (the ``KVConnectorStats`` subclass named by the connector's
``build_kv_connector_stats``); its logging stat logger prints :meth:`MoqtConnectorStats.reduce`
and :class:`MoqtPromMetrics` turns the same numbers into ``vllm:kvmoq_*`` counters. The counters
also accumulate for the life of the process (``totals``) so tests and ``kvmoq inspect`` can
read them without a Prometheus scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.metrics import (
    KVConnectorPromMetrics,
    KVConnectorStats,
)
from vllm.v1.metrics.utils import create_metric_per_engine

__all__ = [
    "COUNTER_NAMES",
    "ConnectorCounters",
    "CounterReporter",
    "MoqtConnectorStats",
    "MoqtPromMetrics",
]


@dataclass
class ConnectorCounters:
    """Counts since the last :meth:`take` (all ints; thread-safe increments via :meth:`add`)."""

    tokens_matched_local: int = 0
    """Prompt tokens the scheduler planned to load from this node's relay."""
    tokens_matched_remote: int = 0
    """Prompt tokens planned to be pulled from another node."""
    tokens_loaded: int = 0
    """Tokens written into vLLM's blocks from loaded groups."""
    groups_loaded: int = 0
    """Groups loaded."""
    bytes_loaded: int = 0
    """Encoded KV bytes loaded (payloads)."""
    groups_saved: int = 0
    """Groups published."""
    bytes_saved: int = 0
    """Encoded KV bytes published."""
    groups_not_admitted: int = 0
    """Whole prompt chunks computed but not published: this engine had seen them fewer than
    ``publish_threshold`` times (the admission rule, ``connector/sightings.py``)."""
    chunks_evicted_seen: int = 0
    """Whole prompt chunks vLLM's prefix cache had held and no longer held when a prompt came
    back with them (evicted repeats: what makes the engine publish on first sight)."""
    requests_first_sight: int = 0
    """Requests whose chunks were admitted on first sight, as evicted repeats were frequent
    (``publish_when_evicting``)."""
    load_errors: int = 0
    """Loads that failed (missing, late, evicted or corrupt group): vLLM recomputed."""
    digest_errors: int = 0
    """Of those, objects whose digest or header did not check out."""
    handoffs_abandoned: int = 0
    """Of those, PD follows stopped because the serving layer reported their prefill lost
    (before ``load_timeout_s`` ran out)."""
    save_errors: int = 0
    """Groups that could not be published."""
    lookup_errors: int = 0
    """Directory lookups that failed (the request was computed)."""
    lookup_timeouts: int = 0
    """Directory lookups slower than ``lookup_timeout_s``."""
    lookups_answered_at_once: int = 0
    """Directory lookups answered in the scheduler step that made them (from this process's
    copy of the directory), so the request waited no step for them."""
    lookups_skipped: int = 0
    """Requests whose every whole chunk vLLM's own prefix cache held: no directory round trip."""
    pulls_declined: int = 0
    """Prefixes held on another node that were recomputed because the measured pull is slower."""
    pulls_probed: int = 0
    """Pulls made although the figures said recompute, to measure them again (one per 30 s)."""
    requests_finished: int = 0
    """Requests the engine finished (any reason)."""
    requests_aborted: int = 0
    """Of those, requests aborted before their end (a client that went away, a cancelled call)."""
    tokens_not_generated: int = 0
    """Output tokens aborted requests were allowed but never generated (``max_tokens`` minus
    the tokens they had): generation stopped when the client left."""
    encode_us: int = 0
    """Microseconds spent encoding."""
    decode_us: int = 0
    """Microseconds spent verifying and decoding."""
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    _totals: dict[str, int] = field(default_factory=dict, repr=False, compare=False)

    def add(self, **deltas: int) -> None:
        """Add ``deltas`` to the named counters (this interval's and the totals)."""
        with self._lock:
            for k, v in deltas.items():
                setattr(self, k, getattr(self, k) + int(v))
                self._totals[k] = self._totals.get(k, 0) + int(v)

    def count_match(self, tokens: int, *, remote: bool) -> None:
        """Tokens the scheduler planned to load."""
        self.add(**{"tokens_matched_remote" if remote else "tokens_matched_local": tokens})

    def take(self) -> dict[str, int]:
        """This interval's counts (since the last call), reset to zero."""
        with self._lock:
            out = {n: getattr(self, n) for n in COUNTER_NAMES}
            for n in COUNTER_NAMES:
                setattr(self, n, 0)
        return out

    def totals(self) -> dict[str, int]:
        """Counts since the process started."""
        with self._lock:
            return {n: self._totals.get(n, 0) for n in COUNTER_NAMES}


COUNTER_NAMES = tuple(f.name for f in fields(ConnectorCounters) if not f.name.startswith("_"))


class CounterReporter:
    """Sends a side's cumulative counters (``totals``) with ``send`` whenever they changed: at
    once if the last send is ``period_s`` old, else by a timer at the end of the period.

    Call :meth:`poke` wherever counts change, on any thread: an engine that falls idle makes no
    more steps, so a publish that finishes on its own thread after the request's last step, or
    an abort, would otherwise not reach the board until the next request."""

    def __init__(
        self,
        counters: ConnectorCounters,
        send: Callable[[dict[str, int]], None],
        period_s: float,
    ) -> None:
        self._counters = counters
        self._send = send
        self.period_s = period_s
        self._lock = threading.Lock()
        self._sent: dict[str, int] = {}
        self._sent_at = -period_s
        self._timer: threading.Timer | None = None

    def poke(self) -> None:
        """Send the totals if they changed since the last send (now, or when the period ends)."""
        with self._lock:
            totals = self._counters.totals()
            if totals == self._sent:
                return
            wait = self._sent_at + self.period_s - time.monotonic()
            if wait > 0:
                if self._timer is None or not self._timer.is_alive():
                    self._timer = threading.Timer(wait + 0.01, self.poke)
                    self._timer.daemon = True
                    self._timer.start()
                return
            self._sent, self._sent_at = totals, time.monotonic()
        self._send(totals)

    def cancel(self) -> None:
        """Stop a pending timer (shutdown)."""
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()


@dataclass
class MoqtConnectorStats(KVConnectorStats):
    """vLLM's per-interval connector stats: ``data`` maps counter name → count."""

    def reset(self) -> None:
        self.data = {}

    def aggregate(self, other: KVConnectorStats) -> KVConnectorStats:
        for k, v in (other.data or {}).items():
            self.data[k] = self.data.get(k, 0) + v
        return self

    def reduce(self) -> dict[str, int | float]:
        return {k: v for k, v in self.data.items() if v}

    def is_empty(self) -> bool:
        return not any(self.data.values())


class MoqtPromMetrics(KVConnectorPromMetrics):
    """``vllm:kvmoq_<counter>_total`` Prometheus counters, one per :data:`COUNTER_NAMES`."""

    def __init__(
        self,
        vllm_config: Any,
        metric_types: dict[type, type],
        labelnames: list[str],
        per_engine_labelvalues: dict[int, list[object]],
    ) -> None:
        super().__init__(vllm_config, metric_types, labelnames, per_engine_labelvalues)
        self._counters = {
            name: create_metric_per_engine(
                self._counter_cls(
                    name=f"vllm:kvmoq_{name}",
                    documentation=f"MoQT KV connector: {name.replace('_', ' ')}",
                    labelnames=labelnames,
                ),
                per_engine_labelvalues,
            )
            for name in COUNTER_NAMES
        }

    def observe(self, transfer_stats_data: dict[str, Any], engine_idx: int = 0) -> None:
        for name, value in transfer_stats_data.items():
            per_engine = self._counters.get(name)
            if per_engine is not None and value:
                per_engine[engine_idx].inc(value)  # type: ignore[union-attr]  # Counters only
