"""``kvmoq bench relay --json`` on the shared cluster (small sizes): the keys exist and the
fan-out ratio is exact. Speed itself is the bench's business, not a test's."""

from __future__ import annotations

import json
from typing import Any

import pytest
from click.testing import CliRunner

from ray_kvmoq.bench.relay import relay

pytestmark = [pytest.mark.ray, pytest.mark.slow]


def test_bench_relay_json_on_the_test_cluster(ray_cluster: Any) -> None:
    args = ["--address", ray_cluster.address, "--json", "--groups", "2", "--group-mb", "1"]
    result = CliRunner().invoke(relay, [*args, "--subscribers", "3"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["fanout_upstream_ratio"] == 1.0
    assert out["fanout_delivered_ratio"] == 3.0
    assert out["pull_mb_s"] > 0 and out["ray_get_mb_s"] > 0
    assert out["zero_copy"] is True
