"""Interop: independent MoQT implementations against ``kvmoq relay`` (a subprocess).

* aiomoqt 0.5.3's interop client (the moq-interop-runner cases; it offers only ``moq-00``) must
  pass all six against a relay that offers both versions, i.e. on draft-14;
* a moq-rs (moq-dev) publisher → ``kvmoq relay`` → moq-rs subscriber must deliver every frame
  intact (``tests/relay/moq_peer.py`` checks each payload), once with the relay accepting only
  draft-14 (``--draft 14``) and once only draft-16 (``--draft 16``);
* our ``kvmoq pub`` → ``kvmoq relay`` → ``kvmoq sub`` on each version and across versions (the
  relay re-encodes every object, KV extension headers included, for the subscriber's draft), and
  a peer offering both ALPNs to a relay that offers both gets draft-16, to a draft-14-only relay
  draft-14.
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
from tests.moqt.test_interop_moqrs import _check, _kvmoq_pub, _kvmoq_sub, _stop, _wait_announced

pytestmark = pytest.mark.interop
ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def kvmoq_relay(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    """``kvmoq relay`` on a free port; ``indirect`` parametrization picks its ``--draft``."""
    draft = getattr(request, "param", "all")
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
            "--draft",
            draft,
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


@pytest.mark.parametrize("kvmoq_relay", ["14", "16"], ids=["d14", "d16"], indirect=True)
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


@pytest.mark.parametrize(
    ("pub_draft", "sub_draft"),
    [("14", "14"), ("16", "16"), ("16", "14"), ("14", "16")],
    ids=["d14", "d16", "pub16-sub14", "pub14-sub16"],
)
def test_kvmoq_pub_through_kvmoq_relay_to_kvmoq_sub(
    kvmoq_relay: int, pub_draft: str, sub_draft: str
) -> None:
    url = f"moqt://127.0.0.1:{kvmoq_relay}"
    pub = _kvmoq_pub(url, 3, 4, 3000, "--draft", pub_draft)
    try:
        assert f"(draft-{pub_draft})" in _wait_announced(pub)
        # The relay ends each group with an END_OF_GROUP status object for our peers: 3 x 5.
        sub = _kvmoq_sub(url, "--max-objects", "15", "--draft", sub_draft)
        out, err = sub.communicate(timeout=40)
        assert sub.returncode == 0, err
        assert f"receiving (draft-{sub_draft})" in err
    finally:
        _stop(pub)
    assert out.count("status=END_OF_GROUP") == 3
    _check("\n".join(line for line in out.splitlines() if "status=" not in line), 3, 4, 3000)


@pytest.mark.parametrize(
    ("kvmoq_relay", "expected"), [("all", "16"), ("14", "14")], indirect=["kvmoq_relay"]
)
def test_peer_offering_both_alpns_gets_the_newest_the_relay_accepts(
    kvmoq_relay: int, expected: str
) -> None:
    url = f"moqt://127.0.0.1:{kvmoq_relay}"
    pub = _kvmoq_pub(url, 1, 1, 100, "--draft", "all", "--wait", "1")
    try:
        assert f"(draft-{expected})" in _wait_announced(pub)
    finally:
        _stop(pub)
