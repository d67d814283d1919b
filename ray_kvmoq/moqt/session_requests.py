"""The FETCH and TRACK_STATUS role of a MoQT session (d14 §9.16-§9.22).

Like :mod:`.session_subscribe`: :class:`Requests` owns its records, the application commands
and the handlers for the same messages from the peer (``HANDLERS``), every step checked by a
table from :mod:`.state`. A joining FETCH reads the subscriptions role (``subs``); fetch streams
are the data-plane role's (``data``).

Invariants:

* A joining FETCH names a subscription we publish; it must use the LargestObject filter
  (else PROTOCOL_VIOLATION, d14 §9.16.2). An unknown joining id gets FETCH_ERROR
  INVALID_JOINING_REQUEST_ID and a subscription accepted without content gets INVALID_RANGE,
  both answered by the session itself. Otherwise the range is resolved from the Largest
  Location we gave in ``accept_subscribe`` (None while that SUBSCRIBE is unanswered).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .codec import (
    AuthToken,
    Fetch,
    FetchCancel,
    FetchError,
    FetchOk,
    Location,
    MessageParameters,
    TrackStatus,
    TrackStatusError,
    TrackStatusOk,
)
from .codec.errors import LocalProtocolError, ProtocolViolation
from .codec.types import FetchErrorCode, FetchType, FilterType, GroupOrder, StreamResetCode
from .events import (
    FetchAccepted,
    FetchCancelled,
    FetchRejected,
    FetchRequested,
    MoqtEvent,
    TrackStatusReceived,
    TrackStatusRejected,
    TrackStatusRequested,
)
from .session_core import FetchRecord, RequestFlow, TrackStatusRecord
from .session_subscribe import with_tokens
from .state import (
    FETCH_PUBLISHER,
    FETCH_SUBSCRIBER,
    TRACK_STATUS_REQUESTER,
    TRACK_STATUS_RESPONDER,
    FetchInput,
    FetchState,
    StateMachine,
    TrackStatusInput,
    TrackStatusState,
)

if TYPE_CHECKING:
    from .session_data import DataStreams
    from .session_subscribe import Subscriptions

__all__ = ["Requests"]

_NO_PARAMS = MessageParameters()


class Requests:
    """FETCH and TRACK_STATUS commands and handlers (module docstring)."""

    HANDLERS: ClassVar[dict[type, str]] = {
        Fetch: "on_fetch",
        FetchOk: "on_fetch_ok",
        FetchError: "on_fetch_error",
        FetchCancel: "on_fetch_cancel",
        TrackStatus: "on_track_status",
        TrackStatusOk: "on_track_status_ok",
        TrackStatusError: "on_track_status_error",
    }
    """Handler method of each control message this role receives."""
    REQUESTS: ClassVar[frozenset[type]] = frozenset((Fetch, TrackStatus))
    """Messages that open a request (their handlers validate the request id, d14 §9.1)."""

    def __init__(self, flow: RequestFlow, subs: Subscriptions) -> None:
        self._flow = flow
        self._subs = subs
        self.data: DataStreams
        """The data-plane role (set by the session right after construction)."""
        self.fetch_out: dict[int, FetchRecord] = {}
        """Our FETCHes, by request id."""
        self.fetch_in: dict[int, FetchRecord] = {}
        """The peer's FETCHes we serve, by request id."""
        self._ts_out: dict[int, TrackStatusRecord] = {}
        self._ts_in: dict[int, TrackStatusRecord] = {}

    # ------------------------------------------------------------ FETCH: commands

    def fetch(
        self,
        track_namespace: tuple[bytes, ...],
        track_name: bytes,
        *,
        start: Location,
        end: Location,
        subscriber_priority: int = 128,
        group_order: GroupOrder = GroupOrder.PUBLISHER_DEFAULT,
        parameters: MessageParameters | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> int:
        """Send a standalone FETCH of ``[start, end)``; ``end.object == 0`` = all of group."""
        rid = self._flow.start_request(
            lambda rid: Fetch(
                request_id=rid,
                fetch_type=FetchType.STANDALONE,
                subscriber_priority=subscriber_priority,
                group_order=group_order,
                track_namespace=track_namespace,
                track_name=track_name,
                start=start,
                end=end,
                parameters=with_tokens(parameters, auth_tokens),
            )
        )
        self.fetch_out[rid] = self._new_fetch(rid, serving=False)
        return rid

    def joining_fetch(
        self,
        subscription_request_id: int,
        joining_start: int = 0,
        *,
        absolute: bool = False,
        subscriber_priority: int = 128,
        group_order: GroupOrder = GroupOrder.PUBLISHER_DEFAULT,
        parameters: MessageParameters | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> int:
        """Send a joining FETCH for our LargestObject subscription ``subscription_request_id``.

        Relative (default): ``joining_start`` groups before the subscription's Largest group;
        ``absolute``: from group ``joining_start``.
        """
        sub = self._subs.subs_out.get(subscription_request_id)
        if sub is None:
            raise LocalProtocolError(f"no subscription with request id {subscription_request_id}")
        if sub.filter_type is not FilterType.LARGEST_OBJECT:
            raise LocalProtocolError("joining FETCH needs a LargestObject subscription")
        kind = FetchType.ABSOLUTE_JOINING if absolute else FetchType.RELATIVE_JOINING
        rid = self._flow.start_request(
            lambda rid: Fetch(
                request_id=rid,
                fetch_type=kind,
                subscriber_priority=subscriber_priority,
                group_order=group_order,
                joining_request_id=subscription_request_id,
                joining_start=joining_start,
                parameters=with_tokens(parameters, auth_tokens),
            )
        )
        self.fetch_out[rid] = self._new_fetch(rid, serving=False)
        return rid

    def fetch_cancel(self, request_id: int) -> None:
        """Abandon our fetch (FETCH_CANCEL); its stream, if any, is stopped."""
        rec = self._fetch_rec(self.fetch_out, request_id)
        rec.machine.apply(FetchInput.SEND_CANCEL)
        self._flow.send_control(FetchCancel(request_id=request_id))
        if rec.stream_id is not None:
            self.data.stop_data_stream(rec.stream_id)
        del self.fetch_out[request_id]
        self._flow.abandon(request_id)  # FETCH_OK/ERROR or the stream may cross the cancel

    def accept_fetch(
        self,
        request_id: int,
        *,
        end: Location,
        end_of_track: bool = False,
        group_order: GroupOrder = GroupOrder.ASCENDING,
        parameters: MessageParameters | None = None,
    ) -> None:
        """Answer the peer's FETCH with FETCH_OK; ``end`` is the end location plus one."""
        rec = self._fetch_rec(self.fetch_in, request_id)
        data = self._flow.encode(
            FetchOk(
                request_id=request_id,
                group_order=group_order,
                end_of_track=end_of_track,
                end=end,
                parameters=parameters if parameters is not None else _NO_PARAMS,
            )
        )
        self._serve_fetch_step(rec, FetchInput.SEND_FETCH_OK, data)

    def reject_fetch(self, request_id: int, error_code: int, reason: str = "") -> None:
        """Answer the peer's FETCH with FETCH_ERROR (reset its stream first if one is open)."""
        rec = self._fetch_rec(self.fetch_in, request_id)
        data = self._flow.encode(
            FetchError(request_id=request_id, error_code=error_code, reason=reason)
        )
        if rec.stream_id is not None and rec.machine.state is FetchState.PENDING_STREAMING:
            self.data.reset_data_stream_quietly(rec.stream_id, StreamResetCode.INTERNAL_ERROR)
        self._serve_fetch_step(rec, FetchInput.SEND_FETCH_ERROR, data)

    def _serve_fetch_step(self, rec: FetchRecord, inp: FetchInput, data: bytes) -> None:
        state = rec.machine.apply(inp)
        self._flow.send_raw_control(data)
        if state is FetchState.CLOSED:
            self._drop_served_fetch(rec)

    def _drop_served_fetch(self, rec: FetchRecord) -> None:
        self.fetch_in.pop(rec.request_id, None)
        self._flow.peer_request_done(rec.request_id)

    def answers(self, rid: int) -> tuple[type, type | None] | None:
        """Draft-16 answer routing: the (error, OK) answer classes of *our* request ``rid``
        if this role owns it (FETCH has no REQUEST_OK)."""
        if rid in self.fetch_out:
            return FetchError, None
        if rid in self._ts_out:
            return TrackStatusError, TrackStatusOk
        return None

    def _fetch_rec(self, table: dict[int, FetchRecord], request_id: int) -> FetchRecord:
        rec = table.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no fetch with request id {request_id}")
        return rec

    # ------------------------------------------------------------ FETCH: handlers

    def on_fetch(self, msg: Fetch, out: list[MoqtEvent]) -> None:
        self._flow.accept_peer_request_id(msg.request_id)
        tokens = self._flow.tokens(msg.parameters)
        rec = self._new_fetch(msg.request_id, serving=True)
        self.fetch_in[msg.request_id] = rec
        ns, name, start, end = msg.track_namespace, msg.track_name, msg.start, msg.end
        if msg.is_joining:
            sub = self._subs.subs_in.get(msg.joining_request_id or 0)
            if sub is None or msg.joining_request_id is None:
                self.reject_fetch(
                    msg.request_id, FetchErrorCode.INVALID_JOINING_REQUEST_ID, "no such subscribe"
                )
                return
            if sub.filter_type is not FilterType.LARGEST_OBJECT:
                raise ProtocolViolation(
                    "joining FETCH for a subscription that is not LargestObject"
                )
            ns, name = sub.track_namespace, sub.track_name
            if sub.accepted and sub.largest is None:
                self.reject_fetch(msg.request_id, FetchErrorCode.INVALID_RANGE, "no content")
                return
            if sub.largest is not None:
                start, end = _joining_range(msg, sub.largest)
        out.append(
            FetchRequested(
                request_id=msg.request_id,
                fetch_type=msg.fetch_type,
                subscriber_priority=msg.subscriber_priority,
                group_order=msg.group_order,
                track_namespace=ns,
                track_name=name,
                start=start,
                end=end,
                joining_request_id=msg.joining_request_id,
                joining_start=msg.joining_start,
                parameters=msg.parameters,
                auth_tokens=tokens,
            )
        )

    def on_fetch_ok(self, msg: FetchOk, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self.fetch_out, msg.request_id, "FETCH_OK")
        if rec is None:
            return
        if rec.machine.apply(FetchInput.RECV_FETCH_OK) is FetchState.CLOSED:
            self.fetch_out.pop(msg.request_id, None)
        out.append(
            FetchAccepted(
                request_id=msg.request_id,
                group_order=msg.group_order,
                end_of_track=msg.end_of_track,
                end=msg.end,
                parameters=msg.parameters,
            )
        )

    def on_fetch_error(self, msg: FetchError, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self.fetch_out, msg.request_id, "FETCH_ERROR")
        if rec is None:
            return
        rec.machine.apply(FetchInput.RECV_FETCH_ERROR)
        self.fetch_out.pop(msg.request_id, None)
        if rec.stream_id is not None:
            self.data.stop_data_stream(rec.stream_id)
        out.append(
            FetchRejected(request_id=msg.request_id, error_code=msg.error_code, reason=msg.reason)
        )

    def on_fetch_cancel(self, msg: FetchCancel, out: list[MoqtEvent]) -> None:
        rec = self.fetch_in.get(msg.request_id)
        if rec is None:
            self._flow.unknown_reference(msg.request_id, "FETCH_CANCEL")
            return
        rec.machine.apply(FetchInput.RECV_CANCEL)
        if rec.stream_id is not None:
            self.data.reset_data_stream_quietly(rec.stream_id, StreamResetCode.CANCELLED)
        self._drop_served_fetch(rec)
        out.append(FetchCancelled(request_id=msg.request_id))

    # ------------------------------------------------------------ TRACK_STATUS

    def track_status(
        self,
        track_namespace: tuple[bytes, ...],
        track_name: bytes,
        *,
        parameters: MessageParameters | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> int:
        """Ask for a track's status (TRACK_STATUS); returns its request id."""
        rid = self._flow.start_request(
            lambda rid: TrackStatus(
                request_id=rid,
                track_namespace=track_namespace,
                track_name=track_name,
                parameters=with_tokens(parameters, auth_tokens),
            )
        )
        self._ts_out[rid] = self._new_track_status(rid, responder=False)
        return rid

    def track_status_ok(
        self,
        request_id: int,
        *,
        largest: Location | None = None,
        expires: int = 0,
        group_order: GroupOrder = GroupOrder.ASCENDING,
        parameters: MessageParameters | None = None,
    ) -> None:
        """Answer the peer's TRACK_STATUS with TRACK_STATUS_OK."""
        msg = TrackStatusOk(
            request_id=request_id,
            expires=expires,
            group_order=group_order,
            largest=largest,
            parameters=parameters if parameters is not None else _NO_PARAMS,
        )
        self._answer_track_status(request_id, TrackStatusInput.SEND_OK, self._flow.encode(msg))

    def track_status_error(self, request_id: int, error_code: int, reason: str = "") -> None:
        """Answer the peer's TRACK_STATUS with TRACK_STATUS_ERROR."""
        msg = TrackStatusError(request_id=request_id, error_code=error_code, reason=reason)
        self._answer_track_status(request_id, TrackStatusInput.SEND_ERROR, self._flow.encode(msg))

    def _answer_track_status(self, request_id: int, inp: TrackStatusInput, data: bytes) -> None:
        rec = self._ts_in.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no track status request with id {request_id}")
        rec.machine.apply(inp)
        self._flow.send_raw_control(data)
        del self._ts_in[request_id]
        self._flow.peer_request_done(request_id)

    def on_track_status(self, msg: TrackStatus, out: list[MoqtEvent]) -> None:
        self._flow.accept_peer_request_id(msg.request_id)
        tokens = self._flow.tokens(msg.parameters)
        self._ts_in[msg.request_id] = self._new_track_status(msg.request_id, responder=True)
        out.append(
            TrackStatusRequested(
                request_id=msg.request_id,
                track_namespace=msg.track_namespace,
                track_name=msg.track_name,
                parameters=msg.parameters,
                auth_tokens=tokens,
            )
        )

    def on_track_status_ok(self, msg: TrackStatusOk, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self._ts_out, msg.request_id, "TRACK_STATUS_OK")
        if rec is None:
            return
        rec.machine.apply(TrackStatusInput.RECV_OK)
        del self._ts_out[msg.request_id]
        out.append(
            TrackStatusReceived(
                request_id=msg.request_id,
                expires=msg.expires,
                group_order=msg.group_order,
                largest=msg.largest,
                parameters=msg.parameters,
            )
        )

    def on_track_status_error(self, msg: TrackStatusError, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self._ts_out, msg.request_id, "TRACK_STATUS_ERROR")
        if rec is None:
            return
        rec.machine.apply(TrackStatusInput.RECV_ERROR)
        del self._ts_out[msg.request_id]
        out.append(
            TrackStatusRejected(
                request_id=msg.request_id, error_code=msg.error_code, reason=msg.reason
            )
        )

    # ------------------------------------------------------------ records

    @staticmethod
    def _new_fetch(rid: int, *, serving: bool) -> FetchRecord:
        table = FETCH_PUBLISHER if serving else FETCH_SUBSCRIBER
        return FetchRecord(request_id=rid, machine=StateMachine(table, FetchState.PENDING))

    @staticmethod
    def _new_track_status(rid: int, *, responder: bool) -> TrackStatusRecord:
        table = TRACK_STATUS_RESPONDER if responder else TRACK_STATUS_REQUESTER
        return TrackStatusRecord(
            request_id=rid, machine=StateMachine(table, TrackStatusState.PENDING)
        )


def _joining_range(msg: Fetch, largest: Location) -> tuple[Location, Location]:
    """Start and end of a joining fetch from the subscription's Largest (d14 §9.16.2)."""
    joining_start = msg.joining_start or 0
    if msg.fetch_type is FetchType.RELATIVE_JOINING:
        start = Location(max(0, largest.group - joining_start), 0)
    else:
        start = Location(joining_start, 0)
    return start, largest.next_object()
