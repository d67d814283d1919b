"""Namespace requests of a MoQT session: PUBLISH_NAMESPACE* and SUBSCRIBE_NAMESPACE* (d14
§9.23-§9.31).

Like :mod:`.session_subscribe`: :class:`Namespaces` owns its records, the application commands
and the handlers for the same messages from the peer (``HANDLERS``), every step checked by the
namespace tables of :mod:`.state`. It needs nothing but :class:`~.session_core.RequestFlow`.

Invariants:

* Records are keyed by request id, but PUBLISH_NAMESPACE_DONE / _CANCEL and
  UNSUBSCRIBE_NAMESPACE name a namespace (d14): DONE and UNSUBSCRIBE act on every live record
  with it; CANCEL only on *accepted* ones, so an announcement still unanswered when the
  responder cancels gets PUBLISH_NAMESPACE_ERROR instead (every request gets exactly one
  answer even when the same namespace is announced twice, moqt-draft14.md §3.7 quirk 2).
* A withdrawal or cancel naming a namespace we do not know is ignored: it crossed an error,
  a cancel or a withdrawal on the wire.
* An empty SUBSCRIBE_NAMESPACE prefix from the peer is accepted (moq-dev sends one).

Draft-16 (d16 §9.20-§9.25): PUBLISH_NAMESPACE_DONE / _CANCEL name the request id, so they act
on exactly that record. SUBSCRIBE_NAMESPACE runs on a bidirectional stream of its own: the
requester opens it with the request, the responder's first message on it is REQUEST_OK or
REQUEST_ERROR (then FIN), after which NAMESPACE / NAMESPACE_DONE report namespaces under the
prefix (:meth:`Namespaces.namespace`); closing the stream (FIN or reset, either side) ends the
subscription, which replaces UNSUBSCRIBE_NAMESPACE. Anything else on such a stream, a second
answer, a NAMESPACE_DONE without its NAMESPACE, or SUBSCRIBE_NAMESPACE on the control stream
is a PROTOCOL_VIOLATION.
"""

from __future__ import annotations

from typing import ClassVar

from .codec import (
    AuthToken,
    Message,
    MessageParameters,
    Namespace,
    NamespaceDone,
    PublishNamespace,
    PublishNamespaceCancel,
    PublishNamespaceError,
    PublishNamespaceOk,
    RequestErrorMessage,
    RequestOk,
    SubscribeNamespace,
    SubscribeNamespaceError,
    SubscribeNamespaceOk,
    UnsubscribeNamespace,
)
from .codec import (
    PublishNamespaceDone as PublishNamespaceDoneMsg,
)
from .codec.control import ControlStreamParser
from .codec.errors import LocalProtocolError, ProtocolViolation
from .codec.types import DRAFT_14, DRAFT_16
from .events import (
    MoqtEvent,
    NamespaceDoneReceived,
    NamespaceReceived,
    PublishNamespaceAccepted,
    PublishNamespaceCancelled,
    PublishNamespaceDone,
    PublishNamespaceRejected,
    PublishNamespaceRequested,
    SubscribeNamespaceAccepted,
    SubscribeNamespaceRejected,
    SubscribeNamespaceRequested,
    UnsubscribedNamespace,
)
from .session_core import NamespaceRecord, RequestFlow
from .session_subscribe import with_tokens
from .session_versions import from_request_error, from_request_ok
from .state import (
    NAMESPACE_REQUESTER,
    NAMESPACE_RESPONDER,
    NamespaceInput,
    NamespaceState,
    StateMachine,
)

__all__ = ["Namespaces"]


class Namespaces:
    """PUBLISH_NAMESPACE / SUBSCRIBE_NAMESPACE commands and handlers (module docstring)."""

    HANDLERS: ClassVar[dict[type, str]] = {
        PublishNamespace: "on_publish_namespace",
        PublishNamespaceOk: "on_publish_namespace_ok",
        PublishNamespaceError: "on_publish_namespace_error",
        PublishNamespaceDoneMsg: "on_publish_namespace_done",
        PublishNamespaceCancel: "on_publish_namespace_cancel",
        SubscribeNamespace: "on_subscribe_namespace",
        SubscribeNamespaceOk: "on_subscribe_namespace_ok",
        SubscribeNamespaceError: "on_subscribe_namespace_error",
        UnsubscribeNamespace: "on_unsubscribe_namespace",
        Namespace: "on_namespace_on_control",
        NamespaceDone: "on_namespace_on_control",
    }
    """Handler method of each control message this role receives."""
    REQUESTS: ClassVar[frozenset[type]] = frozenset((PublishNamespace, SubscribeNamespace))
    """Messages that open a request (their handlers validate the request id, d14 §9.1)."""

    def __init__(self, flow: RequestFlow) -> None:
        self._flow = flow
        self._pubns_out: dict[int, NamespaceRecord] = {}
        self._pubns_in: dict[int, NamespaceRecord] = {}
        self._subns_out: dict[int, NamespaceRecord] = {}
        self._subns_in: dict[int, NamespaceRecord] = {}
        self._streams: dict[int, NamespaceRecord | ControlStreamParser] = {}
        """Draft-16 SUBSCRIBE_NAMESPACE streams by stream id: their record, or the parser of a
        peer's stream whose SUBSCRIBE_NAMESPACE is not complete yet."""

    # ------------------------------------------------------------ namespaces: commands

    def publish_namespace(
        self,
        track_namespace: tuple[bytes, ...],
        *,
        parameters: MessageParameters | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
    ) -> int:
        """Announce a namespace (PUBLISH_NAMESPACE); returns its request id."""
        rid = self._flow.start_request(
            lambda rid: PublishNamespace(
                request_id=rid,
                track_namespace=track_namespace,
                parameters=with_tokens(parameters, auth_tokens),
            )
        )
        self._pubns_out[rid] = self._new_namespace(rid, track_namespace, responder=False)
        return rid

    def accept_publish_namespace(self, request_id: int) -> None:
        """Answer the peer's PUBLISH_NAMESPACE with PUBLISH_NAMESPACE_OK."""
        rec = self._ns_rec(self._pubns_in, request_id)
        self._ns_step(rec, NamespaceInput.SEND_OK, PublishNamespaceOk(request_id=request_id))

    def reject_publish_namespace(self, request_id: int, error_code: int, reason: str = "") -> None:
        """Answer the peer's PUBLISH_NAMESPACE with PUBLISH_NAMESPACE_ERROR."""
        rec = self._ns_rec(self._pubns_in, request_id)
        msg = PublishNamespaceError(request_id=request_id, error_code=error_code, reason=reason)
        self._ns_step(rec, NamespaceInput.SEND_ERROR, msg)
        self._drop_ns(self._pubns_in, rec)

    def publish_namespace_done(self, track_namespace: tuple[bytes, ...]) -> None:
        """Withdraw a namespace we announced (PUBLISH_NAMESPACE_DONE)."""
        recs = self._ns_matching(self._pubns_out, track_namespace)
        for rec in recs:
            rec.machine.apply(NamespaceInput.SEND_DONE)
        if self._flow.version == DRAFT_14:
            self._flow.send_control(PublishNamespaceDoneMsg(track_namespace=track_namespace))
        for rec in recs:
            if self._flow.version != DRAFT_14:  # d16 §9.22: one per PUBLISH_NAMESPACE
                self._flow.send_control(PublishNamespaceDoneMsg(request_id=rec.request_id))
            self._drop_ns(self._pubns_out, rec)
            self._flow.abandon(rec.request_id)  # its OK/ERROR may still be on the way

    def publish_namespace_cancel(
        self, track_namespace: tuple[bytes, ...], error_code: int, reason: str = ""
    ) -> None:
        """Stop accepting a namespace the peer announced (PUBLISH_NAMESPACE_CANCEL).

        CANCEL names the namespace, not a request, so announcements of it not answered yet
        get PUBLISH_NAMESPACE_ERROR instead: every request keeps exactly one answer even when
        the peer announces the same namespace again while the CANCEL is in flight.
        """
        recs = self._ns_matching(self._pubns_in, track_namespace)
        active = [r for r in recs if r.machine.state is NamespaceState.ACTIVE]
        for rec in recs:
            if rec not in active:
                self.reject_publish_namespace(rec.request_id, error_code, reason)
        if not active:
            return
        for rec in active:
            rec.machine.apply(NamespaceInput.SEND_CANCEL)
        if self._flow.version == DRAFT_14:
            self._flow.send_control(
                PublishNamespaceCancel(
                    track_namespace=track_namespace, error_code=error_code, reason=reason
                )
            )
        else:  # d16 §9.24: one per PUBLISH_NAMESPACE
            for rec in active:
                self._flow.send_control(
                    PublishNamespaceCancel(
                        request_id=rec.request_id, error_code=error_code, reason=reason
                    )
                )
        for rec in active:
            self._drop_ns(self._pubns_in, rec)

    def subscribe_namespace(
        self,
        track_namespace_prefix: tuple[bytes, ...],
        *,
        parameters: MessageParameters | None = None,
        auth_tokens: tuple[AuthToken, ...] = (),
        subscribe_options: int = 1,
    ) -> int:
        """Ask for namespaces under a prefix (SUBSCRIBE_NAMESPACE); returns its request id.

        Draft-16: the request opens its own stream; ``subscribe_options`` asks for PUBLISH (0),
        NAMESPACE (1, the default) or both (2).
        """

        def build(rid: int) -> SubscribeNamespace:
            return SubscribeNamespace(
                request_id=rid,
                track_namespace_prefix=track_namespace_prefix,
                parameters=with_tokens(parameters, auth_tokens),
                subscribe_options=subscribe_options,
            )

        rec: NamespaceRecord
        if self._flow.version == DRAFT_14:
            rid = self._flow.start_request(build)
            rec = self._new_namespace(rid, track_namespace_prefix, responder=False)
        else:
            rid, stream_id = self._flow.start_stream_request(build)
            rec = self._new_namespace(rid, track_namespace_prefix, responder=False)
            rec.stream_id, rec.parser = stream_id, self._parser()
            self._streams[stream_id] = rec
        self._subns_out[rid] = rec
        return rid

    def accept_subscribe_namespace(self, request_id: int) -> None:
        """Answer the peer's SUBSCRIBE_NAMESPACE with SUBSCRIBE_NAMESPACE_OK."""
        rec = self._ns_rec(self._subns_in, request_id)
        self._ns_step(rec, NamespaceInput.SEND_OK, SubscribeNamespaceOk(request_id=request_id))

    def reject_subscribe_namespace(
        self, request_id: int, error_code: int, reason: str = ""
    ) -> None:
        """Answer the peer's SUBSCRIBE_NAMESPACE with SUBSCRIBE_NAMESPACE_ERROR."""
        rec = self._ns_rec(self._subns_in, request_id)
        msg = SubscribeNamespaceError(request_id=request_id, error_code=error_code, reason=reason)
        self._ns_step(rec, NamespaceInput.SEND_ERROR, msg)
        self._drop_ns(self._subns_in, rec)
        self._close_stream(rec)  # d16 §9.25: an error is followed by FIN

    def unsubscribe_namespace(self, track_namespace_prefix: tuple[bytes, ...]) -> None:
        """End our namespace subscription for a prefix (UNSUBSCRIBE_NAMESPACE)."""
        recs = self._ns_matching(self._subns_out, track_namespace_prefix)
        for rec in recs:
            rec.machine.apply(NamespaceInput.SEND_DONE)
        if self._flow.version == DRAFT_14:
            msg = UnsubscribeNamespace(track_namespace_prefix=track_namespace_prefix)
            self._flow.send_control(msg)
        for rec in recs:
            self._drop_ns(self._subns_out, rec)
            self._flow.abandon(rec.request_id)
            self._close_stream(rec)  # d16: closing the stream is the unsubscribe

    def _ns_rec(self, table: dict[int, NamespaceRecord], request_id: int) -> NamespaceRecord:
        rec = table.get(request_id)
        if rec is None:
            raise LocalProtocolError(f"no namespace request with id {request_id}")
        return rec

    def _ns_step(
        self,
        rec: NamespaceRecord,
        inp: NamespaceInput,
        msg: PublishNamespaceOk
        | PublishNamespaceError
        | SubscribeNamespaceOk
        | SubscribeNamespaceError,
    ) -> None:
        data = self._flow.encode(msg)
        rec.machine.apply(inp)
        if rec.stream_id is None:
            self._flow.send_raw_control(data)
        else:  # d16: the answer is the first message on the request's own stream
            self._flow.quic.send_stream_data(rec.stream_id, data)

    def _ns_matching(
        self, table: dict[int, NamespaceRecord], namespace: tuple[bytes, ...]
    ) -> list[NamespaceRecord]:
        recs = [r for r in table.values() if r.namespace == namespace]
        if not recs:
            raise LocalProtocolError(f"no namespace request for {namespace!r}")
        return recs

    def _drop_ns(self, table: dict[int, NamespaceRecord], rec: NamespaceRecord) -> None:
        table.pop(rec.request_id, None)
        if not self._flow.is_ours(rec.request_id):
            self._flow.peer_request_done(rec.request_id)

    # ------------------------------------------------------------ namespaces: handlers

    def on_publish_namespace(self, msg: PublishNamespace, out: list[MoqtEvent]) -> None:
        self._flow.accept_peer_request_id(msg.request_id)
        tokens = self._flow.tokens(msg.parameters)
        self._pubns_in[msg.request_id] = self._new_namespace(
            msg.request_id, msg.track_namespace, responder=True
        )
        out.append(
            PublishNamespaceRequested(
                request_id=msg.request_id,
                track_namespace=msg.track_namespace,
                parameters=msg.parameters,
                auth_tokens=tokens,
            )
        )

    def on_publish_namespace_ok(self, msg: PublishNamespaceOk, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self._pubns_out, msg.request_id, "PUBLISH_NAMESPACE_OK")
        if rec is None:
            return
        rec.machine.apply(NamespaceInput.RECV_OK)
        out.append(
            PublishNamespaceAccepted(request_id=msg.request_id, track_namespace=rec.namespace)
        )

    def on_publish_namespace_error(self, msg: PublishNamespaceError, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self._pubns_out, msg.request_id, "PUBLISH_NAMESPACE_ERROR")
        if rec is None:
            return
        rec.machine.apply(NamespaceInput.RECV_ERROR)
        self._drop_ns(self._pubns_out, rec)
        out.append(
            PublishNamespaceRejected(
                request_id=msg.request_id,
                track_namespace=rec.namespace,
                error_code=msg.error_code,
                reason=msg.reason,
            )
        )

    def on_publish_namespace_done(self, msg: PublishNamespaceDoneMsg, out: list[MoqtEvent]) -> None:
        if msg.request_id is not None:  # d16: names its PUBLISH_NAMESPACE
            rec = self._pubns_in.get(msg.request_id)
            if rec is None:
                self._flow.unknown_reference(msg.request_id, "PUBLISH_NAMESPACE_DONE")
                return
            msg = PublishNamespaceDoneMsg(track_namespace=rec.namespace)
            recs = [rec]
        else:
            recs = [r for r in self._pubns_in.values() if r.namespace == msg.track_namespace]
        for rec in recs:
            rec.machine.apply(NamespaceInput.RECV_DONE)
            self._drop_ns(self._pubns_in, rec)
        if recs:
            out.append(
                PublishNamespaceDone(
                    track_namespace=msg.track_namespace,
                    request_ids=tuple(r.request_id for r in recs),
                )
            )

    def on_publish_namespace_cancel(
        self, msg: PublishNamespaceCancel, out: list[MoqtEvent]
    ) -> None:
        if msg.request_id is not None:  # d16: names its PUBLISH_NAMESPACE
            found = self._pubns_out.get(msg.request_id)
            if found is None:
                self._flow.unknown_reference(msg.request_id, "PUBLISH_NAMESPACE_CANCEL")
                return
            if found.machine.state is not NamespaceState.ACTIVE:
                raise ProtocolViolation("PUBLISH_NAMESPACE_CANCEL before PUBLISH_NAMESPACE_OK")
            recs = [found]
            msg = PublishNamespaceCancel(
                track_namespace=found.namespace, error_code=msg.error_code, reason=msg.reason
            )
        else:
            recs = [
                r
                for r in self._pubns_out.values()
                if r.namespace == msg.track_namespace and r.machine.state is NamespaceState.ACTIVE
            ]
        for rec in recs:
            rec.machine.apply(NamespaceInput.RECV_CANCEL)
            self._drop_ns(self._pubns_out, rec)
        if recs:
            out.append(
                PublishNamespaceCancelled(
                    track_namespace=msg.track_namespace,
                    request_ids=tuple(r.request_id for r in recs),
                    error_code=msg.error_code,
                    reason=msg.reason,
                )
            )

    def on_subscribe_namespace(
        self, msg: SubscribeNamespace, out: list[MoqtEvent], stream_id: int | None = None
    ) -> None:
        if self._flow.version != DRAFT_14 and stream_id is None:
            raise ProtocolViolation("SUBSCRIBE_NAMESPACE on the control stream (d16 §9.25)")
        self._flow.accept_peer_request_id(msg.request_id)
        tokens = self._flow.tokens(msg.parameters)
        rec = self._new_namespace(msg.request_id, msg.track_namespace_prefix, responder=True)
        rec.stream_id = stream_id
        self._subns_in[msg.request_id] = rec
        if stream_id is not None:
            self._streams[stream_id] = rec
        out.append(
            SubscribeNamespaceRequested(
                request_id=msg.request_id,
                track_namespace_prefix=msg.track_namespace_prefix,
                parameters=msg.parameters,
                auth_tokens=tokens,
            )
        )

    def on_subscribe_namespace_ok(self, msg: SubscribeNamespaceOk, out: list[MoqtEvent]) -> None:
        rec = self._flow.lookup(self._subns_out, msg.request_id, "SUBSCRIBE_NAMESPACE_OK")
        if rec is None:
            return
        rec.machine.apply(NamespaceInput.RECV_OK)
        out.append(
            SubscribeNamespaceAccepted(
                request_id=msg.request_id, track_namespace_prefix=rec.namespace
            )
        )

    def on_subscribe_namespace_error(
        self, msg: SubscribeNamespaceError, out: list[MoqtEvent]
    ) -> None:
        rec = self._flow.lookup(self._subns_out, msg.request_id, "SUBSCRIBE_NAMESPACE_ERROR")
        if rec is None:
            return
        rec.machine.apply(NamespaceInput.RECV_ERROR)
        self._drop_ns(self._subns_out, rec)
        out.append(
            SubscribeNamespaceRejected(
                request_id=msg.request_id,
                track_namespace_prefix=rec.namespace,
                error_code=msg.error_code,
                reason=msg.reason,
            )
        )

    def on_namespace_on_control(self, msg: Namespace | NamespaceDone, out: list[MoqtEvent]) -> None:
        raise ProtocolViolation(
            f"{type(msg).__name__} outside a SUBSCRIBE_NAMESPACE stream (d16 §9.21)"
        )

    def on_unsubscribe_namespace(self, msg: UnsubscribeNamespace, out: list[MoqtEvent]) -> None:
        prefix = msg.track_namespace_prefix
        recs = [r for r in self._subns_in.values() if r.namespace == prefix]
        for rec in recs:
            rec.machine.apply(NamespaceInput.RECV_DONE)
            self._drop_ns(self._subns_in, rec)
        if recs:
            out.append(
                UnsubscribedNamespace(
                    track_namespace_prefix=prefix, request_ids=tuple(r.request_id for r in recs)
                )
            )

    # ------------------------------------------------------------ draft-16 namespace streams

    def namespace(self, request_id: int, track_namespace: tuple[bytes, ...]) -> None:
        """Draft-16: report a namespace under the peer's accepted SUBSCRIBE_NAMESPACE
        ``request_id`` (NAMESPACE on its stream, d16 §9.21)."""
        self._send_on_stream(request_id, track_namespace, done=False)

    def namespace_done(self, request_id: int, track_namespace: tuple[bytes, ...]) -> None:
        """Draft-16: withdraw a namespace reported with :meth:`namespace` (NAMESPACE_DONE)."""
        self._send_on_stream(request_id, track_namespace, done=True)

    def namespace_subscriptions(self, track_namespace: tuple[bytes, ...]) -> list[int]:
        """Draft-16: the peer's accepted SUBSCRIBE_NAMESPACE requests whose prefix covers
        ``track_namespace`` and which were not told about it yet (see :meth:`namespace`)."""
        return [
            rec.request_id
            for rec in self._subns_in.values()
            if rec.stream_id is not None
            and rec.machine.state is NamespaceState.ACTIVE
            and track_namespace[: len(rec.namespace)] == rec.namespace
            and track_namespace not in rec.reported
        ]

    def _send_on_stream(self, request_id: int, namespace: tuple[bytes, ...], *, done: bool) -> None:
        rec = self._ns_rec(self._subns_in, request_id)
        if rec.stream_id is None or rec.machine.state is not NamespaceState.ACTIVE:
            raise LocalProtocolError(f"SUBSCRIBE_NAMESPACE {request_id} has no open stream")
        if namespace[: len(rec.namespace)] != rec.namespace:
            raise LocalProtocolError(f"{namespace!r} is not under {rec.namespace!r}")
        if done != (namespace in rec.reported):
            raise LocalProtocolError(f"{namespace!r} was {'never' if done else 'already'} sent")
        suffix = namespace[len(rec.namespace) :]
        msg = (
            NamespaceDone(track_namespace_suffix=suffix)
            if done
            else Namespace(track_namespace_suffix=suffix)
        )
        self._flow.quic.send_stream_data(rec.stream_id, self._flow.encode(msg))
        if done:
            rec.reported.discard(namespace)
        else:
            rec.reported.add(namespace)

    def answers(self, rid: int) -> tuple[type, type | None] | None:
        """Draft-16 answer routing on the control stream: the (error, OK) answer classes of
        *our* request ``rid`` if this role owns it. A SUBSCRIBE_NAMESPACE is answered on its
        own stream, so an answer to it here is a PROTOCOL_VIOLATION."""
        if rid in self._pubns_out:
            return PublishNamespaceError, PublishNamespaceOk
        if rid in self._subns_out:
            raise ProtocolViolation("SUBSCRIBE_NAMESPACE answered on the control stream")
        return None

    def on_request_stream(
        self, stream_id: int, data: bytes, fin: bool, out: list[MoqtEvent]
    ) -> None:
        """Bytes (or the end: FIN or reset) of a draft-16 SUBSCRIBE_NAMESPACE stream."""
        entry = self._streams.get(stream_id)
        if entry is None:
            if (stream_id & 0x1 == 0) == self._flow.is_client:
                return  # one of ours we already closed: late bytes are dropped
            entry = self._streams[stream_id] = self._parser()
        parser = entry if isinstance(entry, ControlStreamParser) else entry.parser
        messages = parser.feed(data) if parser is not None and data else []
        for msg in messages:
            entry = self._streams.get(stream_id)
            if entry is None:
                break
            self._on_stream_message(stream_id, entry, msg, out)
        if fin:
            self._on_stream_end(stream_id, out)

    def on_request_stream_stopped(self, stream_id: int) -> None:
        """The peer sent STOP_SENDING on a SUBSCRIBE_NAMESPACE stream: stop writing to it."""
        entry = self._streams.get(stream_id)
        if isinstance(entry, NamespaceRecord) and entry.stream_id is not None:
            self._close_stream(entry)

    def _on_stream_message(
        self,
        stream_id: int,
        entry: NamespaceRecord | ControlStreamParser,
        msg: Message,
        out: list[MoqtEvent],
    ) -> None:
        if isinstance(entry, ControlStreamParser):  # the peer's new stream: its request
            if not isinstance(msg, SubscribeNamespace):
                raise ProtocolViolation(f"{type(msg).__name__} opened a bidirectional stream")
            self.on_subscribe_namespace(msg, out, stream_id=stream_id)
            self._streams[stream_id].parser = entry  # type: ignore[union-attr]
            return
        if entry.request_id in self._subns_in:
            raise ProtocolViolation(f"{type(msg).__name__} after SUBSCRIBE_NAMESPACE on its stream")
        if isinstance(msg, RequestOk | RequestErrorMessage):
            if entry.answered:
                raise ProtocolViolation("a second answer on a SUBSCRIBE_NAMESPACE stream")
            entry.answered = True
            if isinstance(msg, RequestOk):
                self.on_subscribe_namespace_ok(from_request_ok(msg, SubscribeNamespaceOk), out)
            else:
                err = from_request_error(msg, SubscribeNamespaceError)
                self.on_subscribe_namespace_error(err, out)
            return
        if not isinstance(msg, Namespace | NamespaceDone) or not entry.answered:
            raise ProtocolViolation(f"{type(msg).__name__} on a SUBSCRIBE_NAMESPACE stream")
        if entry.request_id not in self._subns_out:
            return  # we unsubscribed: the stream is closing
        namespace = entry.namespace + msg.track_namespace_suffix
        if isinstance(msg, Namespace):
            entry.reported.add(namespace)
            out.append(NamespaceReceived(request_id=entry.request_id, track_namespace=namespace))
            return
        if namespace not in entry.reported:
            raise ProtocolViolation("NAMESPACE_DONE before its NAMESPACE (d16 §9.25)")
        entry.reported.discard(namespace)
        out.append(NamespaceDoneReceived(request_id=entry.request_id, track_namespace=namespace))

    def _on_stream_end(self, stream_id: int, out: list[MoqtEvent]) -> None:
        entry = self._streams.pop(stream_id, None)
        if not isinstance(entry, NamespaceRecord):
            return  # a stream that ended before its request was complete: nothing opened
        if entry.request_id in self._subns_in:  # the subscriber cancelled (d16 §9.25)
            entry.machine.apply(NamespaceInput.RECV_DONE)
            self._drop_ns(self._subns_in, entry)
            out.append(
                UnsubscribedNamespace(
                    track_namespace_prefix=entry.namespace, request_ids=(entry.request_id,)
                )
            )
        elif entry.request_id in self._subns_out:  # the publisher ended ours
            if not entry.answered:
                raise ProtocolViolation("SUBSCRIBE_NAMESPACE stream ended without an answer")
            self._subns_out.pop(entry.request_id, None)
        self._close_stream(entry)

    def _close_stream(self, rec: NamespaceRecord) -> None:
        """End our half of a draft-16 SUBSCRIBE_NAMESPACE stream (FIN)."""
        if rec.stream_id is None:
            return
        sid, rec.stream_id = rec.stream_id, None
        self._finish_stream(sid)

    def _finish_stream(self, stream_id: int) -> None:
        try:
            self._flow.quic.send_stream_data(stream_id, b"", end_stream=True)
        except (RuntimeError, ValueError):  # the peer's STOP_SENDING already reset our half
            pass

    def _parser(self) -> ControlStreamParser:
        return ControlStreamParser(version=DRAFT_16, allow_empty_namespace_prefix=True)

    # ------------------------------------------------------------ records

    @staticmethod
    def _new_namespace(rid: int, ns: tuple[bytes, ...], *, responder: bool) -> NamespaceRecord:
        table = NAMESPACE_RESPONDER if responder else NAMESPACE_REQUESTER
        return NamespaceRecord(
            request_id=rid, machine=StateMachine(table, NamespaceState.PENDING), namespace=ns
        )
