"""Exceptions of the MoQT layer.

Hierarchy (``error_code`` in brackets is the :class:`SessionError` a session closes with)::

    Exception
     +-- NeedMoreData                   input is incomplete: feed more bytes (not an error)
     +-- MoqtError                      base of every MoQT error; ``error_code``, ``reason``
          +-- LocalProtocolError        [INTERNAL_ERROR] we asked to encode or do something
          |                             invalid (our bug); never closes a session by itself
          +-- RemoteProtocolError       the peer sent something invalid; close with error_code
               +-- ProtocolViolation           [PROTOCOL_VIOLATION]
               |    +-- UnknownMessageType     unknown control message type
               |    +-- UnknownStreamType      unknown data stream or datagram type
               +-- KeyValueFormattingError     [KEY_VALUE_FORMATTING_ERROR]
               +-- InvalidRequestId            [INVALID_REQUEST_ID]
               +-- TooManyRequests             [TOO_MANY_REQUESTS]
               +-- DuplicateTrackAlias         [DUPLICATE_TRACK_ALIAS]
               +-- Unauthorized                [UNAUTHORIZED]
               +-- InvalidPath                 [INVALID_PATH]
               +-- MalformedPath               [MALFORMED_PATH]
               +-- InvalidAuthority            [INVALID_AUTHORITY]
               +-- MalformedAuthority          [MALFORMED_AUTHORITY]
               +-- VersionNegotiationFailed    [VERSION_NEGOTIATION_FAILED]
               +-- AuthTokenCacheOverflow      [AUTH_TOKEN_CACHE_OVERFLOW]
               +-- DuplicateAuthTokenAlias     [DUPLICATE_AUTH_TOKEN_ALIAS]
               +-- MalformedAuthToken          [MALFORMED_AUTH_TOKEN]
               +-- UnknownAuthTokenAlias       [UNKNOWN_AUTH_TOKEN_ALIAS]
               +-- ExpiredAuthToken            [EXPIRED_AUTH_TOKEN]
               +-- ObjectTooLarge              [INTERNAL_ERROR] object exceeds our configured cap
               +-- SessionTimeout              [CONTROL_MESSAGE_TIMEOUT] (subclasses per timer)
                    +-- GoawayTimeout          [GOAWAY_TIMEOUT]
                    +-- ControlMessageTimeout  [CONTROL_MESSAGE_TIMEOUT]
                    +-- DataStreamTimeout      [DATA_STREAM_TIMEOUT]

Invariants:

* ``NeedMoreData`` is *not* a :class:`MoqtError`: an incremental parser catches it and waits; a
  whole-buffer decoder turns it into :class:`ProtocolViolation` when the buffer was declared
  complete (a control payload shorter than its length field, a FIN mid-object).
* Every concrete class sets ``error_code`` as a class attribute; an instance may override it
  only through the ``error_code=`` keyword (used for non-d14 codes seen in the wild).
* Codec functions raise only :class:`RemoteProtocolError` subclasses on peer input and
  :class:`LocalProtocolError` on invalid arguments; a session catches ``RemoteProtocolError`` at
  its single entry point and closes with ``exc.error_code``.
"""

from __future__ import annotations

from typing import ClassVar

from .types import SessionError

__all__ = [
    "AuthTokenCacheOverflow",
    "ControlMessageTimeout",
    "DataStreamTimeout",
    "DuplicateAuthTokenAlias",
    "DuplicateTrackAlias",
    "ExpiredAuthToken",
    "GoawayTimeout",
    "InvalidAuthority",
    "InvalidPath",
    "InvalidRequestId",
    "KeyValueFormattingError",
    "LocalProtocolError",
    "MalformedAuthToken",
    "MalformedAuthority",
    "MalformedPath",
    "MoqtError",
    "NeedMoreData",
    "ObjectTooLarge",
    "ProtocolViolation",
    "RemoteProtocolError",
    "SessionTimeout",
    "TooManyRequests",
    "Unauthorized",
    "UnknownAuthTokenAlias",
    "UnknownMessageType",
    "UnknownStreamType",
    "VersionNegotiationFailed",
]


class NeedMoreData(Exception):
    """The input ends before the item being parsed does: feed more bytes and retry.

    Raised by low-level readers; never a protocol error by itself.
    """


class MoqtError(Exception):
    """Base of every MoQT error.

    Attributes:
        error_code: the session error code to close with (class attribute, instance override).
        reason: human-readable reason; also usable as the wire Reason Phrase.
    """

    error_code: ClassVar[SessionError] = SessionError.INTERNAL_ERROR

    def __init__(self, reason: str = "", *, error_code: SessionError | None = None) -> None:
        super().__init__(reason)
        self.reason: str = reason
        """Human-readable description of what went wrong."""
        if error_code is not None:
            # Instance attribute shadows the ClassVar on purpose (rare override).
            self.__dict__["error_code"] = error_code

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.reason!r}, error_code={self.error_code.name})"


class LocalProtocolError(MoqtError):
    """We tried to encode an invalid value or misuse the protocol (a bug on our side)."""

    error_code = SessionError.INTERNAL_ERROR


class RemoteProtocolError(MoqtError):
    """The peer sent something the protocol forbids; the session closes with ``error_code``."""

    error_code = SessionError.PROTOCOL_VIOLATION


class ProtocolViolation(RemoteProtocolError):
    """Generic PROTOCOL_VIOLATION: malformed or out-of-range peer input (d14 §3.4)."""

    error_code = SessionError.PROTOCOL_VIOLATION


class UnknownMessageType(ProtocolViolation):
    """A control message type that draft-14 does not define (d14 §9)."""


class UnknownStreamType(ProtocolViolation):
    """A data stream or datagram type that draft-14 does not define (d14 §10)."""


class KeyValueFormattingError(RemoteProtocolError):
    """A known Key-Value-Pair type whose value has the wrong shape (d14 §1.4.2)."""

    error_code = SessionError.KEY_VALUE_FORMATTING_ERROR


class InvalidRequestId(RemoteProtocolError):
    """Request ID of the wrong parity or not increasing (d14 §9.1)."""

    error_code = SessionError.INVALID_REQUEST_ID


class TooManyRequests(RemoteProtocolError):
    """Request ID not below the advertised Maximum Request ID (d14 §9.1)."""

    error_code = SessionError.TOO_MANY_REQUESTS


class DuplicateTrackAlias(RemoteProtocolError):
    """Track Alias already in use for another track (d14 §10.1)."""

    error_code = SessionError.DUPLICATE_TRACK_ALIAS


class Unauthorized(RemoteProtocolError):
    """The peer is not authorized for the session (d14 §3.4)."""

    error_code = SessionError.UNAUTHORIZED


class InvalidPath(RemoteProtocolError):
    """PATH parameter unusable, or sent where it is not allowed (d14 §9.3.2.2)."""

    error_code = SessionError.INVALID_PATH


class MalformedPath(RemoteProtocolError):
    """PATH parameter does not parse as path-abempty[?query] (d14 §9.3.2.2)."""

    error_code = SessionError.MALFORMED_PATH


class InvalidAuthority(RemoteProtocolError):
    """AUTHORITY parameter unusable (d14 §9.3.2.1)."""

    error_code = SessionError.INVALID_AUTHORITY


class MalformedAuthority(RemoteProtocolError):
    """AUTHORITY parameter does not parse as host[:port] (d14 §9.3.2.1)."""

    error_code = SessionError.MALFORMED_AUTHORITY


class VersionNegotiationFailed(RemoteProtocolError):
    """No common version in CLIENT_SETUP / SERVER_SETUP (d14 §9.3.1)."""

    error_code = SessionError.VERSION_NEGOTIATION_FAILED


class AuthTokenCacheOverflow(RemoteProtocolError):
    """Registering a token alias would exceed MAX_AUTH_TOKEN_CACHE_SIZE (d14 §9.2.1.1)."""

    error_code = SessionError.AUTH_TOKEN_CACHE_OVERFLOW


class DuplicateAuthTokenAlias(RemoteProtocolError):
    """REGISTER of an alias that is already registered (d14 §9.2.1.1)."""

    error_code = SessionError.DUPLICATE_AUTH_TOKEN_ALIAS


class MalformedAuthToken(RemoteProtocolError):
    """Well-formed Token structure with an invalid value (d14 §9.2.1.1)."""

    error_code = SessionError.MALFORMED_AUTH_TOKEN


class UnknownAuthTokenAlias(RemoteProtocolError):
    """USE_ALIAS or DELETE of an alias that is not registered (d14 §9.2.1.1)."""

    error_code = SessionError.UNKNOWN_AUTH_TOKEN_ALIAS


class ExpiredAuthToken(RemoteProtocolError):
    """The token referred to has expired (d14 §9.2.1.1)."""

    error_code = SessionError.EXPIRED_AUTH_TOKEN


class ObjectTooLarge(RemoteProtocolError):
    """An object's declared payload length exceeds our configured cap (not a d14 limit).

    Raised before any buffer is allocated for the payload.
    """

    error_code = SessionError.INTERNAL_ERROR


class SessionTimeout(RemoteProtocolError):
    """A session-level timer expired waiting for the peer (d14 §3.4)."""

    error_code = SessionError.CONTROL_MESSAGE_TIMEOUT


class GoawayTimeout(SessionTimeout):
    """The peer did not close the session after GOAWAY in time (d14 §3.5)."""

    error_code = SessionError.GOAWAY_TIMEOUT


class ControlMessageTimeout(SessionTimeout):
    """The peer did not answer a control message in time (d14 §3.4)."""

    error_code = SessionError.CONTROL_MESSAGE_TIMEOUT


class DataStreamTimeout(SessionTimeout):
    """A data stream stalled for too long (d14 §3.4)."""

    error_code = SessionError.DATA_STREAM_TIMEOUT
