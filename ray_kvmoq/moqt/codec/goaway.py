"""GOAWAY (d14 §9.4): the sender asks the peer to move to a new session — dataclass, payload
codec, ``CODECS``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .errors import LocalProtocolError
from .fields import Codecs, DecodeOptions
from .types import MAX_GOAWAY_URI, MessageType, MessageTypeD16
from .wire import Reader, Writer

__all__ = [
    "Goaway",
    "GoawayMessage",
]


@dataclass(frozen=True, kw_only=True, slots=True)
class Goaway:
    """GOAWAY (0x10, d14 §9.4): the sender asks the peer to move to a new session."""

    TYPE: ClassVar[MessageType] = MessageType.GOAWAY
    new_session_uri: bytes = b""
    """URI to reconnect to (at most 8192 bytes); empty = reuse the current one."""


def enc_goaway(w: Writer, m: Goaway) -> None:
    """GOAWAY payload."""
    if len(m.new_session_uri) > MAX_GOAWAY_URI:
        raise LocalProtocolError(f"GOAWAY URI longer than {MAX_GOAWAY_URI} bytes")
    w.length_prefixed(m.new_session_uri)


def dec_goaway(r: Reader, opts: DecodeOptions) -> Goaway:
    """GOAWAY payload; URI at most 8192 bytes (d14 §9.4)."""
    return Goaway(new_session_uri=r.length_prefixed(MAX_GOAWAY_URI, "GOAWAY URI"))


CODECS: Codecs = {MessageType.GOAWAY: (Goaway, enc_goaway, dec_goaway)}
"""Registry entry of GOAWAY."""

CODECS_16: Codecs = {MessageTypeD16.GOAWAY: (Goaway, enc_goaway, dec_goaway)}
"""Draft-16 registry entry of GOAWAY (unchanged, d16 §9.4)."""

GoawayMessage = Goaway
"""Any message of this family."""
