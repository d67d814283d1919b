"""A pytest plugin that records what the MoQT parsers are fed during real test sessions, as
seeds for the ``control``, ``data_stream`` and ``datagram`` targets (quiche's
``gen_fuzz_seeds`` idea: real peers make the best seeds).

Used by ``make_seeds.py``; it patches the parser entry points of the public codec for the
length of one pytest run, keeps each parser instance's whole input (one stream), and writes at
most ``LIMIT`` distinct seeds per target, preferring distinct leading bytes, then short ones.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from pathlib import Path
from typing import Any

from ray_kvmoq.moqt import codec
from ray_kvmoq.moqt.codec import control, datagrams, streams

LIMIT = 120
MAX_SEED = 8192
_streams: dict[str, dict[int, bytearray]] = defaultdict(dict)
_datagrams: list[bytes] = []
_keep: list[Any] = []  # parsers stay alive so id() keys stay unique


def _wrap_feed(cls: type, target: str) -> None:
    orig = cls.feed

    def feed(self: Any, data: Any, *, fin: bool = False) -> Any:
        buf = _streams[target].get(id(self))
        if buf is None:
            buf = _streams[target][id(self)] = bytearray()
            _keep.append(self)
        if len(buf) < MAX_SEED:
            buf += bytes(data)[: MAX_SEED - len(buf)]
        return orig(self, data, fin=fin)

    cls.feed = feed  # type: ignore[attr-defined]


def _wrap_datagram() -> None:
    orig = datagrams.decode_datagram

    def decode(data: Any, *, version: int) -> Any:
        _datagrams.append(bytes(data)[:MAX_SEED])
        return orig(data, version=version)

    for mod in (datagrams, codec):
        mod.decode_datagram = decode  # type: ignore[attr-defined]


_wrap_feed(control.ControlStreamParser, "control")
_wrap_feed(streams.DataStreamParser, "data_stream")
_wrap_datagram()


def _pick(seeds: list[bytes]) -> list[bytes]:
    unique = sorted({s for s in seeds if s}, key=lambda s: (len(s), s))
    by_lead: dict[bytes, bytes] = {}
    for s in unique:
        by_lead.setdefault(s[:3], s)
    chosen = list(by_lead.values())[:LIMIT]
    for s in unique:
        if len(chosen) >= LIMIT:
            break
        if s not in chosen:
            chosen.append(s)
    return chosen


def pytest_sessionfinish(session: Any, exitstatus: int) -> None:
    out = Path(os.environ["KVMOQ_SEED_DIR"])
    found = {t: [bytes(b) for b in d.values()] for t, d in _streams.items()}
    found["datagram"] = _datagrams
    for target, seeds in found.items():
        d = out / target
        d.mkdir(parents=True, exist_ok=True)
        for s in _pick(seeds):
            (d / ("live-" + hashlib.sha1(s).hexdigest()[:16])).write_bytes(s)
