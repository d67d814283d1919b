"""Two-peer in-memory harness: real aioquic client and server connections, each wrapped by a
:class:`~ray_kvmoq.moqt.session.MoqtSession`, passing datagrams to each other in memory.

Modelled on aioquic's ``client_and_server`` test helper: no sockets, no event loop, a fake
clock (``Harness.now``) that only moves when a test asks (``advance``/``settle``). Everything is
deterministic, so tests can inject raw bytes on any stream of either connection and check
exactly what the other side's session did and which CONNECTION_CLOSE code it sent.
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, TypeVar

from aioquic.quic.configuration import QuicConfiguration
from aioquic.quic.connection import QuicConnection
from aioquic.quic.events import ConnectionTerminated, QuicEvent, StreamDataReceived
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ray_kvmoq.moqt.certs import self_signed
from ray_kvmoq.moqt.codec.types import ALPN
from ray_kvmoq.moqt.events import MoqtEvent, SessionTerminated, SetupCompleted
from ray_kvmoq.moqt.session import MoqtSession, SessionConfig

E = TypeVar("E")

CLIENT_ADDR = ("127.0.0.1", 40000)
SERVER_ADDR = ("127.0.0.1", 4443)
MAX_ROUNDS = 100_000
ACK_HORIZON = 0.03
"""pump() lets the clock run this far ahead to fire delayed-ACK timers (aioquic: 25 ms)."""


@lru_cache(maxsize=1)
def _server_credentials() -> tuple[Any, Any]:
    leaf = self_signed(("localhost", "127.0.0.1"))
    cert = x509.load_pem_x509_certificate(leaf.cert_pem)
    key = serialization.load_pem_private_key(leaf.key_pem, password=None)
    return cert, key


def _never_wait(now: float) -> None:
    return None


@dataclass
class Peer:
    """One side: its QUIC connection, its session and everything the session returned."""

    name: str
    quic: QuicConnection
    session: MoqtSession
    events: list[MoqtEvent] = field(default_factory=list)
    quic_events: list[QuicEvent] = field(default_factory=list)
    raw: bool = False
    """True: QUIC events are recorded but not given to the session."""

    def of_type(self, kind: type[E]) -> list[E]:
        """Every session event of ``kind`` so far."""
        return [e for e in self.events if isinstance(e, kind)]

    def last(self, kind: type[E]) -> E:
        """The most recent session event of ``kind`` (AssertionError if none)."""
        found = self.of_type(kind)
        assert found, (
            f"{self.name}: no {kind.__name__} in {[type(e).__name__ for e in self.events]}"
        )
        return found[-1]

    def take(self) -> list[MoqtEvent]:
        """Return and forget the events collected so far."""
        out, self.events = self.events, []
        return out

    @property
    def terminated(self) -> SessionTerminated | None:
        """The session's SessionTerminated event, if it ended."""
        found = self.of_type(SessionTerminated)
        return found[-1] if found else None

    @property
    def connection_close(self) -> ConnectionTerminated | None:
        """The QUIC ConnectionTerminated this side's connection reported, if any."""
        found = [e for e in self.quic_events if isinstance(e, ConnectionTerminated)]
        return found[-1] if found else None


class Harness:
    """A connected client/server pair; see the module docstring."""

    def __init__(
        self,
        *,
        client_config: SessionConfig | None = None,
        server_config: SessionConfig | None = None,
        setup: bool = True,
        max_stream_data: int | None = None,
        raw_server: bool = False,
        client_alpns: tuple[str, ...] = (ALPN,),
        server_alpns: tuple[str, ...] = (ALPN,),
    ) -> None:
        """``client_alpns`` / ``server_alpns``: the ALPNs each side offers (``moqt-16`` on
        both makes a draft-16 session; the default is draft-14's ``moq-00``)."""
        self.now = 0.0
        cert, key = _server_credentials()
        common: dict[str, Any] = dict(max_datagram_frame_size=65536)
        if max_stream_data is not None:
            common.update(max_data=4 * max_stream_data, max_stream_data=max_stream_data)
        cconf = QuicConfiguration(is_client=True, alpn_protocols=list(client_alpns), **common)
        cconf.verify_mode = ssl.CERT_NONE
        cconf.server_name = "localhost"
        sconf = QuicConfiguration(
            is_client=False,
            certificate=cert,
            private_key=key,
            alpn_protocols=list(server_alpns),
            **common,
        )
        cquic = QuicConnection(configuration=cconf)
        squic = QuicConnection(
            configuration=sconf,
            original_destination_connection_id=cquic.original_destination_connection_id,
        )
        self.client = Peer(
            "client", cquic, MoqtSession(cquic, is_client=True, config=client_config)
        )
        self.server = Peer(
            "server", squic, MoqtSession(squic, is_client=False, config=server_config)
        )
        # A raw server has no session in the loop: a test scripts its bytes by hand.
        self.server.raw = raw_server
        for quic in (cquic, squic):
            # No pacing: the fake clock only moves when a test says so (aioquic's pacer would
            # otherwise hold packets back until a later "now").
            quic._loss._pacer.next_send_time = _never_wait  # type: ignore[method-assign,assignment]
        cquic.connect(SERVER_ADDR, now=self.now)
        self.pump()
        if setup and not raw_server:
            self.client.session.setup()
            self.pump()
            assert self.client.of_type(SetupCompleted) and self.server.of_type(SetupCompleted)

    # ------------------------------------------------------------ moving bytes

    def pump(self) -> None:
        """Exchange datagrams and deliver events until both sides are quiet."""
        for _ in range(MAX_ROUNDS):
            moved = self._transfer(self.client, self.server, CLIENT_ADDR)
            moved |= self._transfer(self.server, self.client, SERVER_ADDR)
            self._drain(self.client)
            self._drain(self.server)
            if not moved and not self._quic_timers(ACK_HORIZON):
                return
        raise AssertionError("harness did not go quiet (livelock?)")

    def _quic_timers(self, horizon: float) -> bool:
        """Fire QUIC timers due within ``horizon`` seconds (delayed ACKs: the congestion
        window only opens when ACKs flow). Returns True if one fired."""
        due = [
            t
            for t in (self.client.quic.get_timer(), self.server.quic.get_timer())
            if t is not None and t <= self.now + horizon
        ]
        if not due:
            return False
        self.now = max(self.now, min(due))
        for p in (self.client, self.server):
            t = p.quic.get_timer()
            if t is not None and t <= self.now:
                p.quic.handle_timer(now=self.now)
        self._drain(self.client)
        self._drain(self.server)
        return True

    def _transfer(self, src: Peer, dst: Peer, addr: tuple[str, int]) -> bool:
        moved = False
        for data, _ in src.quic.datagrams_to_send(now=self.now):
            dst.quic.receive_datagram(data, addr, now=self.now)
            moved = True
        return moved

    def _drain(self, peer: Peer) -> None:
        while (event := peer.quic.next_event()) is not None:
            peer.quic_events.append(event)
            if not peer.raw:
                peer.events.extend(peer.session.handle_event(event, now=self.now))

    def advance(self, seconds: float) -> None:
        """Move the clock, firing QUIC and session timers on the way, then pump."""
        self.pump()  # bytes already buffered go out before any timer fires
        end = self.now + seconds
        last_due, stuck = -1.0, 0
        for _ in range(MAX_ROUNDS):
            timers = [
                t
                for p in (self.client, self.server)
                for t in (p.quic.get_timer(), None if p.raw else p.session.get_timer())
                if t is not None and t <= end
            ]
            if not timers:
                break
            if min(timers) == last_due:
                stuck += 1
                if stuck > 100:  # a timer that firing does not clear: a session bug
                    raise AssertionError(f"timer stays due at {last_due} (now {self.now})")
            else:
                last_due, stuck = min(timers), 0
            self.now = max(self.now, min(timers))
            for p in (self.client, self.server):
                qt = p.quic.get_timer()
                if qt is not None and qt <= self.now:
                    p.quic.handle_timer(now=self.now)
                st = None if p.raw else p.session.get_timer()
                if st is not None and st <= self.now:
                    p.events.extend(p.session.handle_timer(self.now))
            self.pump()
        self.now = end
        self.pump()

    def settle(self) -> None:
        """Let any connection close run to completion (draining periods are timers)."""
        self.advance(10.0)

    # ------------------------------------------------------------ raw injection

    def inject(self, peer: Peer, stream_id: int, data: bytes, *, fin: bool = False) -> None:
        """Write raw bytes on ``peer``'s QUIC connection (bypassing its session) and pump."""
        peer.quic.send_stream_data(stream_id, data, end_stream=fin)
        self.pump()

    def received(self, peer: Peer, stream_id: int = 0) -> bytes:
        """Every byte ``peer``'s QUIC connection received on ``stream_id`` so far."""
        return b"".join(
            e.data
            for e in peer.quic_events
            if isinstance(e, StreamDataReceived) and e.stream_id == stream_id
        )

    def inject_uni(self, peer: Peer, data: bytes, *, fin: bool = False) -> int:
        """Open a new unidirectional stream on ``peer`` with raw bytes; returns its id."""
        stream_id = peer.quic.get_next_available_stream_id(is_unidirectional=True)
        self.inject(peer, stream_id, data, fin=fin)
        return stream_id

    def close_code(self, victim: Peer) -> int | None:
        """The session error code ``victim``'s peer closed the connection with, as seen on the
        wire by ``victim`` (None if it was not closed)."""
        self.settle()
        other = self.server if victim is self.client else self.client
        closed = victim.connection_close
        if closed is None:
            return None
        # The closer's own record must agree with what went over the wire.
        if not other.raw:
            assert other.session.terminated
            mine = other.terminated  # None when the application called close() itself
            if mine is not None:
                assert not mine.by_peer and mine.error_code == closed.error_code, mine
        return closed.error_code
