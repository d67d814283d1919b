"""Tenant salts derive from a secret nobody can guess unless the operator chose one."""

from __future__ import annotations

import pytest

from ray_kvmoq.serving.app import AppArgs, with_tenant_secret
from ray_kvmoq.serving.tenants import AuthError, TenantTable


def test_explicit_secret_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVMOQ_TENANT_SECRET", "from-env")
    assert with_tenant_secret(AppArgs(tenant_secret="mine")).tenant_secret == "mine"
    assert with_tenant_secret(AppArgs()).tenant_secret == "from-env"


def test_default_secret_is_random_per_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVMOQ_TENANT_SECRET", raising=False)
    a = with_tenant_secret(AppArgs()).tenant_secret
    b = with_tenant_secret(AppArgs()).tenant_secret
    assert a != b and a is not None and len(a) == 64


def test_tenants_get_different_salts_and_a_client_salt_cannot_reach_another_tenant() -> None:
    table = TenantTable({"sk-a": "team-a", "sk-b": "team-b"}, secret="s3cret")
    a, b = table.resolve("Bearer sk-a"), table.resolve("Bearer sk-b")
    assert a.cache_salt() != b.cache_salt()
    # whatever cache_salt team a sends, it never lands on team b's salt (or its own base one)
    assert a.cache_salt(b.cache_salt()) not in (a.cache_salt(), b.cache_salt())
    assert a.cache_salt("x") != b.cache_salt("x")
    assert TenantTable({"sk-a": "team-a"}, secret="other").resolve("Bearer sk-a").cache_salt() != (
        a.cache_salt()
    )


@pytest.mark.parametrize("header", [None, "", "Bearer", "Bearer sk-c", "Basic sk-a"])
def test_a_missing_or_unknown_key_is_refused_when_keys_are_configured(header: str | None) -> None:
    with pytest.raises(AuthError):
        TenantTable({"sk-a": "team-a"}, secret="s").resolve(header)


def test_without_keys_everyone_is_the_public_tenant() -> None:
    t = TenantTable({}, secret="s")
    assert t.resolve(None) == t.resolve("Bearer whatever")
    assert t.resolve(None).name == "public"
