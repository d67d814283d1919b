"""What the relay core exchanges with its callers and upstreams: track events, the
:class:`Upstream` and :class:`DirectoryClient` protocols, :class:`RelayError`, name helpers.

No I/O here; :mod:`.relay` is the core, :mod:`.upstream` implements :class:`Upstream` over MoQT,
``actor.py`` implements :class:`DirectoryClient` over the directory actor.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import Protocol

from ray_kvmoq.moqt.api import Group, MoqtObject

from .directory import Directory, NodeInfo

__all__ = [
    "INTERNAL_ERROR",
    "TIMEOUT",
    "TRACK_DOES_NOT_EXIST",
    "DirectoryClient",
    "GroupEnded",
    "LocalDirectoryClient",
    "ObjectReceived",
    "RelayError",
    "TrackEnded",
    "TrackEvent",
    "Upstream",
    "as_namespace",
    "as_track",
]

Namespace = tuple[bytes, ...]

# Request error codes shared by SUBSCRIBE_ERROR and FETCH_ERROR (draft-14 §13.1.2, §13.1.5).
INTERNAL_ERROR = 0x0
TIMEOUT = 0x2
TRACK_DOES_NOT_EXIST = 0x4


class RelayError(Exception):
    """A track or group could not be served. ``error_code`` is a d14 request error code."""

    def __init__(self, error_code: int, reason: str) -> None:
        super().__init__(f"{reason} (error 0x{error_code:x})")
        self.error_code = error_code
        self.reason = reason

    def __reduce__(self) -> tuple[type[RelayError], tuple[int, str]]:
        return (RelayError, (self.error_code, self.reason))  # crosses Ray task boundaries


@dataclass(frozen=True, kw_only=True, slots=True)
class ObjectReceived:
    """An object of a track, in group order and ascending object id within a group."""

    group_id: int
    """Group the object belongs to."""
    obj: MoqtObject
    """The object, exactly as published."""


@dataclass(frozen=True, kw_only=True, slots=True)
class GroupEnded:
    """Every object of ``group_id`` has been delivered (the subgroup stream may FIN)."""

    group_id: int
    """The completed group."""


@dataclass(frozen=True, kw_only=True, slots=True)
class TrackEnded:
    """The track is complete; nothing follows."""


TrackEvent = ObjectReceived | GroupEnded | TrackEnded


class Upstream(Protocol):
    """Where a relay gets a track it does not have (a peer relay or an external publisher).

    Both methods return once the upstream accepted the request (SUBSCRIBE_OK / FETCH_OK) and
    raise :class:`RelayError` if it refused; the iterator then raises RelayError on failure.
    ``parallelism`` (optional attribute, default 1): how many ``fetch_groups`` calls the
    upstream serves at once without queueing them (its number of connections).
    """

    async def subscribe(self, namespace: Namespace, track: bytes) -> AsyncIterator[TrackEvent]:
        """Every object of the track from the start, live."""
        ...

    async def fetch_groups(
        self, namespace: Namespace, track: bytes, first: int, last: int
    ) -> AsyncIterator[Group]:
        """The complete groups ``first..last`` (inclusive) the upstream has, ascending, each as
        one :class:`~ray_kvmoq.moqt.api.Group` (one FETCH for the whole range)."""
        ...


class DirectoryClient(Protocol):
    """The relay's view of the cluster directory (a local object or the Ray actor)."""

    async def register_node(self, info: NodeInfo) -> None:
        """Announce where this node's relay listens."""

    async def add_groups(
        self,
        node_id: str,
        namespace: Namespace,
        track: bytes,
        groups: list[int],
        hashes: dict[int, bytes],
    ) -> None:
        """Record groups this node caches."""

    async def remove_groups(
        self, node_id: str, namespace: Namespace, track: bytes, groups: list[int]
    ) -> None:
        """Forget groups this node evicted."""

    async def locate(self, namespace: Namespace, track: bytes) -> list[NodeInfo]:
        """Relays holding any group of the track."""
        ...


class LocalDirectoryClient:
    """A :class:`DirectoryClient` over an in-process :class:`Directory` (tests, plain relay)."""

    def __init__(self, directory: Directory | None = None) -> None:
        self.directory = directory if directory is not None else Directory()

    async def register_node(self, info: NodeInfo) -> None:
        self.directory.register_node(info)

    async def add_groups(
        self,
        node_id: str,
        namespace: Namespace,
        track: bytes,
        groups: list[int],
        hashes: dict[int, bytes],
    ) -> None:
        self.directory.add_groups(node_id, namespace, track, groups, hashes)

    async def remove_groups(
        self, node_id: str, namespace: Namespace, track: bytes, groups: list[int]
    ) -> None:
        self.directory.remove_groups(node_id, namespace, track, groups)

    async def locate(self, namespace: Namespace, track: bytes) -> list[NodeInfo]:
        infos = (self.directory.node(n) for n in self.directory.nodes_for(namespace, track))
        return [i for i in infos if i is not None]


def as_namespace(namespace: Iterable[str | bytes] | str) -> Namespace:
    """Normalise a namespace: a tuple of str/bytes fields, or a ``/``-separated string."""
    if isinstance(namespace, str):
        namespace = namespace.split("/")
    return tuple(f.encode() if isinstance(f, str) else bytes(f) for f in namespace)


def as_track(track: str | bytes) -> bytes:
    """Normalise a track name to bytes."""
    return track.encode() if isinstance(track, str) else bytes(track)
