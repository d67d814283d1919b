"""Interop: independent MoQT draft-14 implementations against ``kvmoq relay`` (a subprocess).

* aiomoqt 0.5.3's interop client (the moq-interop-runner cases) must pass all six;
* a moq-rs (moq-dev) publisher → ``kvmoq relay`` → moq-rs subscriber must deliver every frame
  intact (``tests/relay/moq_peer.py`` checks each payload).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import free_port

pytestmark = pytest.mark.interop
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kvmoq_relay(tmp_path: Path) -> Iterator[int]:
    port = free_port()
    ready = tmp_path / "ready"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "ray_kvmoq.cli",
            "relay",
            "--listen",
            f"127.0.0.1:{port}",
            "--ready-file",
            str(ready),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        cwd=ROOT,
    )
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
            assert time.monotonic() < deadline, "kvmoq relay did not start"
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def test_aiomoqt_interop_client_passes_all_six_cases(kvmoq_relay: int) -> None:
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "aiomoqt.examples.moq_interop_client",
            "-r",
            f"moqt://127.0.0.1:{kvmoq_relay}",
            "--tls-disable-verify",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
    )
    oks = re.findall(r"^ok \d+ - (\S+)", out.stdout, re.M)
    assert out.returncode == 0, out.stdout + out.stderr[-2000:]
    assert sorted(oks) == sorted(
        [
            "setup-only",
            "announce-only",
            "publish-namespace-done",
            "subscribe-error",
            "announce-subscribe",
            "subscribe-before-announce",
        ]
    )


def test_moq_rs_publisher_through_kvmoq_relay_to_moq_rs_subscriber(kvmoq_relay: int) -> None:
    url = f"moqt://127.0.0.1:{kvmoq_relay}"
    args = ["kv/m1", "layer0", "4", "5", "3000"]
    env = {**os.environ, "RUST_LOG": "error"}
    pub = subprocess.Popen(
        [sys.executable, "-m", "tests.relay.moq_peer", "pub", url, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        env=env,
    )
    try:
        assert pub.stdout is not None
        assert json.loads(pub.stdout.readline()) == {"announced": True}
        sub = subprocess.run(
            [sys.executable, "-m", "tests.relay.moq_peer", "sub", url, *args],
            capture_output=True,
            text=True,
            timeout=60,
            cwd=ROOT,
            env=env,
        )
        result = json.loads(sub.stdout.strip().splitlines()[-1])
        assert result == {"groups": 4, "frames": 20, "bytes": 60000, "ok": True}, sub.stderr[-2000:]
    finally:
        pub.kill()
        pub.wait()
