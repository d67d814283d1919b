"""Relay tokens: signature, expiry, scope, malformed input, key rotation (reliability-plan §6.2)."""

from __future__ import annotations

import base64
import json

import pytest

from ray_kvmoq.relay.auth import (
    AuthError,
    Claims,
    ExpiredToken,
    MalformedToken,
    TokenSigner,
    TokenVerifier,
    Unauthorized,
    namespace_allowed,
)

KEY = b"k" * 32
NOW = 1_800_000_000.0
A_NS = (b"kv", b"tenant-a", b"p1")
B_NS = (b"kv", b"tenant-b", b"p1")


def _signer() -> TokenSigner:
    return TokenSigner("k1", KEY)


def _token(**kw: object) -> bytes:
    args: dict[str, object] = dict(publish=[["kv", "tenant-a"]], subscribe=[["kv", "tenant-a"]])
    args.update(kw)
    return _signer().issue("tenant-a", now=NOW, ttl_s=60, **args)  # type: ignore[arg-type]


def test_valid_token_grants_exactly_its_prefixes() -> None:
    v = TokenVerifier({"k1": KEY})
    claims = v.authorize(_token(), "subscribe", A_NS, now=NOW + 1)
    assert claims.tenant == "tenant-a"
    assert v.authorize(_token(), "publish", A_NS, now=NOW + 1) == claims
    with pytest.raises(Unauthorized) as ei:
        v.authorize(_token(), "subscribe", B_NS, now=NOW + 1)
    assert (ei.value.error_code, ei.value.request_code) == (0x2, 0x1)
    with pytest.raises(Unauthorized):
        v.authorize(_token(publish=[]), "publish", A_NS, now=NOW + 1)


def test_expired_and_not_yet_valid() -> None:
    v = TokenVerifier({"k1": KEY})
    with pytest.raises(ExpiredToken) as ei:
        v.verify(_token(), now=NOW + 61)
    assert (ei.value.error_code, ei.value.request_code) == (0x18, 0x12)
    with pytest.raises(Unauthorized):
        v.verify(_token(), now=NOW - 100)


def test_wrong_key_bad_signature_and_rotation() -> None:
    tok = _token()
    with pytest.raises(Unauthorized):
        TokenVerifier({"k1": b"z" * 32}).verify(tok, now=NOW)
    with pytest.raises(Unauthorized):
        TokenVerifier({"k2": KEY}).verify(tok, now=NOW)
    flipped = tok[:-3] + (b"A" if tok[-3:-2] != b"A" else b"B") + tok[-2:]
    with pytest.raises((Unauthorized, MalformedToken)):
        TokenVerifier({"k1": KEY}).verify(flipped, now=NOW)
    v = TokenVerifier({"k1": KEY})
    v.add_key("k2", b"n" * 32)
    new = TokenSigner("k2", b"n" * 32).issue("t", subscribe=[[]], now=NOW)
    assert v.verify(new, now=NOW).tenant == "t" and v.verify(tok, now=NOW).tenant == "tenant-a"
    v.remove_key("k1")
    with pytest.raises(Unauthorized):
        v.verify(tok, now=NOW)


def _forge(body: dict[str, object]) -> bytes:
    """A correctly signed token over arbitrary claims JSON."""
    b = base64.urlsafe_b64encode(json.dumps(body).encode()).rstrip(b"=").decode()
    import hashlib
    import hmac

    head = f"kvm1.k1.{b}"
    mac = hmac.new(KEY, head.encode(), hashlib.sha256).digest()
    return f"{head}.{base64.urlsafe_b64encode(mac).rstrip(b'=').decode()}".encode()


GOOD = {"ten": "t", "pub": [], "sub": [["kv"]], "exp": int(NOW) + 10}


@pytest.mark.parametrize(
    "token",
    [
        b"",
        b"interop-test",
        b"kvm1.k1.x",
        b"kvm2.k1.e30.AAAA",
        b"kvm1.k1.e30.AAAA.extra",
        "kvm1.k1.é.AA".encode(),
        b"\xff\xfe",
        b"kvm1.k1." + b"A" * 9000 + b".AA",
        _forge({**GOOD, "aud": "x"}),  # unknown claim refuses
        _forge({**GOOD, "exp": "soon"}),
        _forge({**GOOD, "exp": True}),
        _forge({**GOOD, "ten": ""}),
        _forge({k: v for k, v in GOOD.items() if k != "sub"}),
        _forge({**GOOD, "sub": "kv"}),
        _forge({**GOOD, "sub": [["kv", 3]]}),
        _forge({**GOOD, "sub": [["x"] * 33]}),
        _forge([1, 2]),  # type: ignore[arg-type]
    ],
)
def test_malformed_tokens(token: bytes) -> None:
    with pytest.raises(MalformedToken) as ei:
        TokenVerifier({"k1": KEY}).verify(token, now=NOW)
    assert (ei.value.error_code, ei.value.request_code) == (0x16, 0x10)


def test_forged_good_claims_verify_and_bad_mac_body_is_refused() -> None:
    assert TokenVerifier({"k1": KEY}).verify(_forge(GOOD), now=NOW).subscribe == (("kv",),)
    head, _, mac = _forge(GOOD).rpartition(b".")
    other = _forge({**GOOD, "sub": [[]]}).split(b".")[2]
    tampered = b".".join([*head.split(b".")[:2], other, mac])
    with pytest.raises(Unauthorized):
        TokenVerifier({"k1": KEY}).verify(tampered, now=NOW)


def test_missing_token_is_unauthorized() -> None:
    with pytest.raises(AuthError) as ei:
        TokenVerifier({"k1": KEY}).verify(None, now=NOW)
    assert type(ei.value) is Unauthorized


def test_prefix_matching_is_field_wise_with_trailing_star() -> None:
    assert namespace_allowed(["foo"], (b"foo", b"bar"))
    assert not namespace_allowed(["foo"], (b"foobar",))
    assert namespace_allowed([], (b"anything",))
    assert namespace_allowed(["kv", "t1-*"], (b"kv", b"t1-abc", b"x"))
    assert not namespace_allowed(["kv", "t1-*"], (b"kv", b"t2-abc"))
    assert not namespace_allowed(["a", "b", "c"], (b"a", b"b"))
    assert not namespace_allowed(["a"], (b"\xff",))
    c = Claims(tenant="t", publish=(), subscribe=(("a",),), exp=0)
    assert c.allows("subscribe", (b"a", b"x")) and not c.allows("publish", (b"a",))


def test_signer_rejects_weak_keys_and_bad_key_ids() -> None:
    with pytest.raises(ValueError):
        TokenSigner("k", b"short")
    with pytest.raises(ValueError):
        TokenSigner("a.b", KEY)
