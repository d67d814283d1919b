"""``kvmoq relay``: the node relay outside Ray, as a plain caching MoQT draft-14 relay.

Publishers announce namespaces (PUBLISH_NAMESPACE) and serve SUBSCRIBE; subscribers SUBSCRIBE or
FETCH; the relay keeps one upstream subscription per track, caches groups under a byte budget
and fans out. Same code as the per-node ``RelayActor``, without the object store or directory.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import tempfile

import click

from ray_kvmoq.commands.moqt import DRAFTS
from ray_kvmoq.relay.auth import TokenVerifier


def _parse_listen(value: str) -> tuple[str, int]:
    host, sep, port = value.rpartition(":")
    if not sep or not port.isdigit():
        raise click.BadParameter("expected HOST:PORT, e.g. 127.0.0.1:4443")
    return host or "127.0.0.1", int(port)


def _parse_keys(values: tuple[str, ...]) -> dict[str, bytes]:
    keys = {}
    for v in values:
        kid, sep, hexkey = v.partition(":")
        try:
            key = bytes.fromhex(hexkey)
        except ValueError:
            key = b""
        if not sep or not kid or len(key) < 16:
            raise click.BadParameter(f"{v!r}: expected KID:HEX with at least 16 key bytes")
        keys[kid] = key
    return keys


async def _run(
    host: str,
    port: int,
    budget: int,
    cert: str | None,
    key: str | None,
    verifier: TokenVerifier | None,
    ready_file: str | None,
    transport: dict[str, object],
) -> None:
    from ray_kvmoq.relay.downstream import serve_plain_relay

    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    async with serve_plain_relay(
        host,
        port,
        budget_bytes=budget,
        certfile=cert,
        keyfile=key,
        verifier=verifier,
        transport_options=transport,
    ) as (relay, bound):
        alpns = ", ".join(str(a) for a in transport.get("alpns", ()))  # type: ignore[attr-defined]
        click.echo(f"kvmoq relay listening on moqt://{host}:{bound} (ALPN {alpns})", err=True)
        if ready_file:
            with open(ready_file, "w") as f:
                f.write(str(bound))
        await stop.wait()
        click.echo(json.dumps(relay.stats()), err=True)


@click.command()
@click.option(
    "--listen",
    "listen",
    default="127.0.0.1:4443",
    show_default=True,
    help="UDP HOST:PORT to bind (port 0: any free port).",
)
@click.option(
    "--budget-mb",
    default=256,
    show_default=True,
    type=click.IntRange(1),
    help="Cache byte budget in MiB.",
)
@click.option(
    "--cert",
    type=click.Path(exists=True, dir_okay=False),
    help="TLS certificate (PEM). Default: a fresh self-signed one.",
)
@click.option(
    "--key", type=click.Path(exists=True, dir_okay=False), help="TLS private key for --cert."
)
@click.option(
    "--auth-key",
    "auth_keys",
    multiple=True,
    metavar="KID:HEX",
    help="Require signed tokens (ray_kvmoq.relay.auth) verified with this HMAC key; repeat to rotate.",
)
@click.option(
    "--datagram",
    default=1452,
    show_default=True,
    type=click.IntRange(1200, 65527),
    help="QUIC datagram size (bounded by each peer's limit). 1452 fits any 1500-MTU path; "
    "use 9000 on jumbo-frame networks.",
)
@click.option(
    "--pacing/--no-pacing",
    default=True,
    show_default=True,
    help="Pace packets at cwnd/RTT. --no-pacing: only the congestion window limits bursts "
    "(a dedicated LAN; keep it only if `kvmoq bench relay --no-pacing` is faster there).",
)
@click.option(
    "--quic",
    "quic_backend",
    type=click.Choice(["auto", "aioquic", "qh3"]),
    default="aioquic",
    show_default=True,
    help="QUIC library (auto: qh3 when installed). aioquic is the interop-tested default; "
    "qh3 is faster between ray_kvmoq relays.",
)
@click.option(
    "--draft",
    type=click.Choice(sorted(DRAFTS)),
    default="all",
    show_default=True,
    help="MoQT version(s) to accept: all (ALPN moqt-16 preferred, then moq-00), 16 or 14.",
)
@click.option(
    "--ready-file",
    type=click.Path(dir_okay=False),
    help="Write the bound port here once listening (scripts, tests).",
)
def relay(
    listen: str,
    budget_mb: int,
    cert: str | None,
    key: str | None,
    auth_keys: tuple[str, ...],
    datagram: int,
    pacing: bool,
    quic_backend: str,
    draft: str,
    ready_file: str | None,
) -> None:
    """Run a caching MoQT relay outside Ray.

    Speaks MoQT draft-16 (ALPN moqt-16) and draft-14 (ALPN moq-00) over raw QUIC; a peer
    offering both gets draft-16. Publishers send PUBLISH_NAMESPACE, then
    answer the relay's SUBSCRIBE; subscribers SUBSCRIBE or FETCH. Without --auth-key every
    request is accepted (tokens are ignored); with it, a valid token is required in
    CLIENT_SETUP or in each request. Stop with Ctrl-C; the final counters go to stderr.
    """
    host, port = _parse_listen(listen)
    if (cert is None) != (key is None):
        raise click.UsageError("--cert and --key go together")
    verifier = TokenVerifier(_parse_keys(auth_keys)) if auth_keys else None
    if cert is None:
        from ray_kvmoq.moqt.api import self_signed, write_pem_files

        paths = write_pem_files(self_signed(), tempfile.mkdtemp(prefix="kvmoq-relay-"))
        cert, key = str(paths.certfile), str(paths.keyfile)
    try:
        transport: dict[str, object] = {
            "max_datagram_size": datagram,
            "pacing": pacing,
            "backend": quic_backend,
            "alpns": DRAFTS[draft],
        }
        asyncio.run(_run(host, port, budget_mb << 20, cert, key, verifier, ready_file, transport))
    except OSError as exc:
        click.echo(f"kvmoq relay: cannot listen on {listen}: {exc}; pick another port", err=True)
        sys.exit(1)
