"""asyncio application API for MoQT draft-14: sessions, requests as awaitables, objects as async
iterators, and a per-session handler for everything the peer asks of us.

Layers (STYLE rule 2): ``aio.FastQuicProtocol`` (QUIC + fast path) feeds QUIC events to the
sans-I/O :class:`~ray_kvmoq.moqt.session.MoqtSession`; :class:`MoqtConnection` turns the
session's events into futures, queues and handler calls, and its commands back into session
calls followed by one transmit per loop turn. Nothing here parses bytes.

Shape (the relay builds on it):

* :func:`serve` accepts many sessions; each gets its own :class:`SessionHandler` from a factory.
  The handler's control-plane methods (``on_setup``, ``on_publish_namespace``,
  ``on_subscribe_namespace``, ``on_subscribe``, ``on_fetch``, ...) receive each request with its
  AUTHORIZATION_TOKENs and answer asynchronously: ``request.accept(...)`` returns a writer for
  the data plane (:class:`Publication`, :class:`FetchWriter`); ``request.reject(code)`` or
  raising :class:`RequestError` refuses. A handler method that returns without answering is
  answered INTERNAL_ERROR.
* :func:`connect` yields the same :class:`MoqtConnection` on the client side: it subscribes and
  fetches (async iterators of :class:`MoqtObject`) and, with a handler, publishes on the same
  session (``publish_namespace`` + serving the peer's SUBSCRIBE/FETCH).
* :class:`TrackSource` is the application-provided data behind a track; :class:`MemoryTrack`
  keeps recent groups in memory and :class:`TrackServer` is a handler serving a set of sources.

Invariants: one subgroup stream per group written; objects are never reordered within a stream;
every waiting iterator or writer fails with :class:`SessionClosed` as soon as the session ends
(peer close, idle timeout, protocol error), so a dead peer ends every ``async for`` within the
QUIC idle timeout at most.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from .aio import FastQuicProtocol, QuicEndpoint, TransportConfig, connect_quic, serve_quic
from .api_types import (
    Cancelled,
    FetchRequest,
    FetchStream,
    FetchWriter,
    FullTrackName,
    GroupWriter,
    MoqtApiError,
    MoqtObject,
    NamespaceRequest,
    Publication,
    RequestError,
    SessionClosed,
    SessionHandler,
    SubscribeRequest,
    Subscription,
)
from .certs import (
    CertificateAuthority,
    LeafCertificate,
    PemPaths,
    generate_ca,
    issue_certificate,
    self_signed,
    write_pem_files,
)
from .connection import MoqtConnection
from .objects import Group
from .session import MoqtSession, SessionConfig
from .tracks import MemoryTrack, TrackServer, TrackSource

__all__ = [
    "Cancelled",
    "CertificateAuthority",
    "FastQuicProtocol",
    "FetchRequest",
    "FetchStream",
    "FetchWriter",
    "FullTrackName",
    "Group",
    "GroupWriter",
    "LeafCertificate",
    "MemoryTrack",
    "MoqtApiError",
    "MoqtConnection",
    "MoqtObject",
    "MoqtServer",
    "MoqtSession",
    "MoqtUrl",
    "NamespaceRequest",
    "PemPaths",
    "Publication",
    "QuicEndpoint",
    "RequestError",
    "SessionClosed",
    "SessionConfig",
    "SessionHandler",
    "SubscribeRequest",
    "Subscription",
    "TrackServer",
    "TrackSource",
    "TransportConfig",
    "connect",
    "connect_quic",
    "generate_ca",
    "issue_certificate",
    "self_signed",
    "serve",
    "serve_quic",
    "write_pem_files",
]

MoqtError = MoqtApiError
"""Alias of :class:`MoqtApiError` for early users of ``api.MoqtError`` (not in ``__all__``:
the package's ``MoqtError`` is the codec's protocol error)."""


# ------------------------------------------------------------------------------ endpoints


@dataclass(frozen=True, kw_only=True)
class MoqtUrl:
    """A parsed ``moqt://host:port/path?query`` URL (raw QUIC, d14 §3.1.2)."""

    host: str
    """Host name or address."""
    port: int
    """UDP port."""
    path: str
    """``/path?query`` sent as the PATH setup parameter (may be empty)."""

    @classmethod
    def parse(cls, url: str) -> MoqtUrl:
        """Parse; raises ValueError with a hint on anything but ``moqt://host:port[/path]``."""
        parts = urlsplit(url)
        if parts.scheme != "moqt" or not parts.hostname or parts.port is None:
            raise ValueError(f"expected moqt://HOST:PORT[/path], got {url!r}")
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        return cls(host=parts.hostname, port=parts.port, path=path)

    @property
    def authority(self) -> str:
        """``host:port`` (the AUTHORITY setup parameter)."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{host}:{self.port}"


class MoqtServer:
    """A listening MoQT endpoint; ``sessions`` holds the live ones."""

    def __init__(self) -> None:
        self.sessions: set[MoqtConnection] = set()
        self.port = 0
        self.host = ""
        self._listener: Any = None

    def close(self) -> None:
        """Close every session and the socket."""
        if self._listener is not None:
            self._listener.close()


async def serve(
    host: str,
    port: int,
    *,
    transport: TransportConfig,
    handler_factory: Callable[[], SessionHandler] = SessionHandler,
    session_config: SessionConfig | None = None,
    **connection_options: Any,
) -> MoqtServer:
    """Listen for MoQT sessions (raw QUIC, the ALPNs of ``transport``: ``moqt-16`` preferred,
    then ``moq-00``); each gets ``handler_factory()``.

    ``connection_options`` go to :class:`MoqtConnection` (``send_buffer``, ``request_timeout``).
    """
    server = MoqtServer()

    def on_connection(protocol: QuicEndpoint) -> None:
        conn = MoqtConnection(
            protocol,
            is_client=False,
            session_config=session_config,
            handler=handler_factory(),
            **connection_options,
        )
        server.sessions.add(conn)
        conn._closed_callbacks.append(lambda: server.sessions.discard(conn))

    listener = await serve_quic(host, port, config=transport, on_connection=on_connection)
    server._listener, server.port, server.host = listener, listener.port, host
    return server


@contextlib.asynccontextmanager
async def connect(
    url: str,
    *,
    transport: TransportConfig,
    session_config: SessionConfig | None = None,
    handler: SessionHandler | None = None,
    timeout: float = 10.0,
    **connection_options: Any,
) -> AsyncIterator[MoqtConnection]:
    """Connect to ``moqt://host:port[/path]``; yield the session once SETUP completed; close on
    exit. Raises ``ConnectionError``/``TimeoutError``/:class:`SessionClosed` on failure."""
    target = MoqtUrl.parse(url)
    config = session_config or SessionConfig()
    config = dataclasses.replace(
        config,
        path=config.path if config.path is not None else (target.path.encode() or None),
        authority=config.authority or target.authority.encode(),
    )
    async with connect_quic(
        target.host, target.port, config=transport, connect_timeout=timeout
    ) as protocol:
        conn = MoqtConnection(
            protocol,
            is_client=True,
            session_config=config,
            handler=handler,
            **connection_options,
        )
        conn._cmd(lambda s: s.setup())
        try:
            await conn.wait_ready(timeout)
            yield conn
        finally:
            await conn.close()
