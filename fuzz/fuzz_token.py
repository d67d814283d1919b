"""Fuzz target: relay tokens (``ray_kvmoq.relay.auth``), the ``kvm1.<kid>.<claims>.<mac>``
strings peers put in MoQT AUTHORIZATION TOKEN parameters.

Half the inputs are whole tokens (mostly stopped by the MAC, as a forger's would be); the other
half are claim bodies that get a valid signature first, so the claims parser itself is
fuzzed. Checked: :meth:`TokenVerifier.verify` / :meth:`TokenVerifier.authorize` raise nothing
but :class:`~ray_kvmoq.relay.auth.AuthError`; a token that verifies names a non-empty tenant
and prefix lists of at most 32 string fields.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

import atheris

with atheris.instrument_imports(include=["ray_kvmoq"]):
    from ray_kvmoq.relay.auth import AuthError, TokenVerifier

from _common import main

KEY = b"fuzz token key, 32 bytes long..!"
VERIFIER = TokenVerifier({"k1": KEY})
NOW = 1_800_000_000.0


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _signed(body: bytes) -> bytes:
    head = f"kvm1.k1.{_b64(body)}"
    mac = hmac.new(KEY, head.encode(), hashlib.sha256).digest()
    return f"{head}.{_b64(mac)}".encode()


def test_one_input(data: bytes) -> None:
    if not data:
        return
    token = _signed(data[1:]) if data[0] & 1 else data[1:]
    namespace = tuple(data[1:].split(b"/")[:4])
    try:
        claims = VERIFIER.verify(token, NOW)
    except AuthError:
        return
    assert claims.tenant and isinstance(claims.tenant, str)
    assert all(len(p) <= 32 for p in (*claims.publish, *claims.subscribe))
    for action in ("publish", "subscribe"):
        try:
            VERIFIER.authorize(token, action, namespace, NOW)  # type: ignore[arg-type]
        except AuthError:
            pass


if __name__ == "__main__":
    main(test_one_input)
