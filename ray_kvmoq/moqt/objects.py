"""The object model of the KV data path: :class:`MoqtObject` and :class:`Group` (d14 §2.1-2.3).

One object type and one group type serve the MoQT API, the relay cache and the relay's
object-store form, so a KV chunk takes the same shape from the publisher's encode to the
subscriber's decode (see ``docs/benchmarks.md``, "shapes per chunk"):

* :class:`MoqtObject` — one object: group, subgroup and object ids, publisher priority,
  :class:`~ray_kvmoq.moqt.codec.types.ObjectStatus`, extension headers and an opaque payload
  (``bytes`` or a read-only ``memoryview`` of its group's buffer).
* :class:`Group` — a complete group: every payload back to back in **one buffer**, plus one
  row per object (object id, status, priority, subgroup, offset, length) and each object's
  extension headers. Its objects are views of that buffer (:meth:`Group.objects`); nothing is
  copied to read them. Pickled with protocol 5 the buffer travels out of band
  (``pickle.PickleBuffer``), so the Ray object store holds a group as one shared-memory
  buffer and same-node readers map it without a copy.

Copies: :meth:`Group.pack` copies each payload once into the group buffer (the one copy
between a list of objects and the sealed form); :meth:`Group.from_buffer` adopts a buffer
that already holds the payloads back to back (no copy). Writers hand the payload views to the
transport directly, which copies them into its send buffer.

Invariants: ``Group.pack(g, objs).objects() == objs`` for objects of group ``g`` (payload
compared by value); rows are in ascending object id; offsets and lengths tile the buffer.
Pure stdlib (the moqt layer imports no numpy).
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from .codec import Location
from .codec.types import ObjectStatus

__all__ = ["Extensions", "Group", "MoqtObject", "Payload"]

Extensions = tuple[tuple[int, int | bytes], ...]
"""Extension headers of one object, (type, value) in wire order (even types int, odd bytes)."""

Payload = bytes | memoryview
"""An object payload: ``bytes`` or a contiguous byte ``memoryview``."""

Row = tuple[int, int, int, int, int, int]
"""One object of a :class:`Group`: object id, status, priority, subgroup, offset, length."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MoqtObject:
    """One MoQT object, as published, cached and received (d14 §2.1, §10.2)."""

    group: int = 0
    """Group id."""
    object_id: int
    """Object id within the group."""
    payload: Payload = b""
    """Payload (empty for status objects); a read-only view when it comes from a group."""
    subgroup: int = 0
    """Subgroup id."""
    priority: int = 128
    """Publisher priority (0 highest)."""
    extensions: Extensions = ()
    """Extension headers, forwarded unchanged."""
    status: ObjectStatus = ObjectStatus.NORMAL
    """Object status."""

    @property
    def location(self) -> Location:
        """(group, object)."""
        return Location(self.group, self.object_id)

    @property
    def size(self) -> int:
        """Payload bytes (what a cache budget counts)."""
        return len(self.payload)

    @property
    def subgroup_id(self) -> int:
        """Alias of :attr:`subgroup` (the relay cache's earlier name)."""
        return self.subgroup


def _rebuild(
    group_id: int, payload: Any, table: tuple[Row, ...], ext: tuple[Extensions, ...]
) -> Group:
    return Group(group_id, memoryview(payload).cast("B"), table, ext)


class Group:
    """A complete group: one payload buffer, one row per object (see the module docstring)."""

    __slots__ = ("_ext", "_table", "buffer", "group_id")

    def __init__(
        self,
        group_id: int,
        buffer: memoryview,
        table: tuple[Row, ...],
        extensions: tuple[Extensions, ...] | None = None,
    ) -> None:
        self.group_id = group_id
        """Group id."""
        self.buffer = buffer
        """Every payload back to back (a flat byte ``memoryview``; read-only from the store)."""
        self._table = table
        self._ext: tuple[Extensions, ...] = (
            extensions if extensions is not None else ((),) * len(table)
        )

    # ---- building ----------------------------------------------------------------------

    @classmethod
    def pack(cls, group_id: int, objects: Iterable[MoqtObject]) -> Group:
        """Copy the objects' payloads once into one buffer (objects in ascending id)."""
        objs = list(objects)
        buf = bytearray(sum(len(o.payload) for o in objs))
        view = memoryview(buf)
        rows: list[Row] = []
        off = 0
        for o in objs:
            n = len(o.payload)
            view[off : off + n] = o.payload
            rows.append((o.object_id, int(o.status), o.priority, o.subgroup, off, n))
            off += n
        return cls(group_id, view, tuple(rows), tuple(o.extensions for o in objs))

    @classmethod
    def from_payloads(
        cls,
        group_id: int,
        payloads: Sequence[Payload],
        extensions: Sequence[Extensions] | None = None,
        *,
        priority: int = 128,
        subgroup: int = 0,
    ) -> Group:
        """Objects 0..n-1 with these payloads (one copy into the group buffer)."""
        ext = list(extensions) if extensions is not None else [()] * len(payloads)
        return cls.pack(
            group_id,
            (
                MoqtObject(
                    group=group_id,
                    object_id=i,
                    payload=p,
                    extensions=e,
                    priority=priority,
                    subgroup=subgroup,
                )
                for i, (p, e) in enumerate(zip(payloads, ext, strict=True))
            ),
        )

    @classmethod
    def from_buffer(
        cls,
        group_id: int,
        buffer: Payload,
        lengths: Sequence[int],
        extensions: Sequence[Extensions] | None = None,
        *,
        priority: int = 128,
        subgroup: int = 0,
    ) -> Group:
        """Adopt ``buffer`` (payloads of objects 0..n-1 back to back, ``lengths`` bytes each)
        without copying it; the caller must not write to it afterwards."""
        rows: list[Row] = []
        off = 0
        for i, n in enumerate(lengths):
            rows.append((i, int(ObjectStatus.NORMAL), priority, subgroup, off, n))
            off += n
        view = memoryview(buffer).cast("B")
        if off != view.nbytes:
            raise ValueError(f"lengths sum to {off}, the buffer holds {view.nbytes} bytes")
        ext = tuple(extensions) if extensions is not None else None
        if ext is not None and len(ext) != len(rows):
            raise ValueError("one extensions tuple per object")
        return cls(group_id, view, tuple(rows), ext)

    # ---- reading -----------------------------------------------------------------------

    @property
    def table(self) -> tuple[Row, ...]:
        """One row per object: object id, status, priority, subgroup, offset, length."""
        return self._table

    @property
    def extensions(self) -> tuple[Extensions, ...]:
        """Extension headers of each object, in row order."""
        return self._ext

    @property
    def nbytes(self) -> int:
        """Payload bytes of the whole group."""
        return self.buffer.nbytes

    @property
    def payload(self) -> memoryview:
        """Alias of :attr:`buffer` (every payload back to back)."""
        return self.buffer

    def __len__(self) -> int:
        return len(self._table)

    def __iter__(self) -> Iterator[MoqtObject]:
        return iter(self.objects())

    def objects(self) -> list[MoqtObject]:
        """The objects; payloads are views of :attr:`buffer` (no copy)."""
        view, gid = self.buffer, self.group_id
        return [
            MoqtObject(
                group=gid,
                object_id=oid,
                payload=view[off : off + n],
                subgroup=sub,
                priority=prio,
                extensions=ext,
                status=ObjectStatus(status),
            )
            for (oid, status, prio, sub, off, n), ext in zip(self._table, self._ext, strict=True)
        ]

    def last_object_id(self) -> int:
        """Largest object id in the group (-1 when empty)."""
        return self._table[-1][0] if self._table else -1

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Group):
            return NotImplemented
        return (
            self.group_id == other.group_id
            and self._table == other._table
            and self._ext == other._ext
            and self.buffer == other.buffer
        )

    def __hash__(self) -> int:
        return hash((self.group_id, self._table))

    def __repr__(self) -> str:
        return f"Group(group_id={self.group_id}, objects={len(self)}, nbytes={self.nbytes})"

    def __reduce_ex__(self, protocol: Any) -> Any:
        # Protocol 5 (Ray's serializer): the payload buffer goes out of band, so the object
        # store keeps it as one shared-memory buffer and readers get a read-only view of it.
        buf: Any = pickle.PickleBuffer(self.buffer) if protocol >= 5 else bytes(self.buffer)
        return (_rebuild, (self.group_id, buf, self._table, self._ext))
