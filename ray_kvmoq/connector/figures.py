"""Measured cost figures, shared across the cluster: what prefill and pulls cost *here*, now.

Whether loading a prefix beats recomputing it depends on the model, the hardware and the
network, so nothing here is a constant: the connector measures every node's prefill speed (the
scheduler times its engine steps) and every node's pull speed (the worker times its loads), the
serving layer adds start-up probes, and all of it lands in one :class:`FiguresBoard` actor
(named ``kvmoq_figures``, detached, in the relays' Ray namespace) as exponentially weighted
averages. The router and each connector read the board every few seconds.

Figures (``kind`` → per-node value):

* ``prefill_s_per_token`` — seconds of engine time per prompt token computed on that node;
* ``decode_s_per_token`` — the seconds one more running sequence adds to a decode step (the
  slope of step time over batch size; what each running request adds to every step);
* ``pull_s_per_byte`` — seconds per encoded KV byte loaded from *another* node (relay pull over
  MoQT plus verify, decode and write);
* ``local_s_per_byte`` — the same for bytes this node's relay already held (zero-copy read).

A node's figure only changes when that node does the work it measures, so a figure measured
badly (a start-up probe beside another engine's start) would keep the router from ever sending
that node the work that would correct it. A figure not refreshed for :data:`STALE_S` seconds
therefore reads as the median of the other nodes' fresh figures of its kind, where any exist:
the node gets work again and measures itself anew (a node that really is slower is tried
again once a minute and pushed back by its new measurements). Start-up probes report
*provisional* figures: the first measurement of real work replaces a provisional figure
instead of averaging with it, and until then the node reads as the lower of its probe and
its peers' fresh measured median (a probe run beside another engine's start measured 10 ms a
token where the node's real steps take 1.3 ms, and priced that node out).

:class:`Figures` is the plain (Ray-free, clock-injected) table; the actor wraps it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "FIGURES_NAME",
    "KINDS",
    "STALE_S",
    "Figures",
    "FiguresBoard",
    "FiguresSnapshot",
    "figures_board",
]

FIGURES_NAME = "kvmoq_figures"
"""Actor name of the board (in the relays' Ray namespace)."""

KINDS = ("prefill_s_per_token", "decode_s_per_token", "pull_s_per_byte", "local_s_per_byte")
"""The figures the board keeps."""

_ALPHA = 0.3

STALE_S = 60.0
"""Seconds after its last measurement a node's figure gives way to its peers' fresh ones."""


@dataclass(frozen=True, kw_only=True)
class FiguresSnapshot:
    """The board's figures at one moment (JSON-able via :meth:`to_dict`)."""

    values: dict[str, dict[str, float]] = field(default_factory=dict)
    """kind → node id → value."""
    samples: dict[str, dict[str, int]] = field(default_factory=dict)
    """kind → node id → how many measurements went in."""
    ages: dict[str, dict[str, float]] = field(default_factory=dict)
    """kind → node id → seconds since its last measurement, when the snapshot was taken."""
    provisional: dict[str, list[str]] = field(default_factory=dict)
    """kind → the nodes whose figure is a start-up probe's, not yet a measurement of real
    work."""

    def get(self, kind: str, node_id: str) -> float | None:
        """The node's figure while fresh; else the median over the fresh figures of the other
        nodes; else the node's own (however old); for a node with none, the median over all
        nodes; else None."""
        per_node = self.values.get(kind, {})
        ages = self.ages.get(kind, {})
        probed = set(self.provisional.get(kind, ()))
        own = per_node.get(node_id)
        if own is not None and ages.get(node_id, 0.0) <= STALE_S:
            if node_id in probed:
                measured = [
                    v
                    for n, v in per_node.items()
                    if n != node_id and n not in probed and ages.get(n, 0.0) <= STALE_S
                ]
                if measured:
                    return min(own, _median(measured))
            return own
        fresh = [v for n, v in per_node.items() if n != node_id and ages.get(n, 0.0) <= STALE_S]
        if fresh:
            return _median(fresh)
        if own is not None:
            return own
        return _median(list(per_node.values())) if per_node else None

    def is_provisional(self, kind: str, node_id: str) -> bool:
        """Whether the node's figure of this kind is still a start-up probe's."""
        return node_id in self.provisional.get(kind, ())

    def to_dict(self) -> dict[str, Any]:
        """Plain dicts (for Serve routing stats, ``kvmoq inspect``, benches)."""
        return {
            "values": self.values,
            "samples": self.samples,
            "ages": self.ages,
            "provisional": self.provisional,
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any] | None) -> FiguresSnapshot:
        """The inverse of :meth:`to_dict` (tolerates missing keys)."""
        d = d or {}
        return cls(
            values=dict(d.get("values", {})),
            samples=dict(d.get("samples", {})),
            ages=dict(d.get("ages", {})),
            provisional=dict(d.get("provisional", {})),
        )


def _median(vals: list[float]) -> float:
    """The (upper) median of a non-empty list."""
    return sorted(vals)[len(vals) // 2]


class Figures:
    """Exponentially weighted figures per (kind, node)."""

    def __init__(self, alpha: float = _ALPHA, clock: Callable[[], float] = time.monotonic) -> None:
        self._alpha = alpha
        self._clock = clock
        self._values: dict[str, dict[str, float]] = {k: {} for k in KINDS}
        self._samples: dict[str, dict[str, int]] = {k: {} for k in KINDS}
        self._at: dict[str, dict[str, float]] = {k: {} for k in KINDS}
        self._probed: dict[str, set[str]] = {k: set() for k in KINDS}

    def report(
        self, kind: str, node_id: str, value: float, weight: int = 1, provisional: bool = False
    ) -> None:
        """Fold a measurement in (``weight`` measurements averaging ``value``); a
        ``provisional`` one (a start-up probe) only stands in until real work is measured."""
        if kind not in self._values:
            raise ValueError(f"unknown figure {kind!r}; known: {', '.join(KINDS)}")
        if not value > 0 or value != value:  # rejects zero, negatives and NaN
            return
        per_node = self._values[kind]
        probed = self._probed[kind]
        old = per_node.get(node_id)
        if provisional:
            if old is not None and node_id not in probed:
                return  # real work already measured this node
            probed.add(node_id)
        elif node_id in probed:
            probed.discard(node_id)
            old = None  # the first real measurement replaces the probe's
        a = 1 - (1 - self._alpha) ** max(1, weight)
        per_node[node_id] = value if old is None else old + a * (value - old)
        self._samples[kind][node_id] = self._samples[kind].get(node_id, 0) + max(1, weight)
        self._at[kind][node_id] = self._clock()

    def snapshot(self) -> FiguresSnapshot:
        """A copy of the current figures."""
        now = self._clock()
        return FiguresSnapshot(
            values={k: dict(v) for k, v in self._values.items()},
            samples={k: dict(v) for k, v in self._samples.items()},
            ages={k: {n: now - at for n, at in v.items()} for k, v in self._at.items()},
            provisional={k: sorted(v) for k, v in self._probed.items() if v},
        )


class FiguresBoard:
    """:class:`Figures` behind an actor's methods (see :func:`figures_board`), plus every
    connector's cumulative counters (``kvmoq inspect``, tests and benches read them here
    instead of scraping each engine's Prometheus endpoint)."""

    def __init__(self) -> None:
        self._f = Figures()
        self._counters: dict[str, dict[str, Any]] = {}

    def report(
        self, kind: str, node_id: str, value: float, weight: int = 1, provisional: bool = False
    ) -> None:
        """Fold a measurement in (see :meth:`Figures.report`)."""
        self._f.report(kind, node_id, value, weight, provisional)

    def snapshot(self) -> dict[str, Any]:
        """The figures as plain dicts (:meth:`FiguresSnapshot.to_dict`)."""
        return self._f.snapshot().to_dict()

    def report_counters(self, source: str, node_id: str, counters: dict[str, int]) -> None:
        """A connector side's counters since it started (``source``: engine and side)."""
        self._counters[source] = {"node_id": node_id, **counters}

    def counters(self) -> dict[str, dict[str, Any]]:
        """source → {node_id, counter: total}."""
        return {k: dict(v) for k, v in self._counters.items()}


def figures_board(namespace: str = "kvmoq") -> Any:
    """The ``kvmoq_figures`` actor (created, detached and restartable, on the head node, if
    absent)."""
    import ray

    from ray_kvmoq.relay.actor import on_head_node

    actor_cls: Any = ray.remote(  # type: ignore[call-overload]  # enable_task_events: not in the stubs
        num_cpus=0, max_restarts=-1, max_task_retries=-1, enable_task_events=False
    )(FiguresBoard)
    return actor_cls.options(
        name=FIGURES_NAME, namespace=namespace, get_if_exists=True, lifetime="detached",
        **on_head_node(),
    ).remote()  # fmt: skip
