"""Which CPU cores the connector's own threads run on, in a vLLM CPU worker.

vLLM's CPU worker binds its OpenMP threads one core each (``VLLM_CPU_OMP_THREADS_BIND``, or
its automatic binding, which leaves ``VLLM_CPU_NUM_OF_RESERVED_CPU`` cores for everything
else). The main thread is OpenMP thread 0, and a thread inherits its creator's binding, so every
thread started after that — the connector's publisher and loader, and Ray's own threads when the
connector joins the cluster from the worker — would share the first engine core with the
forward pass. Measured with ``kvmoq bench serve``'s engine settings (SmolLM2, 128-token steps,
one core per engine): a cold 1,088-token prefill took 1.14 s with publishing on and 0.87 s with
it off, while the core next to it sat idle.

:func:`spare_cores` finds the cores the worker's process may use that no engine thread is bound
to; :func:`pin_thread` moves the calling thread there. The connector starts its threads (and
joins Ray from one of them) pinned that way, so encoding, digests and relay calls run beside the
forward pass instead of inside its time slices. With no spare core (the engine binds every core
the process may use) nothing changes.

Only under vLLM's automatic binding (``VLLM_CPU_OMP_THREADS_BIND`` unset or ``auto``): there the
cores it leaves are the ones it reserves for other work. An explicit binding names the cores of
*this* engine only, and the rest may be another engine's (``kvmoq bench serve`` binds its two
engines one core each, so each one's "spare" core is the other's engine core). There the
operator's layout stands, and the threads stay where vLLM started them.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

__all__ = ["BIND_ENV", "pin_thread", "spare_cores", "spare_of"]

log = logging.getLogger(__name__)


def spare_of(allowed: Iterable[int], thread_masks: Iterable[Iterable[int]]) -> frozenset[int]:
    """The cores in ``allowed`` that no thread is bound to.

    A thread counts as bound when its mask is a strict subset of ``allowed`` (vLLM's OpenMP
    threads, one core each, and the threads that inherited the main thread's binding); threads
    free to run anywhere in ``allowed`` say nothing about the engine."""
    free = frozenset(allowed)
    bound: set[int] = set()
    for mask in thread_masks:
        m = frozenset(mask)
        if m and m < free:
            bound |= m
    return free - bound


def _thread_masks() -> list[frozenset[int]]:
    """The CPU affinity of each thread of this process (from ``/proc``)."""
    out = []
    for status in Path("/proc/self/task").glob("*/status"):
        try:
            text = status.read_text()
        except OSError:
            continue  # the thread ended
        for line in text.splitlines():
            if line.startswith("Cpus_allowed_list:"):
                out.append(_parse_list(line.split(":", 1)[1]))
    return out


def _parse_list(text: str) -> frozenset[int]:
    """``"0-2,5"`` → {0, 1, 2, 5} (the kernel's CPU list format)."""
    cores: set[int] = set()
    for part in text.strip().split(","):
        if not part:
            continue
        lo, _, hi = part.partition("-")
        cores.update(range(int(lo), int(hi or lo) + 1))
    return frozenset(cores)


BIND_ENV = "VLLM_CPU_OMP_THREADS_BIND"


def spare_cores() -> frozenset[int]:
    """The cores this process may use that none of its threads is bound to (empty when it
    cannot tell, when there are none, or when the engine's binding is not vLLM's automatic
    one: see the module docstring).

    What the process may use is its parent's affinity (vLLM starts the worker from the engine
    core process, or runs it in that process, whose parent is unbound) together with this
    process's own threads' masks."""
    if os.environ.get(BIND_ENV, "auto") != "auto":
        return frozenset()
    try:
        masks = _thread_masks()
        allowed = set(os.sched_getaffinity(os.getppid()))
        for m in masks:
            allowed |= m
        return spare_of(allowed, masks)
    except (OSError, ValueError) as exc:
        log.debug("cannot read CPU affinities: %s", exc)
        return frozenset()


def pin_thread(cores: frozenset[int]) -> None:
    """Run the calling thread on ``cores`` (nothing when empty, or when the OS refuses)."""
    if not cores:
        return
    try:
        os.sched_setaffinity(0, cores)  # Linux: 0 is the calling thread
    except OSError as exc:
        log.debug("cannot move thread to cores %s: %s", sorted(cores), exc)
