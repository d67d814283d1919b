"""``kvmoq bench codecs`` runs and prints the documented JSON shape (synthetic KV, no model)."""

from __future__ import annotations

import json

from click.testing import CliRunner

from ray_kvmoq.cli import main
from ray_kvmoq.kvcache import TRACK_NAMES


def test_bench_codecs_json_shape() -> None:
    result = CliRunner().invoke(main, ["bench", "codecs", "--synthetic", "--repeat", "1", "--json"])
    assert result.exit_code == 0, result.output
    out = json.loads(result.stdout)
    assert list(out["codecs"]) == [n.decode() for n in TRACK_NAMES]
    for name, row in out["codecs"].items():
        for key in ("encode_mb_s", "decode_mb_s", "bytes_per_token", "ratio_vs_fp16", "top1"):
            assert key in row, (name, key)
        assert row["encode_mb_s"] > 0 and row["decode_mb_s"] > 0
    assert out["codecs"]["FP16"]["ratio_vs_fp16"] == 1.0
    assert out["codecs"]["AC"]["ratio_vs_fp16"] > 5.0


def test_bench_codecs_table_and_bad_option() -> None:
    runner = CliRunner()
    result = runner.invoke(main, ["bench", "codecs", "--synthetic", "--repeat", "1"])
    assert result.exit_code == 0 and "Int4" in result.stdout and "ratio" in result.stdout
    bad = runner.invoke(main, ["bench", "codecs", "--synthetic", "--repeat", "0"])
    assert bad.exit_code != 0 and "--repeat" in bad.output
