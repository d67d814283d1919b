"""API keys → tenants → the ``cache_salt`` that keeps each tenant's KV apart.

Every request reaches vLLM with a ``cache_salt`` derived from its tenant: vLLM folds it into its
own prefix-cache hashes, the connector into every chained chunk hash and prompt id, so one
tenant's prefixes are never found — or revealed through ``cached_tokens`` — by another. A
client's own ``cache_salt`` narrows its tenant further (same tenant, separate cache); it can
never reach another tenant's salt, because the result is a hash over the tenant's secret salt.

Salts derive from a deployment secret (:func:`derive_salt`): stable across replicas and
restarts for a given secret, unpredictable without it.
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import dataclass

__all__ = ["AuthError", "Tenant", "TenantTable", "derive_salt"]


class AuthError(Exception):
    """A missing or unknown API key (HTTP 401)."""


@dataclass(frozen=True, kw_only=True)
class Tenant:
    """Who a request belongs to, and its salt."""

    name: str
    """The tenant's name (logs and metrics; never the key)."""
    salt: bytes
    """Secret salt folded into every chunk hash and prompt id of the tenant."""

    def cache_salt(self, client_salt: str | None = None) -> str:
        """The ``cache_salt`` to send to vLLM (hex), narrowed by the client's own if any."""
        if not client_salt:
            return self.salt.hex()
        narrowed = hashlib.sha256(self.salt + b"\x00cache_salt\x00" + client_salt.encode())
        return narrowed.hexdigest()


def derive_salt(secret: str, tenant: str) -> bytes:
    """The salt of ``tenant``: HMAC-SHA256(secret, tenant)."""
    return hmac.new(secret.encode(), b"kvmoq-tenant:" + tenant.encode(), hashlib.sha256).digest()


class TenantTable:
    """Maps API keys to tenants.

    With no keys configured, every request is the tenant ``public``; with keys configured, a
    missing or unknown key is an :class:`AuthError`.
    """

    def __init__(self, api_keys: dict[str, str] | None = None, *, secret: str) -> None:
        if not secret:
            raise ValueError("a tenant secret is required (see AppArgs.tenant_secret)")
        self._secret = secret
        self._by_key = {k: self._tenant(t) for k, t in (api_keys or {}).items()}
        self._public = self._tenant("public")

    def _tenant(self, name: str) -> Tenant:
        return Tenant(name=name, salt=derive_salt(self._secret, name))

    @property
    def auth_required(self) -> bool:
        """True when API keys are configured."""
        return bool(self._by_key)

    def resolve(self, authorization: str | None) -> Tenant:
        """The tenant of an ``Authorization: Bearer <key>`` header value."""
        if not self._by_key:
            return self._public
        key = ""
        if authorization and authorization.lower().startswith("bearer "):
            key = authorization[7:].strip()
        tenant = self._by_key.get(key) if key else None
        if tenant is None:
            raise AuthError("Missing API key." if not key else "Incorrect API key provided.")
        return tenant
