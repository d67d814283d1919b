"""The Serve config files parse with Ray's schema and their args with ``AppArgs``."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from ray_kvmoq.serving.app import AppArgs

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("name", ["local.yaml", "pd.yaml", "gpu.yaml"])
def test_serve_config_validates(name: str) -> None:
    from ray.serve.schema import ServeDeploySchema

    config = yaml.safe_load((ROOT / "apps" / name).read_text())
    schema = ServeDeploySchema.model_validate(config)
    app = schema.applications[0]
    assert app.import_path == "ray_kvmoq.serving.app:build"
    args = AppArgs.model_validate(app.args)
    assert args.mode == ("combined" if name == "local.yaml" else "pd")


def test_a_model_that_is_not_a_checkpoint_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="not a Hugging Face checkpoint directory"):
        AppArgs(model=str(tmp_path)).model_dir()


def test_app_args_reject_unknown_fields() -> None:
    with pytest.raises(ValueError):
        AppArgs.model_validate({"mdoe": "pd"})
    assert AppArgs(dtype="float32").codec() == "FP16"
    assert AppArgs().codec() == "BF16"


def test_cpu_engines_reserve_one_core_for_vllms_scheduler_and_gpu_engines_get_no_override(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """vLLM's CPU backend reserves an extra core whenever a KV connector is configured; on 2
    cores that leaves none reserved (OpenMP spins on the scheduler's core). Our engines ask for
    one, unless the user set ``VLLM_CPU_NUM_OF_RESERVED_CPU``."""
    from ray_kvmoq.serving.app import ReplicaArgs
    from ray_kvmoq.serving.graph import _llm_config

    monkeypatch.delenv("VLLM_CPU_NUM_OF_RESERVED_CPU", raising=False)
    cpu = _llm_config(AppArgs(), ReplicaArgs(), "kv_both", "d").runtime_env["env_vars"]
    assert cpu["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1"
    monkeypatch.setenv("VLLM_CPU_NUM_OF_RESERVED_CPU", "3")
    cpu = _llm_config(AppArgs(), ReplicaArgs(), "kv_both", "d").runtime_env["env_vars"]
    assert cpu["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "3"
    gpu = _llm_config(AppArgs(), ReplicaArgs(num_gpus=1), "kv_both", "d").runtime_env["env_vars"]
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU" not in gpu
