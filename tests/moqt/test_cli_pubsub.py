"""``kvmoq pub`` / ``kvmoq sub`` as a user runs them: two processes on 127.0.0.1.

``pub --listen`` serves the track itself (self-signed certificate), so no relay is needed; the
subscriber checks every printed line (group, object, length, SHA-256) against the deterministic
payloads. Peers run under ``timeout`` and are stopped by PID.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner

from ray_kvmoq.commands.moqt import payload_for, sub
from tests.helpers import free_port

ROOT = Path(__file__).resolve().parents[2]
KVMOQ = [sys.executable, "-m", "ray_kvmoq.cli"]


def _lines(groups: range, objects: int, size: int) -> list[str]:
    return [
        f"{g} {o} {size} {hashlib.sha256(payload_for(g, o, size)).hexdigest()}"
        for g in groups
        for o in range(objects)
    ]


@contextlib.contextmanager
def _publisher(*extra: str) -> Iterator[str]:
    port = free_port()
    url = f"moqt://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [
            "timeout",
            "-s",
            "KILL",
            "40",
            *KVMOQ,
            "pub",
            url,
            "--listen",
            "--namespace",
            "a/b/c",
            "--track",
            "t",
            *extra,
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert proc.stderr is not None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and "listening" not in proc.stderr.readline():
            assert proc.poll() is None, proc.stderr.read()
        yield url
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def _sub(url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            *KVMOQ,
            "sub",
            url,
            "--namespace",
            "a/b/c",
            "--track",
            "t",
            "--tls-disable-verify",
            "--timeout",
            "20",
            *extra,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=30,
    )


def test_pub_then_sub_prints_every_object() -> None:
    with _publisher("--groups", "3", "--objects", "5", "--size", "1500") as url:
        done = _sub(url)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()  # one stream per group: groups may interleave
    for g in range(3):
        assert [line for line in lines if line.startswith(f"{g} ")] == _lines(
            range(g, g + 1), 5, 1500
        )
    assert sorted(lines) == sorted(_lines(range(3), 5, 1500))


def test_sub_fetch_range() -> None:
    with _publisher(
        "--groups", "4", "--objects", "2", "--size", "64", "--subscribers", "0", "--linger", "20"
    ) as url:
        time.sleep(0.5)  # the publisher has stored its groups
        done = _sub(url, "--fetch", "1:2")
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == _lines(range(1, 3), 2, 64)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["https://x:1", "--namespace", "a", "--track", "t"], "moqt://"),
        (["moqt://127.0.0.1:1", "--namespace", "a", "--track", "t", "--fetch", "3:1"], "END"),
        (
            [
                "moqt://127.0.0.1:1",
                "--namespace",
                "a",
                "--track",
                "t",
                "--filter",
                "absolute-start",
            ],
            "--start",
        ),
    ],
)
def test_sub_explains_bad_arguments(args: list[str], message: str) -> None:
    result = CliRunner().invoke(sub, args)
    assert result.exit_code != 0
    assert message in result.output
