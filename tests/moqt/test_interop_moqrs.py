"""Interop with moq-dev's Rust stack (PyPI ``moq-rs`` / ``moq-ffi``; ``moq.Server`` is a relay).

Matrix (raw QUIC on 127.0.0.1), each direction once per version: draft-14 (our peers offer only
ALPN ``moq-00``) and draft-16 (only ``moqt-16``); the negotiated version each of our peers
reports on stderr is checked too:

1. our publisher (``kvmoq pub``) -> moq-rs relay -> our subscriber (``kvmoq sub``), also with
   the publisher and the subscriber on different versions (the relay translates);
2. moq-rs publisher -> moq-rs relay -> our subscriber
3. our publisher -> moq-rs relay -> moq-rs subscriber

and our peer offering both ALPNs gets draft-16 from moq-rs. Each moq-rs peer runs in its own
process (this module run as a script, see ``_main``) under a hard ``timeout`` and is stopped by
PID; every check compares group ids, object ids and payload digests end to end.
"""

from __future__ import annotations

import asyncio
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

from tests.helpers import free_port

pytestmark = pytest.mark.interop

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
KVMOQ = [PY, "-m", "ray_kvmoq.cli"]
PEER = [PY, "-m", "tests.moqt.test_interop_moqrs"]
NS, TRACK = "interop/kv", "t0"


def _payload(group: int, obj: int, size: int) -> bytes:
    from ray_kvmoq.commands.moqt import payload_for

    return payload_for(group, obj, size)


def _expected(groups: int, objects: int, size: int) -> list[str]:
    return [
        f"{g} {o} {size} {hashlib.sha256(_payload(g, o, size)).hexdigest()}"
        for g in range(groups)
        for o in range(objects)
    ]


def _check(out: str, groups: int, objects: int, size: int) -> None:
    """Same objects as published; within each group in order (groups may interleave)."""
    lines = out.splitlines()
    key = [tuple(int(x) for x in line.split()[:2]) for line in lines]
    for g in range(groups):
        assert [o for gg, o in key if gg == g] == list(range(objects)), f"group {g}: {lines}"
    assert sorted(lines, key=lambda s: tuple(int(x) for x in s.split()[:2])) == _expected(
        groups, objects, size
    )


def _spawn(args: list[str], limit: float) -> subprocess.Popen[str]:
    return subprocess.Popen(
        ["timeout", "-s", "KILL", str(limit), *args],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )


def _stop(proc: subprocess.Popen[str]) -> tuple[str, str]:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        return proc.communicate(timeout=5)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        return proc.communicate()


def _wait_line(proc: subprocess.Popen[str], needle: str, timeout: float) -> None:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if needle in line:
            return
        if not line and proc.poll() is not None:
            break
    out, err = _stop(proc)
    raise AssertionError(f"peer never printed {needle!r}: {out}\n{err}")


@pytest.fixture
def relay() -> Iterator[str]:
    port = free_port()
    proc = _spawn([*PEER, "relay", str(port)], 60)
    try:
        _wait_line(proc, "READY", 20)
        yield f"moqt://127.0.0.1:{port}"
    finally:
        _stop(proc)


DRAFTS = pytest.mark.parametrize("draft", ["14", "16"], ids=["d14", "d16"])


def _kvmoq_sub(url: str, *extra: str) -> subprocess.Popen[str]:
    return _spawn(
        [
            *KVMOQ,
            "sub",
            url,
            "--namespace",
            NS,
            "--track",
            TRACK,
            "--tls-disable-verify",
            "--timeout",
            "30",
            *extra,
        ],
        40,
    )


def _kvmoq_pub(
    url: str, groups: int, objects: int, size: int, *extra: str
) -> subprocess.Popen[str]:
    return _spawn(
        [
            *KVMOQ,
            "pub",
            url,
            "--namespace",
            NS,
            "--track",
            TRACK,
            "--tls-disable-verify",
            "--groups",
            str(groups),
            "--objects",
            str(objects),
            "--size",
            str(size),
            "--wait",
            "30",
            *extra,
        ],
        45,
    )


def _wait_announced(pub: subprocess.Popen[str], timeout: float = 20) -> str:
    """Wait for ``kvmoq pub`` to announce; returns the line (it names the negotiated draft)."""
    assert pub.stderr is not None
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = pub.stderr.readline()
        seen.append(line)
        if "announced" in line:
            return line
        if not line and pub.poll() is not None:
            break
    out, err = _stop(pub)
    raise AssertionError(f"publisher did not announce: {out}\n{''.join(seen)}{err}")


@pytest.mark.parametrize(
    ("pub_draft", "sub_draft"),
    [("14", "14"), ("16", "16"), ("16", "14"), ("14", "16")],
    ids=["d14", "d16", "pub16-sub14", "pub14-sub16"],
)
def test_ours_to_relay_to_ours(relay: str, pub_draft: str, sub_draft: str) -> None:
    # We ask for 60 KB datagrams; moq-rs advertises max_udp_payload_size 1472, and the
    # fast path must fall back to it (aioquic alone would ignore the limit).
    pub = _kvmoq_pub(relay, 3, 4, 3000, "--datagram-size", "60000", "--draft", pub_draft)
    try:
        assert f"(draft-{pub_draft})" in _wait_announced(pub)
        sub = _kvmoq_sub(
            relay, "--max-objects", "12", "--datagram-size", "60000", "--draft", sub_draft
        )
        out, err = sub.communicate(timeout=40)
        assert sub.returncode == 0, err
        assert f"receiving (draft-{sub_draft})" in err
    finally:
        _stop(pub)
    _check(out, 3, 4, 3000)


def test_our_peer_offering_both_alpns_gets_draft16_from_moqrs(relay: str) -> None:
    pub = _kvmoq_pub(relay, 1, 1, 100, "--draft", "all", "--wait", "1")
    try:
        assert "(draft-16)" in _wait_announced(pub)
    finally:
        _stop(pub)


@DRAFTS
def test_moqrs_publisher_to_relay_to_ours(relay: str, draft: str) -> None:
    pub = _spawn([*PEER, "publish", relay, "3", "4", "2500"], 45)
    try:
        _wait_line(pub, "ANNOUNCED", 20)
        sub = _kvmoq_sub(relay, "--max-objects", "12", "--draft", draft)
        out, err = sub.communicate(timeout=40)
        assert sub.returncode == 0, err
        assert f"receiving (draft-{draft})" in err
    finally:
        _stop(pub)
    _check(out, 3, 4, 2500)


@DRAFTS
def test_ours_to_relay_to_moqrs_subscriber(relay: str, draft: str) -> None:
    # moq-dev subscribers start at the latest group: publish groups apart so each one is live.
    pub = _kvmoq_pub(relay, 3, 4, 2000, "--interval", "0.3", "--draft", draft)
    try:
        assert f"(draft-{draft})" in _wait_announced(pub)
        sub = _spawn([*PEER, "subscribe", relay, "12"], 40)
        out, err = sub.communicate(timeout=40)
        assert sub.returncode == 0, err
    finally:
        _stop(pub)
    _check(out, 3, 4, 2000)


# --------------------------------------------------------------------------- moq-rs peers


async def _relay(port: int) -> None:
    import moq

    async with moq.Server(f"127.0.0.1:{port}", tls_generate=["localhost"]) as server:
        print("READY", flush=True)
        sessions = []
        async for request in server:
            sessions.append(await request.accept())


async def _publish(url: str, groups: int, objects: int, size: int) -> None:
    import moq

    async with moq.Client(url, tls_verify=False, reconnect=False) as client:
        broadcast = client.create_broadcast(NS)
        track = broadcast.publish_track(TRACK)
        broadcast.announce()
        print("ANNOUNCED", flush=True)
        await track.used()
        await asyncio.sleep(0.5)
        for g in range(groups):
            group = track.create_group(g)
            for o in range(objects):
                group.write_frame(_payload(g, o, size), timestamp_us=0)
            group.finish()
        track.finish()
        await asyncio.sleep(10)


async def _subscribe(url: str, count: int) -> None:
    import moq

    async with moq.Client(url, tls_verify=False, reconnect=False) as client:
        broadcast = await client.announced_broadcast(NS)
        track = await broadcast.subscribe_track(TRACK)
        seen = 0
        async for group in track:
            index = 0
            async for frame in group:
                data = bytes(frame.payload)
                print(
                    f"{group.sequence} {index} {len(data)} {hashlib.sha256(data).hexdigest()}",
                    flush=True,
                )
                index += 1
                seen += 1
            if seen >= count:
                return


def _main(argv: list[str]) -> None:
    sys.path.insert(0, str(ROOT))
    role, *args = argv
    if os.environ.get("MOQ_LOG"):
        import moq

        moq.log_level(os.environ["MOQ_LOG"])
    if role == "relay":
        asyncio.run(_relay(int(args[0])))
    elif role == "publish":
        asyncio.run(_publish(args[0], int(args[1]), int(args[2]), int(args[3])))
    elif role == "subscribe":
        asyncio.run(_subscribe(args[0], int(args[1])))


if __name__ == "__main__":
    _main(sys.argv[1:])
