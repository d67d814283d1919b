"""Control-message framing for MoQT (d14 §9): stateless encode/decode and an
incremental control-stream parser.

Frame layout: ``Message Type (i) | Message Length (16) | Message Payload (..)``.

Design (moxygen's framer/codec split; moq's ``DecodeError::Short``):

* :func:`encode_control` and :func:`decode_control` are pure functions over one message, with
  the version passed explicitly. Each message family's module (:mod:`.setup`, :mod:`.goaway`,
  :mod:`.subscribe`, :mod:`.publish`, :mod:`.fetch`, :mod:`.track_status`, :mod:`.namespace`)
  holds its dataclasses, payload codecs and ``CODECS`` registry entries; this module assembles
  the dispatch tables from them and frames payloads.
* :class:`ControlStreamParser` reassembles frames across arbitrary chunking. A frame prefix that
  is not complete yet simply waits (that is :class:`NeedMoreData` territory); once the declared
  length is complete, the payload must decode exactly, else :class:`ProtocolViolation`.
* An unknown message type is rejected as soon as its varint is complete, before waiting for the
  payload (d14 §9: "MUST close the session").

Errors: peer input raises :class:`RemoteProtocolError` subclasses only; our own invalid
messages raise :class:`LocalProtocolError`. A parser that raised stays failed.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from enum import IntEnum
from typing import Any

from . import fetch, goaway, namespace, publish, request, setup, subscribe, track_status
from .errors import (
    LocalProtocolError,
    MoqtError,
    NeedMoreData,
    ProtocolViolation,
    UnknownMessageType,
)
from .fields import DecodeOptions
from .types import DRAFT_14, DRAFT_16, MAX_CONTROL_PAYLOAD, MessageType, MessageTypeD16
from .wire import Reader, Writer, decode_varint

__all__ = [
    "MESSAGE_CLASSES",
    "MESSAGE_CLASSES_BY_VERSION",
    "SUPPORTED_VERSIONS",
    "ControlStreamParser",
    "Message",
    "decode_control",
    "encode_control",
    "read_control_frame",
]

SUPPORTED_VERSIONS = frozenset({DRAFT_14, DRAFT_16})
"""Versions this codec knows (control messages; the data plane is draft-14's, see
:mod:`.streams`)."""

Message = (
    setup.SetupMessage
    | goaway.GoawayMessage
    | subscribe.SubscribeMessage
    | publish.PublishMessage
    | fetch.FetchMessage
    | track_status.TrackStatusMessage
    | namespace.NamespaceMessage
    | request.RequestMessage
)
"""Any control message."""

_U16 = struct.Struct(">H")

_Decoder = Callable[[Reader, DecodeOptions], Message]

_FAMILIES = (setup, goaway, subscribe, publish, fetch, track_status, namespace)
_FAMILIES_16 = (setup, goaway, request, subscribe, publish, fetch, track_status, namespace)
"""The control-message families of draft-16."""

_Encoder = Callable[[Writer, Any], None]
_ENCODERS: dict[int, dict[type, tuple[int, _Encoder]]] = {}
_DECODERS: dict[int, dict[int, _Decoder]] = {}
_NAMES: dict[int, type[IntEnum]] = {DRAFT_14: MessageType, DRAFT_16: MessageTypeD16}
MESSAGE_CLASSES_BY_VERSION: dict[int, dict[int, type]] = {}
"""Per version: type code -> message class (draft-16: the families ported so far)."""
for _version, _families, _attr in (
    (DRAFT_14, _FAMILIES, "CODECS"),
    (DRAFT_16, _FAMILIES_16, "CODECS_16"),
):
    _classes = MESSAGE_CLASSES_BY_VERSION.setdefault(_version, {})
    for _family in _families:
        for _type, (_cls, _enc, _dec) in getattr(_family, _attr).items():
            assert _type not in _classes and int(_cls.TYPE) == _type, (_version, _type)
            assert _type in set(_NAMES[_version]), (_version, _type)
            _classes[_type] = _cls
            _ENCODERS.setdefault(_version, {})[_cls] = (_type, _enc)
            _DECODERS.setdefault(_version, {})[_type] = _dec
MESSAGE_CLASSES: dict[MessageType, type[Message]] = {
    MessageType(k): v for k, v in MESSAGE_CLASSES_BY_VERSION[DRAFT_14].items()
}
"""The message class for every draft-14 MessageType."""
assert set(MESSAGE_CLASSES) == set(MessageType), set(MessageType) - set(MESSAGE_CLASSES)


def _name(version: int, msg_type: int) -> str:
    try:
        return _NAMES[version](msg_type).name
    except ValueError:
        return f"{msg_type:#x}"


def _check_version(version: int) -> None:
    if version not in SUPPORTED_VERSIONS:
        raise LocalProtocolError(f"unsupported MoQT version {version:#x}")


def encode_control(msg: Message, *, version: int = DRAFT_14) -> bytes:
    """Encode one control message with its type and 16-bit length (d14 §9).

    Raises:
        LocalProtocolError: unsupported version, an invalid field value, or a payload over
            65535 bytes.
    """
    _check_version(version)
    entry = _ENCODERS[version].get(type(msg))
    if entry is None:
        raise LocalProtocolError(
            f"not a control message of version {version:#x}: {type(msg).__name__}"
        )
    msg_type, encoder = entry
    w = Writer()
    w.varint(msg_type)
    at = len(w.buf)
    w.buf += b"\x00\x00"
    try:
        encoder(w, msg)
    except MoqtError:
        raise
    except (TypeError, ValueError, AttributeError, OverflowError) as exc:
        raise LocalProtocolError(f"cannot encode {type(msg).__name__}: {exc}") from exc
    length = len(w.buf) - at - 2
    if length > MAX_CONTROL_PAYLOAD:
        raise LocalProtocolError(f"{type(msg).__name__} payload of {length} bytes exceeds 65535")
    _U16.pack_into(w.buf, at, length)
    return bytes(w.buf)


def decode_control(
    msg_type: int,
    payload: bytes | bytearray | memoryview,
    *,
    version: int,
    allow_empty_namespace_prefix: bool = False,
) -> Message:
    """Decode one complete control message payload; it must be consumed exactly.

    Raises:
        UnknownMessageType: ``msg_type`` is not a draft-14 control message.
        ProtocolViolation: truncated or overlong payload, or an invalid field value.
        KeyValueFormattingError: a malformed known parameter (authorization token).
        LocalProtocolError: unsupported ``version``.
    """
    _check_version(version)
    opts = DecodeOptions(version=version, allow_empty_namespace_prefix=allow_empty_namespace_prefix)
    return _decode(msg_type, payload, opts)


def _decode(msg_type: int, payload: bytes | bytearray | memoryview, opts: DecodeOptions) -> Message:
    decoder = _DECODERS[opts.version].get(msg_type)
    if decoder is None:
        raise UnknownMessageType(f"unknown control message type {msg_type:#x}")
    if len(payload) > MAX_CONTROL_PAYLOAD:
        raise ProtocolViolation(f"control payload of {len(payload)} bytes exceeds 65535")
    r = Reader(payload)
    try:
        msg = decoder(r, opts)
    except NeedMoreData:
        name = _name(opts.version, msg_type)
        raise ProtocolViolation(f"{name} payload shorter than its fields") from None
    if not r.at_end():
        name = _name(opts.version, msg_type)
        raise ProtocolViolation(f"{name} payload has {r.remaining} trailing bytes")
    return msg


def read_control_frame(
    data: bytes | bytearray | memoryview, pos: int = 0, *, version: int = DRAFT_14
) -> tuple[int, bytes, int]:
    """Split one control frame off ``data[pos:]``: returns ``(type, payload, end)``.

    Raises:
        NeedMoreData: the type, the length or the payload is not complete yet.
        UnknownMessageType: the type is not a draft-14 control message (checked as soon as the
            type varint is complete).
    """
    msg_type, at = decode_varint(data, pos)
    if msg_type not in _DECODERS[version]:
        raise UnknownMessageType(f"unknown control message type {msg_type:#x}")
    if at + 2 > len(data):
        raise NeedMoreData
    end = at + 2 + _U16.unpack_from(data, at)[0]
    if end > len(data):
        raise NeedMoreData
    return msg_type, bytes(data[at + 2 : end]), end


class ControlStreamParser:
    """Incremental parser of the bidirectional control stream.

    ``feed(data)`` returns every message completed by ``data``, in order. Bytes of an
    incomplete frame are buffered (at most one frame: 1 + 8 + 2 + 65535 bytes).
    """

    __slots__ = ("_buf", "_failed", "allow_empty_namespace_prefix", "closed", "version")

    def __init__(self, *, version: int = DRAFT_14, allow_empty_namespace_prefix: bool = False):
        _check_version(version)
        self.version = version
        """Version used to decode payloads (the negotiated one)."""
        self.allow_empty_namespace_prefix = allow_empty_namespace_prefix
        """Tolerate a 0-field SUBSCRIBE_NAMESPACE prefix (moq-dev sends one)."""
        self.closed = False
        """True once the peer's FIN was fed."""
        self._buf = bytearray()
        self._failed: MoqtError | None = None

    @property
    def buffered(self) -> int:
        """Bytes held for an incomplete frame."""
        return len(self._buf)

    def feed(self, data: bytes | bytearray | memoryview, *, fin: bool = False) -> list[Message]:
        """Add stream bytes; return the messages they complete.

        With ``fin=True`` (the peer closed its side) leftover bytes of an incomplete frame are a
        ProtocolViolation. Closing the control stream at all is a violation too (d14 §3.3), but
        that is for the session to decide.

        Raises:
            RemoteProtocolError: malformed input; the parser stays failed and re-raises it.
        """
        if self._failed is not None:
            raise self._failed
        if self.closed:
            raise LocalProtocolError("feed() after FIN")
        try:
            return self._feed(data, fin)
        except MoqtError as exc:
            self._failed = exc
            raise

    def _feed(self, data: bytes | bytearray | memoryview, fin: bool) -> list[Message]:
        buf = self._buf
        buf += data
        opts = DecodeOptions(
            version=self.version, allow_empty_namespace_prefix=self.allow_empty_namespace_prefix
        )
        out: list[Message] = []
        pos = 0
        size = len(buf)
        while pos < size:
            try:
                msg_type, payload, end = read_control_frame(buf, pos, version=self.version)
            except NeedMoreData:
                break
            out.append(_decode(msg_type, payload, opts))
            pos = end
        if pos:
            del buf[:pos]
        if fin:
            self.closed = True
            if buf:
                raise ProtocolViolation(f"control stream ended inside a message ({len(buf)} B)")
        return out
