"""Session setup and request flow control (d14 §9.3, §9.5, §9.6): CLIENT_SETUP, SERVER_SETUP,
MAX_REQUEST_ID and REQUESTS_BLOCKED — dataclasses, payload codecs, ``CODECS``.

Draft-14 negotiates the version inside CLIENT_SETUP/SERVER_SETUP (ALPN ``moq-00``); from
draft-15 on the ALPN is the version and SETUP carries parameters only (d16 §9.3), whose types are
delta-encoded (d16 §1.4.2). ``CODECS_16`` holds the draft-16 entries; the request flow-control
messages are unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import ClassVar, TypeVar

from .fields import Codecs, DecodeOptions, SetupParameters, read_params, write_params
from .types import DRAFT_14, DRAFT_16, MessageType, MessageTypeD16
from .wire import Reader, Writer

__all__ = [
    "ClientSetup",
    "MaxRequestId",
    "RequestsBlocked",
    "ServerSetup",
    "SetupMessage",
]

_NO_SETUP_PARAMS = SetupParameters()
Limit = TypeVar("Limit", "MaxRequestId", "RequestsBlocked")


@dataclass(frozen=True, kw_only=True, slots=True)
class ClientSetup:
    """CLIENT_SETUP (0x20, d14 §9.3): first message of the client on the control stream."""

    TYPE: ClassVar[MessageType] = MessageType.CLIENT_SETUP
    versions: tuple[int, ...] = (DRAFT_14,)
    """Supported versions, most preferred first."""
    parameters: SetupParameters = _NO_SETUP_PARAMS
    """Setup parameters (PATH, AUTHORITY, MAX_REQUEST_ID, ...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class ServerSetup:
    """SERVER_SETUP (0x21, d14 §9.3): the server's answer to CLIENT_SETUP."""

    TYPE: ClassVar[MessageType] = MessageType.SERVER_SETUP
    selected_version: int = DRAFT_14
    """The version chosen from the client's list."""
    parameters: SetupParameters = _NO_SETUP_PARAMS
    """Setup parameters (MAX_REQUEST_ID, MOQT_IMPLEMENTATION, ...)."""


@dataclass(frozen=True, kw_only=True, slots=True)
class MaxRequestId:
    """MAX_REQUEST_ID (0x15, d14 §9.5): raise the peer's request ID limit."""

    TYPE: ClassVar[MessageType] = MessageType.MAX_REQUEST_ID
    max_request_id: int
    """New Maximum Request ID: the peer may use request IDs strictly below it."""


@dataclass(frozen=True, kw_only=True, slots=True)
class RequestsBlocked:
    """REQUESTS_BLOCKED (0x1A, d14 §9.6): the sender is out of request IDs."""

    TYPE: ClassVar[MessageType] = MessageType.REQUESTS_BLOCKED
    max_request_id: int
    """The Maximum Request ID the sender is blocked at."""


def enc_client_setup(w: Writer, m: ClientSetup) -> None:
    """CLIENT_SETUP payload."""
    w.varint(len(m.versions))
    for version in m.versions:
        w.varint(version)
    write_params(w, m.parameters)


def dec_client_setup(r: Reader, opts: DecodeOptions) -> ClientSetup:
    """CLIENT_SETUP payload."""
    count = r.varint()
    versions = tuple(r.varint() for _ in range(count))
    return ClientSetup(versions=versions, parameters=read_params(r, SetupParameters))


def enc_server_setup(w: Writer, m: ServerSetup) -> None:
    """SERVER_SETUP payload."""
    w.varint(m.selected_version)
    write_params(w, m.parameters)


def dec_server_setup(r: Reader, opts: DecodeOptions) -> ServerSetup:
    """SERVER_SETUP payload."""
    version = r.varint()
    return ServerSetup(selected_version=version, parameters=read_params(r, SetupParameters))


def enc_limit(w: Writer, m: MaxRequestId | RequestsBlocked) -> None:
    """MAX_REQUEST_ID / REQUESTS_BLOCKED payload."""
    w.varint(m.max_request_id)


def dec_limit(cls: type[Limit], r: Reader, opts: DecodeOptions) -> Limit:
    """MAX_REQUEST_ID / REQUESTS_BLOCKED payload."""
    return cls(max_request_id=r.varint())


CODECS: Codecs = {
    MessageType.CLIENT_SETUP: (ClientSetup, enc_client_setup, dec_client_setup),
    MessageType.SERVER_SETUP: (ServerSetup, enc_server_setup, dec_server_setup),
    MessageType.MAX_REQUEST_ID: (MaxRequestId, enc_limit, partial(dec_limit, MaxRequestId)),
    MessageType.REQUESTS_BLOCKED: (RequestsBlocked, enc_limit, partial(dec_limit, RequestsBlocked)),
}
"""Registry entries of the setup family."""

SetupMessage = ClientSetup | ServerSetup | MaxRequestId | RequestsBlocked
"""Any message of this family."""


def enc_client_setup_16(w: Writer, m: ClientSetup) -> None:
    """CLIENT_SETUP payload of draft-16: parameters only (``versions`` is not sent)."""
    write_params(w, m.parameters, version=DRAFT_16)


def dec_client_setup_16(r: Reader, opts: DecodeOptions) -> ClientSetup:
    """CLIENT_SETUP payload of draft-16; ``versions`` is the one the ALPN chose."""
    parameters = read_params(r, SetupParameters, version=opts.version)
    return ClientSetup(versions=(opts.version,), parameters=parameters)


def enc_server_setup_16(w: Writer, m: ServerSetup) -> None:
    """SERVER_SETUP payload of draft-16: parameters only."""
    write_params(w, m.parameters, version=DRAFT_16)


def dec_server_setup_16(r: Reader, opts: DecodeOptions) -> ServerSetup:
    """SERVER_SETUP payload of draft-16; ``selected_version`` is the ALPN's."""
    parameters = read_params(r, SetupParameters, version=opts.version)
    return ServerSetup(selected_version=opts.version, parameters=parameters)


CODECS_16: Codecs = {
    MessageTypeD16.CLIENT_SETUP: (ClientSetup, enc_client_setup_16, dec_client_setup_16),
    MessageTypeD16.SERVER_SETUP: (ServerSetup, enc_server_setup_16, dec_server_setup_16),
    MessageTypeD16.MAX_REQUEST_ID: (MaxRequestId, enc_limit, partial(dec_limit, MaxRequestId)),
    MessageTypeD16.REQUESTS_BLOCKED: (
        RequestsBlocked,
        enc_limit,
        partial(dec_limit, RequestsBlocked),
    ),
}
"""Draft-16 registry entries of the setup family."""
