"""Value types shared by control messages: Location, parameter lists and auth tokens.

Design: parameters stay a faithful ordered list of ``(type, value)`` pairs, unknown and
duplicate ones included, so a relay can forward what it does not understand and a decode/encode
round trip is byte-exact. Typed accessors (``delivery_timeout``, ``max_request_id``, ...) read the
known ones. The two parameter namespaces of d14 (setup parameters §9.3.2, version-specific
message parameters §9.2.1) reuse type numbers with different meanings, hence two classes.

Invariants: even types carry ``int`` values, odd types ``bytes`` (d14 §1.4.2); the encoder
checks this and raises :class:`LocalProtocolError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from .errors import KeyValueFormattingError, LocalProtocolError, NeedMoreData
from .types import MessageParameter, SetupParameter, TokenAliasType
from .wire import KeyValuePairs, Reader, Writer

__all__ = [
    "AuthToken",
    "Location",
    "MessageParameters",
    "Parameters",
    "SetupParameters",
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
