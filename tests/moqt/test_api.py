"""The asyncio MoQT API end to end on 127.0.0.1: real QUIC, real TLS, our session on both ends.

Covers the four SUBSCRIBE filters, FETCH ranges and errors, AUTHORIZATION_TOKEN decisions by
the application, a client that publishes on its own session, object fields (extensions,
status, subgroup) surviving the trip, UNSUBSCRIBE reaching the publisher, and a dying peer
ending iterators with :class:`SessionClosed` within a bounded time.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
from collections.abc import AsyncIterator, Callable

import pytest

from ray_kvmoq.moqt.aio import TransportConfig
from ray_kvmoq.moqt.api import (
    FullTrackName,
    MemoryTrack,
    MoqtConnection,
    MoqtObject,
    MoqtUrl,
    NamespaceRequest,
    RequestError,
    SessionClosed,
    SessionHandler,
    SubscribeRequest,
    TrackServer,
    connect,
    serve,
)
from ray_kvmoq.moqt.certs import self_signed
from ray_kvmoq.moqt.codec import AuthToken, Location
from ray_kvmoq.moqt.codec.types import (
    DRAFT_14,
    DRAFT_16,
    FetchErrorCode,
    FilterType,
    ObjectStatus,
    SessionError,
    SubscribeErrorCode,
    TokenAliasType,
)
from ray_kvmoq.moqt.events import SetupCompleted
from ray_kvmoq.moqt.session_core import SessionConfig

LEAF = self_signed()
TRACK = FullTrackName.parse("a/b", "t")
SERVER_TLS = TransportConfig(cert_pem=LEAF.cert_pem, key_pem=LEAF.key_pem, idle_timeout=5)
CLIENT_TLS = TransportConfig(cadata=LEAF.ca_pem, idle_timeout=5)
"""Offers both ALPNs, like the server: the pair speaks draft-16 unless ``draft`` pins 14."""


@pytest.fixture(autouse=True, params=["moqt-16", "moq-00"], ids=["d16", "d14"])
def draft(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test here runs once per version: the client offers only that version's ALPN."""
    client = dataclasses.replace(CLIENT_TLS, alpns=(request.param,))
    monkeypatch.setattr(sys.modules[__name__], "CLIENT_TLS", client)
    return str(request.param)


def _token(value: bytes) -> AuthToken:
    return AuthToken(alias_type=TokenAliasType.USE_VALUE, token_type=0, value=value)


@contextlib.asynccontextmanager
async def pair(
    handler_factory: Callable[[], SessionHandler],
    *,
    client_handler: SessionHandler | None = None,
    session_config: SessionConfig | None = None,
    client_transport: TransportConfig | None = None,
) -> AsyncIterator[MoqtConnection]:
    client_transport = client_transport or CLIENT_TLS
    server = await serve("127.0.0.1", 0, transport=SERVER_TLS, handler_factory=handler_factory)
    try:
        async with connect(
            f"moqt://127.0.0.1:{server.port}/moq",
            transport=client_transport,
            handler=client_handler,
            session_config=session_config,
        ) as client:
            yield client
    finally:
        server.close()


async def _collect(it: AsyncIterator[MoqtObject]) -> list[tuple[int, int, bytes]]:
    return [(o.group, o.object_id, o.payload) async for o in it]


def _payloads(group: int, n: int = 3) -> list[bytes]:
    return [f"g{group}o{i}".encode() for i in range(n)]


async def _publish(track: MemoryTrack, groups: range) -> None:
    for g in groups:
        await track.publish_group(g, _payloads(g))


@pytest.mark.parametrize(
    ("filter_type", "start", "end_group", "expected_groups"),
    [
        (FilterType.LARGEST_OBJECT, None, None, [2, 3, 4]),
        (FilterType.NEXT_GROUP_START, None, None, [2, 3, 4]),
        (FilterType.ABSOLUTE_START, Location(3, 0), None, [3, 4]),
        (FilterType.ABSOLUTE_RANGE, Location(2, 0), 3, [2, 3]),
    ],
)
async def test_subscribe_filters(
    filter_type: FilterType,
    start: Location | None,
    end_group: int | None,
    expected_groups: list[int],
) -> None:
    track = MemoryTrack()
    await _publish(track, range(2))  # history: groups 0-1, largest (1, 2)
    async with pair(lambda: TrackServer({TRACK: track})) as client:
        sub = await client.subscribe(
            "a/b", "t", filter_type=filter_type, start=start, end_group=end_group
        )
        assert sub.largest == Location(1, 2)
        await track.wait_subscribers(1, timeout=5)
        await _publish(track, range(2, 5))
        await track.finish()
        got = await asyncio.wait_for(_collect(sub), 10)
    assert sorted({g for g, _, _ in got}) == expected_groups
    for g in expected_groups:
        assert [(o, p) for gg, o, p in got if gg == g] == list(enumerate(_payloads(g)))


async def test_subscribe_unknown_track_is_refused() -> None:
    async with pair(lambda: TrackServer({})) as client:
        with pytest.raises(RequestError) as info:
            await client.subscribe("no/such", "t")
    assert info.value.error_code == SubscribeErrorCode.TRACK_DOES_NOT_EXIST


async def test_fetch_ranges_and_errors() -> None:
    track = MemoryTrack()
    await _publish(track, range(4))
    async with pair(lambda: TrackServer({TRACK: track})) as client:
        whole = await client.fetch("a/b", "t", start=Location(1, 0), end=Location(2, 0))
        assert [(g, o) for g, o, _ in await _collect(whole)] == [
            (g, o) for g in (1, 2) for o in range(3)
        ]
        part = await client.fetch("a/b", "t", start=Location(0, 1), end=Location(1, 2))
        assert [(g, o) for g, o, _ in await _collect(part)] == [(0, 1), (0, 2), (1, 0), (1, 1)]
        clamped = await client.fetch("a/b", "t", start=Location(3, 2), end=Location(9, 0))
        assert clamped.end == Location(3, 3)
        assert [(g, o) for g, o, _ in await _collect(clamped)] == [(3, 2)]
        with pytest.raises(RequestError) as info:
            await client.fetch("a/b", "t", start=Location(7, 0), end=Location(8, 0))
        assert info.value.error_code == FetchErrorCode.INVALID_RANGE
        with pytest.raises(RequestError) as info:
            await client.fetch("x", "t", start=Location(0, 0), end=Location(1, 0))
        assert info.value.error_code == FetchErrorCode.TRACK_DOES_NOT_EXIST


async def test_object_fields_survive(draft: str) -> None:
    track = MemoryTrack()
    objects = [
        MoqtObject(group=5, object_id=0, payload=b"x", extensions=((0x20, 42), (0x0B, b"imm"))),
        MoqtObject(group=5, object_id=2, payload=b"y" * 70000),
        MoqtObject(group=5, object_id=3, status=ObjectStatus.END_OF_GROUP),
    ]
    async with pair(lambda: TrackServer({TRACK: track})) as client:
        sub = await client.subscribe("a/b", "t")
        await track.wait_subscribers(1, timeout=5)
        await track.publish_group(5, objects)
        await track.finish()
        got = [o async for o in sub]
        fetched = [
            o
            async for o in await client.fetch("a/b", "t", start=Location(5, 0), end=Location(5, 0))
        ]
    assert client.session.version == (DRAFT_16 if draft == "moqt-16" else DRAFT_14)
    # A draft-16 fetch stream has no object status (d16 §10.4.4): the END_OF_GROUP marker
    # travels on the subscription only. Draft-16 delta-encodes extension types, so they arrive
    # sorted by type (d16 §1.4.2).
    on_fetch = objects if draft == "moq-00" else objects[:2]
    order = (lambda e: e) if draft == "moq-00" else (lambda e: tuple(sorted(e)))
    for received, sent in ((got, objects), (fetched, on_fetch)):
        assert [(o.object_id, o.payload, o.extensions, o.status) for o in received] == [
            (o.object_id, o.payload, order(o.extensions), o.status) for o in sent
        ]


class _TokenGate(TrackServer):
    """Accepts the session only with token b"open", subscriptions only with b"sub"."""

    async def on_setup(self, session: MoqtConnection, setup: SetupCompleted) -> None:
        if _token(b"open") not in setup.auth_tokens:
            raise RequestError(SessionError.UNAUTHORIZED, "bad token")


async def test_auth_tokens_reach_the_application() -> None:
    def gate() -> SessionHandler:
        return _TokenGate({TRACK: MemoryTrack()}, authorize=lambda tokens: _token(b"sub") in tokens)

    ok = SessionConfig(auth_tokens=(_token(b"open"),))
    async with pair(gate, session_config=ok) as client:
        with pytest.raises(RequestError) as info:
            await client.subscribe("a/b", "t", auth_tokens=(_token(b"nope"),))
        assert info.value.error_code == SubscribeErrorCode.UNAUTHORIZED
        sub = await client.subscribe("a/b", "t", auth_tokens=(_token(b"sub"),))
        assert sub.track_alias >= 0

    with pytest.raises((SessionClosed, ConnectionError)):
        async with pair(gate, session_config=SessionConfig(auth_tokens=(_token(b"x"),))) as c:
            await asyncio.wait_for(c.wait_closed(), 5)
            raise c._error or AssertionError("not closed")


class _PullBack(SessionHandler):
    """Server that, when a client announces a namespace, subscribes to it over that session."""

    def __init__(self, results: asyncio.Queue[list[tuple[int, int, bytes]]]) -> None:
        self.results = results

    async def on_publish_namespace(
        self, session: MoqtConnection, request: NamespaceRequest
    ) -> None:
        asyncio.get_running_loop().create_task(self._pull(session, request.namespace))

    async def _pull(self, session: MoqtConnection, namespace: tuple[bytes, ...]) -> None:
        sub = await session.subscribe(namespace, b"t")
        await self.results.put(await _collect(sub))


async def test_client_publishes_on_its_own_session() -> None:
    results: asyncio.Queue[list[tuple[int, int, bytes]]] = asyncio.Queue()
    track = MemoryTrack()
    async with pair(lambda: _PullBack(results), client_handler=TrackServer({TRACK: track})) as c:
        await c.publish_namespace("a/b")
        await track.wait_subscribers(1, timeout=5)
        await _publish(track, range(3))
        await track.finish()
        got = await asyncio.wait_for(results.get(), 10)
    assert got == [(g, o, p) for g in range(3) for o, p in enumerate(_payloads(g))]


class _Recorder(SessionHandler):
    def __init__(self) -> None:
        self.publications: asyncio.Queue[object] = asyncio.Queue()

    async def on_subscribe(self, session: MoqtConnection, request: SubscribeRequest) -> None:
        await self.publications.put(request.accept(largest=None))


async def test_unsubscribe_reaches_the_publisher() -> None:
    recorder = _Recorder()
    async with pair(lambda: recorder) as client:
        sub = await client.subscribe("a/b", "t")
        pub = await asyncio.wait_for(recorder.publications.get(), 5)
        await sub.unsubscribe()
        for _ in range(100):
            if pub.cancelled:  # type: ignore[attr-defined]
                break
            await asyncio.sleep(0.02)
        assert pub.cancelled  # type: ignore[attr-defined]
        assert await _collect(sub) == []


async def test_peer_death_ends_iterators() -> None:
    recorder = _Recorder()
    server = await serve("127.0.0.1", 0, transport=SERVER_TLS, handler_factory=lambda: recorder)
    fast_idle = TransportConfig(cadata=LEAF.ca_pem, idle_timeout=1.0)
    try:
        async with connect(f"moqt://127.0.0.1:{server.port}", transport=fast_idle) as client:
            sub = await client.subscribe("a/b", "t")
            await recorder.publications.get()
            server._listener.server._transport.close()  # vanish without CONNECTION_CLOSE
            with pytest.raises(SessionClosed):
                await asyncio.wait_for(_collect(sub), 10)
            assert client.closed
    finally:
        server.close()


async def test_clean_close_is_seen_by_the_peer() -> None:
    sessions: list[MoqtConnection] = []

    class Keep(SessionHandler):
        async def on_setup(self, session: MoqtConnection, setup: SetupCompleted) -> None:
            sessions.append(session)

    server = await serve("127.0.0.1", 0, transport=SERVER_TLS, handler_factory=Keep)
    try:
        async with connect(f"moqt://127.0.0.1:{server.port}", transport=CLIENT_TLS) as client:
            assert client.setup is not None
            for _ in range(100):
                if sessions:
                    break
                await asyncio.sleep(0.01)
        why = await asyncio.wait_for(sessions[0].wait_closed(), 5)
        assert why.error_code == SessionError.NO_ERROR
    finally:
        server.close()


def test_url_parsing() -> None:
    url = MoqtUrl.parse("moqt://127.0.0.1:4443/moq?x=1")
    assert (url.host, url.port, url.path, url.authority) == (
        "127.0.0.1",
        4443,
        "/moq?x=1",
        "127.0.0.1:4443",
    )
    with pytest.raises(ValueError, match="moqt://"):
        MoqtUrl.parse("https://127.0.0.1:4443/moq")


def test_package_surface_is_pinned_and_resolves() -> None:
    import ray_kvmoq.moqt as pkg
    from ray_kvmoq.moqt import aio, api, certs, session

    def isort_key(name: str) -> tuple[int, str]:
        return (0 if name.isupper() else 1 if name[0].isupper() else 2, name)

    assert len(set(pkg.__all__)) == len(pkg.__all__)
    assert sorted(pkg._API, key=isort_key) == api.__all__
    for module in (api,):
        for name in module.__all__:
            assert getattr(pkg, name) is getattr(module, name), name
            assert getattr(module, name).__doc__, name
    assert pkg.TransportConfig is aio.TransportConfig
    assert pkg.MoqtSession is session.MoqtSession
    assert pkg.self_signed is certs.self_signed


async def test_requests_wait_for_the_setup_decision() -> None:
    """A SUBSCRIBE racing a slow on_setup that refuses never reaches on_subscribe."""
    seen: list[str] = []

    class SlowGate(SessionHandler):
        async def on_setup(self, session: MoqtConnection, setup: SetupCompleted) -> None:
            await asyncio.sleep(0.3)
            raise RequestError(SessionError.UNAUTHORIZED, "no")

        async def on_subscribe(self, session: MoqtConnection, request: SubscribeRequest) -> None:
            seen.append("subscribe")
            request.accept()

    server = await serve("127.0.0.1", 0, transport=SERVER_TLS, handler_factory=SlowGate)
    try:
        async with connect(f"moqt://127.0.0.1:{server.port}", transport=CLIENT_TLS) as client:
            with pytest.raises(SessionClosed) as info:
                await client.subscribe("a/b", "t")
            assert info.value.error_code == SessionError.UNAUTHORIZED
    finally:
        server.close()
    assert seen == []


async def test_joining_fetch_returns_the_history_before_the_subscription() -> None:
    track = MemoryTrack()
    await _publish(track, range(3))  # largest (2, 2)
    async with pair(lambda: TrackServer({TRACK: track})) as client:
        sub = await client.subscribe("a/b", "t")
        history = await client.joining_fetch(sub, preceding_groups=1)
        got = [(g, o) for g, o, _ in await _collect(history)]
        await sub.unsubscribe()
    assert got == [(g, o) for g in (1, 2) for o in range(3)]


async def test_group_ends_marks_each_end_of_group_stream_after_its_objects() -> None:
    """A publisher that sends no End of Group object (moq-dev) still lets a ``group_ends``
    subscriber learn when each group is complete: its stream ends with the end-of-group bit."""
    track = MemoryTrack()
    async with pair(lambda: TrackServer({TRACK: track})) as client:
        sub = await client.subscribe("a/b", "t", group_ends=True)
        await track.wait_subscribers(1, timeout=5)
        await _publish(track, range(3))
        await track.finish()
        objs = await asyncio.wait_for(_collect_all(sub), 10)
    for g in range(3):
        of_group = [o for o in objs if o.group == g]
        assert [o.status for o in of_group] == [ObjectStatus.NORMAL] * 3 + [
            ObjectStatus.END_OF_GROUP
        ]
        assert of_group[-1].payload == b""


async def _collect_all(it: AsyncIterator[MoqtObject]) -> list[MoqtObject]:
    return [o async for o in it]
