"""Data plane of a MoQT session: subgroup streams, fetch streams, object datagrams (d14 §10).

Both drafts: a session speaks the version it negotiated; draft-16 subgroup and fetch streams
and datagrams (d16 §10) go through :mod:`.codec.streams16` and the draft-16 datagram codec, and
extension headers are re-encoded per session (draft-16 delta-encodes their types), never copied
as raw blocks between sessions.

Sending is :class:`~.session_send.DataSender`'s (the base class). Receiving: each peer
unidirectional stream gets a :class:`~.codec.streams.DataStreamParser` (draft-14) or
:class:`~.codec.streams16.DataStreamParser16` (draft-16, the same zero-copy path); its events
become :class:`ObjectReceived`, :class:`SubgroupStreamEnded` and :class:`FetchStreamEnded`.

Invariants:

* A subgroup stream whose Track Alias is not known yet is *parked* (d14 §10.4.2: SUBSCRIBE_OK
  may arrive after the first data): parsed objects are held until the alias appears. Parked
  bytes across all streams are bounded by ``unknown_alias_buffer_bytes`` and each stream may
  wait ``unknown_alias_timeout`` seconds; beyond either the session fails with
  PROTOCOL_VIOLATION. Streams for aliases that *were* known (ended subscriptions) are stopped
  and ignored instead.
* Data for a subscription we unsubscribed, or a fetch we cancelled, is dropped with
  STOP_SENDING; it never surfaces as an event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .codec.datagrams import decode_datagram
from .codec.errors import ProtocolViolation
from .codec.streams import (
    DataEvent,
    DataStreamParser,
    FetchHeaderParsed,
    ObjectParsed,
    StreamFinished,
    SubgroupHeaderParsed,
)
from .codec.streams16 import (
    DataStreamParser16,
    FetchRangeEnded,
)
from .codec.types import DRAFT_14, ObjectStatus, StreamResetCode
from .events import (
    DataStreamReset,
    FetchStreamEnded,
    MoqtEvent,
    ObjectReceived,
    SubgroupStreamEnded,
)
from .session_core import RequestFlow
from .session_send import DataSender, OutgoingFetchObject, OutgoingObject
from .state import FetchInput, FetchState, SessionInput, SubscriberSubInput
from .state import SubscriberSubState as SubState

if TYPE_CHECKING:
    from .session_requests import Requests
    from .session_subscribe import Subscriptions

__all__ = ["DataStreams", "OutgoingFetchObject", "OutgoingObject"]


@dataclass(slots=True)
class _RecvStream:
    """A peer unidirectional stream being parsed."""

    parser: DataStreamParser | DataStreamParser16
    request_id: int | None = None
    header: SubgroupHeaderParsed | None = None
    is_fetch: bool = False
    ignore: bool = False
    parked: list[DataEvent] | None = None
    parked_bytes: int = 0
    parked_since: float = 0.0


class DataStreams(DataSender):
    """Data-plane commands (:class:`~.session_send.DataSender`) and the receive path."""

    def __init__(self, flow: RequestFlow, subs: Subscriptions, requests: Requests) -> None:
        super().__init__(flow, subs, requests)
        self._recv: dict[int, _RecvStream] = {}
        self.parked_by_alias: dict[int, list[int]] = {}
        self._parked_total = 0

    # ------------------------------------------------------------ receiving

    def on_data_stream(self, stream_id: int, data: bytes, fin: bool, out: list[MoqtEvent]) -> None:
        st = self._recv.get(stream_id)
        if st is None:
            limit = self._flow.config.max_object_size
            parser: DataStreamParser | DataStreamParser16
            if self._flow.version == DRAFT_14:
                parser = DataStreamParser(version=self._flow.version, max_object_size=limit)
            else:
                parser = DataStreamParser16(max_object_size=limit)
            st = _RecvStream(parser=parser)
            self._recv[stream_id] = st
        if st.ignore:
            if fin:
                del self._recv[stream_id]
            return
        for ev in st.parser.feed(data, fin=fin):
            self._route(stream_id, st, ev, out)
            if st.ignore:
                break
        if st.parked is not None:
            st.parked_bytes += len(data)
            self._parked_total += len(data)
            if self._parked_total > self._flow.config.unknown_alias_buffer_bytes:
                raise ProtocolViolation(
                    f"over {self._flow.config.unknown_alias_buffer_bytes} bytes of data streams "
                    "for unknown track aliases"
                )
        elif fin:
            self._recv.pop(stream_id, None)

    def _route(
        self, stream_id: int, st: _RecvStream, ev: DataEvent | FetchRangeEnded, out: list[MoqtEvent]
    ) -> None:
        if isinstance(ev, FetchRangeEnded):
            return  # d16: objects the fetch range does not have; nothing to deliver
        if st.parked is not None:
            st.parked.append(ev)
        elif isinstance(ev, ObjectParsed):
            self._deliver(stream_id, st, ev, out)
        elif isinstance(ev, SubgroupHeaderParsed):
            self._on_subgroup_header(stream_id, st, ev)
        elif isinstance(ev, FetchHeaderParsed):
            self._on_fetch_header(stream_id, st, ev)
        elif isinstance(ev, StreamFinished):
            self._on_stream_finished(stream_id, st, ev, out)

    def _on_subgroup_header(
        self, stream_id: int, st: _RecvStream, ev: SubgroupHeaderParsed
    ) -> None:
        st.header = ev
        rid = self._subs.alias_in.get(ev.track_alias)
        if rid is None:
            if ev.track_alias in self._subs.retired_aliases:
                self.stop_data_stream(stream_id)
                return
            st.parked = []
            st.parked_since = self._flow.now
            self.parked_by_alias.setdefault(ev.track_alias, []).append(stream_id)
            return
        rec = self._subs.subs_out[rid]
        if rec.machine.apply(SubscriberSubInput.RECV_OBJECT) is SubState.UNSUBSCRIBED:
            self.stop_data_stream(stream_id)
            return
        st.request_id = rid
        rec.streams_seen += 1
        rec.open_streams += 1

    def _on_fetch_header(self, stream_id: int, st: _RecvStream, ev: FetchHeaderParsed) -> None:
        st.is_fetch = True
        rec = self._requests.fetch_out.get(ev.request_id)
        if rec is None:
            if not (self._flow.is_ours(ev.request_id) and self._flow.issued(ev.request_id)):
                raise ProtocolViolation(f"fetch stream for unknown request id {ev.request_id}")
            self.stop_data_stream(stream_id)
            return
        rec.machine.apply(FetchInput.RECV_STREAM)
        rec.stream_id = stream_id
        st.request_id = ev.request_id

    def _deliver(
        self, stream_id: int, st: _RecvStream, ev: ObjectParsed, out: list[MoqtEvent]
    ) -> None:
        assert st.request_id is not None
        if not st.is_fetch:
            rec = self._subs.subs_out.get(st.request_id)
            if rec is None or rec.machine.apply(SubscriberSubInput.RECV_OBJECT) is (
                SubState.UNSUBSCRIBED
            ):
                self.stop_data_stream(stream_id)
                return
        out.append(
            ObjectReceived(
                request_id=st.request_id,
                track_alias=None if st.header is None else st.header.track_alias,
                group=ev.group,
                subgroup=ev.subgroup,
                object_id=ev.object_id,
                publisher_priority=ev.publisher_priority,
                extensions=ev.extensions,
                status=ev.status,
                payload=ev.payload,
                stream_id=stream_id,
            )
        )

    def _on_stream_finished(
        self, stream_id: int, st: _RecvStream, ev: StreamFinished, out: list[MoqtEvent]
    ) -> None:
        assert st.request_id is not None
        if st.is_fetch:
            out.append(FetchStreamEnded(stream_id=stream_id, request_id=st.request_id))
            self._fetch_stream_gone(st.request_id)
            return
        assert st.header is not None
        out.append(
            SubgroupStreamEnded(
                stream_id=stream_id,
                request_id=st.request_id,
                track_alias=st.header.track_alias,
                group=st.header.group,
                subgroup=st.header.subgroup if st.header.subgroup is not None else 0,
                end_of_group=ev.end_of_group,
            )
        )
        self._subgroup_stream_gone(st.request_id)

    def _subgroup_stream_gone(self, request_id: int) -> None:
        rec = self._subs.subs_out.get(request_id)
        if rec is not None:
            rec.open_streams = max(0, rec.open_streams - 1)
            self._subs.check_subscriber_done(rec)

    def _fetch_stream_gone(self, request_id: int) -> None:
        rec = self._requests.fetch_out.get(request_id)
        if rec is not None and rec.machine.apply(FetchInput.RECV_STREAM_END) is FetchState.CLOSED:
            del self._requests.fetch_out[request_id]

    def stop_data_stream(self, stream_id: int) -> None:
        st = self._recv.get(stream_id)
        if st is not None:
            st.ignore = True
            self._unpark(stream_id, st)
        try:
            self._flow.quic.stop_stream(stream_id, StreamResetCode.CANCELLED)
        except ValueError:  # the stream already finished at the QUIC layer
            pass

    def on_data_stream_reset(self, stream_id: int, error_code: int, out: list[MoqtEvent]) -> None:
        st = self._recv.pop(stream_id, None)
        if st is None or st.ignore:
            return
        self._unpark(stream_id, st)
        if st.request_id is None:
            return
        out.append(
            DataStreamReset(stream_id=stream_id, request_id=st.request_id, error_code=error_code)
        )
        if st.is_fetch:
            self._fetch_stream_gone(st.request_id)
        else:
            self._subgroup_stream_gone(st.request_id)

    # ------------------------------------------------------------ parking

    def _unpark(self, stream_id: int, st: _RecvStream) -> None:
        if st.parked is None:
            return
        self._parked_total -= st.parked_bytes
        st.parked, st.parked_bytes = None, 0
        if st.header is not None:
            waiting = self.parked_by_alias.get(st.header.track_alias, [])
            if stream_id in waiting:
                waiting.remove(stream_id)
            if not waiting:
                self.parked_by_alias.pop(st.header.track_alias, None)

    def alias_known(self, alias: int, out: list[MoqtEvent]) -> None:
        for stream_id in self.parked_by_alias.pop(alias, []):
            st = self._recv.get(stream_id)
            if st is None or st.parked is None or st.header is None:
                continue
            events = st.parked
            self._parked_total -= st.parked_bytes
            st.parked, st.parked_bytes = None, 0
            self._on_subgroup_header(stream_id, st, st.header)
            for ev in events:
                if st.ignore:
                    break
                self._route(stream_id, st, ev, out)
            if any(isinstance(ev, StreamFinished) for ev in events):
                self._recv.pop(stream_id, None)

    def check_parked(self, now: float) -> None:
        """Fail the session if a stream waited too long for its track alias."""
        limit = self._flow.config.unknown_alias_timeout
        for streams in self.parked_by_alias.values():
            for stream_id in streams:
                st = self._recv.get(stream_id)
                if st is not None and now >= st.parked_since + limit:
                    alias = st.header.track_alias if st.header else -1
                    raise ProtocolViolation(
                        f"data stream {stream_id} for unknown track alias {alias} "
                        f"waited over {limit} s"
                    )

    def parked_deadline(self) -> float | None:
        times = [
            st.parked_since
            for streams in self.parked_by_alias.values()
            for sid in streams
            if (st := self._recv.get(sid)) is not None
        ]
        return min(times) + self._flow.config.unknown_alias_timeout if times else None

    # ------------------------------------------------------------ datagrams

    def on_datagram(self, data: bytes, out: list[MoqtEvent]) -> None:
        if not self._flow.machine.allows(SessionInput.RECV_DATA):
            return  # before SETUP there is no subscription it could belong to
        dgram = decode_datagram(data, version=self._flow.version)
        rid = self._subs.alias_in.get(dgram.track_alias)
        if rid is None:
            return  # unknown alias: datagrams are unreliable, drop it
        rec = self._subs.subs_out[rid]
        if rec.machine.apply(SubscriberSubInput.RECV_OBJECT) is SubState.UNSUBSCRIBED:
            return
        out.append(
            ObjectReceived(
                request_id=rid,
                track_alias=dgram.track_alias,
                group=dgram.group,
                subgroup=dgram.object_id,
                object_id=dgram.object_id,
                publisher_priority=dgram.publisher_priority,
                extensions=dgram.extensions,
                status=dgram.status if dgram.status is not None else ObjectStatus.NORMAL,
                payload=dgram.payload,
                stream_id=None,
            )
        )
