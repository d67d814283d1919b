"""ray_kvmoq.moqt: MoQT (draft-ietf-moq-transport) over QUIC (aioquic, qh3).

Two public modules; everything else in this package is private:

* :mod:`.codec` — the stateless codec, one module per message family (setup, goaway,
  subscribe, publish, fetch, track status, namespace, data streams, datagrams), the wire-code
  registries and the exception tree. Pure stdlib.
* :mod:`.api` — the asyncio application API (:func:`~.api.connect`, :func:`~.api.serve`,
  handlers, writers, iterators), the object model (``MoqtObject``, ``Group``), the sans-I/O
  session (``MoqtSession``, ``SessionConfig``), the QUIC endpoints (``TransportConfig``) and TLS
  helpers (``self_signed``, ...).

Inside: the sans-I/O session (:mod:`.session` routing to its role objects), its events
(:mod:`.events`) and transition tables (:mod:`.state`); the asyncio wing (:mod:`.connection`,
:mod:`.api_types`, :mod:`.tracks`); the transport wing (:mod:`.aio`, :mod:`.aio_qh3`: QUIC
endpoints and the fast path). ``docs/moqt-versions.md`` has the full map.

The package re-exports both: the codec's names eagerly (pure stdlib), the API's lazily, so
importing the codec never pulls in asyncio or aioquic. ``tests/moqt/test_public_surface.py`` pins them and checks that nothing
outside ``moqt/`` imports a private module.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from . import codec
from .codec import *  # noqa: F403

if TYPE_CHECKING:
    from .api import (
        Cancelled,
        CertificateAuthority,
        FastQuicProtocol,
        FetchRequest,
        FetchStream,
        FetchWriter,
        FullTrackName,
        Group,
        GroupWriter,
        LeafCertificate,
        MemoryTrack,
        MoqtApiError,
        MoqtConnection,
        MoqtObject,
        MoqtServer,
        MoqtSession,
        MoqtUrl,
        NamespaceRequest,
        PemPaths,
        Publication,
        QuicEndpoint,
        RequestError,
        SessionClosed,
        SessionConfig,
        SessionHandler,
        SubscribeRequest,
        Subscription,
        TrackServer,
        TrackSource,
        TransportConfig,
        connect,
        connect_quic,
        generate_ca,
        issue_certificate,
        self_signed,
        serve,
        serve_quic,
        write_pem_files,
    )

_API: tuple[str, ...] = (
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
)
"""Names of :mod:`.api` re-exported here (imported on first use)."""

__all__: list[str] = [
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
__all__ += codec.__all__


def __getattr__(name: str) -> Any:
    if name not in _API:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(".api", __name__), name)
    globals()[name] = value
    return value
