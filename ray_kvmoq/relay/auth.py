"""Signed, expiring, namespace-scoped AUTHORIZATION_TOKEN values for relays (sans-I/O).

A token is ASCII text, carried as the value of a draft-14 AUTHORIZATION_TOKEN parameter
(Alias Type USE_VALUE, Token Type 0 "out of band") in CLIENT_SETUP or in a request::

    kvm1.<key id>.<base64url(JSON claims)>.<base64url(HMAC-SHA256(key, "kvm1.<kid>.<claims>"))>

Claims (all required except ``nbf``; any other claim makes the token malformed, so a typo can
never widen access — moq-relay's rule):

    {"ten": "tenant-a", "pub": [["kv", "tenant-a"]], "sub": [["kv", "tenant-a"]],
     "exp": 1767225600, "nbf": 1767222000}

``pub`` / ``sub`` are lists of namespace prefixes, each a list of UTF-8 fields. A prefix
matches field-wise (``["foo"]`` covers ``("foo", "bar")``, not ``("foobar",)``); its *last*
field may end in ``*`` to match any field that starts with the rest (so ``["kv", "t1-*"]``
covers every prompt id a tenant's salt prefixes). ``[]`` (the empty prefix) covers everything —
used only by cluster-internal relay tokens.

Keys rotate through key ids: a :class:`TokenVerifier` holds every key still accepted, a
:class:`TokenSigner` signs with one. Verification is constant-time on the MAC and takes the
clock as an argument. Failures are :class:`AuthError` subclasses; each carries the draft-14
session close code (``error_code``) and the request error code (``request_code``) to answer
with::

    AuthError                      session / request code
     +-- MalformedToken            MALFORMED_AUTH_TOKEN 0x16 / 0x10
     +-- ExpiredToken              EXPIRED_AUTH_TOKEN   0x18 / 0x12
     +-- Unauthorized              UNAUTHORIZED         0x2  / 0x1  (bad key, bad MAC, not yet
                                                                     valid, out of scope, absent)
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

__all__ = [
    "AuthError",
    "Claims",
    "ExpiredToken",
    "MalformedToken",
    "TokenSigner",
    "TokenVerifier",
    "Unauthorized",
    "namespace_allowed",
]

_PREFIX = "kvm1"
_KNOWN_CLAIMS = frozenset({"ten", "pub", "sub", "exp", "nbf"})
_MAX_TOKEN = 8192  # well under the 65535-byte control message limit

Namespace = tuple[bytes, ...]
Action = Literal["publish", "subscribe"]


class AuthError(Exception):
    """A token was refused. ``error_code``: session close code; ``request_code``: request error."""

    error_code = 0x2
    request_code = 0x1


class MalformedToken(AuthError):
    """Not a token of this format: bad framing, encoding, JSON or claims."""

    error_code = 0x16
    request_code = 0x10


class ExpiredToken(AuthError):
    """The token's ``exp`` has passed."""

    error_code = 0x18
    request_code = 0x12


class Unauthorized(AuthError):
    """Well-formed but not acceptable: unknown key, bad signature, not yet valid, out of scope."""

    error_code = 0x2
    request_code = 0x1


@dataclass(frozen=True, kw_only=True)
class Claims:
    """What a verified token grants."""

    tenant: str
    """Tenant name (for logs and per-tenant accounting)."""
    publish: tuple[tuple[str, ...], ...]
    """Namespace prefixes the holder may publish under."""
    subscribe: tuple[tuple[str, ...], ...]
    """Namespace prefixes the holder may subscribe to or fetch from."""
    exp: int
    """Expiry, seconds since the epoch."""
    nbf: int = 0
    """Not-before, seconds since the epoch."""

    def allows(self, action: Action, namespace: Namespace) -> bool:
        """True when the claims cover ``action`` on ``namespace``."""
        prefixes = self.publish if action == "publish" else self.subscribe
        return any(namespace_allowed(p, namespace) for p in prefixes)

    def to_json(self) -> dict[str, object]:
        """The claims object as signed."""
        out: dict[str, object] = {
            "ten": self.tenant,
            "pub": [list(p) for p in self.publish],
            "sub": [list(p) for p in self.subscribe],
            "exp": self.exp,
        }
        if self.nbf:
            out["nbf"] = self.nbf
        return out


def namespace_allowed(prefix: Sequence[str], namespace: Namespace) -> bool:
    """Field-wise prefix match; the prefix's last field may end in ``*`` (string prefix)."""
    if len(prefix) > len(namespace):
        return False
    for i, want in enumerate(prefix):
        try:
            have = namespace[i].decode()
        except UnicodeDecodeError:
            return False
        if i == len(prefix) - 1 and want.endswith("*"):
            if not have.startswith(want[:-1]):
                return False
        elif have != want:
            return False
    return True


def _b64e(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _b64d(text: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))
    except (binascii.Error, ValueError) as exc:
        raise MalformedToken("bad base64url") from exc


class TokenSigner:
    """Issues tokens with one key (``key_id`` names it to verifiers)."""

    def __init__(self, key_id: str, key: bytes) -> None:
        if not key_id or "." in key_id:
            raise ValueError("key id must be non-empty and contain no '.'")
        if len(key) < 16:
            raise ValueError("HMAC key must be at least 16 bytes")
        self.key_id = key_id
        self._key = key

    def sign(self, claims: Claims) -> bytes:
        """The token (ASCII bytes) for ``claims``."""
        body = json.dumps(claims.to_json(), separators=(",", ":"), sort_keys=True).encode()
        head = f"{_PREFIX}.{self.key_id}.{_b64e(body)}"
        mac = hmac.new(self._key, head.encode(), hashlib.sha256).digest()
        return f"{head}.{_b64e(mac)}".encode()

    def issue(
        self,
        tenant: str,
        *,
        publish: Sequence[Sequence[str]] = (),
        subscribe: Sequence[Sequence[str]] = (),
        now: float,
        ttl_s: float = 3600.0,
    ) -> bytes:
        """Sign a token valid from ``now`` for ``ttl_s`` seconds."""
        claims = Claims(
            tenant=tenant,
            publish=tuple(tuple(p) for p in publish),
            subscribe=tuple(tuple(p) for p in subscribe),
            exp=int(now + ttl_s),
            nbf=int(now) - 1,
        )
        return self.sign(claims)


class TokenVerifier:
    """Checks tokens against every accepted key (rotation: add the new key, then drop the old)."""

    def __init__(self, keys: Mapping[str, bytes], *, leeway_s: float = 0.0) -> None:
        self._keys = dict(keys)
        self.leeway_s = leeway_s

    def add_key(self, key_id: str, key: bytes) -> None:
        """Accept tokens signed with ``key``."""
        self._keys[key_id] = key

    def remove_key(self, key_id: str) -> None:
        """Stop accepting tokens signed with ``key_id``."""
        self._keys.pop(key_id, None)

    def verify(self, token: bytes | None, now: float) -> Claims:
        """The claims of a valid token; raises an :class:`AuthError` subclass otherwise."""
        if token is None:
            raise Unauthorized("no authorization token")
        if len(token) > _MAX_TOKEN:
            raise MalformedToken("token too long")
        try:
            text = token.decode("ascii")
        except UnicodeDecodeError as exc:
            raise MalformedToken("token is not ASCII") from exc
        parts = text.split(".")
        if len(parts) != 4 or parts[0] != _PREFIX:
            raise MalformedToken("not a kvm1 token")
        _, kid, body_b64, mac_b64 = parts
        mac = _b64d(mac_b64)
        key = self._keys.get(kid)
        if key is None:
            raise Unauthorized(f"unknown key id {kid!r}")
        want = hmac.new(key, f"{_PREFIX}.{kid}.{body_b64}".encode(), hashlib.sha256).digest()
        if not hmac.compare_digest(mac, want):
            raise Unauthorized("bad signature")
        claims = _parse_claims(_b64d(body_b64))
        if now >= claims.exp + self.leeway_s:
            raise ExpiredToken(f"token expired at {claims.exp}")
        if now < claims.nbf - self.leeway_s:
            raise Unauthorized("token not yet valid")
        return claims

    def authorize(
        self, token: bytes | None, action: Action, namespace: Namespace, now: float
    ) -> Claims:
        """Verify ``token`` and check it covers ``action`` on ``namespace``."""
        claims = self.verify(token, now)
        if not claims.allows(action, namespace):
            raise Unauthorized(f"tenant {claims.tenant!r} may not {action} this namespace")
        return claims


def _prefixes(value: object) -> tuple[tuple[str, ...], ...]:
    if not isinstance(value, list):
        raise MalformedToken("prefix list expected")
    out = []
    for p in value:
        if not isinstance(p, list) or not all(isinstance(f, str) for f in p) or len(p) > 32:
            raise MalformedToken("a prefix is a list of at most 32 strings")
        out.append(tuple(p))
    return tuple(out)


def _parse_claims(body: bytes) -> Claims:
    try:
        raw = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise MalformedToken("claims are not JSON") from exc
    if not isinstance(raw, dict):
        raise MalformedToken("claims must be an object")
    unknown = set(raw) - _KNOWN_CLAIMS
    if unknown:
        raise MalformedToken(f"unknown claims {sorted(unknown)}")
    ten, exp, nbf = raw.get("ten"), raw.get("exp"), raw.get("nbf", 0)
    if not isinstance(ten, str) or not ten:
        raise MalformedToken("'ten' must be a non-empty string")
    for name, v in (("exp", exp), ("nbf", nbf)):
        if not isinstance(v, int) or isinstance(v, bool):
            raise MalformedToken(f"{name!r} must be an integer")
    assert isinstance(exp, int) and isinstance(nbf, int)
    if "pub" not in raw or "sub" not in raw:
        raise MalformedToken("'pub' and 'sub' are required")
    return Claims(
        tenant=ten,
        publish=_prefixes(raw["pub"]),
        subscribe=_prefixes(raw["sub"]),
        exp=exp,
        nbf=nbf,
    )
