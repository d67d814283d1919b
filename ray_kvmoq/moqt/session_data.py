"""Data plane of a MoQT session: subgroup streams, fetch streams, object datagrams (d14 §10).

Both drafts: a session speaks the version it negotiated; draft-16 subgroup and fetch streams
and datagrams (d16 §10) go through :mod:`.codec.streams16` and the draft-16 datagram codec, and
extension headers are re-encoded per session (draft-16 delta-encodes their types), never copied
as raw blocks between sessions.

Sending: ``open_subgroup`` writes a SUBGROUP_HEADER on a new unidirectional stream and returns
its id; ``write_object``/``write_objects`` append objects (one ``send_stream_data`` per call,
so a batch of objects costs one transport call); ``end_subgroup`` sends the FIN. Fetch streams
mirror this. Receiving: each peer unidirectional stream gets a
:class:`~ray_kvmoq.moqt.data.DataStreamParser`; its events become :class:`ObjectReceived`,
:class:`SubgroupStreamEnded` and :class:`FetchStreamEnded`.

Invariants:

* A subgroup stream whose Track Alias is not known yet is *parked* (d14 §10.4.2: SUBSCRIBE_OK
  may arrive after the first data): parsed objects are held until the alias appears. Parked
  bytes across all streams are bounded by ``unknown_alias_buffer_bytes`` and each stream may
  wait ``unknown_alias_timeout`` seconds; beyond either the session fails with
  PROTOCOL_VIOLATION. Streams for aliases that *were* known (ended subscriptions) are stopped
  and ignored instead.
* Data for a subscription we unsubscribed, or a fetch we cancelled, is dropped with
  STOP_SENDING; it never surfaces as an event.
* Writes to a stream the session reset itself (UNSUBSCRIBE, FETCH_CANCEL, STOP_SENDING from the
  peer) are dropped silently: the application learns of it from the matching event and may
  race it. Writes to a stream it ended or never opened raise LocalProtocolError.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .codec.datagrams import ObjectDatagram, decode_datagram, encode_datagram
from .codec.errors import LocalProtocolError, ProtocolViolation
from .codec.streams import (
    DataEvent,
    DataStreamParser,
    FetchHeaderParsed,
    ObjectParsed,
    StreamFinished,
    SubgroupHeaderParsed,
    encode_fetch_header,
    encode_fetch_object,
    encode_fetch_object_header,
    encode_subgroup_header,
    encode_subgroup_object,
    encode_subgroup_object_header,
)
from .codec.streams16 import (
    DataStreamParser16,
    FetchObjectWriter16,
    FetchRangeEnded,
    encode_subgroup_header_16,
    encode_subgroup_object_header_16,
)
from .codec.types import DRAFT_14, ObjectStatus, StreamResetCode
from .codec.wire import KeyValuePairs
from .events import (
    DataStreamReset,
    FetchStreamEnded,
    MoqtEvent,
    ObjectReceived,
    SubgroupStreamEnded,
)
from .session_core import PublisherRecord, RequestFlow
from .state import FetchInput, FetchState, PublisherSubInput, SessionInput, SubscriberSubInput
from .state import SubscriberSubState as SubState

if TYPE_CHECKING:
    from .session_requests import Requests
    from .session_subscribe import Subscriptions

__all__ = ["DataStreams", "OutgoingFetchObject", "OutgoingObject"]

OutgoingObject = tuple[int, bytes] | tuple[int, bytes, KeyValuePairs]
"""An object for :meth:`DataStreams.write_objects`: ``(object_id, payload[, extensions])``."""

OutgoingFetchObject = tuple[int, int, int, bytes] | tuple[int, int, int, bytes, KeyValuePairs]
"""An object for :meth:`DataStreams.write_fetch_objects`:
``(group, subgroup, object_id, payload[, extensions])``."""

_CANCELLED_MAX = 4096
_INLINE_PAYLOAD_MAX = 16 << 10
"""Payloads up to this size are copied next to their header (one transport write); larger ones
go to the transport as they are, after their header, so aioquic's send buffer holds their only
copy (a 4 MiB object was copied twice before reaching it)."""


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


@dataclass(slots=True)
class _SendStream:
    """A unidirectional stream we write."""

    request_id: int
    is_fetch: bool
    with_ext: bool = False
    last_object_id: int | None = None
    fetch16: FetchObjectWriter16 | None = None
    """Draft-16 fetch streams: the writer that compacts each object against the previous."""


class DataStreams:
    """Data-plane commands and receive path (see the module docstring)."""

    def __init__(self, flow: RequestFlow, subs: Subscriptions, requests: Requests) -> None:
        self._flow = flow
        self._subs = subs
        self._requests = requests
        self._recv: dict[int, _RecvStream] = {}
        self._send_streams: dict[int, _SendStream] = {}
        self._cancelled: OrderedDict[int, None] = OrderedDict()
        self.parked_by_alias: dict[int, list[int]] = {}
        self._parked_total = 0

    # ------------------------------------------------------------ sending: subgroups

    def open_subgroup(
        self,
        request_id: int,
        group: int,
        subgroup: int = 0,
        *,
        priority: int = 128,
        with_extensions: bool = False,
        end_of_group: bool = False,
    ) -> int:
        """Open a subgroup stream for subscription ``request_id``; returns the stream id.

        ``with_extensions`` lets objects on it carry extension headers; ``end_of_group`` says
        the stream will end with the group's last object (header type bit, d14 §10.4.2).
        """
        rec = self._subs.subs_in.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no subscription with request id {request_id}")
        if rec.track_alias is None:
            raise LocalProtocolError(f"subscription {request_id} has no track alias yet")
        encode = (
            encode_subgroup_header
            if self._flow.version == DRAFT_14
            else (encode_subgroup_header_16)
        )
        header = encode(
            track_alias=rec.track_alias,
            group=group,
            subgroup=subgroup,
            publisher_priority=priority,
            extensions=with_extensions,
            end_of_group=end_of_group,
        )
        rec.machine.apply(PublisherSubInput.SEND_OBJECT)
        self._flow.machine.apply(SessionInput.SEND_DATA)
        stream_id = self._flow.quic.get_next_available_stream_id(is_unidirectional=True)
        self._flow.quic.send_stream_data(stream_id, header)
        rec.streams_opened += 1
        rec.open_streams.add(stream_id)
        self._send_streams[stream_id] = _SendStream(
            request_id=request_id, is_fetch=False, with_ext=with_extensions
        )
        return stream_id

    def write_object(
        self,
        stream_id: int,
        object_id: int,
        payload: bytes | memoryview = b"",
        *,
        extensions: KeyValuePairs = (),
        status: ObjectStatus = ObjectStatus.NORMAL,
        end_stream: bool = False,
    ) -> None:
        """Append one object to a subgroup stream (``end_stream``: FIN right after it)."""
        st = self._writable(stream_id, fetch=False)
        if st is None:
            return
        if self._flow.version != DRAFT_14:
            header = encode_subgroup_object_header_16(
                previous_id=st.last_object_id,
                object_id=object_id,
                payload_len=len(payload),
                status=status,
                extensions=extensions,
                with_extensions=st.with_ext,
            )
            st.last_object_id = object_id
            self._write_object(stream_id, st, header, payload, end_stream)
            return
        if len(payload) > _INLINE_PAYLOAD_MAX:
            header = encode_subgroup_object_header(
                st.last_object_id,
                object_id,
                len(payload),
                extensions=extensions,
                with_ext=st.with_ext,
                status=status,
            )
            st.last_object_id = object_id
            self._flow.quic.send_stream_data(stream_id, header)
            self._write(stream_id, st, payload, end_stream)
            return
        buf = bytearray()
        encode_subgroup_object(
            st.last_object_id,
            object_id,
            payload,
            extensions=extensions,
            with_ext=st.with_ext,
            status=status,
            out=buf,
        )
        st.last_object_id = object_id
        self._write(stream_id, st, buf, end_stream)

    def write_objects(
        self, stream_id: int, objects: Iterable[OutgoingObject], *, end_stream: bool = False
    ) -> None:
        """Append a batch of objects to a subgroup stream with one transport write."""
        st = self._writable(stream_id, fetch=False)
        if st is None:
            return
        buf = bytearray()
        last = st.last_object_id
        d14 = self._flow.version == DRAFT_14
        for item in objects:
            extensions: KeyValuePairs = item[2] if len(item) == 3 else ()
            if d14:
                encode_subgroup_object(
                    last, item[0], item[1], extensions=extensions, with_ext=st.with_ext, out=buf
                )
            else:
                buf += encode_subgroup_object_header_16(
                    previous_id=last,
                    object_id=item[0],
                    payload_len=len(item[1]),
                    extensions=extensions,
                    with_extensions=st.with_ext,
                )
                buf += item[1]
            last = item[0]
        st.last_object_id = last
        self._write(stream_id, st, buf, end_stream)

    def end_subgroup(self, stream_id: int) -> None:
        """End a subgroup stream cleanly (FIN)."""
        st = self._writable(stream_id, fetch=False)
        if st is not None:
            self._write(stream_id, st, b"", True)

    def reset_subgroup(self, stream_id: int, error_code: int = StreamResetCode.CANCELLED) -> None:
        """Abort a subgroup or fetch stream we write (RESET_STREAM, d14 §10.4.3)."""
        st = self._send_streams.get(stream_id)
        if st is None:
            if stream_id in self._cancelled:
                return
            raise LocalProtocolError(f"stream {stream_id} is not an open data stream")
        self.reset_data_stream_quietly(stream_id, error_code)

    # ------------------------------------------------------------ sending: fetch streams

    def open_fetch_stream(self, request_id: int) -> int:
        """Open the stream answering the peer's FETCH ``request_id``; returns its id."""
        rec = self._requests.fetch_in.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no fetch with request id {request_id}")
        header = encode_fetch_header(request_id)
        rec.machine.apply(FetchInput.SEND_STREAM)
        self._flow.machine.apply(SessionInput.SEND_DATA)
        stream_id = self._flow.quic.get_next_available_stream_id(is_unidirectional=True)
        self._flow.quic.send_stream_data(stream_id, header)
        rec.stream_id = stream_id
        st = _SendStream(request_id=request_id, is_fetch=True)
        if self._flow.version != DRAFT_14:
            st.fetch16 = FetchObjectWriter16()
        self._send_streams[stream_id] = st
        return stream_id

    def write_fetch_object(
        self,
        stream_id: int,
        *,
        group: int,
        subgroup: int,
        object_id: int,
        payload: bytes | memoryview = b"",
        priority: int = 128,
        extensions: KeyValuePairs = (),
        status: ObjectStatus = ObjectStatus.NORMAL,
        end_stream: bool = False,
    ) -> None:
        """Append one object to a fetch stream (objects in group order, ascending ids)."""
        st = self._writable(stream_id, fetch=True)
        if st is None:
            return
        if st.fetch16 is not None:
            if status is not ObjectStatus.NORMAL:
                # d16 §10.4.4: fetch objects carry no status; a status object (End of Group,
                # End of Track) has no wire form there, the range itself says where it ends.
                if payload:
                    raise LocalProtocolError("a status object has no payload")
                self._write(stream_id, st, b"", end_stream)
                return
            header = self._fetch_header_16(
                st.fetch16, group, subgroup, object_id, priority, len(payload), extensions
            )
            self._write_object(stream_id, st, header, payload, end_stream)
            return
        if len(payload) > _INLINE_PAYLOAD_MAX:
            header = encode_fetch_object_header(
                group=group,
                subgroup=subgroup,
                object_id=object_id,
                publisher_priority=priority,
                payload_len=len(payload),
                extensions=extensions,
                status=status,
            )
            self._flow.quic.send_stream_data(stream_id, header)
            self._write(stream_id, st, payload, end_stream)
            return
        buf = bytearray()
        encode_fetch_object(
            group=group,
            subgroup=subgroup,
            object_id=object_id,
            publisher_priority=priority,
            payload=payload,
            extensions=extensions,
            status=status,
            out=buf,
        )
        self._write(stream_id, st, buf, end_stream)

    def write_fetch_objects(
        self,
        stream_id: int,
        objects: Iterable[OutgoingFetchObject],
        *,
        priority: int = 128,
        end_stream: bool = False,
    ) -> None:
        """Append a batch of objects to a fetch stream with one transport write."""
        st = self._writable(stream_id, fetch=True)
        if st is None:
            return
        buf = bytearray()
        if st.fetch16 is not None:
            for item in objects:
                buf += self._fetch_header_16(
                    st.fetch16,
                    item[0],
                    item[1],
                    item[2],
                    priority,
                    len(item[3]),
                    item[4] if len(item) == 5 else (),
                )
                buf += item[3]
            self._write(stream_id, st, buf, end_stream)
            return
        for item in objects:
            encode_fetch_object(
                group=item[0],
                subgroup=item[1],
                object_id=item[2],
                publisher_priority=priority,
                payload=item[3],
                extensions=item[4] if len(item) == 5 else (),
                out=buf,
            )
        self._write(stream_id, st, buf, end_stream)

    @staticmethod
    def _fetch_header_16(
        writer: FetchObjectWriter16,
        group: int,
        subgroup: int,
        object_id: int,
        priority: int,
        payload_len: int,
        extensions: KeyValuePairs,
    ) -> bytes:
        return writer.object_header(
            group=group,
            subgroup=subgroup,
            object_id=object_id,
            publisher_priority=priority,
            payload_len=payload_len,
            extensions=extensions,
        )

    def end_fetch_stream(self, stream_id: int) -> None:
        """End a fetch stream cleanly (FIN): every object of the range was sent."""
        st = self._writable(stream_id, fetch=True)
        if st is not None:
            self._write(stream_id, st, b"", True)

    # ------------------------------------------------------------ sending: datagrams

    def send_datagram_object(
        self,
        request_id: int,
        group: int,
        object_id: int,
        payload: bytes = b"",
        *,
        priority: int = 128,
        extensions: KeyValuePairs = (),
        status: ObjectStatus | None = None,
        end_of_group: bool = False,
    ) -> None:
        """Send one object as a QUIC DATAGRAM (small objects only; may be dropped)."""
        rec = self._subs.subs_in.get(request_id)
        if rec is None or rec.track_alias is None:
            raise LocalProtocolError(f"no accepted subscription with request id {request_id}")
        data = encode_datagram(
            ObjectDatagram(
                track_alias=rec.track_alias,
                group=group,
                object_id=object_id,
                publisher_priority=priority,
                extensions=extensions,
                status=status,
                payload=payload,
                end_of_group=end_of_group,
            ),
            version=self._flow.version,
        )
        rec.machine.apply(PublisherSubInput.SEND_OBJECT)
        self._flow.machine.apply(SessionInput.SEND_DATA)
        self._flow.quic.send_datagram_frame(data)

    # ------------------------------------------------------------ sending: helpers

    def _writable(self, stream_id: int, *, fetch: bool) -> _SendStream | None:
        st = self._send_streams.get(stream_id)
        if st is None:
            if stream_id in self._cancelled:
                return None  # reset by the session: the application is racing the event
            raise LocalProtocolError(f"stream {stream_id} is not an open data stream")
        if st.is_fetch != fetch:
            kind = "fetch" if st.is_fetch else "subgroup"
            raise LocalProtocolError(f"stream {stream_id} is a {kind} stream")
        self._flow.machine.apply(SessionInput.SEND_DATA)
        return st

    def _write_object(
        self,
        stream_id: int,
        st: _SendStream,
        header: bytes,
        payload: bytes | memoryview,
        fin: bool,
    ) -> None:
        """Write an object's header and payload: one write for a small payload, two for a
        large one (its only copy is then aioquic's send buffer)."""
        if len(payload) > _INLINE_PAYLOAD_MAX:
            self._flow.quic.send_stream_data(stream_id, header)
            self._write(stream_id, st, payload, fin)
        else:
            self._write(stream_id, st, header + payload, fin)

    def _write(
        self, stream_id: int, st: _SendStream, data: bytes | bytearray | memoryview, fin: bool
    ) -> None:
        # aioquic copies the data into its send buffer, so a bytearray or a view is fine.
        self._flow.quic.send_stream_data(stream_id, data, end_stream=fin)  # type: ignore[arg-type]
        if fin:
            self._stream_sent_fin(stream_id, st)

    def _stream_sent_fin(self, stream_id: int, st: _SendStream) -> None:
        del self._send_streams[stream_id]
        self._send_stream_gone(stream_id, st)

    def _send_stream_gone(self, stream_id: int, st: _SendStream) -> None:
        """A stream we wrote ended (FIN or reset): update its fetch or subscription."""
        if st.is_fetch:
            rec = self._requests.fetch_in.get(st.request_id)
            # Not when the fetch itself already ended (FETCH_CANCEL resets its stream).
            if (
                rec is not None
                and rec.machine.allows(FetchInput.SEND_STREAM_END)
                and rec.machine.apply(FetchInput.SEND_STREAM_END) is FetchState.CLOSED
            ):
                self._requests.fetch_in.pop(st.request_id, None)
                self._flow.peer_request_done(st.request_id)
        else:
            pub = self._subs.subs_in.get(st.request_id)
            if pub is not None:
                pub.open_streams.discard(stream_id)

    def reset_data_stream_quietly(self, stream_id: int, error_code: int) -> None:
        st = self._send_streams.pop(stream_id, None)
        self._cancelled[stream_id] = None
        while len(self._cancelled) > _CANCELLED_MAX:
            self._cancelled.popitem(last=False)
        if st is None:
            return
        try:
            self._flow.quic.reset_stream(stream_id, error_code)
        except ValueError:  # already finished at the QUIC layer
            pass
        self._send_stream_gone(stream_id, st)

    def cancel_publisher_streams(self, rec: PublisherRecord) -> None:
        for stream_id in list(rec.open_streams):
            self.reset_data_stream_quietly(stream_id, StreamResetCode.CANCELLED)

    def on_stop_sending(self, stream_id: int) -> None:
        """The subscriber no longer wants a stream we write: answer with RESET_STREAM."""
        if stream_id in self._send_streams:
            self.reset_data_stream_quietly(stream_id, StreamResetCode.CANCELLED)

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
