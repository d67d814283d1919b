"""Tenant salts derive from a secret nobody can guess unless the operator chose one."""

from __future__ import annotations

import pytest

from ray_kvmoq.serving.app import with_tenant_secret


def test_explicit_secret_wins(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KVMOQ_TENANT_SECRET", "from-env")
    assert with_tenant_secret({"tenant_secret": "mine"})["tenant_secret"] == "mine"
    assert with_tenant_secret({"tenant_secret": None})["tenant_secret"] == "from-env"


def test_default_secret_is_random_per_build(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("KVMOQ_TENANT_SECRET", raising=False)
    a = with_tenant_secret({"tenant_secret": None})["tenant_secret"]
    b = with_tenant_secret({"tenant_secret": None})["tenant_secret"]
    assert a != b and len(a) == 64
