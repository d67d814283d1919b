"""Sealed groups as flat numpy buffers, the form they take in the Ray object store.

A sealed group becomes one :class:`PackedGroup`: every payload concatenated into one ``uint8``
array, an ``int64`` table with one row per object (object id, status, priority, subgroup,
offset, length), and a tuple of the (rare) extension headers. Numpy arrays inside a tuple go
through Ray's pickle-5 out-of-band path, so ``ray.get`` on the same node maps them from shared
memory without a copy, and :func:`unpack_group` hands out payloads as read-only
``memoryview`` slices of that one buffer. No ``ray`` here: ``actor.py`` does the ``put``.

Invariant: ``unpack_group(pack_group(objs)) == objs`` for any list of :class:`CachedObject`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from .cache import CachedObject

__all__ = ["PackedGroup", "pack_group", "unpack_group"]

_COLS = 6  # object_id, status, priority, subgroup_id, offset, length


class PackedGroup(NamedTuple):
    """One sealed group: payload bytes, per-object table, extensions."""

    payload: np.ndarray
    """All payloads back to back (``uint8``)."""
    table: np.ndarray
    """``int64[n, 6]``: object id, status, priority, subgroup id, offset, length."""
    extensions: tuple[tuple[tuple[int, int | bytes], ...], ...]
    """Extension headers of each object, in row order."""


def pack_group(objects: Sequence[CachedObject]) -> PackedGroup:
    """Flatten a group (one copy of the payload bytes)."""
    sizes = [len(o.payload) for o in objects]
    payload = np.empty(sum(sizes), dtype=np.uint8)
    table = np.empty((len(objects), _COLS), dtype=np.int64)
    off = 0
    for i, (o, n) in enumerate(zip(objects, sizes, strict=True)):
        payload[off : off + n] = np.frombuffer(o.payload, dtype=np.uint8)
        table[i] = (o.object_id, o.status, o.priority, o.subgroup_id, off, n)
        off += n
    return PackedGroup(payload, table, tuple(o.extensions for o in objects))


def unpack_group(packed: PackedGroup) -> list[CachedObject]:
    """The objects of a packed group; payloads are views of ``packed.payload`` (no copy)."""
    view = packed.payload.data.cast("B")
    out = []
    for row, ext in zip(packed.table.tolist(), packed.extensions, strict=True):
        oid, status, prio, sub, off, n = row
        out.append(
            CachedObject(
                object_id=oid,
                payload=view[off : off + n],
                status=status,
                extensions=ext,
                priority=prio,
                subgroup_id=sub,
            )
        )
    return out
