"""Small helpers shared by tests (import as ``from tests.helpers import free_port``)."""

from __future__ import annotations

import socket


def free_port(kind: int = socket.SOCK_DGRAM, host: str = "127.0.0.1") -> int:
    """A currently free UDP (default) or TCP port on ``host``."""
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])
