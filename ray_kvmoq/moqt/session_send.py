"""The sending half of a MoQT session's data plane: subgroup streams, fetch streams, object
datagrams (d14 §10, d16 §10), written in the negotiated version.

:class:`DataSender` is the base of :class:`~.session_data.DataStreams` (the receiving half), so
the session's data-plane commands stay one role. ``open_subgroup`` writes a SUBGROUP_HEADER on a
new unidirectional stream and returns its id; ``write_object``/``write_objects`` append objects
(one ``send_stream_data`` per call, so a batch of objects costs one transport call);
``end_subgroup`` sends the FIN. Fetch streams mirror this. Draft-16 streams use
:mod:`.codec.streams16` (no Publisher Priority with the default, delta-encoded extension types,
compacted fetch objects); extension headers are always encoded from their decoded form, so a
relay re-encodes them per hop and never copies a raw block across versions.

Invariants: writes to a stream the session reset itself (UNSUBSCRIBE, FETCH_CANCEL, STOP_SENDING
from the peer) are dropped silently, the application learns of it from the matching event and
may race it; writes to a stream it ended or never opened raise LocalProtocolError. A payload
above ``_INLINE_PAYLOAD_MAX`` goes to the transport after its header, uncopied.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .codec.datagrams import ObjectDatagram, encode_datagram
from .codec.errors import LocalProtocolError
from .codec.streams import (
    encode_fetch_header,
    encode_fetch_object,
    encode_fetch_object_header,
    encode_subgroup_header,
    encode_subgroup_object,
    encode_subgroup_object_header,
)
from .codec.streams16 import (
    FetchObjectWriter16,
    encode_subgroup_header_16,
    encode_subgroup_object_header_16,
)
from .codec.types import DRAFT_14, ObjectStatus, StreamResetCode
from .codec.wire import KeyValuePairs
from .session_core import PublisherRecord, RequestFlow
from .state import FetchInput, FetchState, PublisherSubInput, SessionInput

if TYPE_CHECKING:
    from .session_requests import Requests
    from .session_subscribe import Subscriptions

__all__ = ["DataSender", "OutgoingFetchObject", "OutgoingObject"]

OutgoingObject = tuple[int, bytes] | tuple[int, bytes, KeyValuePairs]
"""An object for :meth:`DataSender.write_objects`: ``(object_id, payload[, extensions])``."""

OutgoingFetchObject = tuple[int, int, int, bytes] | tuple[int, int, int, bytes, KeyValuePairs]
"""An object for :meth:`DataSender.write_fetch_objects`:
``(group, subgroup, object_id, payload[, extensions])``."""

_CANCELLED_MAX = 4096
_INLINE_PAYLOAD_MAX = 16 << 10
"""Payloads up to this size are copied next to their header (one transport write); larger ones
go to the transport as they are, after their header, so aioquic's send buffer holds their only
copy (a 4 MiB object was copied twice before reaching it)."""


@dataclass(slots=True)
class _SendStream:
    """A unidirectional stream we write."""

    request_id: int
    is_fetch: bool
    with_ext: bool = False
    last_object_id: int | None = None
    fetch16: FetchObjectWriter16 | None = None
    """Draft-16 fetch streams: the writer that compacts each object against the previous."""


class DataSender:
    """Data-plane commands (see the module docstring); the receive path is the subclass's."""

    def __init__(self, flow: RequestFlow, subs: Subscriptions, requests: Requests) -> None:
        self._flow = flow
        self._subs = subs
        self._requests = requests
        self._send_streams: dict[int, _SendStream] = {}
        self._cancelled: OrderedDict[int, None] = OrderedDict()

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
