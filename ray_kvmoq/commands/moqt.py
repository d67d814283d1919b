"""``kvmoq pub`` and ``kvmoq sub``: MoQT debugging tools for any draft-14 or draft-16 relay or
peer (``--draft``: which ALPNs to offer; the negotiated version is reported on stderr).

``pub`` connects to a relay (or, with ``--listen``, serves subscribers itself), announces the
namespace and publishes a synthetic track group by group once someone subscribes. Payloads are
deterministic (:func:`payload_for`), so a ``sub`` anywhere can check them. ``sub`` subscribes
(any filter) or fetches a group range and prints one line per object:
``GROUP OBJECT LENGTH SHA256``. Progress and errors go to stderr.
"""

from __future__ import annotations

import asyncio
import hashlib
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import click

from ray_kvmoq.moqt.api import (
    FullTrackName,
    MemoryTrack,
    MoqtApiError,
    MoqtConnection,
    MoqtObject,
    MoqtUrl,
    SessionConfig,
    TrackServer,
    TransportConfig,
    connect,
    self_signed,
    serve,
)
from ray_kvmoq.moqt.codec import (
    ALPN_BY_VERSION,
    DRAFT_14,
    DRAFT_16,
    AuthToken,
    FilterType,
    Location,
    TokenAliasType,
)

__all__ = ["DRAFTS", "draft_name", "payload_for", "pub", "sub"]

DRAFTS: dict[str, tuple[str, ...]] = {
    "all": (ALPN_BY_VERSION[DRAFT_16], ALPN_BY_VERSION[DRAFT_14]),
    "16": (ALPN_BY_VERSION[DRAFT_16],),
    "14": (ALPN_BY_VERSION[DRAFT_14],),
}
"""``--draft`` values and the ALPNs each offers, most preferred first."""


def draft_name(version: int) -> str:
    """``draft-16`` / ``draft-14`` for a session's negotiated version."""
    return {DRAFT_16: "draft-16", DRAFT_14: "draft-14"}.get(version, f"{version:#x}")


_FILTERS = {
    "largest": FilterType.LARGEST_OBJECT,
    "next-group": FilterType.NEXT_GROUP_START,
    "absolute-start": FilterType.ABSOLUTE_START,
    "absolute-range": FilterType.ABSOLUTE_RANGE,
}


def payload_for(group: int, object_id: int, size: int) -> bytes:
    """The deterministic payload ``pub`` sends for (group, object): SHA-256 chain bytes."""
    seed = hashlib.sha256(f"kvmoq/{group}/{object_id}".encode()).digest()
    return (seed * (size // len(seed) + 1))[:size]


def _transport(
    *, insecure: bool, cafile: str | None, datagram: int, draft: str, server: bool = False
) -> TransportConfig:
    alpns = DRAFTS[draft]
    if server:
        leaf = self_signed()
        return TransportConfig(
            cert_pem=leaf.cert_pem, key_pem=leaf.key_pem, max_datagram_size=datagram, alpns=alpns
        )
    return TransportConfig(
        verify_peer=not insecure, cafile=cafile, max_datagram_size=datagram, alpns=alpns
    )


def _session_config(token: str | None) -> SessionConfig:
    tokens = (
        (AuthToken(alias_type=TokenAliasType.USE_VALUE, token_type=0, value=token.encode()),)
        if token
        else ()
    )
    return SessionConfig(auth_tokens=tokens, implementation=b"ray_kvmoq-cli")


_common = [
    click.argument("url"),
    click.option("--namespace", required=True, help="Track namespace, '/'-separated (a/b/c)."),
    click.option("--track", required=True, help="Track name."),
    click.option(
        "--tls-disable-verify",
        "--insecure",
        "insecure",
        is_flag=True,
        help="Accept any server certificate (self-signed test relays).",
    ),
    click.option("--cafile", type=click.Path(exists=True, dir_okay=False), help="CA bundle (PEM)."),
    click.option("--token", help="AUTHORIZATION_TOKEN (setup and requests), out-of-band type 0."),
    click.option("--datagram-size", default=1452, show_default=True, help="QUIC datagram size."),
    click.option(
        "--draft",
        type=click.Choice(sorted(DRAFTS)),
        default="all",
        show_default=True,
        help="MoQT version(s) to offer: all (ALPN moqt-16, then moq-00), 16 or 14.",
    ),
]


_F = TypeVar("_F", bound=Callable[..., Any])


def _with_common(fn: _F) -> _F:
    for deco in reversed(_common):
        fn = deco(fn)
    return fn


@click.command("pub")
@_with_common
@click.option("--groups", default=3, show_default=True, help="Groups to publish.")
@click.option("--objects", default=4, show_default=True, help="Objects per group.")
@click.option("--size", default=1000, show_default=True, help="Bytes per object.")
@click.option("--subscribers", default=1, show_default=True, help="Wait for this many first.")
@click.option("--wait", default=30.0, show_default=True, help="Seconds to wait for subscribers.")
@click.option("--interval", default=0.0, help="Seconds between groups.")
@click.option("--listen", is_flag=True, help="Serve subscribers on URL's port (self-signed).")
@click.option(
    "--linger", default=1.0, show_default=True, help="Seconds to keep serving FETCH afterwards."
)
def pub(
    url: str,
    namespace: str,
    track: str,
    insecure: bool,
    cafile: str | None,
    token: str | None,
    datagram_size: int,
    draft: str,
    groups: int,
    objects: int,
    size: int,
    subscribers: int,
    wait: float,
    interval: float,
    listen: bool,
    linger: float,
) -> None:
    """Publish a synthetic track (GROUPS x OBJECTS x SIZE bytes) to a MoQT relay at URL."""
    try:
        target = MoqtUrl.parse(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="URL") from exc
    name = FullTrackName.parse(namespace, track)
    source = MemoryTrack(max_groups=max(groups, 1))

    plan = _Plan(groups=groups, objects=objects, size=size, interval=interval)
    if listen:
        transport = _transport(
            insecure=True, cafile=None, datagram=datagram_size, draft=draft, server=True
        )
        _run(_pub_server(target, transport, name, source, plan, subscribers, wait, linger))
    else:
        transport = _transport(
            insecure=insecure, cafile=cafile, datagram=datagram_size, draft=draft
        )
        _run(_pub_client(url, transport, token, name, source, plan, subscribers, wait, linger))


@dataclass(frozen=True, kw_only=True)
class _Plan:
    groups: int
    objects: int
    size: int
    interval: float


async def _publish(source: MemoryTrack, plan: _Plan, subscribers: int, wait: float) -> None:
    if subscribers > 0:
        try:
            await source.wait_subscribers(subscribers, timeout=wait)
        except TimeoutError:
            raise click.ClickException(
                f"no subscriber within {wait:.0f} s (start `kvmoq sub` after `pub` announced)"
            ) from None
        await asyncio.sleep(0.3)  # relays may probe with SUBSCRIBE/UNSUBSCRIBE first
        await source.wait_subscribers(subscribers, timeout=wait)
    for group in range(plan.groups):
        payloads = [
            MoqtObject(group=group, object_id=o, payload=payload_for(group, o, plan.size))
            for o in range(plan.objects)
        ]
        await source.publish_group(group, payloads)
        click.echo(f"published group {group} ({plan.objects} x {plan.size} B)", err=True)
        if plan.interval:
            await asyncio.sleep(plan.interval)
    await source.finish()


async def _pub_client(
    url: str,
    transport: TransportConfig,
    token: str | None,
    name: FullTrackName,
    source: MemoryTrack,
    plan: _Plan,
    subscribers: int,
    wait: float,
    linger: float,
) -> None:
    handler = TrackServer({name: source})
    async with connect(
        url, transport=transport, handler=handler, session_config=_session_config(token)
    ) as session:
        await session.publish_namespace(name.namespace, auth_tokens=_tokens(token))
        ns = "/".join(p.decode() for p in name.namespace)
        version = draft_name(session.session.version)
        click.echo(f"announced {ns} ({version}); waiting for {subscribers} subscriber(s)", err=True)
        await _publish(source, plan, subscribers, wait)
        await session.protocol.drain(0)
        await asyncio.sleep(max(linger, 0.5))  # PUBLISH_DONE, last ACKs, late FETCHes


async def _pub_server(
    target: MoqtUrl,
    transport: TransportConfig,
    name: FullTrackName,
    source: MemoryTrack,
    plan: _Plan,
    subscribers: int,
    wait: float,
    linger: float,
) -> None:
    server = await serve(
        target.host,
        target.port,
        transport=transport,
        handler_factory=lambda: TrackServer({name: source}),
    )
    click.echo(f"listening on {target.host}:{server.port}", err=True)
    try:
        await _publish(source, plan, subscribers, wait)
        await asyncio.sleep(linger)
    finally:
        server.close()


def _tokens(token: str | None) -> tuple[AuthToken, ...]:
    return _session_config(token).auth_tokens


def _run(coro: object) -> None:
    try:
        asyncio.run(coro)  # type: ignore[arg-type]
    except MoqtApiError as exc:
        raise click.ClickException(f"{type(exc).__name__}: {exc}") from None
    except (ConnectionError, TimeoutError) as exc:
        raise click.ClickException(
            f"could not reach the peer ({str(exc) or type(exc).__name__}); check the URL, and "
            "--tls-disable-verify for self-signed relays"
        ) from None


def _parse_range(text: str) -> tuple[int, int]:
    try:
        first, last = (int(x) for x in text.split(":"))
    except ValueError:
        raise click.BadParameter("expected START:END group numbers, e.g. 0:3") from None
    if last < first:
        raise click.BadParameter("END must be >= START")
    return first, last


def _line(obj: MoqtObject) -> str:
    digest = hashlib.sha256(obj.payload).hexdigest()
    status = "" if obj.status == 0 else f" status={obj.status.name}"
    return f"{obj.group} {obj.object_id} {len(obj.payload)} {digest}{status}"


@click.command("sub")
@_with_common
@click.option("--fetch", "fetch_range", help="Fetch groups START:END (inclusive) instead.")
@click.option(
    "--filter",
    "filter_name",
    type=click.Choice(sorted(_FILTERS)),
    default="largest",
    show_default=True,
    help="Subscription filter.",
)
@click.option("--start", "start_group", type=int, help="First group (absolute filters).")
@click.option("--end-group", type=int, help="Last group, inclusive (absolute-range).")
@click.option("--max-objects", type=int, help="Stop after this many objects.")
@click.option("--timeout", default=60.0, show_default=True, help="Give up after this many seconds.")
def sub(
    url: str,
    namespace: str,
    track: str,
    insecure: bool,
    cafile: str | None,
    token: str | None,
    datagram_size: int,
    draft: str,
    fetch_range: str | None,
    filter_name: str,
    start_group: int | None,
    end_group: int | None,
    max_objects: int | None,
    timeout: float,
) -> None:
    """Subscribe to (or --fetch) a track at URL; print GROUP OBJECT LENGTH SHA256 per object."""
    try:
        MoqtUrl.parse(url)
    except ValueError as exc:
        raise click.BadParameter(str(exc), param_hint="URL") from exc
    filter_type = _FILTERS[filter_name]
    if filter_type.has_start and start_group is None:
        raise click.BadParameter("--start is required with absolute filters", param_hint="--start")
    if filter_type == FilterType.ABSOLUTE_RANGE and end_group is None:
        raise click.BadParameter("--end-group is required with absolute-range")
    name = FullTrackName.parse(namespace, track)
    groups = _parse_range(fetch_range) if fetch_range else None

    transport = _transport(insecure=insecure, cafile=cafile, datagram=datagram_size, draft=draft)
    start = Location(start_group, 0) if start_group is not None else None

    async def open_(session: MoqtConnection) -> AsyncIterator[MoqtObject]:
        tokens = _tokens(token)
        if groups is not None:
            first, last = Location(groups[0], 0), Location(groups[1], 0)
            return await session.fetch(*_name_args(name), start=first, end=last, auth_tokens=tokens)
        return await session.subscribe(
            *_name_args(name),
            filter_type=filter_type,
            start=start,
            end_group=end_group,
            auth_tokens=tokens,
        )

    coro = _sub_main(url, transport, token, open_, max_objects)
    _run(asyncio.wait_for(coro, timeout))
    sys.stdout.flush()


def _name_args(name: FullTrackName) -> tuple[tuple[bytes, ...], bytes]:
    return name.namespace, name.name


async def _sub_main(
    url: str,
    transport: TransportConfig,
    token: str | None,
    open_: Callable[[MoqtConnection], Awaitable[AsyncIterator[MoqtObject]]],
    max_objects: int | None,
) -> None:
    count, started = 0, time.perf_counter()
    async with connect(url, transport=transport, session_config=_session_config(token)) as session:
        objects = await open_(session)
        click.echo(f"receiving ({draft_name(session.session.version)})", err=True)
        async for obj in objects:
            click.echo(_line(obj))
            count += 1
            if max_objects is not None and count >= max_objects:
                break
    click.echo(f"{count} objects in {time.perf_counter() - started:.2f} s", err=True)
