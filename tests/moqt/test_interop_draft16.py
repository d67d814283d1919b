"""Draft-16 codec against a real peer: moq-rs 0.5.1 (moq-dev) over ALPN ``moqt-16``.

These tests check the codec below the session: they drive a raw aioquic connection with the
draft-16 codec alone (the sessions' draft-16 interop is in ``test_interop_moqrs.py`` and
``tests/relay/test_interop.py``) (``encode_control(..., version=DRAFT_16)``, ``StreamParser16``'s
encoders): what moq-rs sends must decode, and what we encode must be understood well enough for
moq-rs to answer and to relay our objects to its own subscriber intact.

* setup and requests: CLIENT_SETUP → SERVER_SETUP (delta-encoded setup parameters), the
  relay's SUBSCRIBE_NAMESPACE on its own bidirectional stream (d16 §9.25), PUBLISH_NAMESPACE →
  REQUEST_OK, SUBSCRIBE for an unknown track → REQUEST_ERROR;
* our draft-16 publisher (raw codec) → moq-rs relay → moq-rs subscriber: SUBSCRIBE from the
  relay, our SUBSCRIBE_OK, draft-16 subgroup streams; every frame arrives byte-exact;
* moq-rs publisher → moq-rs relay → our draft-16 subscriber (raw codec): our SUBSCRIBE, the
  relay's SUBSCRIBE_OK and subgroup streams through ``StreamParser16``; every frame byte-exact.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from urllib.parse import urlsplit

import pytest
from aioquic.asyncio import connect
from aioquic.asyncio.protocol import QuicConnectionProtocol
from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.events import HandshakeCompleted, QuicEvent, StreamDataReceived

from ray_kvmoq.moqt.codec import (
    ClientSetup,
    Message,
    PublishNamespace,
    RequestErrorMessage,
    RequestOk,
    ServerSetup,
    SetupParameters,
    Subscribe,
    SubscribeNamespace,
    SubscribeOk,
    Unsubscribe,
)
from ray_kvmoq.moqt.codec.control import ControlStreamParser, encode_control
from ray_kvmoq.moqt.codec.streams import ObjectParsed
from ray_kvmoq.moqt.codec.streams16 import (
    StreamParser16,
    encode_subgroup_header_16,
    encode_subgroup_object_16,
)
from ray_kvmoq.moqt.codec.types import ALPN_BY_VERSION, DRAFT_16
from tests.moqt.test_interop_moqrs import (
    NS,
    PEER,
    TRACK,
    _check,
    _payload,
    _spawn,
    _stop,
    _wait_line,
    relay,
)

pytestmark = pytest.mark.interop
__all__ = ["relay"]  # the fixture, re-used from the draft-14 interop tests


class _Raw(QuicConnectionProtocol):
    """A bare QUIC client: stream data goes to a queue, the ALPN is recorded."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.data: asyncio.Queue[StreamDataReceived] = asyncio.Queue()
        self.alpn: str | None = None

    def quic_event_received(self, event: QuicEvent) -> None:
        if isinstance(event, HandshakeCompleted):
            self.alpn = event.alpn_protocol
        elif isinstance(event, StreamDataReceived):
            self.data.put_nowait(event)


class _Peer16:
    """Our side of a draft-16 session, by hand: control stream, parsers per bidi stream."""

    def __init__(self, proto: _Raw) -> None:
        self.proto = proto
        self.quic = proto._quic
        self.control = self.quic.get_next_available_stream_id()
        self.parsers: dict[int, ControlStreamParser] = {}
        self.messages: list[tuple[int, Message]] = []
        self.streams: dict[int, StreamParser16] = {}
        self.objects: list[ObjectParsed] = []

    def send(self, msg: Message) -> None:
        self.quic.send_stream_data(self.control, encode_control(msg, version=DRAFT_16))
        self.proto.transmit()

    async def _next(self, left: float) -> None:
        try:
            ev = await asyncio.wait_for(self.proto.data.get(), left)
        except TimeoutError:
            return
        if ev.stream_id & 0x2:  # a data stream: draft-16 subgroup or fetch stream
            stream = self.streams.setdefault(ev.stream_id, StreamParser16())
            events = stream.feed(ev.data, fin=ev.end_stream)
            self.objects += [e for e in events if isinstance(e, ObjectParsed)]
            return
        parser = self.parsers.setdefault(
            ev.stream_id,
            ControlStreamParser(version=DRAFT_16, allow_empty_namespace_prefix=True),
        )
        self.messages += [(ev.stream_id, m) for m in parser.feed(ev.data)]

    async def wait_for(self, kind: type, timeout: float = 10.0) -> tuple[int, Message]:
        deadline = time.monotonic() + timeout
        while True:
            for i, (sid, msg) in enumerate(self.messages):
                if isinstance(msg, kind):
                    del self.messages[i]
                    return sid, msg
            left = deadline - time.monotonic()
            assert left > 0, f"no {kind}; got {self.messages}"
            await self._next(left)

    async def wait_objects(self, count: int, timeout: float = 20.0) -> list[ObjectParsed]:
        deadline = time.monotonic() + timeout
        while len(self.objects) < count and time.monotonic() < deadline:
            await self._next(deadline - time.monotonic())
        return self.objects


def _config() -> QuicConfiguration:
    return QuicConfiguration(
        is_client=True,
        alpn_protocols=[ALPN_BY_VERSION[DRAFT_16]],
        verify_mode=ssl.CERT_NONE,
        server_name="localhost",
        max_datagram_frame_size=65536,
    )


async def _session(url: str):  # type: ignore[no-untyped-def]
    parts = urlsplit(url)
    return connect(
        parts.hostname or "", parts.port or 0, configuration=_config(), create_protocol=_Raw
    )


async def _setup(peer: _Peer16) -> ServerSetup:
    peer.send(
        ClientSetup(
            parameters=SetupParameters.build(
                path=b"/", max_request_id=100, implementation=b"ray_kvmoq"
            )
        )
    )
    _, server_setup = await peer.wait_for(ServerSetup)
    assert isinstance(server_setup, ServerSetup)
    return server_setup


def test_setup_and_requests(relay: str) -> None:
    async def run() -> None:
        async with await _session(relay) as proto:
            assert proto.alpn == "moqt-16"
            peer = _Peer16(proto)
            server_setup = await _setup(peer)
            assert server_setup.parameters.max_request_id is not None
            # The relay asks for our namespaces on a stream of its own (d16 §9.25).
            sid, subns = await peer.wait_for(SubscribeNamespace)
            assert sid != peer.control and isinstance(subns, SubscribeNamespace)
            peer.send(PublishNamespace(request_id=0, track_namespace=(b"probe",)))
            _, ok = await peer.wait_for(RequestOk)
            assert ok.request_id == 0  # type: ignore[union-attr]
            peer.send(Subscribe(request_id=2, track_namespace=(b"nope",), track_name=b"t"))
            _, err = await peer.wait_for(RequestErrorMessage)
            assert err.request_id == 2  # type: ignore[union-attr]

    asyncio.run(run())


def test_our_draft16_publisher_to_moqrs_relay_to_moqrs_subscriber(relay: str) -> None:
    """moq-dev's relay first probes the track (SUBSCRIBE, then UNSUBSCRIBE once SUBSCRIBE_OK
    arrives) and then subscribes for real: every SUBSCRIBE is answered, and each group goes to
    the subscriptions still open when it is written."""
    groups, objects, size = 3, 4, 2000
    namespace = tuple(p.encode() for p in NS.split("/"))

    seen = {"subscribes": 0}

    async def answer(peer: _Peer16, live: dict[int, int]) -> None:
        alias = 0
        while True:
            _, msg = await peer.wait_for(Subscribe | Unsubscribe, timeout=60)  # type: ignore[arg-type]
            if isinstance(msg, Subscribe):
                assert (msg.track_namespace, msg.track_name) == (namespace, TRACK.encode())
                alias += 1
                seen["subscribes"] += 1
                live[msg.request_id] = alias
                peer.send(SubscribeOk(request_id=msg.request_id, track_alias=alias))
            elif isinstance(msg, Unsubscribe):
                live.pop(msg.request_id, None)

    async def run() -> None:
        async with await _session(relay) as proto:
            peer = _Peer16(proto)
            await _setup(peer)
            peer.send(PublishNamespace(request_id=0, track_namespace=namespace))
            await peer.wait_for(RequestOk)
            live: dict[int, int] = {}
            answering = asyncio.create_task(answer(peer, live))
            sub = _spawn([*PEER, "subscribe", relay, str(groups * objects)], 40)
            try:
                # Wait for the probe and the real subscription (at most 20 s), so that group 0
                # is written after the subscription that carries it downstream exists.
                deadline = time.monotonic() + 20
                while seen["subscribes"] < 2 and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)
                assert live, "the relay never subscribed"
                for g in range(groups):
                    for alias in list(live.values()):
                        sid = peer.quic.get_next_available_stream_id(is_unidirectional=True)
                        data = bytearray(encode_subgroup_header_16(track_alias=alias, group=g))
                        previous = None
                        for o in range(objects):
                            data += encode_subgroup_object_16(
                                previous_id=previous, object_id=o, payload=_payload(g, o, size)
                            )
                            previous = o
                        peer.quic.send_stream_data(sid, bytes(data), end_stream=True)
                    proto.transmit()
                    await asyncio.sleep(0.3)  # moq-dev subscribers start at the latest group
                out, err = await asyncio.to_thread(sub.communicate, timeout=30)
            finally:
                answering.cancel()
                _stop(sub)
            assert sub.returncode == 0, err
            _check(out, groups, objects, size)

    asyncio.run(run())


def test_moqrs_publisher_to_moqrs_relay_to_our_draft16_subscriber(relay: str) -> None:
    """Our SUBSCRIBE (draft-16 layout) is routed to a moq-rs publisher; its SUBSCRIBE_OK and
    the relay's draft-16 subgroup streams decode, and every frame is byte-exact."""
    groups, objects, size = 3, 4, 2500
    namespace = tuple(p.encode() for p in NS.split("/"))

    async def run() -> None:
        pub = _spawn([*PEER, "publish", relay, str(groups), str(objects), str(size)], 45)
        try:
            await asyncio.to_thread(_wait_line, pub, "ANNOUNCED", 20)
            async with await _session(relay) as proto:
                peer = _Peer16(proto)
                await _setup(peer)
                # The relay may not have routed the publisher's announcement yet: a SUBSCRIBE
                # then gets REQUEST_ERROR "unroutable"; ask again with the next request id.
                ok: Message | None = None
                for rid in range(0, 40, 2):
                    peer.send(
                        Subscribe(
                            request_id=rid, track_namespace=namespace, track_name=TRACK.encode()
                        )
                    )
                    _, ok = await peer.wait_for(SubscribeOk | RequestErrorMessage, timeout=20)  # type: ignore[arg-type]
                    if isinstance(ok, SubscribeOk):
                        break
                    await asyncio.sleep(0.25)
                assert isinstance(ok, SubscribeOk), ok
                got = await peer.wait_objects(groups * objects)
        finally:
            _stop(pub)
        frames = sorted((o.group, o.object_id, o.payload) for o in got)
        assert frames == [
            (g, o, _payload(g, o, size)) for g in range(groups) for o in range(objects)
        ]

    asyncio.run(run())
