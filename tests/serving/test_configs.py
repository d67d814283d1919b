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


def test_the_cpu_engine_core_reservation_is_one_unless_the_environment_sets_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from ray_kvmoq.serving.graph import RESERVED_CPU_ENV, cpu_reserved_cores_env

    monkeypatch.delenv(RESERVED_CPU_ENV, raising=False)
    assert cpu_reserved_cores_env() == {RESERVED_CPU_ENV: "1"}
    monkeypatch.setenv(RESERVED_CPU_ENV, "3")
    assert cpu_reserved_cores_env() == {RESERVED_CPU_ENV: "3"}
