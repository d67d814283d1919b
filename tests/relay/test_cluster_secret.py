"""``kvmoq cluster-secret``: a random secret in the cluster's GCS, made once, never printed."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from click.testing import CliRunner

from ray_kvmoq.cli import main

pytestmark = pytest.mark.ray


@pytest.fixture
def no_secret(ray_cluster: Any) -> Iterator[None]:
    """The test cluster without a stored secret, before and after (other tests run without)."""
    from ray.experimental import internal_kv

    internal_kv._internal_kv_del(b"kvmoq_cluster_secret", namespace=b"kvmoq")
    yield
    internal_kv._internal_kv_del(b"kvmoq_cluster_secret", namespace=b"kvmoq")


def _run(*args: str, address: str) -> str:
    res = CliRunner().invoke(main, ["cluster-secret", *args, "--address", address])
    assert res.exit_code == 0, res.output
    m = re.search(r"fingerprint: ([0-9a-f]{16})", res.stdout)
    assert m, res.output
    return m.group(1)


def test_ensure_creates_once_rotate_replaces_show_never_prints_it(
    ray_cluster: Any, no_secret: None
) -> None:
    from ray_kvmoq.relay.actor import read_cluster_secret
    from ray_kvmoq.relay.security import ClusterSecurity

    res = CliRunner().invoke(main, ["cluster-secret", "show", "--address", ray_cluster.address])
    assert res.exit_code != 0 and "kvmoq cluster-secret ensure" in res.output
    first = _run("ensure", address=ray_cluster.address)
    secret = read_cluster_secret()
    assert secret is not None and len(secret) == 32
    assert _run("ensure", address=ray_cluster.address) == first  # idempotent
    shown = CliRunner().invoke(main, ["cluster-secret", "show", "--address", ray_cluster.address])
    assert secret.hex() not in shown.output and first in shown.output
    assert _run("rotate", address=ray_cluster.address) != first
    assert read_cluster_secret() != secret
    # what relays derive from it: the same CA and token keys on every node
    a, b = ClusterSecurity.from_secret(secret), ClusterSecurity.from_secret(secret)
    assert a.keys == b.keys and a.signing_key_id == b.signing_key_id
