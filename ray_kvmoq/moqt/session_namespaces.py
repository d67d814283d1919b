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
"""

from __future__ import annotations

from typing import ClassVar

from .codec import (
    AuthToken,
    MessageParameters,
    PublishNamespace,
    PublishNamespaceCancel,
    PublishNamespaceError,
    PublishNamespaceOk,
    SubscribeNamespace,
    SubscribeNamespaceError,
    SubscribeNamespaceOk,
    UnsubscribeNamespace,
)
from .codec import (
    PublishNamespaceDone as PublishNamespaceDoneMsg,
)
from .codec.control import encode_control
from .codec.errors import LocalProtocolError
from .events import (
    MoqtEvent,
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
        self._flow.send_control(PublishNamespaceDoneMsg(track_namespace=track_namespace))
        for rec in recs:
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
        self._flow.send_control(
            PublishNamespaceCancel(
                track_namespace=track_namespace, error_code=error_code, reason=reason
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
    ) -> int:
        """Ask for namespaces under a prefix (SUBSCRIBE_NAMESPACE); returns its request id."""
        rid = self._flow.start_request(
            lambda rid: SubscribeNamespace(
                request_id=rid,
                track_namespace_prefix=track_namespace_prefix,
                parameters=with_tokens(parameters, auth_tokens),
            )
        )
        self._subns_out[rid] = self._new_namespace(rid, track_namespace_prefix, responder=False)
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

    def unsubscribe_namespace(self, track_namespace_prefix: tuple[bytes, ...]) -> None:
        """End our namespace subscription for a prefix (UNSUBSCRIBE_NAMESPACE)."""
        recs = self._ns_matching(self._subns_out, track_namespace_prefix)
        for rec in recs:
            rec.machine.apply(NamespaceInput.SEND_DONE)
        self._flow.send_control(UnsubscribeNamespace(track_namespace_prefix=track_namespace_prefix))
        for rec in recs:
            self._drop_ns(self._subns_out, rec)
            self._flow.abandon(rec.request_id)

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
        data = encode_control(msg)
        rec.machine.apply(inp)
        self._flow.send_raw_control(data)

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

    def on_subscribe_namespace(self, msg: SubscribeNamespace, out: list[MoqtEvent]) -> None:
        self._flow.accept_peer_request_id(msg.request_id)
        tokens = self._flow.tokens(msg.parameters)
        self._subns_in[msg.request_id] = self._new_namespace(
            msg.request_id, msg.track_namespace_prefix, responder=True
        )
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

    # ------------------------------------------------------------ records

    @staticmethod
    def _new_namespace(rid: int, ns: tuple[bytes, ...], *, responder: bool) -> NamespaceRecord:
        table = NAMESPACE_RESPONDER if responder else NAMESPACE_REQUESTER
        return NamespaceRecord(
            request_id=rid, machine=StateMachine(table, NamespaceState.PENDING), namespace=ns
        )
