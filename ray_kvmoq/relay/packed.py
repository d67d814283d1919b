"""A sealed group in the form it takes in the Ray object store: one
:class:`~ray_kvmoq.moqt.api.Group`.

``PackedGroup`` *is* :class:`~ray_kvmoq.moqt.api.Group` (one type from the MoQT API to the
object store): every payload back to back in one buffer, one row per object (object id,
status, priority, subgroup, offset, length) and each object's extension headers. Pickled with
protocol 5 (Ray) the buffer travels out of band, so ``ray.get`` on the same node maps it from
shared memory without a copy, and :func:`unpack_group` hands out payloads as read-only
``memoryview`` slices of that one buffer.

What changed for readers of the earlier numpy form: ``packed.payload`` (alias
``packed.buffer``) is a flat byte ``memoryview`` (read-only from the store: check
``.readonly``, not ``.flags.writeable``; wrap it with ``numpy.frombuffer`` for an array, still
without a copy); ``packed.table`` is a tuple of row tuples; :func:`unpack_group` returns
:class:`~ray_kvmoq.moqt.api.MoqtObject` s (``CachedObject`` is the same class), each with
``.payload`` (bytes-like) and ``.extensions`` (tuple of (type, value)) as before, plus
``.group``. No ``ray`` here: ``actor.py`` does the ``put``.

Invariant: ``unpack_group(pack_group(objs))`` equals ``objs`` (payloads by value).
"""

from __future__ import annotations

from collections.abc import Sequence

from ray_kvmoq.moqt.api import Group, MoqtObject

__all__ = ["PackedGroup", "pack_group", "unpack_group"]

PackedGroup = Group
"""The object-store form of a sealed group (the same class as ``moqt.api.Group``)."""


def pack_group(objects: Sequence[MoqtObject], group_id: int | None = None) -> Group:
    """Flatten a group into one buffer (one copy of the payload bytes).

    ``group_id`` defaults to the first object's ``group``.
    """
    gid = group_id if group_id is not None else (objects[0].group if objects else 0)
    return Group.pack(gid, objects)


def unpack_group(packed: Group) -> list[MoqtObject]:
    """The objects of a packed group; payloads are views of its buffer (no copy)."""
    return packed.objects()
