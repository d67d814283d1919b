"""The relay's data plane on more than one core: K processes per node, each with its own QUIC
endpoint, that move sealed groups between nodes while the relay actor keeps the cache.

Transport-agnostic parts (the Ray actors that host them live in ``actor.py``):

* :class:`DataPlaneHandler` answers FETCH on a data-plane endpoint (and nothing else): it asks
  a *source* — the node's relay, through the object store — for the sealed groups of the
  range and writes each one as soon as it is at hand (payload views of the shared buffer go
  straight to the QUIC send buffer). Tokens are checked as on the relay's own endpoint.
* :class:`DataPlane` is one endpoint: that server plus a pool of client sessions to other
  nodes' data planes; :meth:`DataPlane.pull` is one range FETCH whose groups come back as
  :class:`~ray_kvmoq.moqt.api.Group` s.
* :class:`StripedUpstream` is the :class:`~.events.Upstream` a relay uses for a peer that runs
  data planes: live SUBSCRIBEs still go to the peer relay itself, and every ``fetch_groups``
  goes to one of the K local data planes, round robin, each talking to the peer's data plane
  of the same index. ``parallelism = K``, so the relay keeps K times as many FETCHes in
  flight: a pull's groups are striped over K connections, each driven by its own process.

Same-node readers never touch a data plane: they read the relay's object-store refs.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from ray_kvmoq.moqt import api
from ray_kvmoq.moqt.api import Group
from ray_kvmoq.moqt.codec import FetchErrorCode, Location, SubscribeErrorCode

from .auth import TokenVerifier
from .directory import NodeInfo
from .downstream import GuardedHandler, RelayNetwork
from .events import RelayError, TrackEvent, Upstream
from .security import ClusterSecurity

__all__ = ["DataPlane", "DataPlaneHandler", "GroupSource", "StripedUpstream"]

Namespace = tuple[bytes, ...]

GroupSource = Callable[
    [Namespace, bytes, int, int], Awaitable[tuple[list[tuple[int, Awaitable[Group]]], bool]]
]
"""``source(namespace, track, first, last)`` → ((group id, awaitable group) for each
available group of ``first..last``, ascending; whether the last of them ends the track).
Raises RelayError."""

PullFn = Callable[[int, NodeInfo, Namespace, bytes, int, int], AsyncIterator[Group]]
"""``pull(plane_index, peer, namespace, track, first, last)``: groups from one data plane."""


class DataPlaneHandler(GuardedHandler):
    """Serves FETCH of whole groups from a :data:`GroupSource`; refuses everything else."""

    def __init__(self, source: GroupSource, verifier: TokenVerifier | None) -> None:
        super().__init__(verifier)
        self.source = source

    async def on_subscribe(
        self, session: api.MoqtConnection, request: api.SubscribeRequest
    ) -> None:
        raise api.RequestError(SubscribeErrorCode.NOT_SUPPORTED, "a data plane serves FETCH only")

    async def on_fetch(self, session: api.MoqtConnection, request: api.FetchRequest) -> None:
        ns, name = request.track.namespace, request.track.name
        self._authorize(request.auth_tokens, "subscribe", ns)
        if request.start is None or request.end is None:
            raise api.RequestError(FetchErrorCode.NOT_SUPPORTED, "joining FETCH on a data plane")
        try:
            groups, ends_track = await self.source(ns, name, request.start.group, request.end.group)
        except RelayError as exc:
            raise api.RequestError(exc.error_code, exc.reason) from None
        if not groups:
            raise api.RequestError(FetchErrorCode.NO_OBJECTS, "no groups in range")
        writer = request.accept(end=Location(groups[-1][0], 0), end_of_track=ends_track)
        for _, pending in groups:
            writer.write_group(await pending)
            await writer.drain()
        writer.end()


class DataPlane:
    """One data-plane endpoint: a FETCH-only server and a client pool (see the module doc)."""

    def __init__(
        self,
        *,
        node_id: str,
        host: str,
        port: int = 0,
        security: ClusterSecurity | None = None,
        idle_timeout_s: float = 3.0,
        transport_options: dict[str, Any] | None = None,
    ) -> None:
        self.net = RelayNetwork(
            node_id=node_id,
            host=host,
            port=port,
            security=security,
            idle_timeout_s=idle_timeout_s,
            transport_options=transport_options,
        )

    @property
    def port(self) -> int:
        """The bound UDP port (after :meth:`start`)."""
        return self.net.port

    async def start(self, source: GroupSource) -> int:
        """Listen; returns the bound UDP port."""
        verifier = self.net.verifier
        return await self.net.serve(lambda: DataPlaneHandler(source, verifier))

    async def pull(
        self, peer: NodeInfo, namespace: Namespace, track: bytes, first: int, last: int
    ) -> AsyncIterator[Group]:
        """Groups ``first..last`` from the data plane at ``peer`` (one range FETCH)."""
        up = await self.net.connect(peer)
        async for group in await up.fetch_groups(namespace, track, first, last):
            yield group

    async def close(self) -> None:
        """Stop listening and close every session."""
        await self.net.close()


class StripedUpstream:
    """An Upstream over K local data planes to a peer's K data planes (see the module doc)."""

    def __init__(self, control: Upstream, peer: NodeInfo, planes: int, pull: PullFn) -> None:
        if not peer.data_ports or planes < 1:
            raise ValueError("a striped upstream needs data planes on both ends")
        self.control = control
        self.peer = peer
        self.parallelism = min(planes, len(peer.data_ports))
        """Connections a pull is striped over."""
        self._pull = pull
        self._next = itertools.cycle(range(self.parallelism))

    async def subscribe(self, namespace: Namespace, track: bytes) -> AsyncIterator[TrackEvent]:
        return await self.control.subscribe(namespace, track)

    async def fetch_groups(
        self, namespace: Namespace, track: bytes, first: int, last: int
    ) -> AsyncIterator[Group]:
        index = next(self._next)
        peer = NodeInfo(
            node_id=self.peer.node_id,
            host=self.peer.host,
            port=self.peer.data_ports[index],
            data_ports=self.peer.data_ports,
        )
        return self._pull(index, peer, namespace, track, first, last)
