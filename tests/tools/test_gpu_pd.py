"""``tools/gpu_pd.py`` — the GPU check of the PD hand-off — run small on the CPU, so the script a
GPU session carries to its machine is known to work before any device time is spent."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ray_kvmoq.kvcache import KVGeometry, get_codec

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(300)]

ROOT = Path(__file__).resolve().parents[2]


def test_the_gpu_pd_tool_hands_off_bit_exact_kv_through_a_relay_and_decodes_the_same_tokens(
    tmp_path: Path,
) -> None:
    """Prefill, relay and decode processes: every object of the 256-token prefix (2 groups)
    crosses the relay once, the pulled KV equals decode's own bit for bit, and greedy tokens
    from it equal those from decode's own prefix KV."""
    out = tmp_path / "result.json"
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "gpu_pd.py"), "--device", "cpu", "--arch", "tiny",
         "--tokens", "256", "--decode-tokens", "4", "--runs", "BF16@1452",
         "--prefill-lengths", "", "--out", str(out)],
        check=True, timeout=240, capture_output=True, cwd=ROOT,
    )  # fmt: skip
    run = json.loads(out.read_text())["runs"][0]
    assert run["pulled_groups"] == run["groups"] == 2, run
    per_token = get_codec("BF16").object_size(KVGeometry(num_layers=4, num_kv_heads=2, head_dim=64))
    assert run["bytes"] == 256 * per_token, run  # one object per token, the tiny arch's shape
    assert run["relay_upstream_bytes"] == run["bytes"], run
    assert run["kv_bit_exact"] and run["kv_max_abs_err"] == 0.0, run
    assert run["greedy_pulled_equals_own_prefix"], run
    assert run["namespace"].startswith("moq://kvcache.moq.arpa/v1/tiny-random-seed0/"), run
    assert run["track"] == "BF16", run
