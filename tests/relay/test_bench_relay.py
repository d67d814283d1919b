"""``kvmoq bench relay --json`` on the shared cluster (small sizes): every row has its keys and
no failed run, the fan-out ratio is exact, reads are zero-copy. Speed itself is the bench's
business, not a test's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from ray_kvmoq.bench.relay import relay

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_bench_relay_json_rows_have_their_keys_and_no_failures(ray_cluster: Any) -> None:
    args = ["--address", ray_cluster.address, "--json", "--mb", "4", "--group-mb", "1"]
    args += ["--repeat", "2", "--datagram", "9000", "--planes", "0,1", "--backend", "aioquic,qh3"]
    args += ["--reader", "batch,prefetch"]
    result = CliRunner().invoke(relay, [*args, "--subscribers", "3"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["failures"] == 0
    rows = {(r["backend"], r["planes"], r["reader"]) for r in out["rows"]}
    assert rows == {
        (be, k, rd) for be in ("aioquic", "qh3") for k in (0, 1) for rd in ("batch", "prefetch")
    }
    for r in out["rows"]:
        assert r["pull_mb_s"] > 0 and r["ray_get_mb_s"] > 0 and r["pull_vs_ray_get"] > 0
        assert len(r["runs"]) == 2 and r["errors"] == []
    assert out["fanout_upstream_ratio"] == 1.0
    assert out["fanout_delivered_ratio"] == 3.0
    assert out["zero_copy"] is True


def test_bench_relay_refuses_an_unknown_reader_by_name() -> None:
    result = CliRunner().invoke(relay, ["--reader", "batch,eager"])
    assert result.exit_code == 2
    assert "eager: not one of batch, prefetch, sequential" in result.output
