"""kv_connector_extra_config validation, transfer params parsing, weights fingerprints."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest

from ray_kvmoq.connector import kv_transfer_config
from ray_kvmoq.connector.config import ConnectorConfig, ConnectorConfigError
from ray_kvmoq.connector.identity import model_fingerprint, namespace_model_name
from ray_kvmoq.connector.metadata import TransferParams


def test_defaults_resolve_auto_to_the_lossless_track_of_the_kv_dtype() -> None:
    conf = ConnectorConfig.from_extra({})
    assert conf.track_codec("torch.bfloat16") == "BF16"
    assert conf.track_codec("torch.float16") == "FP16"
    assert ConnectorConfig.from_extra({"codec": "Int4"}).track_codec("torch.bfloat16") == "Int4"


@pytest.mark.parametrize(
    ("extra", "match"),
    [
        ({"codek": "FP8"}, r"unknown kv_connector_extra_config key\(s\) \['codek'\]"),
        ({"codec": "fp9"}, "not a KV track compression"),
        ({"chunk_size": 0}, r"chunk_size must be an integer in \[1, 65536\]"),
        ({"chunk_size": True}, "chunk_size must be an integer"),
        ({"load_timeout_s": -1}, r"load_timeout_s must be a number of seconds"),
        ({"relay_datagram_size": 100}, r"relay_datagram_size must be an integer in \[1200"),
        ({"tenant_salt": ""}, "tenant_salt must be a non-empty string"),
        ({"directory_view": "yes"}, "directory_view must be true or false"),
        ({"publish_when_evicting": 1}, "publish_when_evicting must be true or false"),
    ],
)
def test_bad_settings_fail_with_a_message_naming_the_key(extra: dict, match: str) -> None:
    with pytest.raises(ConnectorConfigError, match=match):
        ConnectorConfig.from_extra(extra)


def test_kv_transfer_config_names_the_connector_and_asks_for_recompute_on_failure() -> None:
    ktc = kv_transfer_config("kv_producer", codec="FP8")
    assert ktc["kv_connector"] == "MoqtKVConnector"
    assert ktc["kv_connector_module_path"] == "ray_kvmoq.connector"
    assert ktc["kv_load_failure_policy"] == "recompute"
    assert ktc["kv_connector_extra_config"] == {"codec": "FP8"}
    with pytest.raises(ValueError, match="kv_role"):
        kv_transfer_config("kv_sender")


def test_transfer_params_round_trip_and_junk_is_ignored() -> None:
    p = TransferParams(model="m@1", tokens=300, chunk_size=128, groups=(("a" * 32, "BF16", 0),))
    assert TransferParams.from_json(json.loads(json.dumps(p.to_json()))) == p
    for junk in (
        None,
        3,
        {"model": "m"},
        {"model": "m", "tokens": "x", "chunk_size": 1, "groups": []},
        {"model": "m", "tokens": 1, "chunk_size": 1, "groups": [[1, 2]]},
    ):
        assert TransferParams.from_json(junk) is None


def _safetensors(path: Path, header: dict) -> None:
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * 16)


def test_fingerprint_changes_with_weights_layout_config_and_dtype(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 8}))
    _safetensors(
        tmp_path / "model.safetensors",
        {"w": {"dtype": "BF16", "shape": [2, 4], "data_offsets": [0, 16]}},
    )
    base = model_fingerprint(str(tmp_path), dtype="bfloat16")
    assert base == model_fingerprint(str(tmp_path), dtype="bfloat16")
    assert base != model_fingerprint(str(tmp_path), dtype="float16")
    assert base != model_fingerprint(str(tmp_path), dtype="bfloat16", kv_cache_dtype="fp8")
    _safetensors(
        tmp_path / "model.safetensors",
        {"w": {"dtype": "BF16", "shape": [4, 2], "data_offsets": [0, 16]}},
    )
    reshaped = model_fingerprint(str(tmp_path), dtype="bfloat16")
    assert reshaped != base
    (tmp_path / "config.json").write_text(json.dumps({"hidden_size": 9}))
    assert model_fingerprint(str(tmp_path), dtype="bfloat16") not in (base, reshaped)
    assert namespace_model_name("SmolLM2", "abc") == "SmolLM2@abc"
