"""ray_kvmoq.moqt.codec: the stateless MoQT codec, arranged by message family.

One module per concept, each holding its dataclasses, its encode/decode functions (the
negotiated draft version is a parameter of every one) and its registry entries (``CODECS``):

==================  ==============================================================
:mod:`.setup`       CLIENT_SETUP, SERVER_SETUP, MAX_REQUEST_ID, REQUESTS_BLOCKED
:mod:`.goaway`      GOAWAY
:mod:`.subscribe`   SUBSCRIBE, SUBSCRIBE_OK/_ERROR/_UPDATE, UNSUBSCRIBE
:mod:`.publish`     PUBLISH, PUBLISH_OK/_ERROR, PUBLISH_DONE
:mod:`.fetch`       FETCH, FETCH_OK/_ERROR/_CANCEL
:mod:`.track_status` TRACK_STATUS, TRACK_STATUS_OK/_ERROR
:mod:`.namespace`   PUBLISH_NAMESPACE*, SUBSCRIBE_NAMESPACE*, UNSUBSCRIBE_NAMESPACE
:mod:`.streams`     subgroup and fetch data streams (parser; encoders in ``streams_encode``)
:mod:`.datagrams`   OBJECT_DATAGRAM
==================  ==============================================================

Shared underneath: :mod:`.types` (one IntEnum per IANA-style registry, limits, versions),
:mod:`.wire` (varints, length-prefixed fields, key-value pairs), :mod:`.fields` (Location,
parameters, auth tokens and the field codecs families share), :mod:`.errors` (the exception tree
with wire codes) and :mod:`.control` (control-frame framing: assembles every family's
``CODECS`` into one dispatch table and parses a control stream incrementally).

The names below are the codec's public surface (pinned by ``tests/moqt/test_public_surface.py``).
Everything here is pure stdlib: no I/O, no clock, no asyncio.
"""

from __future__ import annotations

from .control import (
    MESSAGE_CLASSES,
    SUPPORTED_VERSIONS,
    ControlStreamParser,
    Message,
    decode_control,
    encode_control,
    read_control_frame,
)
from .datagrams import (
    ObjectDatagram,
    decode_datagram,
    encode_datagram,
)
from .errors import (
    AuthTokenCacheOverflow,
    ControlMessageTimeout,
    DataStreamTimeout,
    DuplicateAuthTokenAlias,
    DuplicateTrackAlias,
    ExpiredAuthToken,
    GoawayTimeout,
    InvalidAuthority,
    InvalidPath,
    InvalidRequestId,
    KeyValueFormattingError,
    LocalProtocolError,
    MalformedAuthority,
    MalformedAuthToken,
    MalformedPath,
    MoqtError,
    NeedMoreData,
    ObjectTooLarge,
    ProtocolViolation,
    RemoteProtocolError,
    SessionTimeout,
    TooManyRequests,
    Unauthorized,
    UnknownAuthTokenAlias,
    UnknownMessageType,
    UnknownStreamType,
    VersionNegotiationFailed,
)
from .fetch import (
    Fetch,
    FetchCancel,
    FetchError,
    FetchOk,
)
from .fields import (
    AuthToken,
    DecodeOptions,
    Location,
    MessageParameters,
    Parameters,
    SetupParameters,
)
from .goaway import (
    Goaway,
)
from .namespace import (
    PublishNamespace,
    PublishNamespaceCancel,
    PublishNamespaceDone,
    PublishNamespaceError,
    PublishNamespaceOk,
    SubscribeNamespace,
    SubscribeNamespaceError,
    SubscribeNamespaceOk,
    UnsubscribeNamespace,
)
from .publish import (
    Publish,
    PublishDone,
    PublishError,
    PublishOk,
)
from .setup import (
    ClientSetup,
    MaxRequestId,
    RequestsBlocked,
    ServerSetup,
)
from .streams import (
    DEFAULT_MAX_EXTENSIONS_SIZE,
    DataEvent,
    DataStreamParser,
    FetchHeaderParsed,
    ObjectParsed,
    StreamFinished,
    SubgroupHeaderParsed,
    encode_fetch_header,
    encode_fetch_object,
    encode_fetch_object_header,
    encode_subgroup_header,
    encode_subgroup_object,
    encode_subgroup_object_header,
)
from .subscribe import (
    Subscribe,
    SubscribeError,
    SubscribeOk,
    SubscribeUpdate,
    Unsubscribe,
)
from .track_status import (
    TrackStatus,
    TrackStatusError,
    TrackStatusOk,
)
from .types import (
    ALPN,
    DEFAULT_MAX_OBJECT_SIZE,
    DRAFT_14,
    MAX_CONTROL_PAYLOAD,
    MAX_FULL_TRACK_NAME,
    MAX_GOAWAY_URI,
    MAX_KVP_VALUE,
    MAX_NAMESPACE_FIELDS,
    MAX_REASON,
    MAX_VARINT,
    DatagramType,
    DataStreamType,
    FetchErrorCode,
    FetchType,
    FilterType,
    GroupOrder,
    MessageParameter,
    MessageType,
    ObjectStatus,
    PublishDoneCode,
    PublishErrorCode,
    PublishNamespaceErrorCode,
    SessionError,
    SetupParameter,
    StreamResetCode,
    SubgroupIdMode,
    SubscribeErrorCode,
    SubscribeNamespaceErrorCode,
    TokenAliasType,
)
from .wire import (
    decode_varint,
    encode_varint,
)

__all__ = [
    "ALPN",
    "DEFAULT_MAX_EXTENSIONS_SIZE",
    "DEFAULT_MAX_OBJECT_SIZE",
    "DRAFT_14",
    "MAX_CONTROL_PAYLOAD",
    "MAX_FULL_TRACK_NAME",
    "MAX_GOAWAY_URI",
    "MAX_KVP_VALUE",
    "MAX_NAMESPACE_FIELDS",
    "MAX_REASON",
    "MAX_VARINT",
    "MESSAGE_CLASSES",
    "SUPPORTED_VERSIONS",
    "AuthToken",
    "AuthTokenCacheOverflow",
    "ClientSetup",
    "ControlMessageTimeout",
    "ControlStreamParser",
    "DataEvent",
    "DataStreamParser",
    "DataStreamTimeout",
    "DataStreamType",
    "DatagramType",
    "DecodeOptions",
    "DuplicateAuthTokenAlias",
    "DuplicateTrackAlias",
    "ExpiredAuthToken",
    "Fetch",
    "FetchCancel",
    "FetchError",
    "FetchErrorCode",
    "FetchHeaderParsed",
    "FetchOk",
    "FetchType",
    "FilterType",
    "Goaway",
    "GoawayTimeout",
    "GroupOrder",
    "InvalidAuthority",
    "InvalidPath",
    "InvalidRequestId",
    "KeyValueFormattingError",
    "LocalProtocolError",
    "Location",
    "MalformedAuthToken",
    "MalformedAuthority",
    "MalformedPath",
    "MaxRequestId",
    "Message",
    "MessageParameter",
    "MessageParameters",
    "MessageType",
    "MoqtError",
    "NeedMoreData",
    "ObjectDatagram",
    "ObjectParsed",
    "ObjectStatus",
    "ObjectTooLarge",
    "Parameters",
    "ProtocolViolation",
    "Publish",
    "PublishDone",
    "PublishDoneCode",
    "PublishError",
    "PublishErrorCode",
    "PublishNamespace",
    "PublishNamespaceCancel",
    "PublishNamespaceDone",
    "PublishNamespaceError",
    "PublishNamespaceErrorCode",
    "PublishNamespaceOk",
    "PublishOk",
    "RemoteProtocolError",
    "RequestsBlocked",
    "ServerSetup",
    "SessionError",
    "SessionTimeout",
    "SetupParameter",
    "SetupParameters",
    "StreamFinished",
    "StreamResetCode",
    "SubgroupHeaderParsed",
    "SubgroupIdMode",
    "Subscribe",
    "SubscribeError",
    "SubscribeErrorCode",
    "SubscribeNamespace",
    "SubscribeNamespaceError",
    "SubscribeNamespaceErrorCode",
    "SubscribeNamespaceOk",
    "SubscribeOk",
    "SubscribeUpdate",
    "TokenAliasType",
    "TooManyRequests",
    "TrackStatus",
    "TrackStatusError",
    "TrackStatusOk",
    "Unauthorized",
    "UnknownAuthTokenAlias",
    "UnknownMessageType",
    "UnknownStreamType",
    "Unsubscribe",
    "UnsubscribeNamespace",
    "VersionNegotiationFailed",
    "decode_control",
    "decode_datagram",
    "decode_varint",
    "encode_control",
    "encode_datagram",
    "encode_fetch_header",
    "encode_fetch_object",
    "encode_fetch_object_header",
    "encode_subgroup_header",
    "encode_subgroup_object",
    "encode_subgroup_object_header",
    "encode_varint",
    "read_control_frame",
]
