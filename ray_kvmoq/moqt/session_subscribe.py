"""The subscriptions role of a MoQT session: SUBSCRIBE*, UNSUBSCRIBE, PUBLISH*, PUBLISH_DONE
(d14 §9.7-§9.15).

:class:`Subscriptions` owns both directions: the commands an application calls (``subscribe``,
``accept_subscribe``, ``publish``, ...; the session re-exports them), the handlers for the same
messages arriving from the peer (``on_*``, listed in ``HANDLERS`` for the session's router),
the subscription records of both sides and the track aliases. It shares request-id flow control
through :class:`~.session_core.RequestFlow` and reaches the data plane through ``data``. Every
lifecycle step goes through the subscription transition tables in :mod:`.state`.

Invariants:

* Subscriber-side records (``subs_out``) are keyed by our SUBSCRIBE's request id or by the
  peer's PUBLISH id; publisher-side records (``subs_in``) by the peer's SUBSCRIBE id or our
  PUBLISH id. A track alias maps to exactly one live record on each side (``alias_in``,
  ``_alias_out``); a second use is DUPLICATE_TRACK_ALIAS (peer) or LocalProtocolError (us).
* SUBSCRIBE_UPDATE only narrows (d14 §9.10): the current start/end is kept per record, resolved
  from the filter and Largest Location at SUBSCRIBE_OK time.
* UNSUBSCRIBE / SUBSCRIBE_UPDATE naming a request that existed but has ended are ignored (they
  cross PUBLISH_DONE on the wire, and moq-dev probes with SUBSCRIBE/UNSUBSCRIBE); ones naming a
  request that never existed are a PROTOCOL_VIOLATION.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import TYPE_CHECKING, ClassVar

from .codec import (
    AuthToken,
    Location,
    MessageParameters,
    Publish,
    PublishDone,
    PublishError,
    PublishOk,
    RequestOk,
    RequestUpdate,
    Subscribe,
    SubscribeError,
    SubscribeOk,
    SubscribeUpdate,
    Unsubscribe,
)
from .codec.errors import DuplicateTrackAlias, LocalProtocolError, ProtocolViolation
from .codec.subscribe import filter_bytes, read_filter_param
from .codec.types import (
    DRAFT_14,
    FilterType,
    GroupOrder,
    MessageParameterD16,
    PublishDoneCode,
    SubscribeErrorCode,
)
from .events import (
    MoqtEvent,
    PublishAccepted,
    PublishDoneReceived,
    PublishRejected,
    PublishRequested,
    SubscribeAccepted,
    SubscribeRejected,
    SubscribeRequested,
    SubscribeUpdated,
    Unsubscribed,
)
from .session_core import RETIRED_MAX, PublisherRecord, RequestFlow, SubscriberRecord
from .state import (
    SUBSCRIPTION_PUBLISHER,
    SUBSCRIPTION_SUBSCRIBER,
    PublisherSubInput,
    PublisherSubState,
    StateMachine,
    SubscriberSubInput,
    SubscriberSubState,
)

if TYPE_CHECKING:
    from .session_data import DataStreams

__all__ = ["Subscriptions", "resolve_start", "with_tokens"]

_NO_PARAMS = MessageParameters()


def with_tokens(
    parameters: MessageParameters | None, auth_tokens: tuple[AuthToken, ...]
) -> MessageParameters:
    """``parameters`` (or none) with AUTHORIZATION TOKEN parameters appended."""
    params = parameters if parameters is not None else _NO_PARAMS
    for token in auth_tokens:
        params = params.with_param(0x03, token.encode())  # type: ignore[assignment]
    return params


def resolve_start(
    filter_type: FilterType, start: Location | None, largest: Location | None
) -> Location:
    """The first location a subscription covers (d14 §5.1.2), given the Largest Location."""
    if filter_type in (FilterType.ABSOLUTE_START, FilterType.ABSOLUTE_RANGE) and start:
        return start
    if largest is None:
        return Location(0, 0)
    if filter_type is FilterType.NEXT_GROUP_START:
        return Location(largest.group + 1, 0)
    return largest.next_object()


class Subscriptions:
    """SUBSCRIBE / PUBLISH commands and handlers (see the module docstring)."""

    HANDLERS: ClassVar[dict[type, str]] = {
        Subscribe: "on_subscribe",
        SubscribeOk: "on_subscribe_ok",
        SubscribeError: "on_subscribe_error",
        SubscribeUpdate: "on_subscribe_update",
        Unsubscribe: "on_unsubscribe",
        PublishDone: "on_publish_done",
        Publish: "on_publish",
        PublishOk: "on_publish_ok",
        PublishError: "on_publish_error",
        RequestUpdate: "on_request_update",
    }
    """Handler method of each control message this role receives."""
    REQUESTS: ClassVar[frozenset[type]] = frozenset(
        (Subscribe, SubscribeUpdate, Publish, RequestUpdate)
    )
    """Messages that open a request (their handlers validate the request id, d14 §9.1)."""

    def __init__(self, flow: RequestFlow) -> None:
        self._flow = flow
        self.data: DataStreams
        """The data-plane role (set by the session right after construction)."""
        self.subs_out: dict[int, SubscriberRecord] = {}
        """Subscriptions we receive objects for, by request id (our SUBSCRIBE, the peer's PUBLISH)."""
        self.subs_in: dict[int, PublisherRecord] = {}
        """Subscriptions we send objects for, by request id (the peer's SUBSCRIBE, our PUBLISH)."""
        self.alias_in: dict[int, int] = {}
        """The peer's track aliases (we subscribe) -> request id."""
        self._alias_out: dict[int, int] = {}
        self.retired_aliases: OrderedDict[int, None] = OrderedDict()
        """Aliases of ended subscriptions: late data for them is dropped, not parked."""
        self._next_alias = 0
        self.lingering: dict[int, float] = {}
        """Request id -> deadline for data streams still in flight after PUBLISH_DONE."""
        self._updates: OrderedDict[int, None] = OrderedDict()
        """Draft-16: our REQUEST_UPDATEs still unanswered (bounded by ``RETIRED_MAX``)."""

    # ------------------------------------------------------------ subscriber: commands

    def subscribe(
        self,
        track_namespace: tuple[bytes, ...],
        track_name: bytes,
        *,
        filter_type: FilterType = FilterType.LARGEST_OBJECT,
        start: Location | None = None,
        end_group: int | None = None,
        subscriber_priority: int = 128,
        group_order: GroupOrder = GroupOrder.PUBLISHER_DEFAULT,
        forward: bool = True,
        parameters: MessageParameters | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> int:
        """Send SUBSCRIBE; returns its request id. ``start``/``end_group`` per the filter."""
        rid = self._flow.start_request(
            lambda rid: Subscribe(
                request_id=rid,
                track_namespace=track_namespace,
                track_name=track_name,
                subscriber_priority=subscriber_priority,
                group_order=group_order,
                forward=forward,
                filter_type=filter_type,
                start=start,
                end_group=end_group,
                parameters=with_tokens(parameters, auth_tokens),
            )
        )
        self.subs_out[rid] = self._new_subscriber(
            rid,
            SubscriberSubState.PENDING,
            track_namespace=track_namespace,
            track_name=track_name,
            filter_type=filter_type,
            start=start,
            end_group=end_group,
        )
        return rid

    def subscribe_update(
        self,
        request_id: int,
        *,
        start: Location,
        end_group: int | None = None,
        subscriber_priority: int = 128,
        forward: bool = True,
        parameters: MessageParameters | None = None,
    ) -> int:
        """Change subscription ``request_id``; returns the update's new request id.

        ``end_group`` is inclusive (None = open-ended). Draft-14 (SUBSCRIBE_UPDATE, d14 §9.10)
        only narrows: widening raises LocalProtocolError. Draft-16 (REQUEST_UPDATE, d16 §9.11)
        may widen; the new range, priority and forward go as SUBSCRIPTION_FILTER,
        SUBSCRIBER_PRIORITY and FORWARD parameters, and the publisher's REQUEST_OK /
        REQUEST_ERROR is consumed by the session (a failed update also ends the subscription
        with PUBLISH_DONE, which is reported as usual).
        """
        rec = self.subs_out.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no subscription with request id {request_id}")
        if not rec.machine.allows(SubscriberSubInput.SEND_UPDATE):
            rec.machine.apply(SubscriberSubInput.SEND_UPDATE)  # raises with the state name
        if self._flow.version != DRAFT_14:
            return self._request_update(
                rec, start, end_group, subscriber_priority, forward, parameters
            )
        _check_narrowing(rec.start, rec.end_group, start, end_group, LocalProtocolError)
        rid = self._flow.start_request(
            lambda rid: SubscribeUpdate(
                request_id=rid,
                subscription_request_id=request_id,
                start=start,
                end_group=0 if end_group is None else end_group + 1,
                subscriber_priority=subscriber_priority,
                forward=forward,
                parameters=parameters if parameters is not None else _NO_PARAMS,
            )
        )
        rec.machine.apply(SubscriberSubInput.SEND_UPDATE)
        rec.start, rec.end_group = start, end_group
        return rid

    def _request_update(
        self,
        rec: SubscriberRecord,
        start: Location,
        end_group: int | None,
        priority: int,
        forward: bool,
        parameters: MessageParameters | None,
    ) -> int:
        kind = FilterType.ABSOLUTE_START if end_group is None else FilterType.ABSOLUTE_RANGE
        params = parameters if parameters is not None else _NO_PARAMS
        for key, value in (
            (MessageParameterD16.SUBSCRIPTION_FILTER, filter_bytes(kind, start, end_group)),
            (MessageParameterD16.SUBSCRIBER_PRIORITY, priority),
            (MessageParameterD16.FORWARD, int(forward)),
        ):
            params = params.with_param(key, value)  # type: ignore[assignment]
        rid = self._flow.start_request(
            lambda rid: RequestUpdate(
                request_id=rid, existing_request_id=rec.request_id, parameters=params
            )
        )
        rec.machine.apply(SubscriberSubInput.SEND_UPDATE)
        rec.filter_type, rec.start, rec.end_group = kind, start, end_group
        self._updates[rid] = None
        while len(self._updates) > RETIRED_MAX:
            self._updates.popitem(last=False)
        return rid

    def take_update_answer(self, rid: int) -> bool:
        """Draft-16: True (and forgotten) if ``rid`` is one of our REQUEST_UPDATEs, whose
        REQUEST_OK / REQUEST_ERROR needs no further handling here."""
        return self._updates.pop(rid, False) is None

    def unsubscribe(self, request_id: int) -> None:
        """Send UNSUBSCRIBE for our subscription (or an accepted PUBLISH)."""
        rec = self.subs_out.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no subscription with request id {request_id}")
        rec.machine.apply(SubscriberSubInput.SEND_UNSUBSCRIBE)
        self._flow.send_control(Unsubscribe(request_id=request_id))
        # The publisher should answer with PUBLISH_DONE; not every one does (d14 §9.12).
        self.lingering[request_id] = self._flow.now + self._flow.config.publish_done_linger

    def publish_ok(
        self,
        request_id: int,
        *,
        forward: bool = True,
        subscriber_priority: int = 128,
        group_order: GroupOrder = GroupOrder.ASCENDING,
        filter_type: FilterType = FilterType.LARGEST_OBJECT,
        start: Location | None = None,
        end_group: int | None = None,
        parameters: MessageParameters | None = None,
    ) -> None:
        """Accept the peer's PUBLISH (PUBLISH_OK); ``group_order`` must be 1 or 2 (d14 §9.14)."""
        rec = self._subscriber(request_id)
        msg = PublishOk(
            request_id=request_id,
            forward=forward,
            subscriber_priority=subscriber_priority,
            group_order=group_order,
            filter_type=filter_type,
            start=start,
            end_group=end_group,
            parameters=parameters if parameters is not None else _NO_PARAMS,
        )
        data = self._flow.encode(msg)
        rec.machine.apply(SubscriberSubInput.SEND_PUBLISH_OK)
        rec.filter_type, rec.end_group = filter_type, end_group
        rec.start = start if filter_type.has_start else rec.start
        self._flow.send_raw_control(data)

    def publish_error(self, request_id: int, error_code: int, reason: str = "") -> None:
        """Refuse the peer's PUBLISH (PUBLISH_ERROR)."""
        rec = self._subscriber(request_id)
        data = self._flow.encode(
            PublishError(request_id=request_id, error_code=error_code, reason=reason)
        )
        rec.machine.apply(SubscriberSubInput.SEND_PUBLISH_ERROR)
        self._flow.send_raw_control(data)
        self.drop_subscriber(rec)
        self._flow.abandon(request_id)  # the publisher's PUBLISH_DONE may cross our error

    # ------------------------------------------------------------ publisher: commands

    def accept_subscribe(
        self,
        request_id: int,
        *,
        track_alias: int | None = None,
        largest: Location | None = None,
        expires: int = 0,
        group_order: GroupOrder = GroupOrder.ASCENDING,
        parameters: MessageParameters | None = None,
    ) -> int:
        """Answer the peer's SUBSCRIBE with SUBSCRIBE_OK; returns the track alias used.

        ``largest`` is the Largest Location published so far (None: no content yet); it also
        resolves later joining fetches. ``track_alias`` None picks a free one.
        """
        rec = self._publisher(request_id)
        alias = self._pick_alias(track_alias)
        msg = SubscribeOk(
            request_id=request_id,
            track_alias=alias,
            expires=expires,
            group_order=group_order,
            largest=largest,
            parameters=parameters if parameters is not None else _NO_PARAMS,
        )
        data = self._flow.encode(msg)
        rec.machine.apply(PublisherSubInput.SEND_SUBSCRIBE_OK)
        rec.track_alias, rec.largest, rec.accepted = alias, largest, True
        rec.start = resolve_start(rec.filter_type, rec.start, largest)
        self._alias_out[alias] = request_id
        self._flow.send_raw_control(data)
        return alias

    def reject_subscribe(self, request_id: int, error_code: int, reason: str = "") -> None:
        """Answer the peer's SUBSCRIBE with SUBSCRIBE_ERROR."""
        rec = self._publisher(request_id)
        data = self._flow.encode(
            SubscribeError(request_id=request_id, error_code=error_code, reason=reason)
        )
        rec.machine.apply(PublisherSubInput.SEND_SUBSCRIBE_ERROR)
        self._flow.send_raw_control(data)
        self._drop_publisher(rec)

    def publish(
        self,
        track_namespace: tuple[bytes, ...],
        track_name: bytes,
        *,
        track_alias: int | None = None,
        group_order: GroupOrder = GroupOrder.ASCENDING,
        largest: Location | None = None,
        forward: bool = True,
        parameters: MessageParameters | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> tuple[int, int]:
        """Send PUBLISH; returns ``(request_id, track_alias)``.

        With ``forward`` the application may open subgroups before PUBLISH_OK (d14 §9.13).
        """
        alias = self._pick_alias(track_alias)
        rid = self._flow.start_request(
            lambda rid: Publish(
                request_id=rid,
                track_namespace=track_namespace,
                track_name=track_name,
                track_alias=alias,
                group_order=group_order,
                largest=largest,
                forward=forward,
                parameters=with_tokens(parameters, auth_tokens),
            )
        )
        self.subs_in[rid] = self._new_publisher(
            rid,
            PublisherSubState.OFFERED,
            track_namespace=track_namespace,
            track_name=track_name,
            filter_type=FilterType.LARGEST_OBJECT,
            track_alias=alias,
            largest=largest,
            forward=forward,
        )
        self._alias_out[alias] = rid
        return rid, alias

    def publish_done(
        self,
        request_id: int,
        status_code: int,
        reason: str = "",
        *,
        stream_count: int | None = None,
    ) -> None:
        """End a subscription we publish (PUBLISH_DONE).

        ``stream_count`` defaults to the number of subgroup streams opened for it; send it only
        after those streams are finished or reset (d14 §9.12).
        """
        rec = self._publisher(request_id)
        unanswered = rec.machine.state is PublisherSubState.OFFERED
        count = rec.streams_opened if stream_count is None else stream_count
        data = self._flow.encode(
            PublishDone(
                request_id=request_id, status_code=status_code, stream_count=count, reason=reason
            )
        )
        rec.machine.apply(PublisherSubInput.SEND_PUBLISH_DONE)
        self._flow.send_raw_control(data)
        self._drop_publisher(rec)
        if unanswered:
            self._flow.abandon(request_id)  # a PUBLISH_OK/ERROR may cross our PUBLISH_DONE

    # ------------------------------------------------------------ helpers

    def answers(self, rid: int) -> tuple[type, type | None] | None:
        """Draft-16 answer routing: the (error, OK) answer classes of *our* request ``rid``
        if this role owns it (SUBSCRIBE and PUBLISH have no REQUEST_OK)."""
        if rid in self.subs_out:
            return SubscribeError, None
        if rid in self.subs_in:
            return PublishError, None
        return None

    def _subscriber(self, request_id: int) -> SubscriberRecord:
        rec = self.subs_out.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no subscription with request id {request_id}")
        return rec

    def _publisher(self, request_id: int) -> PublisherRecord:
        rec = self.subs_in.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no subscription with request id {request_id}")
        return rec

    def _pick_alias(self, track_alias: int | None) -> int:
        if track_alias is None:
            return self._allocate_alias()
        if track_alias in self._alias_out:
            raise LocalProtocolError(f"track alias {track_alias} already in use")
        return track_alias

    # ------------------------------------------------------------ handlers: subscriber side

    def on_subscribe_ok(self, msg: SubscribeOk, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self.subs_out, msg.request_id, "SUBSCRIBE_OK")
        if rec is None:
            return
        rec.machine.apply(SubscriberSubInput.RECV_SUBSCRIBE_OK)
        if msg.track_alias in self.alias_in:
            raise DuplicateTrackAlias(f"track alias {msg.track_alias} already in use")
        rec.track_alias = msg.track_alias
        rec.start = resolve_start(rec.filter_type, rec.start, msg.largest)
        self.alias_in[msg.track_alias] = rec.request_id
        self.retired_aliases.pop(msg.track_alias, None)
        if rec.machine.state is SubscriberSubState.ESTABLISHED:
            out.append(
                SubscribeAccepted(
                    request_id=msg.request_id,
                    track_alias=msg.track_alias,
                    expires=msg.expires,
                    group_order=msg.group_order,
                    largest=msg.largest,
                    parameters=msg.parameters,
                )
            )
        self.data.alias_known(msg.track_alias, out)

    def on_subscribe_error(self, msg: SubscribeError, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self.subs_out, msg.request_id, "SUBSCRIBE_ERROR")
        if rec is None:
            return
        was_pending = rec.machine.state is SubscriberSubState.PENDING
        rec.machine.apply(SubscriberSubInput.RECV_SUBSCRIBE_ERROR)
        self.drop_subscriber(rec)
        if was_pending:
            out.append(
                SubscribeRejected(
                    request_id=msg.request_id, error_code=msg.error_code, reason=msg.reason
                )
            )

    def on_publish_done(self, msg: PublishDone, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self.subs_out, msg.request_id, "PUBLISH_DONE")
        if rec is None:
            return
        state = rec.machine.apply(SubscriberSubInput.RECV_PUBLISH_DONE)
        out.append(
            PublishDoneReceived(
                request_id=msg.request_id,
                status_code=msg.status_code,
                stream_count=msg.stream_count,
                reason=msg.reason,
            )
        )
        if state is SubscriberSubState.CLOSED:
            self.drop_subscriber(rec)
            return
        rec.expected_streams = msg.stream_count
        self.lingering[rec.request_id] = self._flow.now + self._flow.config.publish_done_linger
        self.check_subscriber_done(rec)

    def on_publish(self, msg: Publish, out: list[MoqtEvent]) -> None:
        self._flow.accept_peer_request_id(msg.request_id)
        if msg.track_alias in self.alias_in:
            raise DuplicateTrackAlias(f"track alias {msg.track_alias} already in use")
        tokens = self._flow.tokens(msg.parameters)
        self.subs_out[msg.request_id] = self._new_subscriber(
            msg.request_id,
            SubscriberSubState.OFFERED,
            track_namespace=msg.track_namespace,
            track_name=msg.track_name,
            filter_type=FilterType.LARGEST_OBJECT,
            track_alias=msg.track_alias,
        )
        self.alias_in[msg.track_alias] = msg.request_id
        self.retired_aliases.pop(msg.track_alias, None)
        out.append(
            PublishRequested(
                request_id=msg.request_id,
                track_namespace=msg.track_namespace,
                track_name=msg.track_name,
                track_alias=msg.track_alias,
                group_order=msg.group_order,
                largest=msg.largest,
                forward=msg.forward,
                parameters=msg.parameters,
                auth_tokens=tokens,
            )
        )
        self.data.alias_known(msg.track_alias, out)

    # ------------------------------------------------------------ handlers: publisher side

    def on_subscribe(self, msg: Subscribe, out: list[MoqtEvent]) -> None:
        self._flow.accept_peer_request_id(msg.request_id)
        # (An AbsoluteRange ending before its start is already refused by the decoder.)
        tokens = self._flow.tokens(msg.parameters)
        self.subs_in[msg.request_id] = self._new_publisher(
            msg.request_id,
            PublisherSubState.REQUESTED,
            track_namespace=msg.track_namespace,
            track_name=msg.track_name,
            filter_type=msg.filter_type,
            start=msg.start,
            end_group=msg.end_group,
            forward=msg.forward,
        )
        out.append(
            SubscribeRequested(
                request_id=msg.request_id,
                track_namespace=msg.track_namespace,
                track_name=msg.track_name,
                subscriber_priority=msg.subscriber_priority,
                group_order=msg.group_order,
                forward=msg.forward,
                filter_type=msg.filter_type,
                start=msg.start,
                end_group=msg.end_group,
                parameters=msg.parameters,
                auth_tokens=tokens,
            )
        )

    def on_subscribe_update(self, msg: SubscribeUpdate, out: list[MoqtEvent]) -> None:
        self._flow.accept_peer_request_id(msg.request_id)
        self._flow.peer_request_done(msg.request_id)  # no response: complete at once
        rec = self.subs_in.get(msg.subscription_request_id)
        if rec is None:
            self._flow.unknown_reference(msg.subscription_request_id, "SUBSCRIBE_UPDATE")
            return
        end_group = msg.end_group - 1 if msg.end_group else None
        if end_group is not None and end_group < msg.start.group:
            raise ProtocolViolation("SUBSCRIBE_UPDATE end group before start group")
        _check_narrowing(rec.start, rec.end_group, msg.start, end_group, ProtocolViolation)
        rec.machine.apply(PublisherSubInput.RECV_UPDATE)
        rec.start, rec.end_group, rec.forward = msg.start, end_group, msg.forward
        out.append(
            SubscribeUpdated(
                request_id=rec.request_id,
                update_request_id=msg.request_id,
                start=msg.start,
                end_group=end_group,
                subscriber_priority=msg.subscriber_priority,
                forward=msg.forward,
                parameters=msg.parameters,
            )
        )

    def on_request_update(self, msg: RequestUpdate, out: list[MoqtEvent]) -> None:
        """Draft-16 REQUEST_UPDATE (d16 §9.11). For a subscription we publish (the peer's
        SUBSCRIBE, or our PUBLISH): the FORWARD,
        SUBSCRIBER_PRIORITY and SUBSCRIPTION_FILTER it carries replace the current ones (it may
        widen, unlike SUBSCRIBE_UPDATE), answered with REQUEST_OK. For any other request of
        the peer's (FETCH, namespaces, TRACK_STATUS) we change nothing and answer REQUEST_ERROR
        NOT_SUPPORTED; an Existing Request ID that never existed is a PROTOCOL_VIOLATION."""
        self._flow.accept_peer_request_id(msg.request_id)
        existing = msg.existing_request_id
        if not self._flow.issued(existing):
            raise ProtocolViolation(f"REQUEST_UPDATE names request id {existing}, never used")
        rec = self.subs_in.get(existing)  # the peer's SUBSCRIBE, or our PUBLISH it accepted
        if rec is None or not rec.machine.allows(PublisherSubInput.RECV_UPDATE):
            self._flow.send_control(
                SubscribeError(
                    request_id=msg.request_id,
                    error_code=SubscribeErrorCode.NOT_SUPPORTED,
                    reason="REQUEST_UPDATE of this request is not supported",
                )
            )
            self._flow.peer_request_done(msg.request_id)
            return
        forward, priority, filt = _update_params(msg.parameters)
        rec.machine.apply(PublisherSubInput.RECV_UPDATE)
        if filt is not None:
            rec.filter_type, rec.end_group = filt[0], filt[2]
            rec.start = resolve_start(filt[0], filt[1], rec.largest)
        if forward is not None:
            rec.forward = forward
        self._flow.send_control(RequestOk(request_id=msg.request_id))
        self._flow.peer_request_done(msg.request_id)
        out.append(
            SubscribeUpdated(
                request_id=rec.request_id,
                update_request_id=msg.request_id,
                start=rec.start if rec.start is not None else Location(0, 0),
                end_group=rec.end_group,
                subscriber_priority=128 if priority is None else priority,
                forward=rec.forward,
                parameters=msg.parameters,
            )
        )

    def on_unsubscribe(self, msg: Unsubscribe, out: list[MoqtEvent]) -> None:
        rec = self.subs_in.get(msg.request_id)
        if rec is None:
            self._flow.unknown_reference(msg.request_id, "UNSUBSCRIBE")
            return
        requested = rec.machine.state is PublisherSubState.REQUESTED
        rec.machine.apply(PublisherSubInput.RECV_UNSUBSCRIBE)
        self.data.cancel_publisher_streams(rec)
        # State may only go once PUBLISH_DONE is sent (d14 §9.12); an unanswered SUBSCRIBE
        # gets its one response instead.
        if requested:
            reply: SubscribeError | PublishDone = SubscribeError(
                request_id=msg.request_id, error_code=0, reason="unsubscribed"
            )
        else:
            reply = PublishDone(
                request_id=msg.request_id,
                status_code=PublishDoneCode.SUBSCRIPTION_ENDED,
                stream_count=rec.streams_opened,
                reason="unsubscribed",
            )
        self._flow.send_control(reply)
        self._drop_publisher(rec)
        out.append(Unsubscribed(request_id=msg.request_id))

    def on_publish_ok(self, msg: PublishOk, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self.subs_in, msg.request_id, "PUBLISH_OK")
        if rec is None:
            return
        rec.machine.apply(PublisherSubInput.RECV_PUBLISH_OK)
        rec.filter_type, rec.end_group, rec.forward = msg.filter_type, msg.end_group, msg.forward
        rec.start = resolve_start(msg.filter_type, msg.start, rec.largest)
        rec.accepted = True
        out.append(
            PublishAccepted(
                request_id=msg.request_id,
                forward=msg.forward,
                subscriber_priority=msg.subscriber_priority,
                group_order=msg.group_order,
                filter_type=msg.filter_type,
                start=msg.start,
                end_group=msg.end_group,
                parameters=msg.parameters,
            )
        )

    def on_publish_error(self, msg: PublishError, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self.subs_in, msg.request_id, "PUBLISH_ERROR")
        if rec is None:
            return
        rec.machine.apply(PublisherSubInput.RECV_PUBLISH_ERROR)
        self.data.cancel_publisher_streams(rec)
        self._drop_publisher(rec)
        out.append(
            PublishRejected(request_id=msg.request_id, error_code=msg.error_code, reason=msg.reason)
        )

    # ------------------------------------------------------------ records

    def _retire_alias(self, alias: int | None) -> None:
        if alias is None:
            return
        self.alias_in.pop(alias, None)
        self.retired_aliases[alias] = None
        while len(self.retired_aliases) > RETIRED_MAX:
            self.retired_aliases.popitem(last=False)

    def _allocate_alias(self) -> int:
        while self._next_alias in self._alias_out:
            self._next_alias += 1
        alias = self._next_alias
        self._next_alias += 1
        return alias

    def drop_subscriber(self, rec: SubscriberRecord) -> None:
        self.subs_out.pop(rec.request_id, None)
        self.lingering.pop(rec.request_id, None)
        self._retire_alias(rec.track_alias)
        if not self._flow.is_ours(rec.request_id):
            self._flow.peer_request_done(rec.request_id)

    def _drop_publisher(self, rec: PublisherRecord) -> None:
        self.subs_in.pop(rec.request_id, None)
        if rec.track_alias is not None and self._alias_out.get(rec.track_alias) == rec.request_id:
            del self._alias_out[rec.track_alias]
        if not self._flow.is_ours(rec.request_id):
            self._flow.peer_request_done(rec.request_id)

    def check_subscriber_done(self, rec: SubscriberRecord) -> None:
        """Close a DONE subscription once every counted data stream has come and gone."""
        if rec.machine.state is not SubscriberSubState.DONE or rec.open_streams:
            return
        if rec.expected_streams is not None and rec.streams_seen >= rec.expected_streams:
            rec.machine.apply(SubscriberSubInput.STREAMS_COMPLETE)
            self.drop_subscriber(rec)

    @staticmethod
    def _new_subscriber(rid: int, state: SubscriberSubState, **kwargs: object) -> SubscriberRecord:
        return SubscriberRecord(
            request_id=rid,
            machine=StateMachine(SUBSCRIPTION_SUBSCRIBER, state),
            **kwargs,  # type: ignore[arg-type]
        )

    @staticmethod
    def _new_publisher(rid: int, state: PublisherSubState, **kwargs: object) -> PublisherRecord:
        return PublisherRecord(
            request_id=rid,
            machine=StateMachine(SUBSCRIPTION_PUBLISHER, state),
            **kwargs,  # type: ignore[arg-type]
        )


def _update_params(
    params: MessageParameters,
) -> tuple[bool | None, int | None, tuple[FilterType, Location | None, int | None] | None]:
    """FORWARD, SUBSCRIBER_PRIORITY and SUBSCRIPTION_FILTER of a draft-16 REQUEST_UPDATE
    (None: absent, unchanged); a malformed one is a PROTOCOL_VIOLATION (d16 §9.11)."""
    forward = params.get(MessageParameterD16.FORWARD)
    priority = params.get(MessageParameterD16.SUBSCRIBER_PRIORITY)
    raw_filter = params.get(MessageParameterD16.SUBSCRIPTION_FILTER)
    if forward is not None and forward not in (0, 1):
        raise ProtocolViolation(f"REQUEST_UPDATE FORWARD {forward!r} is not 0 or 1")
    if priority is not None and (not isinstance(priority, int) or priority > 255):
        raise ProtocolViolation(f"REQUEST_UPDATE SUBSCRIBER_PRIORITY {priority!r} out of range")
    if raw_filter is not None and not isinstance(raw_filter, bytes):
        raise ProtocolViolation("REQUEST_UPDATE SUBSCRIPTION_FILTER must be length-prefixed")
    filt = None if raw_filter is None else read_filter_param(raw_filter)
    return None if forward is None else bool(forward), priority, filt


def _check_narrowing(
    old_start: Location | None,
    old_end: int | None,
    new_start: Location,
    new_end: int | None,
    error: type[LocalProtocolError] | type[ProtocolViolation],
) -> None:
    """SUBSCRIBE_UPDATE may only narrow: start must not decrease, end must not increase."""
    if old_start is not None and new_start < old_start:
        raise error(f"SUBSCRIBE_UPDATE moves start back from {old_start} to {new_start}")
    if old_end is not None and (new_end is None or new_end > old_end):
        raise error(f"SUBSCRIBE_UPDATE widens end group {old_end} to {new_end}")
