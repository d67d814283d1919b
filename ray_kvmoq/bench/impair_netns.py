"""A three-namespace network path to break: relay A ⇄ impairment proxy ⇄ relay B.

::

    ns <tag>a            ns <tag>m (proxy)                 ns <tag>b
    a0 10.77.1.1 ─veth─ m0 10.77.1.2 │ m1 10.77.2.2 ─veth─ b0 10.77.2.1

Every link has MTU 1500 (Ethernet). A and B share no subnet and nothing routes between them,
so B reaches A only through the proxy (``impair_proxy.py``) listening on 10.77.2.2 and sending
from 10.77.1.2: every datagram of the path crosses the proxy and two real veth links.

Needs root (``ip netns add``); :func:`netns_unavailable` says why not, so tests can skip with a
reason. Names carry the creating PID and a sequence number (``kq<pid>x<n>a``) so concurrent runs
never collide; :func:`netns_path` deletes its namespaces in ``finally`` (their veths go with
them) and :func:`remove_stale` removes what a killed run left behind (its PID is gone).

:class:`NetPath` is what callers use: the addresses, and :meth:`NetPath.prefix` to run a
command inside a role's namespace. :func:`loopback_path` gives the same interface on
127.0.0.1 (no namespaces, no MTU) for machines where ``ip netns`` is not allowed.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = ["NetPath", "loopback_path", "netns_path", "netns_unavailable", "remove_stale"]

MTU = 1500
_SEQ = itertools.count()
_NAME = re.compile(r"^kq(\d+)x\d+[amb]$")


@dataclass(frozen=True, kw_only=True)
class NetPath:
    """Addresses of one path, and how to run a command on each side of it."""

    namespaces: dict[str, str]
    """role ("a", "m", "b") -> namespace name; empty on loopback."""
    a_host: str
    """Where relay A listens."""
    proxy_listen: str
    """Where the proxy listens (B sends here)."""
    mtu: int | None
    """MTU of every link (None on loopback)."""

    def prefix(self, role: str) -> list[str]:
        """argv prefix that runs a command in ``role``'s namespace (empty on loopback)."""
        ns = self.namespaces.get(role)
        return ["ip", "netns", "exec", ns] if ns else []


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, timeout=10)


def netns_unavailable() -> str | None:
    """Why namespaces cannot be made here, or None when they can (tries one, then removes it)."""
    if shutil.which("ip") is None:
        return "iproute2 `ip` is not installed"
    if os.geteuid() != 0:
        return "`ip netns add` needs root"
    name = f"kq{os.getpid()}x{next(_SEQ)}m"
    try:
        _ip("netns", "add", name)
    except (subprocess.SubprocessError, OSError) as exc:
        err = getattr(exc, "stderr", b"") or b""
        return f"`ip netns add` is not permitted here: {err.decode(errors='replace').strip()}"
    with contextlib.suppress(subprocess.SubprocessError, OSError):
        _ip("netns", "del", name)
    return None


def _delete(names: list[str]) -> None:
    for name in names:
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            _ip("netns", "del", name)


def remove_stale() -> list[str]:
    """Delete namespaces of earlier runs whose creating process is gone; returns their names."""
    try:
        out = subprocess.run(
            ["ip", "netns", "list"], check=True, capture_output=True, text=True, timeout=10
        ).stdout
    except (subprocess.SubprocessError, OSError):
        return []
    stale = []
    for line in out.splitlines():
        name = line.split(" ")[0]
        m = _NAME.match(name)
        if m and not os.path.exists(f"/proc/{m.group(1)}"):
            stale.append(name)
    _delete(stale)
    return stale


@contextlib.contextmanager
def netns_path(mtu: int = MTU) -> Iterator[NetPath]:
    """Create the three namespaces and two veth pairs (see the module docstring), yield the
    :class:`NetPath`, and delete everything again, whatever happened."""
    tag = f"kq{os.getpid()}x{next(_SEQ)}"
    ns = {r: tag + r for r in "amb"}
    made: list[str] = []
    try:
        for name in ns.values():
            _ip("netns", "add", name)
            made.append(name)
        # created directly inside the namespaces: the names never meet in the root namespace
        _ip("link", "add", "a0", "netns", ns["a"], "type", "veth", "peer", "m0", "netns", ns["m"])
        _ip("link", "add", "b0", "netns", ns["b"], "type", "veth", "peer", "m1", "netns", ns["m"])
        for role, dev, cidr in (
            ("a", "a0", "10.77.1.1/24"),
            ("m", "m0", "10.77.1.2/24"),
            ("m", "m1", "10.77.2.2/24"),
            ("b", "b0", "10.77.2.1/24"),
        ):
            _ip("-n", ns[role], "addr", "add", cidr, "dev", dev)
            _ip("-n", ns[role], "link", "set", dev, "mtu", str(mtu), "up")
        for name in ns.values():
            _ip("-n", name, "link", "set", "lo", "up")
        yield NetPath(namespaces=ns, a_host="10.77.1.1", proxy_listen="10.77.2.2", mtu=mtu)
    finally:
        _delete(made)


@contextlib.contextmanager
def loopback_path() -> Iterator[NetPath]:
    """The same roles on 127.0.0.1, without namespaces (the proxy still sits in the middle)."""
    yield NetPath(namespaces={}, a_host="127.0.0.1", proxy_listen="127.0.0.1", mtu=None)
