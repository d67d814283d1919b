"""A time-boxed run of every atheris target in ``fuzz/`` (``make fuzz`` is the long run).

Each target runs in its own subprocess: first over its committed corpus (every seed and every
regression input once), then mutating for a few seconds. A crash, an unexpected exception
type, a broken property, a > 10 s input or > 2 GB RSS makes libFuzzer exit non-zero and fails
the test with the fuzzer's report. New inputs go to a temporary directory, never the repo.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("atheris")

FUZZ = Path(__file__).resolve().parents[2] / "fuzz"
TARGETS = sorted(p.stem.removeprefix("fuzz_") for p in FUZZ.glob("fuzz_*.py"))
SECONDS = 2


def test_every_parser_has_a_target_and_a_corpus() -> None:
    assert TARGETS == [
        "control",
        "data_stream",
        "data_stream16",
        "datagram",
        "datagram16",
        "kv_payload",
        "names",
        "token",
    ]
    for t in TARGETS:
        assert len(list((FUZZ / "corpus" / t).iterdir())) >= 5, t


def _rss_limit_mb() -> int:
    """2 GB over what the fuzzer reports before it runs anything: libFuzzer reads the peak RSS
    (``ru_maxrss``), which Linux carries from the forking parent across ``exec`` — after the
    suite's vLLM tests this pytest process, and so every child at birth, is GBs."""
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024 + 2048


@pytest.mark.timeout(180)
@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_runs_clean(target: str, tmp_path: Path) -> None:
    cmd = [
        sys.executable,
        str(FUZZ / f"fuzz_{target}.py"),
        str(tmp_path),
        str(FUZZ / "corpus" / target),
    ]
    cmd += [f"-max_total_time={SECONDS}", "-timeout=10", f"-rss_limit_mb={_rss_limit_mb()}"]
    cmd += [f"-artifact_prefix={tmp_path}/", "-print_final_stats=1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=170, cwd=FUZZ)
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    runs = re.search(r"stat::number_of_executed_units:\s*(\d+)", log)
    seeds = len(list((FUZZ / "corpus" / target).iterdir()))
    assert runs is not None and int(runs.group(1)) >= seeds, log[-2000:]
