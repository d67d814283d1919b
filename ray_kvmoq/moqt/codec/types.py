"""Wire code points and limits of MoQT draft-14 (draft-ietf-moq-transport-14).

One :class:`enum.IntEnum` per IANA-style registry (d14 §13), plus the numeric limits the codec
enforces. Everything here is a plain constant: no I/O, no state.

Invariants:

* Enum values are exactly the draft-14 code points; names follow the draft's spelling.
* Registries whose receivers must tolerate unknown values (error codes in *_ERROR messages,
  PUBLISH_DONE status codes, parameter types) are *not* validated by the codec: messages keep the
  raw ``int`` and callers may convert with ``SubscribeErrorCode(x)`` when they care.
* Registries whose unknown values are a protocol violation (message types, filter types, group
  order, fetch types, object status, stream and datagram types) are validated at decode time.
"""

from __future__ import annotations

from enum import IntEnum

__all__ = [
    "ALPN",
    "ALPN_BY_VERSION",
    "DEFAULT_MAX_OBJECT_SIZE",
    "DRAFT_14",
    "DRAFT_16",
    "MAX_CONTROL_PAYLOAD",
    "MAX_FULL_TRACK_NAME",
    "MAX_GOAWAY_URI",
    "MAX_KVP_VALUE",
    "MAX_NAMESPACE_FIELDS",
    "MAX_REASON",
    "MAX_VARINT",
    "DataStreamType",
    "DatagramType",
    "FetchErrorCode",
    "FetchType",
    "FilterType",
    "GroupOrder",
    "MessageParameter",
    "MessageParameterD16",
    "MessageType",
    "MessageTypeD16",
    "ObjectStatus",
    "PublishDoneCode",
    "PublishErrorCode",
    "PublishNamespaceErrorCode",
    "SessionError",
    "SetupParameter",
    "StreamResetCode",
    "SubgroupIdMode",
    "SubscribeErrorCode",
    "SubscribeNamespaceErrorCode",
    "TokenAliasType",
]

DRAFT_14 = 0xFF00000E
"""Version number of draft-14 as carried in CLIENT_SETUP / SERVER_SETUP (d14 §9.3.1)."""

ALPN = "moq-00"
"""Raw-QUIC ALPN of drafts up to 14 (d14 §3.1.2)."""

DRAFT_16 = 0xFF000010
"""Our number for draft-16. From draft-15 on the version is the ALPN only (d16 §3.1), so this
value never goes on the wire; it names the codec tables."""

ALPN_BY_VERSION: dict[int, str] = {DRAFT_14: ALPN, DRAFT_16: "moqt-16"}
"""Raw-QUIC ALPN of each version the codec knows (d14 §3.1.2; d16 §3.1: ``moqt-`` + draft)."""

MAX_VARINT = (1 << 62) - 1
"""Largest value a QUIC variable-length integer can carry (RFC 9000 §16)."""

MAX_NAMESPACE_FIELDS = 32
"""Maximum number of fields in a Track Namespace tuple (d14 §2.4.1)."""

MAX_FULL_TRACK_NAME = 4096
"""Maximum total length in bytes of all namespace fields plus the track name (d14 §2.4.1)."""

MAX_REASON = 1024
"""Maximum length in bytes of a Reason Phrase (d14 §1.4.3)."""

MAX_CONTROL_PAYLOAD = 65535
"""Maximum control message payload: the length field is 16 bits (d14 §9)."""

MAX_KVP_VALUE = 65535
"""Maximum length of an odd-typed Key-Value-Pair value (d14 §1.4.2)."""

MAX_GOAWAY_URI = 8192
"""Maximum length of the GOAWAY New Session URI (d14 §9.4)."""

DEFAULT_MAX_OBJECT_SIZE = 64 * 1024 * 1024
"""Default cap on one object's payload in data-stream parsers (ours, not the draft's)."""


class MessageType(IntEnum):
    """Control message types (d14 §9, table "MOQT Message Types")."""

    SUBSCRIBE_UPDATE = 0x02
    SUBSCRIBE = 0x03
    SUBSCRIBE_OK = 0x04
    SUBSCRIBE_ERROR = 0x05
    PUBLISH_NAMESPACE = 0x06
    PUBLISH_NAMESPACE_OK = 0x07
    PUBLISH_NAMESPACE_ERROR = 0x08
    PUBLISH_NAMESPACE_DONE = 0x09
    UNSUBSCRIBE = 0x0A
    PUBLISH_DONE = 0x0B
    PUBLISH_NAMESPACE_CANCEL = 0x0C
    TRACK_STATUS = 0x0D
    TRACK_STATUS_OK = 0x0E
    TRACK_STATUS_ERROR = 0x0F
    GOAWAY = 0x10
    SUBSCRIBE_NAMESPACE = 0x11
    SUBSCRIBE_NAMESPACE_OK = 0x12
    SUBSCRIBE_NAMESPACE_ERROR = 0x13
    UNSUBSCRIBE_NAMESPACE = 0x14
    MAX_REQUEST_ID = 0x15
    FETCH = 0x16
    FETCH_CANCEL = 0x17
    FETCH_OK = 0x18
    FETCH_ERROR = 0x19
    REQUESTS_BLOCKED = 0x1A
    PUBLISH = 0x1D
    PUBLISH_OK = 0x1E
    PUBLISH_ERROR = 0x1F
    CLIENT_SETUP = 0x20
    SERVER_SETUP = 0x21


class MessageTypeD16(IntEnum):
    """Control message types of draft-16 (d16 §9, "MOQT Message Types"): the per-request
    *_ERROR messages became REQUEST_ERROR, SUBSCRIBE_UPDATE became REQUEST_UPDATE, the
    namespace *_OK answers became REQUEST_OK, and NAMESPACE / NAMESPACE_DONE are new."""

    REQUEST_UPDATE = 0x02
    SUBSCRIBE = 0x03
    SUBSCRIBE_OK = 0x04
    REQUEST_ERROR = 0x05
    PUBLISH_NAMESPACE = 0x06
    REQUEST_OK = 0x07
    NAMESPACE = 0x08
    PUBLISH_NAMESPACE_DONE = 0x09
    UNSUBSCRIBE = 0x0A
    PUBLISH_DONE = 0x0B
    PUBLISH_NAMESPACE_CANCEL = 0x0C
    TRACK_STATUS = 0x0D
    NAMESPACE_DONE = 0x0E
    GOAWAY = 0x10
    SUBSCRIBE_NAMESPACE = 0x11
    MAX_REQUEST_ID = 0x15
    FETCH = 0x16
    FETCH_CANCEL = 0x17
    FETCH_OK = 0x18
    REQUESTS_BLOCKED = 0x1A
    PUBLISH = 0x1D
    PUBLISH_OK = 0x1E
    CLIENT_SETUP = 0x20
    SERVER_SETUP = 0x21


class MessageParameterD16(IntEnum):
    """Message parameter types of draft-16 (d16 §9.2.2); several d14 message fields became
    parameters here."""

    DELIVERY_TIMEOUT = 0x02
    AUTHORIZATION_TOKEN = 0x03
    EXPIRES = 0x08
    LARGEST_OBJECT = 0x09
    FORWARD = 0x10
    SUBSCRIBER_PRIORITY = 0x20
    SUBSCRIPTION_FILTER = 0x21
    GROUP_ORDER = 0x22
    NEW_GROUP_REQUEST = 0x32


class SessionError(IntEnum):
    """Session termination error codes (d14 §3.4, §13.1.1)."""

    NO_ERROR = 0x0
    INTERNAL_ERROR = 0x1
    UNAUTHORIZED = 0x2
    PROTOCOL_VIOLATION = 0x3
    INVALID_REQUEST_ID = 0x4
    DUPLICATE_TRACK_ALIAS = 0x5
    KEY_VALUE_FORMATTING_ERROR = 0x6
    TOO_MANY_REQUESTS = 0x7
    INVALID_PATH = 0x8
    MALFORMED_PATH = 0x9
    GOAWAY_TIMEOUT = 0x10
    CONTROL_MESSAGE_TIMEOUT = 0x11
    DATA_STREAM_TIMEOUT = 0x12
    AUTH_TOKEN_CACHE_OVERFLOW = 0x13
    DUPLICATE_AUTH_TOKEN_ALIAS = 0x14
    VERSION_NEGOTIATION_FAILED = 0x15
    MALFORMED_AUTH_TOKEN = 0x16
    UNKNOWN_AUTH_TOKEN_ALIAS = 0x17
    EXPIRED_AUTH_TOKEN = 0x18
    INVALID_AUTHORITY = 0x19
    MALFORMED_AUTHORITY = 0x1A


class SubscribeErrorCode(IntEnum):
    """SUBSCRIBE_ERROR and TRACK_STATUS_ERROR codes (d14 §9.9, §13.1.2)."""

    INTERNAL_ERROR = 0x0
    UNAUTHORIZED = 0x1
    TIMEOUT = 0x2
    NOT_SUPPORTED = 0x3
    TRACK_DOES_NOT_EXIST = 0x4
    INVALID_RANGE = 0x5
    MALFORMED_AUTH_TOKEN = 0x10
    EXPIRED_AUTH_TOKEN = 0x12


class FetchErrorCode(IntEnum):
    """FETCH_ERROR codes (d14 §9.18, §13.1.5)."""

    INTERNAL_ERROR = 0x0
    UNAUTHORIZED = 0x1
    TIMEOUT = 0x2
    NOT_SUPPORTED = 0x3
    TRACK_DOES_NOT_EXIST = 0x4
    INVALID_RANGE = 0x5
    NO_OBJECTS = 0x6
    INVALID_JOINING_REQUEST_ID = 0x7
    UNKNOWN_STATUS_IN_RANGE = 0x8
    MALFORMED_TRACK = 0x9
    MALFORMED_AUTH_TOKEN = 0x10
    EXPIRED_AUTH_TOKEN = 0x12


class PublishErrorCode(IntEnum):
    """PUBLISH_ERROR codes (d14 §9.15, §13.1.4)."""

    INTERNAL_ERROR = 0x0
    UNAUTHORIZED = 0x1
    TIMEOUT = 0x2
    NOT_SUPPORTED = 0x3
    UNINTERESTED = 0x4


class PublishNamespaceErrorCode(IntEnum):
    """PUBLISH_NAMESPACE_ERROR and PUBLISH_NAMESPACE_CANCEL codes (d14 §9.25, §13.1.6)."""

    INTERNAL_ERROR = 0x0
    UNAUTHORIZED = 0x1
    TIMEOUT = 0x2
    NOT_SUPPORTED = 0x3
    UNINTERESTED = 0x4
    MALFORMED_AUTH_TOKEN = 0x10
    EXPIRED_AUTH_TOKEN = 0x12


class SubscribeNamespaceErrorCode(IntEnum):
    """SUBSCRIBE_NAMESPACE_ERROR codes (d14 §9.30, §13.1.7)."""

    INTERNAL_ERROR = 0x0
    UNAUTHORIZED = 0x1
    TIMEOUT = 0x2
    NOT_SUPPORTED = 0x3
    NAMESPACE_PREFIX_UNKNOWN = 0x4
    NAMESPACE_PREFIX_OVERLAP = 0x5
    MALFORMED_AUTH_TOKEN = 0x10
    EXPIRED_AUTH_TOKEN = 0x12


class PublishDoneCode(IntEnum):
    """PUBLISH_DONE status codes (d14 §9.12, §13.1.3)."""

    INTERNAL_ERROR = 0x0
    UNAUTHORIZED = 0x1
    TRACK_ENDED = 0x2
    SUBSCRIPTION_ENDED = 0x3
    GOING_AWAY = 0x4
    EXPIRED = 0x5
    TOO_FAR_BEHIND = 0x6
    MALFORMED_TRACK = 0x7


class StreamResetCode(IntEnum):
    """RESET_STREAM / RESET_STREAM_AT codes for data streams (d14 §10.4.3, §13.1.8)."""

    INTERNAL_ERROR = 0x0
    CANCELLED = 0x1
    DELIVERY_TIMEOUT = 0x2
    SESSION_CLOSED = 0x3


class FilterType(IntEnum):
    """Subscription filter types (d14 §9.7); any other value is a PROTOCOL_VIOLATION."""

    NEXT_GROUP_START = 0x1
    LARGEST_OBJECT = 0x2
    ABSOLUTE_START = 0x3
    ABSOLUTE_RANGE = 0x4

    @property
    def has_start(self) -> bool:
        """True when a Start Location follows the filter type on the wire."""
        return self >= FilterType.ABSOLUTE_START

    @property
    def has_end_group(self) -> bool:
        """True when an End Group follows the Start Location on the wire."""
        return self is FilterType.ABSOLUTE_RANGE


class GroupOrder(IntEnum):
    """Group order (d14 §9.7); 0 is only valid in requests (SUBSCRIBE, FETCH, PUBLISH_OK)."""

    PUBLISHER_DEFAULT = 0x0
    ASCENDING = 0x1
    DESCENDING = 0x2


class FetchType(IntEnum):
    """FETCH types (d14 §9.16)."""

    STANDALONE = 0x1
    RELATIVE_JOINING = 0x2
    ABSOLUTE_JOINING = 0x3


class ObjectStatus(IntEnum):
    """Object status (d14 §10.2.1.1); other values are a PROTOCOL_VIOLATION."""

    NORMAL = 0x0
    DOES_NOT_EXIST = 0x1
    END_OF_GROUP = 0x3
    END_OF_TRACK = 0x4


class SetupParameter(IntEnum):
    """Setup parameter types (d14 §9.3.2); odd types carry bytes, even types a varint.

    MOQT_IMPLEMENTATION is 0x07 as every implementation uses it (d14's text says 0x05, which
    clashes with AUTHORITY; fixed in d15).
    """

    PATH = 0x01
    MAX_REQUEST_ID = 0x02
    AUTHORIZATION_TOKEN = 0x03
    MAX_AUTH_TOKEN_CACHE_SIZE = 0x04
    AUTHORITY = 0x05
    MOQT_IMPLEMENTATION = 0x07


class MessageParameter(IntEnum):
    """Version-specific (message) parameter types (d14 §9.2.1)."""

    DELIVERY_TIMEOUT = 0x02
    AUTHORIZATION_TOKEN = 0x03
    MAX_CACHE_DURATION = 0x04


class TokenAliasType(IntEnum):
    """Alias Type of an AUTHORIZATION TOKEN value (d14 §9.2.1.1)."""

    DELETE = 0x0
    REGISTER = 0x1
    USE_ALIAS = 0x2
    USE_VALUE = 0x3

    @property
    def has_alias(self) -> bool:
        """True when a Token Alias field follows the alias type."""
        return self is not TokenAliasType.USE_VALUE

    @property
    def has_value(self) -> bool:
        """True when a Token Type and Token Value follow."""
        return self in (TokenAliasType.REGISTER, TokenAliasType.USE_VALUE)


class SubgroupIdMode(IntEnum):
    """How a SUBGROUP_HEADER conveys the Subgroup ID (type bits 1-2, d14 §10.4.2)."""

    ZERO = 0
    """Subgroup ID is 0; no field."""
    FIRST_OBJECT = 1
    """Subgroup ID equals the first object's ID; no field."""
    EXPLICIT = 2
    """Subgroup ID field present in the header."""


class DataStreamType(IntEnum):
    """Unidirectional data stream types (d14 §10.4): subgroup headers and FETCH_HEADER.

    Subgroup types are ``0x10 | ext | mode << 1 | eog << 3`` where ``ext`` (bit 0) says every
    object carries an Extension Headers Length, ``mode`` is a :class:`SubgroupIdMode` and ``eog``
    (bit 3) says the subgroup contains the End of Group.
    """

    FETCH_HEADER = 0x05
    SUBGROUP_ZERO = 0x10
    SUBGROUP_ZERO_EXT = 0x11
    SUBGROUP_FIRST_OBJECT = 0x12
    SUBGROUP_FIRST_OBJECT_EXT = 0x13
    SUBGROUP_EXPLICIT = 0x14
    SUBGROUP_EXPLICIT_EXT = 0x15
    SUBGROUP_ZERO_EOG = 0x18
    SUBGROUP_ZERO_EXT_EOG = 0x19
    SUBGROUP_FIRST_OBJECT_EOG = 0x1A
    SUBGROUP_FIRST_OBJECT_EXT_EOG = 0x1B
    SUBGROUP_EXPLICIT_EOG = 0x1C
    SUBGROUP_EXPLICIT_EXT_EOG = 0x1D

    @property
    def is_subgroup(self) -> bool:
        """True for the twelve SUBGROUP_HEADER types."""
        return self is not DataStreamType.FETCH_HEADER

    @property
    def has_extensions(self) -> bool:
        """Subgroup types: every object carries an Extension Headers Length field."""
        return self.is_subgroup and bool(self & 0x01)

    @property
    def subgroup_id_mode(self) -> SubgroupIdMode:
        """Subgroup types: how the Subgroup ID is conveyed."""
        return SubgroupIdMode((self >> 1) & 0x03)

    @property
    def end_of_group(self) -> bool:
        """Subgroup types: the subgroup contains the last object of its group."""
        return self.is_subgroup and bool(self & 0x08)

    @classmethod
    def subgroup(
        cls, *, extensions: bool, mode: SubgroupIdMode, end_of_group: bool
    ) -> DataStreamType:
        """The subgroup header type with the given flag bits."""
        return cls(0x10 | int(extensions) | int(mode) << 1 | int(end_of_group) << 3)


class DatagramType(IntEnum):
    """OBJECT_DATAGRAM types (d14 §10.3.1).

    Types 0x00-0x07 carry a payload: bit 0 = extensions present, bit 1 = end of group, bit 2 =
    Object ID omitted (it is 0). Types 0x20/0x21 carry an Object Status instead (bit 0 =
    extensions present; Object ID always present).
    """

    OBJECT = 0x00
    OBJECT_EXT = 0x01
    OBJECT_EOG = 0x02
    OBJECT_EXT_EOG = 0x03
    OBJECT_NO_ID = 0x04
    OBJECT_NO_ID_EXT = 0x05
    OBJECT_NO_ID_EOG = 0x06
    OBJECT_NO_ID_EXT_EOG = 0x07
    STATUS = 0x20
    STATUS_EXT = 0x21

    @property
    def is_status(self) -> bool:
        """True when the datagram carries an Object Status instead of a payload."""
        return bool(self & 0x20)

    @property
    def has_extensions(self) -> bool:
        """True when Extension Headers Length and extensions are present."""
        return bool(self & 0x01)

    @property
    def end_of_group(self) -> bool:
        """True when the object is the last one in its group (payload types only)."""
        return not self.is_status and bool(self & 0x02)

    @property
    def has_object_id(self) -> bool:
        """True when the Object ID field is present (otherwise it is 0)."""
        return self.is_status or not self & 0x04

    @classmethod
    def for_object(cls, *, extensions: bool, end_of_group: bool, object_id: int) -> DatagramType:
        """The payload datagram type for these properties (Object ID 0 is omitted)."""
        return cls(int(extensions) | int(end_of_group) << 1 | int(object_id == 0) << 2)
