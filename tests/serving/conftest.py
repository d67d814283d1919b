"""Serving test fixtures: Serve's HTTP proxy on 127.0.0.1 and a free port (started once), and a
helper that deploys an app from :class:`~ray_kvmoq.serving.app.AppArgs` under its own route and
takes it down afterwards."""

from __future__ import annotations

import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.helpers import free_port


@pytest.fixture(scope="session")
def serve_http(ray_cluster: Any) -> Iterator[str]:
    """Base URL of Serve's HTTP proxy (Serve started on the shared cluster)."""
    from ray import serve

    port = free_port(socket.SOCK_STREAM)
    # One proxy, on the head. Serve's default puts one on every node, and on one machine every
    # node's proxy binds 127.0.0.1:port with SO_REUSEPORT, so the kernel hands each connection
    # to any of them: a node-loss test whose client landed on the victim's proxy got "Server
    # disconnected without sending a response" (CI, 2026-12-02), not its answer.
    serve.start(
        proxy_location="HeadOnly", http_options={"host": "127.0.0.1", "port": port}, detached=False
    )
    yield f"http://127.0.0.1:{port}"


ROOT = Path(__file__).resolve().parents[2]


def app_args(config: str, **overrides: Any) -> dict[str, Any]:
    """The ``args`` of ``apps/<config>`` with test overrides (placement on the test cluster)."""
    doc = yaml.safe_load((ROOT / "apps" / config).read_text())
    return {**doc["applications"][0]["args"], **overrides}


@contextmanager
def deployed(
    serve_http: str, name: str, args: dict[str, Any], timeout_s: float = 900
) -> Iterator[str]:
    """Deploy ``ray_kvmoq.serving.app.build(args)`` at ``/<name>``; yields its base URL once
    ``/health`` answers 200; deletes the app afterwards."""
    import httpx
    from ray import serve

    from ray_kvmoq.serving.app import build

    serve.run(build(args), name=name, route_prefix=f"/{name}", blocking=False)
    base = f"{serve_http}/{name}"
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                if httpx.get(f"{base}/health", timeout=30).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"app {name} not healthy in {timeout_s:.0f} s")
            time.sleep(1.0)
        yield base
    finally:
        serve.delete(name)
