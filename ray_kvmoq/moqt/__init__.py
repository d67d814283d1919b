"""ray_kvmoq.moqt: MoQT draft-14 over QUIC (aioquic).

Layers, bottom up: the stateless codec (:mod:`.types`, :mod:`.wire`, :mod:`.messages`,
:mod:`.framer`, :mod:`.data`), the sans-I/O session (:mod:`.session`, events in :mod:`.events`),
the one aioquic-facing module (:mod:`.aio`: QUIC endpoints, TLS, the fast path), and the asyncio
application API (:mod:`.api`, :mod:`.tracks`). :mod:`.certs` makes self-signed TLS material.

The names below are the package's public surface. They are imported lazily, so importing the
codec alone (``ray_kvmoq.moqt.types``) never pulls in asyncio or aioquic.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .aio import TransportConfig
    from .api import (
        Cancelled,
        FetchRequest,
        FetchStream,
        FetchWriter,
        FullTrackName,
        GroupWriter,
        MoqtConnection,
        MoqtError,
        MoqtObject,
        MoqtServer,
        MoqtUrl,
        NamespaceRequest,
        Publication,
        RequestError,
        SessionClosed,
        SessionHandler,
        SubscribeRequest,
        Subscription,
        connect,
        serve,
    )
    from .certs import (
        CertificateAuthority,
        LeafCertificate,
        generate_ca,
        issue_certificate,
        self_signed,
    )
    from .messages import AuthToken, Location
    from .session import MoqtSession, SessionConfig
    from .tracks import MemoryTrack, TrackServer, TrackSource

_EXPORTS: dict[str, str] = {
    "AuthToken": "messages",
    "Cancelled": "api",
    "CertificateAuthority": "certs",
    "FetchRequest": "api",
    "FetchStream": "api",
    "FetchWriter": "api",
    "FullTrackName": "api",
    "GroupWriter": "api",
    "LeafCertificate": "certs",
    "Location": "messages",
    "MemoryTrack": "tracks",
    "MoqtConnection": "api",
    "MoqtError": "api",
    "MoqtObject": "api",
    "MoqtServer": "api",
    "MoqtSession": "session",
    "MoqtUrl": "api",
    "NamespaceRequest": "api",
    "Publication": "api",
    "RequestError": "api",
    "SessionClosed": "api",
    "SessionConfig": "session",
    "SessionHandler": "api",
    "SubscribeRequest": "api",
    "Subscription": "api",
    "TrackServer": "tracks",
    "TrackSource": "tracks",
    "TransportConfig": "aio",
    "connect": "api",
    "generate_ca": "certs",
    "issue_certificate": "certs",
    "self_signed": "certs",
    "serve": "api",
}

__all__ = [
    "AuthToken",
    "Cancelled",
    "CertificateAuthority",
    "FetchRequest",
    "FetchStream",
    "FetchWriter",
    "FullTrackName",
    "GroupWriter",
    "LeafCertificate",
    "Location",
    "MemoryTrack",
    "MoqtConnection",
    "MoqtError",
    "MoqtObject",
    "MoqtServer",
    "MoqtSession",
    "MoqtUrl",
    "NamespaceRequest",
    "Publication",
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
    "generate_ca",
    "issue_certificate",
    "self_signed",
    "serve",
]


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value
