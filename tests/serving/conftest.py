"""Serving test fixtures: Serve's HTTP proxy on 127.0.0.1 and a free port, started once."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers import free_port


@pytest.fixture(scope="session")
def serve_http(ray_cluster: Any) -> Iterator[str]:
    """Base URL of Serve's HTTP proxy (Serve started on the shared cluster)."""
    from ray import serve

    port = free_port(socket.SOCK_STREAM)
    serve.start(http_options={"host": "127.0.0.1", "port": port}, detached=False)
    yield f"http://127.0.0.1:{port}"
