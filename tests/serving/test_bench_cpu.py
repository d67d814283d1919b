"""``ray_kvmoq.bench.cpu``: which part a process is, and the cores each part used (real processes)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from ray_kvmoq.bench.cpu import CpuSampler, part_of, read_process
from ray_kvmoq.bench.serve import median_row, table

# spins for 0.6 s of CPU time; the comment puts the bench client's marker in its command line
_SPIN = """# vllm.utils.argparse_utils
import time
t = time.process_time()
while time.process_time() - t < 0.6:
    pass
"""


@pytest.mark.parametrize(
    ("title", "part"),
    [
        ("VLLM::Worker", "vllm worker"),
        ("VLLM::EngineCor", "vllm engine core"),
        ("ray::ServeReplica:bench:OpenAiIngress", "serve ingress"),
        ("ray::ServeReplica:bench:LLMServer:SmolLM2-135M-Instruct", "serve LLM replica"),
        ("ray::RelayActor.pull", "kvmoq relay"),
        ("ray::DataPlaneActor", "kvmoq relay"),
        ("ray::DirectoryActor", "kvmoq directory + figures"),
        ("ray::PrefixTreeActor", "serve LLM prefix tree"),
        ("/venv/lib/python3.11/site-packages/ray/core/src/ray/gcs/gcs_server --log_dir=/t", "ray gcs"),
        ("python -c import sys\nfrom vllm.utils.argparse_utils import FlexibleArgumentParser", "bench client"),
        ("ray::IDLE", "ray other"),
        ("/usr/bin/sshd", "other"),
    ],
)  # fmt: skip
def test_each_process_title_maps_to_its_part_of_the_stack(title: str, part: str) -> None:
    assert part_of(title) == part


def test_read_process_gives_this_process_its_command_line_and_cpu_time() -> None:
    seen = read_process(str(os.getpid()))
    assert seen is not None
    name, cpu_s = seen
    assert "python" in name.lower() or "pytest" in name
    assert cpu_s > 0
    assert read_process("999999999") is None


def test_the_sampler_counts_a_child_that_burns_cpu_and_exits_inside_the_window() -> None:
    with CpuSampler(interval_s=0.1) as s:
        proc = subprocess.Popen([sys.executable, "-c", _SPIN])
        assert proc.wait(timeout=60) == 0
        time.sleep(0.3)
    # the child spun 0.6 s of CPU inside the window, then exited: its last sample counts
    assert s.cores.get("bench client", 0.0) * s.wall_s >= 0.5, (s.cores, s.wall_s)
    assert list(s.cores.values()) == sorted(s.cores.values(), reverse=True)


def test_cpu_cores_are_medians_per_part_across_repetitions_and_show_in_the_table() -> None:
    runs = [
        {"ttft_mean_ms": 1.0, "cpu_cores": {"vllm worker": 1.0, "kvmoq relay": 0.02}},
        {"ttft_mean_ms": 2.0, "cpu_cores": {"vllm worker": 0.8}},
        {"ttft_mean_ms": 3.0, "cpu_cores": {"vllm worker": 0.9, "kvmoq relay": 0.04}},
    ]
    m = median_row(runs)
    assert m["cpu_cores"] == {"vllm worker": 0.9, "kvmoq relay": 0.02}
    row = {"ttft_mean_ms": 1.0, "ttft_p50_ms": 1.0, "ttft_p99_ms": 1.0, "tpot_mean_ms": 1.0,
           "request_throughput": 1.0, "failed": 0, "reused_tokens": 0, "cpu_cores": m["cpu_cores"]}  # fmt: skip
    assert "prefix:b-2 cores: 0.92 (vllm worker 0.90, kvmoq relay 0.02)" in table(
        {"rows": {"prefix:b-2": row}}
    )
