"""CPU used by each part of a serving stack, from every process's CPU times (``psutil``).

``kvmoq bench serve`` runs its whole cluster on this machine, so the processes on it are the
stack: vLLM's workers and engine cores, Serve's replicas, ingress, proxies and controller, our
relays and data planes, Ray's own daemons, and vLLM's benchmark client. :class:`CpuSampler`
reads every process's CPU time (user + system, ``psutil``'s ``cpu_times``) every ``interval_s``
on a thread while a row is driven, and :meth:`CpuSampler.stop` gives the cores each part used
over the window (CPU seconds / wall seconds). A process that starts in the window counts from
zero; one that exits counts up to its last sample. Anything else on the machine shows as
``other``, so read these figures from a quiet machine.
"""

from __future__ import annotations

import re
import threading
import time

import psutil

# (part, pattern over the process's command line or title), first match wins
PARTS: tuple[tuple[str, str], ...] = (
    ("vllm worker", r"VLLM::Worker"),
    ("vllm engine core", r"VLLM::EngineCor"),  # the kernel keeps 15 characters of a title
    ("serve ingress", r"ServeReplica:[^ ]*(Ingress|OpenAi)"),
    ("serve LLM replica", r"ServeReplica:"),
    ("serve proxy", r"ProxyActor"),
    ("serve controller", r"ServeController"),
    ("kvmoq relay", r"RelayActor|DataPlaneActor"),
    ("kvmoq directory + figures", r"DirectoryActor|FiguresBoard"),
    ("serve LLM prefix tree", r"PrefixTreeActor"),  # stock's PrefixCacheAffinityRouter
    ("ray gcs", r"gcs_server"),
    ("ray raylet", r"raylet"),
    ("bench client", r"vllm\.utils\.argparse_utils|vllm bench"),
    ("ray other", r"ray::|/ray/"),
)
_COMPILED = tuple((part, re.compile(pat)) for part, pat in PARTS)


def part_of(name: str) -> str:
    """The part a process belongs to, by its command line or title (``other`` if none)."""
    for part, pat in _COMPILED:
        if pat.search(name):
            return part
    return "other"


def read_process(pid: int | str) -> tuple[str, float] | None:
    """A process's command line (or title) and its CPU seconds so far; None if it is gone."""
    try:
        p = psutil.Process(int(pid))
        with p.oneshot():
            cpu = p.cpu_times()
            name = " ".join(p.cmdline()).strip() or p.name()
    except (psutil.Error, ValueError):
        return None
    return name, cpu.user + cpu.system


class CpuSampler:
    """Cores used by each part while it runs: ``with CpuSampler() as s: ...``, then ``s.cores``
    (part -> cores, busiest first) over ``s.wall_s`` seconds."""

    def __init__(self, interval_s: float = 2.0) -> None:
        self._interval = interval_s
        self._first: dict[int, float] = {}
        self._last: dict[int, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self.cores: dict[str, float] = {}
        self.wall_s = 0.0

    def _sample(self, first: bool) -> None:
        for pid in psutil.pids():
            seen = read_process(pid)
            if seen is None:
                continue
            self._first.setdefault(pid, seen[1] if first else 0.0)
            self._last[pid] = seen

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self._sample(first=False)

    def start(self) -> CpuSampler:
        """Take the first sample and go on sampling on a thread."""
        self._t0 = time.monotonic()
        self._sample(first=True)
        self._thread = threading.Thread(target=self._run, name="cpu-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> dict[str, float]:
        """Take the last sample; the cores each part used since :meth:`start`, busiest first."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample(first=False)
        self.wall_s = wall = max(time.monotonic() - self._t0, 1e-9)
        used: dict[str, float] = {}
        for pid, (name, cpu_s) in self._last.items():
            part = part_of(name)
            used[part] = used.get(part, 0.0) + max(0.0, cpu_s - self._first[pid]) / wall
        self.cores = {
            k: round(v, 3) for k, v in sorted(used.items(), key=lambda kv: -kv[1]) if v >= 0.001
        }
        return self.cores

    def __enter__(self) -> CpuSampler:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
