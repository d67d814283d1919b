"""Field-level values and codecs shared by every control-message family (d14 §1.4, §9.2).

Values: :class:`Location`, the two parameter lists (setup parameters §9.3.2 and message
parameters §9.2.1 reuse type numbers with different meanings, hence two classes) and
:class:`AuthToken`. Parameters stay a faithful ordered list of ``(type, value)`` pairs, unknown
and duplicate ones included, so a relay can forward what it does not understand and a
decode/encode round trip is byte-exact; typed accessors read the known ones.

Codecs: ``read_*`` helpers validate peer input and raise :class:`RemoteProtocolError`
subclasses; ``write_*`` helpers validate our own values and raise :class:`LocalProtocolError`.
``NeedMoreData`` from a reader escapes on purpose: :func:`.control.decode_control` turns it into
a ProtocolViolation because a control payload is always complete when decoded. Bodies shared by
several families (Request ID + Error Code + Reason, a lone Request ID) live here too, so each
family module (:mod:`.setup`, :mod:`.subscribe`, ...) only holds its own messages.

Every decoder receives :class:`DecodeOptions`, whose ``version`` is the negotiated draft: a
family whose layout differs between drafts branches on it in its own module.

Invariants: even parameter types carry ``int`` values, odd types ``bytes`` (d14 §1.4.2); the
encoder checks this and raises :class:`LocalProtocolError`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from .errors import KeyValueFormattingError, LocalProtocolError, NeedMoreData, ProtocolViolation
from .types import (
    DRAFT_14,
    DRAFT_16,
    MAX_FULL_TRACK_NAME,
    FilterType,
    GroupOrder,
    MessageParameter,
    MessageParameterD16,
    SetupParameter,
    TokenAliasType,
)
from .wire import KeyValuePairs, Reader, Writer

__all__ = [
    "AuthToken",
    "Codecs",
    "DecodeOptions",
    "Location",
    "MessageParameters",
    "Parameters",
    "SetupParameters",
    "check_group_order",
    "dec_error",
    "dec_request_id",
    "decode_location",
    "enc_error",
    "enc_request_id",
    "encode_location",
    "int_param",
    "params_with_fields",
    "read_bool",
    "read_filter",
    "read_full_track_name",
    "read_group_order",
    "read_location",
    "read_namespace",
    "read_params",
    "write_bool",
    "write_filter",
    "write_full_track_name",
    "write_location",
    "write_namespace",
    "write_params",
]


@dataclass(frozen=True, order=True, slots=True)
class Location:
    """A position in a track, ordered by group then object (d14 §1.4.1)."""

    group: int
    """Group ID."""
    object: int
    """Object ID within the group."""

    def next_object(self) -> Location:
        """The location right after this one in the same group."""
        return Location(self.group, self.object + 1)


@dataclass(frozen=True, slots=True)
class AuthToken:
    """Value of an AUTHORIZATION TOKEN parameter (d14 §9.2.1.1)."""

    alias_type: TokenAliasType
    """What to do with the alias: DELETE, REGISTER, USE_ALIAS or USE_VALUE."""
    alias: int | None = None
    """Token Alias (absent for USE_VALUE)."""
    token_type: int | None = None
    """Token Type (REGISTER and USE_VALUE only; 0 = negotiated out of band)."""
    value: bytes = b""
    """Token Value (REGISTER and USE_VALUE only); runs to the end of the parameter."""

    def encode(self) -> bytes:
        """Serialize the Token structure.

        Raises:
            LocalProtocolError: fields present/absent contrary to ``alias_type``.
        """
        alias_type = TokenAliasType(self.alias_type)
        if (self.alias is not None) != alias_type.has_alias:
            raise LocalProtocolError(f"{alias_type.name} token: alias presence mismatch")
        if (self.token_type is not None) != alias_type.has_value:
            raise LocalProtocolError(f"{alias_type.name} token: token type presence mismatch")
        if self.value and not alias_type.has_value:
            raise LocalProtocolError(f"{alias_type.name} token carries no value")
        w = Writer().varint(alias_type)
        if self.alias is not None:
            w.varint(self.alias)
        if self.token_type is not None:
            w.varint(self.token_type).raw(self.value)
        return w.getvalue()

    @classmethod
    def decode(cls, data: bytes) -> AuthToken:
        """Parse a Token structure.

        Raises:
            KeyValueFormattingError: unknown alias type, truncated, or trailing bytes.
        """
        r = Reader(data)
        try:
            raw_type = r.varint()
            try:
                alias_type = TokenAliasType(raw_type)
            except ValueError:
                raise KeyValueFormattingError(f"unknown token alias type {raw_type}") from None
            alias = r.varint() if alias_type.has_alias else None
            token_type = None
            value = b""
            if alias_type.has_value:
                token_type = r.varint()
                value = r.rest()
        except NeedMoreData:
            raise KeyValueFormattingError("truncated authorization token") from None
        if not r.at_end():
            raise KeyValueFormattingError("trailing bytes after authorization token")
        return cls(alias_type=alias_type, alias=alias, token_type=token_type, value=value)


@dataclass(frozen=True, slots=True)
class Parameters:
    """Ordered Key-Value-Pair parameter list (d14 §9.2), unknown and duplicates preserved."""

    items: KeyValuePairs = ()
    """The ``(type, value)`` pairs in wire order; even types hold ``int``, odd ``bytes``."""

    REPEATABLE: ClassVar[frozenset[int]] = frozenset()
    """Known types that may appear more than once."""
    KNOWN: ClassVar[frozenset[int]] = frozenset()
    """Types whose meaning this class understands."""

    def __len__(self) -> int:
        return len(self.items)

    def get(self, param_type: int) -> int | bytes | None:
        """Value of the first parameter of ``param_type``, or None."""
        for kvp_type, value in self.items:
            if kvp_type == param_type:
                return value
        return None

    def get_all(self, param_type: int) -> list[int | bytes]:
        """Values of every parameter of ``param_type``, in order."""
        return [value for kvp_type, value in self.items if kvp_type == param_type]

    def get_int(self, param_type: int) -> int | None:
        """Value of the first even-typed parameter of ``param_type``, or None."""
        value = self.get(param_type)
        return value if isinstance(value, int) else None

    def get_bytes(self, param_type: int) -> bytes | None:
        """Value of the first odd-typed parameter of ``param_type``, or None."""
        value = self.get(param_type)
        return value if isinstance(value, bytes) else None

    @property
    def auth_tokens(self) -> list[AuthToken]:
        """Every AUTHORIZATION TOKEN (type 0x03), decoded.

        Raises:
            KeyValueFormattingError: a token that does not parse.
        """
        return [AuthToken.decode(v) for v in self.get_all(0x03) if isinstance(v, bytes)]

    def with_param(self, param_type: int, value: int | bytes) -> Parameters:
        """A copy with one more parameter appended."""
        return type(self)(items=(*self.items, (param_type, value)))


@dataclass(frozen=True, slots=True)
class SetupParameters(Parameters):
    """Setup parameters of CLIENT_SETUP / SERVER_SETUP (d14 §9.3.2)."""

    REPEATABLE: ClassVar[frozenset[int]] = frozenset({SetupParameter.AUTHORIZATION_TOKEN})
    KNOWN: ClassVar[frozenset[int]] = frozenset(SetupParameter)

    @classmethod
    def build(
        cls,
        *,
        path: bytes | None = None,
        authority: bytes | None = None,
        max_request_id: int | None = None,
        max_auth_token_cache_size: int | None = None,
        implementation: bytes | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> SetupParameters:
        """Setup parameters from typed values; None leaves a parameter out."""
        items: list[tuple[int, int | bytes]] = []
        if path is not None:
            items.append((SetupParameter.PATH, path))
        if authority is not None:
            items.append((SetupParameter.AUTHORITY, authority))
        if max_request_id is not None:
            items.append((SetupParameter.MAX_REQUEST_ID, max_request_id))
        if max_auth_token_cache_size is not None:
            items.append((SetupParameter.MAX_AUTH_TOKEN_CACHE_SIZE, max_auth_token_cache_size))
        if implementation is not None:
            items.append((SetupParameter.MOQT_IMPLEMENTATION, implementation))
        items.extend((SetupParameter.AUTHORIZATION_TOKEN, t.encode()) for t in auth_tokens)
        return cls(items=tuple(items))

    @property
    def path(self) -> bytes | None:
        """PATH (0x01): ``path-abempty[?query]`` from a ``moqt://`` URI."""
        return self.get_bytes(SetupParameter.PATH)

    @property
    def authority(self) -> bytes | None:
        """AUTHORITY (0x05): ``host[:port]``."""
        return self.get_bytes(SetupParameter.AUTHORITY)

    @property
    def max_request_id(self) -> int | None:
        """MAX_REQUEST_ID (0x02): initial Maximum Request ID (absent means 0)."""
        return self.get_int(SetupParameter.MAX_REQUEST_ID)

    @property
    def max_auth_token_cache_size(self) -> int | None:
        """MAX_AUTH_TOKEN_CACHE_SIZE (0x04) in bytes (absent means 0)."""
        return self.get_int(SetupParameter.MAX_AUTH_TOKEN_CACHE_SIZE)

    @property
    def implementation(self) -> bytes | None:
        """MOQT_IMPLEMENTATION (0x07): free-form implementation name."""
        return self.get_bytes(SetupParameter.MOQT_IMPLEMENTATION)


@dataclass(frozen=True, slots=True)
class MessageParameters(Parameters):
    """Version-specific parameters of request/response messages (d14 §9.2.1)."""

    REPEATABLE: ClassVar[frozenset[int]] = frozenset({MessageParameter.AUTHORIZATION_TOKEN})
    KNOWN: ClassVar[frozenset[int]] = frozenset(MessageParameter)

    @classmethod
    def build(
        cls,
        *,
        delivery_timeout: int | None = None,
        max_cache_duration: int | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> MessageParameters:
        """Message parameters from typed values; None leaves a parameter out."""
        items: list[tuple[int, int | bytes]] = []
        if delivery_timeout is not None:
            items.append((MessageParameter.DELIVERY_TIMEOUT, delivery_timeout))
        if max_cache_duration is not None:
            items.append((MessageParameter.MAX_CACHE_DURATION, max_cache_duration))
        items.extend((MessageParameter.AUTHORIZATION_TOKEN, t.encode()) for t in auth_tokens)
        return cls(items=tuple(items))

    @property
    def delivery_timeout(self) -> int | None:
        """DELIVERY_TIMEOUT (0x02) in milliseconds."""
        return self.get_int(MessageParameter.DELIVERY_TIMEOUT)

    @property
    def max_cache_duration(self) -> int | None:
        """MAX_CACHE_DURATION (0x04) in milliseconds."""
        return self.get_int(MessageParameter.MAX_CACHE_DURATION)


@dataclass(frozen=True, kw_only=True, slots=True)
class DecodeOptions:
    """Knobs of control-message decoding."""

    version: int
    """Negotiated version (only draft-14 is implemented)."""
    allow_empty_namespace_prefix: bool = False
    """Accept a 0-field prefix in SUBSCRIBE_NAMESPACE/UNSUBSCRIBE_NAMESPACE (moq-dev quirk)."""


def _check_ftn_length(namespace: tuple[bytes, ...], name: bytes, local: bool) -> None:
    total = sum(len(f) for f in namespace) + len(name)
    if total > MAX_FULL_TRACK_NAME:
        message = f"full track name of {total} bytes exceeds {MAX_FULL_TRACK_NAME}"
        raise LocalProtocolError(message) if local else ProtocolViolation(message)


def read_namespace(r: Reader, *, allow_empty: bool = False) -> tuple[bytes, ...]:
    """Read a Track Namespace tuple and check its field count and total length."""
    namespace = r.tuple_field(allow_empty=allow_empty)
    _check_ftn_length(namespace, b"", local=False)
    return namespace


def write_namespace(w: Writer, namespace: tuple[bytes, ...], *, allow_empty: bool = False) -> None:
    """Write a Track Namespace tuple after checking it."""
    _check_ftn_length(namespace, b"", local=True)
    w.tuple_field(namespace, allow_empty=allow_empty)


def read_full_track_name(r: Reader) -> tuple[tuple[bytes, ...], bytes]:
    """Read Track Namespace + Track Name; total length at most 4096 bytes (d14 §2.4.1)."""
    namespace = r.tuple_field()
    name = r.length_prefixed(MAX_FULL_TRACK_NAME, "track name")
    _check_ftn_length(namespace, name, local=False)
    return namespace, name


def write_full_track_name(w: Writer, namespace: tuple[bytes, ...], name: bytes) -> None:
    """Write Track Namespace + Track Name after checking the 4096-byte limit."""
    if not isinstance(name, bytes | bytearray):
        raise LocalProtocolError(f"track name must be bytes, got {type(name).__name__}")
    _check_ftn_length(namespace, name, local=True)
    w.tuple_field(namespace)
    w.length_prefixed(name)


def read_bool(r: Reader, what: str) -> bool:
    """Read an 8-bit 0/1 flag; any other value is a PROTOCOL_VIOLATION."""
    value = r.uint8()
    if value > 1:
        raise ProtocolViolation(f"{what} must be 0 or 1, got {value}")
    return value == 1


def write_bool(w: Writer, value: bool) -> None:
    """Write an 8-bit 0/1 flag."""
    w.uint8(1 if value else 0)


def read_group_order(r: Reader, *, allow_default: bool) -> GroupOrder:
    """Read Group Order: 1..2, or 0..2 in requests (``allow_default``)."""
    value = r.uint8()
    if value > 2 or (value == 0 and not allow_default):
        raise ProtocolViolation(f"invalid group order {value}")
    return GroupOrder(value)


def check_group_order(value: int, *, allow_default: bool) -> int:
    """Validate a group order we are about to send."""
    if not 0 <= value <= 2 or (value == 0 and not allow_default):
        raise LocalProtocolError(f"invalid group order {value}")
    return value


def read_location(r: Reader) -> Location:
    """Read a Location {Group (i), Object (i)}."""
    group = r.varint()
    return Location(group, r.varint())


def write_location(w: Writer, loc: Location) -> None:
    """Write a Location."""
    w.varint(loc.group).varint(loc.object)


def read_filter(r: Reader) -> tuple[FilterType, Location | None, int | None]:
    """Read Filter Type with its optional Start Location and End Group (d14 §9.7)."""
    raw = r.varint()
    try:
        filter_type = FilterType(raw)
    except ValueError:
        raise ProtocolViolation(f"invalid filter type {raw}") from None
    start = read_location(r) if filter_type.has_start else None
    end_group = r.varint() if filter_type.has_end_group else None
    if start is not None and end_group is not None and end_group < start.group:
        raise ProtocolViolation(f"end group {end_group} before start group {start.group}")
    return filter_type, start, end_group


def write_filter(
    w: Writer, filter_type: FilterType, start: Location | None, end_group: int | None
) -> None:
    """Write Filter Type, Start Location and End Group, checking presence."""
    try:
        ft = FilterType(filter_type)
    except ValueError:
        raise LocalProtocolError(f"invalid filter type {filter_type}") from None
    if (start is not None) != ft.has_start or (end_group is not None) != ft.has_end_group:
        raise LocalProtocolError(f"{ft.name}: start/end_group presence does not match filter")
    w.varint(ft)
    if start is not None:
        write_location(w, start)
    if end_group is not None:
        if start is not None and end_group < start.group:
            raise LocalProtocolError("end group before start group")
        w.varint(end_group)


def read_params(r: Reader, cls: type[P], *, version: int = DRAFT_14) -> P:
    """Read Number of Parameters + Key-Value-Pairs into ``cls`` (delta-encoded types from
    draft-16 on, d16 §1.4.2).

    Raises:
        ProtocolViolation: a known non-repeatable parameter appears twice (d14 §9.2).
        KeyValueFormattingError: an AUTHORIZATION_TOKEN value does not parse (d14 §9.2.1.1).
    """
    items = r.kvps(r.varint(), delta=version >= DRAFT_16)
    _check_params(items, cls, local=False, version=version)
    return cls(items=items)


def write_params(w: Writer, params: Parameters, *, version: int = DRAFT_14) -> None:
    """Write Number of Parameters + Key-Value-Pairs (delta-encoded from draft-16 on)."""
    _check_params(params.items, type(params), local=True, version=version)
    w.kvps(params.items, delta=version >= DRAFT_16)


def _known(cls: type[Parameters], version: int) -> tuple[frozenset[int], frozenset[int]]:
    """(known, repeatable) parameter types of ``cls`` in ``version``: setup parameters keep
    their numbers in every version (d16 §9.2); message parameters are per version."""
    if version >= DRAFT_16 and issubclass(cls, MessageParameters):
        return _D16_MESSAGE_PARAMS, _D16_REPEATABLE
    return cls.KNOWN, cls.REPEATABLE


_D16_MESSAGE_PARAMS = frozenset(int(p) for p in MessageParameterD16)
_D16_REPEATABLE = frozenset({int(MessageParameterD16.AUTHORIZATION_TOKEN)})


def _check_params(
    items: tuple[tuple[int, int | bytes], ...],
    cls: type[Parameters],
    *,
    local: bool,
    version: int = DRAFT_14,
) -> None:
    known, repeatable = _known(cls, version)
    seen: set[int] = set()
    for kvp_type, value in items:
        if kvp_type not in known:
            continue
        if kvp_type not in repeatable:
            if kvp_type in seen:
                message = f"duplicate parameter {kvp_type:#x}"
                raise LocalProtocolError(message) if local else ProtocolViolation(message)
            seen.add(kvp_type)
        if kvp_type == 0x03 and isinstance(value, bytes) and not local:
            AuthToken.decode(value)


Codecs = dict[
    int, tuple[type, Callable[[Writer, Any], None], Callable[[Reader, "DecodeOptions"], Any]]
]
"""A family's registry entries for one version: type code -> (class, payload encoder, payload
decoder)."""

P = TypeVar("P", bound=Parameters)
E = TypeVar("E")


def enc_error(w: Writer, m: Any) -> None:
    """Request ID, Error Code, Reason Phrase (every *_ERROR body of d14)."""
    w.varint(m.request_id).varint(m.error_code).reason(m.reason)


def dec_error(cls: type[E], r: Reader, opts: DecodeOptions) -> E:
    """Request ID, Error Code, Reason Phrase."""
    request_id = r.varint()
    error_code = r.varint()
    return cls(request_id=request_id, error_code=error_code, reason=r.reason())  # type: ignore[call-arg]


def enc_request_id(w: Writer, m: Any) -> None:
    """A payload made of one Request ID (UNSUBSCRIBE, FETCH_CANCEL, the namespace *_OKs)."""
    w.varint(m.request_id)


def dec_request_id(cls: type[E], r: Reader, opts: DecodeOptions) -> E:
    """A payload made of one Request ID."""
    return cls(request_id=r.varint())  # type: ignore[call-arg]


def params_with_fields(
    params: MessageParameters, fields: dict[int, tuple[int | bytes, int | bytes | None]]
) -> MessageParameters:
    """``params`` with message fields carried as parameters (draft-16 moved SUBSCRIBE's
    priority, group order, forward and filter, and SUBSCRIBE_OK's expires and largest, into
    parameters, d16 §9.2.2).

    ``fields`` maps a parameter type to ``(value, default)``: a parameter already present takes
    the field's value; an absent one is added only when the value differs from the default (so a
    decoded message re-encodes byte for byte, and a default is never spelled out).
    """
    items = []
    done: set[int] = set()
    for kvp_type, value in params.items:
        if kvp_type in fields:
            if kvp_type in done:
                continue
            value = fields[kvp_type][0]
            done.add(kvp_type)
        items.append((kvp_type, value))
    for kvp_type, (value, default) in fields.items():
        if kvp_type not in done and value != default:
            items.append((kvp_type, value))
    return MessageParameters(items=tuple(items))


def encode_location(loc: Location) -> bytes:
    """A Location as the bytes of a length-prefixed parameter (d16 LARGEST_OBJECT)."""
    w = Writer()
    write_location(w, loc)
    return bytes(w.buf)


def decode_location(data: bytes, what: str) -> Location:
    """Parse a Location that must fill ``data`` exactly (a parameter value)."""
    r = Reader(data)
    try:
        loc = read_location(r)
    except NeedMoreData:
        raise ProtocolViolation(f"{what}: truncated location") from None
    if not r.at_end():
        raise ProtocolViolation(f"{what}: {r.remaining} trailing bytes")
    return loc


def int_param(params: MessageParameters, kind: int, default: int, top: int, what: str) -> int:
    """An even (varint) parameter bounded by ``top``, or ``default`` when absent."""
    value = params.get(kind)
    if value is None:
        return default
    if not isinstance(value, int) or value > top:
        raise ProtocolViolation(f"{what} parameter {value!r} out of range")
    return value
