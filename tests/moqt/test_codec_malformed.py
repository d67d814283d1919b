"""Malformed input at codec level, counted honestly (issue 12 item 7).

Every case is one :class:`Input` (entry point, bytes, options): equal inputs are one case, and
the generated duplicates are dropped and counted (``DUPLICATES``). Cases fall in four groups,
each counted on its own in ``test_counts``:

* **need more data** — a truncated frame or stream prefix: the parser raises
  :class:`NeedMoreData` (no session close, so no code);
* **malformed** — the peer's input is invalid: the exact exception class and the draft's session
  close code (d14 §13.1.1, written out in ``DRAFT_CLOSE_CODES``), PROTOCOL_VIOLATION or
  KEY_VALUE_FORMATTING_ERROR;
* **over our caps** — an object or extension block larger than our configured limit (the draft
  sets none): ObjectTooLarge, closing with INTERNAL_ERROR;
* **our own values** — values we were asked to encode: LocalProtocolError, never sent.

Generated: truncation at every byte of every §2.10 vector (need more data while a frame or
stream is incomplete; malformed once the declared length or the FIN says it is complete), wrong
lengths, unknown types, limit violations (namespace fields, full track name, reason, KVP value,
GOAWAY URI, object size), bad enum values and KVP shape errors.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

import pytest

from ray_kvmoq.moqt.codec.control import ControlStreamParser, decode_control, read_control_frame
from ray_kvmoq.moqt.codec.datagrams import decode_datagram
from ray_kvmoq.moqt.codec.errors import (
    KeyValueFormattingError,
    LocalProtocolError,
    NeedMoreData,
    ObjectTooLarge,
    ProtocolViolation,
    RemoteProtocolError,
    UnknownMessageType,
    UnknownStreamType,
)
from ray_kvmoq.moqt.codec.streams import DataStreamParser
from ray_kvmoq.moqt.codec.types import DRAFT_14, SessionError
from ray_kvmoq.moqt.codec.wire import decode_varint, encode_varint
from tests.moqt.test_vectors import CONTROL_VECTORS, DATAGRAM_VECTORS, STREAM_VECTORS

# Session close codes written out from the draft's registry (d14 §13.1.1), not read from the code.
DRAFT_CLOSE_CODES = {
    "INTERNAL_ERROR": 0x1,
    "PROTOCOL_VIOLATION": 0x3,
    "KEY_VALUE_FORMATTING_ERROR": 0x6,
}
PV = SessionError.PROTOCOL_VIOLATION
KVFE = SessionError.KEY_VALUE_FORMATTING_ERROR


@dataclass(frozen=True)
class Input:
    """One input to one codec entry point; equal inputs are the same case (the dedupe key)."""

    entry: str
    """``frame`` (read_control_frame), ``payload`` (decode_control), ``control``
    (ControlStreamParser.feed), ``stream`` (DataStreamParser.feed), ``datagram``
    (decode_datagram) or ``varint`` (encode_varint, our own value)."""
    data: bytes | int
    msg_type: int | None = None
    fin: bool = False
    options: tuple[tuple[str, object], ...] = ()

    def run(self) -> object:
        kw: dict[str, Any] = dict(self.options)
        if self.entry == "frame":
            return read_control_frame(self.data)  # type: ignore[arg-type]
        if self.entry == "payload":
            assert self.msg_type is not None
            return decode_control(self.msg_type, self.data, version=DRAFT_14)  # type: ignore[arg-type]
        if self.entry == "control":
            return ControlStreamParser(**kw).feed(self.data, fin=self.fin)  # type: ignore[arg-type]
        if self.entry == "stream":
            return DataStreamParser(**kw).feed(self.data, fin=self.fin)  # type: ignore[arg-type]
        if self.entry == "datagram":
            return decode_datagram(self.data, version=DRAFT_14)  # type: ignore[arg-type]
        if self.entry == "varint":
            return encode_varint(self.data)  # type: ignore[arg-type]
        raise AssertionError(self.entry)


@dataclass(frozen=True)
class Case:
    name: str
    input: Input
    exc: type[BaseException]
    code: SessionError | None
    """The draft close code the error carries; None only for NeedMoreData."""


CASES: list[Case] = []
_BY_INPUT: dict[Input, str] = {}
DUPLICATES: list[tuple[str, str]] = []
"""(dropped case, the earlier case with the same input): generated duplicates, not cases."""


def case(name: str, inp: Input, exc: type[BaseException], code: SessionError | None = PV) -> None:
    if exc is NeedMoreData:
        code = None
    if inp in _BY_INPUT:
        DUPLICATES.append((name, _BY_INPUT[inp]))
        return
    _BY_INPUT[inp] = name
    CASES.append(Case(name, inp, exc, code))


# ---------------------------------------------------------------- builders


def vi(*values: int) -> bytes:
    return b"".join(encode_varint(v) for v in values)


def bs(data: bytes) -> bytes:
    return vi(len(data)) + data


def ns(*fields: bytes) -> bytes:
    return vi(len(fields)) + b"".join(bs(f) for f in fields)


def frame(msg_type: int, payload: bytes) -> bytes:
    return vi(msg_type) + len(payload).to_bytes(2, "big") + payload


def feed_control(data: bytes, *, fin: bool = False, **kw: bool) -> Input:
    return Input("control", data, fin=fin, options=tuple(sorted(kw.items())))


def feed_stream(data: bytes, *, fin: bool = True, **kw: int) -> Input:
    return Input("stream", data, fin=fin, options=tuple(sorted(kw.items())))


NO_PARAMS = vi(0)
NS = ns(b"kv", b"m1")
NAME = bs(b"layer0")


def subscribe(
    *, nsp=NS, name=NAME, prio=b"\x80", order=b"\x01", fwd=b"\x01", filt=vi(2), params=NO_PARAMS
) -> bytes:
    return vi(4) + nsp + name + prio + order + fwd + filt + params


def subscribe_ok(*, order=b"\x01", exists=b"\x01" + vi(0, 0), params=NO_PARAMS) -> bytes:
    return vi(2, 7, 0) + order + exists + params


def publish(*, nsp=NS, name=NAME, order=b"\x01", exists=b"\x00", fwd=b"\x01") -> bytes:
    return vi(8) + nsp + name + vi(3) + order + exists + fwd + NO_PARAMS


def publish_ok(*, fwd=b"\x01", order=b"\x01", filt=vi(2)) -> bytes:
    return vi(8) + fwd + b"\x80" + order + filt + NO_PARAMS


def fetch(*, order=b"\x01", ftype=vi(1), nsp=NS, name=NAME) -> bytes:
    body = nsp + name + vi(0, 0, 2, 0) if ftype == vi(1) else vi(2, 0)
    return vi(2) + b"\x80" + order + ftype + body + NO_PARAMS


def fetch_ok(*, order=b"\x01", eot=b"\x00") -> bytes:
    return vi(2) + order + eot + vi(2, 0) + NO_PARAMS


def token_param(token: bytes) -> bytes:
    return vi(1) + vi(3) + bs(token)


# ---------------------------------------------------------------- truncation and lengths

for label, wire, _msg in CONTROL_VECTORS:
    msg_type, at = decode_varint(wire)
    payload = wire[at + 2 :]
    for cut in range(len(wire)):
        # An incomplete frame is not an error yet: the framer asks for more bytes ...
        case(f"{label} frame cut {cut}", Input("frame", wire[:cut]), NeedMoreData)
    for cut in range(len(payload)):
        # ... but a declared length that is complete while the fields are not is malformed.
        case(
            f"{label} payload cut {cut}",
            Input("payload", payload[:cut], msg_type=msg_type),
            ProtocolViolation,
        )
    case(f"{label} fin mid-frame", feed_control(wire[:-1], fin=True), ProtocolViolation)
    case(
        f"{label} length +1",
        feed_control(frame(msg_type, payload + b"\x00")),
        ProtocolViolation,
    )
    shorter = vi(msg_type) + (len(payload) - 1).to_bytes(2, "big") + payload
    case(f"{label} length -1", feed_control(shorter), ProtocolViolation)


def _boundaries(wire: bytes) -> set[int]:
    """Offsets where the header or an object ends (a FIN there is clean)."""
    parser = DataStreamParser()
    return {i + 1 for i in range(len(wire)) if parser.feed(wire[i : i + 1])}


for label, wire, _events in STREAM_VECTORS:
    clean = _boundaries(wire)
    for cut in range(len(wire)):
        if cut not in clean:
            # FIN inside the header or an object (d14 §10.4): PROTOCOL_VIOLATION.
            case(f"{label} fin at {cut}", feed_stream(wire[:cut]), ProtocolViolation)

for label, wire, _dgram in DATAGRAM_VECTORS:
    # A payload datagram's payload runs to the end, so only cuts before it are malformed.
    for cut in range(len(wire) - (0 if wire[0] & 0x20 else 2)):
        case(
            f"{label} truncated {cut}",
            Input("datagram", wire[:cut]),
            ProtocolViolation,
        )
# ---------------------------------------------------------------- unknown types

for t in (0x00, 0x01, 0x1B, 0x1C, 0x22, 0x3F, 0x40, 0x41, 0x2F00, 0x3FFF):
    case(f"unknown message type {t:#x}", feed_control(vi(t)), UnknownMessageType)
for t in (0x00, 0x01, 0x04, 0x06, 0x0F, 0x16, 0x17, 0x1E, 0x1F, 0x20, 0x30, 0x40):
    case(f"unknown stream type {t:#x}", feed_stream(vi(t), fin=False), UnknownStreamType)
for t in (0x08, 0x0F, 0x10, 0x14, 0x1F, 0x22, 0x24, 0x30):
    dgram = vi(t) + vi(3, 7, 0) + b"\x80"
    case(
        f"unknown datagram type {t:#x}",
        Input("datagram", dgram),
        UnknownStreamType,
    )

# ---------------------------------------------------------------- namespace / name / reason limits

ZERO_NS = ns()
WIDE_NS = ns(*[b"x"] * 33)
for ns_label, bad_ns in (("0 fields", ZERO_NS), ("33 fields", WIDE_NS)):
    for msg_label, msg_type, payload in (
        ("SUBSCRIBE", 0x03, subscribe(nsp=bad_ns)),
        ("TRACK_STATUS", 0x0D, subscribe(nsp=bad_ns)),
        ("PUBLISH", 0x1D, publish(nsp=bad_ns)),
        ("FETCH", 0x16, fetch(nsp=bad_ns)),
        ("PUBLISH_NAMESPACE", 0x06, vi(0) + bad_ns + NO_PARAMS),
        ("PUBLISH_NAMESPACE_DONE", 0x09, bad_ns),
        ("PUBLISH_NAMESPACE_CANCEL", 0x0C, bad_ns + vi(0) + bs(b"")),
        ("SUBSCRIBE_NAMESPACE", 0x11, vi(0) + bad_ns + NO_PARAMS),
        ("UNSUBSCRIBE_NAMESPACE", 0x14, bad_ns),
    ):
        case(
            f"{msg_label} namespace {ns_label}",
            feed_control(frame(msg_type, payload)),
            ProtocolViolation,
        )
# Even with the moq-dev leniency, more than 32 fields stay invalid.
case(
    "SUBSCRIBE_NAMESPACE 33 fields lenient",
    feed_control(frame(0x11, vi(0) + WIDE_NS + NO_PARAMS), allow_empty_namespace_prefix=True),
    ProtocolViolation,
)

LONG_NAME = bs(b"n" * 4097)
SPLIT_NAME_NS = ns(b"a" * 2048, b"b" * 2048)  # 4096 bytes of namespace + 1-byte name
for label, nsp, name in (("name 4097", NS, LONG_NAME), ("ns+name 4097", SPLIT_NAME_NS, bs(b"c"))):
    case(
        f"SUBSCRIBE {label}",
        feed_control(frame(0x03, subscribe(nsp=nsp, name=name))),
        ProtocolViolation,
    )
    case(
        f"TRACK_STATUS {label}",
        feed_control(frame(0x0D, subscribe(nsp=nsp, name=name))),
        ProtocolViolation,
    )
    case(
        f"PUBLISH {label}",
        feed_control(frame(0x1D, publish(nsp=nsp, name=name))),
        ProtocolViolation,
    )
    case(f"FETCH {label}", feed_control(frame(0x16, fetch(nsp=nsp, name=name))), ProtocolViolation)
case(
    "PUBLISH_NAMESPACE namespace 4097",
    feed_control(frame(0x06, vi(0) + ns(b"a" * 4097) + NO_PARAMS)),
    ProtocolViolation,
)

LONG_REASON = bs(b"r" * 1025)
for label, msg_type, head in (
    ("SUBSCRIBE_ERROR", 0x05, vi(0, 4)),
    ("TRACK_STATUS_ERROR", 0x0F, vi(0, 4)),
    ("PUBLISH_ERROR", 0x1F, vi(0, 4)),
    ("FETCH_ERROR", 0x19, vi(0, 4)),
    ("PUBLISH_NAMESPACE_ERROR", 0x08, vi(0, 4)),
    ("SUBSCRIBE_NAMESPACE_ERROR", 0x13, vi(0, 4)),
    ("PUBLISH_DONE", 0x0B, vi(0, 2, 1)),
    ("PUBLISH_NAMESPACE_CANCEL", 0x0C, NS + vi(4)),
):
    case(
        f"{label} reason 1025", feed_control(frame(msg_type, head + LONG_REASON)), ProtocolViolation
    )
case("GOAWAY uri 8193", feed_control(frame(0x10, bs(b"u" * 8193))), ProtocolViolation)

# ---------------------------------------------------------------- KVP shape, limits, duplicates

BIG_KVP = vi(1) + vi(0x05) + vi(65536)  # odd type declaring a 65536-byte value
case(
    "SUBSCRIBE param value 65536",
    feed_control(frame(0x03, subscribe(params=BIG_KVP))),
    ProtocolViolation,
)
case(
    "CLIENT_SETUP param value 65536",
    feed_control(frame(0x20, vi(1, DRAFT_14) + BIG_KVP)),
    ProtocolViolation,
)
case(
    "extension value 65536",
    feed_stream(vi(0x11, 1, 0) + b"\x80" + vi(0, 5, 0x21) + vi(65536) + b"\x00", fin=False),
    ProtocolViolation,
)
case(
    "SUBSCRIBE even param value cut",
    feed_control(frame(0x03, subscribe(params=vi(1, 2) + b"\x40"))),
    ProtocolViolation,
)
case(
    "SUBSCRIBE odd param value short",
    feed_control(frame(0x03, subscribe(params=vi(1, 5, 4) + b"ab"))),
    ProtocolViolation,
)
BAD_TOKENS = {
    "alias type 4": vi(4, 0),
    "alias type 0x40": vi(0x40),
    "empty": b"",
    "REGISTER without type": vi(1, 7),
    "DELETE without alias": vi(0),
    "USE_ALIAS trailing": vi(2, 7, 0),
    "USE_VALUE without type": vi(3),
    "truncated varint": b"\x40",
}
for label, token in BAD_TOKENS.items():
    case(
        f"SUBSCRIBE token {label}",
        feed_control(frame(0x03, subscribe(params=token_param(token)))),
        KeyValueFormattingError,
        KVFE,
    )
    case(
        f"CLIENT_SETUP token {label}",
        feed_control(frame(0x20, vi(1, DRAFT_14) + token_param(token))),
        KeyValueFormattingError,
        KVFE,
    )
for label, msg_type, payload in (
    ("SUBSCRIBE DELIVERY_TIMEOUT", 0x03, subscribe(params=vi(2, 2, 10, 2, 20))),
    ("SUBSCRIBE_OK MAX_CACHE_DURATION", 0x04, subscribe_ok(params=vi(2, 4, 1, 4, 1))),
    ("CLIENT_SETUP MAX_REQUEST_ID", 0x20, vi(1, DRAFT_14) + vi(2, 2, 1, 2, 2)),
    ("CLIENT_SETUP PATH", 0x20, vi(1, DRAFT_14, 2) + vi(1) + bs(b"/a") + vi(1) + bs(b"/b")),
    (
        "SERVER_SETUP MOQT_IMPLEMENTATION",
        0x21,
        vi(DRAFT_14, 2) + vi(7) + bs(b"x") + vi(7) + bs(b"y"),
    ),
):
    case(f"{label} duplicated", feed_control(frame(msg_type, payload)), ProtocolViolation)

# ---------------------------------------------------------------- bad enum values

for value in (0, 5, 6, 0x40):
    filt = vi(value) + vi(0, 0, 9)
    case(
        f"SUBSCRIBE filter {value}",
        feed_control(frame(0x03, subscribe(filt=filt))),
        ProtocolViolation,
    )
    case(
        f"TRACK_STATUS filter {value}",
        feed_control(frame(0x0D, subscribe(filt=filt))),
        ProtocolViolation,
    )
    case(
        f"PUBLISH_OK filter {value}",
        feed_control(frame(0x1E, publish_ok(filt=filt))),
        ProtocolViolation,
    )
case(
    "SUBSCRIBE AbsoluteRange end before start",
    feed_control(frame(0x03, subscribe(filt=vi(4, 5, 0, 4)))),
    ProtocolViolation,
)
for value in (3, 4, 0xFF):
    order = bytes([value])
    case(
        f"SUBSCRIBE group order {value}",
        feed_control(frame(0x03, subscribe(order=order))),
        ProtocolViolation,
    )
    case(
        f"FETCH group order {value}",
        feed_control(frame(0x16, fetch(order=order))),
        ProtocolViolation,
    )
for value in (0, 3):
    order = bytes([value])
    case(
        f"SUBSCRIBE_OK group order {value}",
        feed_control(frame(0x04, subscribe_ok(order=order))),
        ProtocolViolation,
    )
    case(
        f"TRACK_STATUS_OK group order {value}",
        feed_control(frame(0x0E, subscribe_ok(order=order))),
        ProtocolViolation,
    )
    case(
        f"PUBLISH group order {value}",
        feed_control(frame(0x1D, publish(order=order))),
        ProtocolViolation,
    )
    case(
        f"PUBLISH_OK group order {value}",
        feed_control(frame(0x1E, publish_ok(order=order))),
        ProtocolViolation,
    )
    case(
        f"FETCH_OK group order {value}",
        feed_control(frame(0x18, fetch_ok(order=order))),
        ProtocolViolation,
    )
for value in (2, 0xFF):
    flag = bytes([value])
    case(
        f"SUBSCRIBE forward {value}",
        feed_control(frame(0x03, subscribe(fwd=flag))),
        ProtocolViolation,
    )
    case(
        f"PUBLISH forward {value}", feed_control(frame(0x1D, publish(fwd=flag))), ProtocolViolation
    )
    case(
        f"PUBLISH_OK forward {value}",
        feed_control(frame(0x1E, publish_ok(fwd=flag))),
        ProtocolViolation,
    )
    case(
        f"SUBSCRIBE_UPDATE forward {value}",
        feed_control(frame(0x02, vi(6, 4, 5, 0, 0) + b"\x80" + flag + NO_PARAMS)),
        ProtocolViolation,
    )
    case(
        f"SUBSCRIBE_OK content exists {value}",
        feed_control(frame(0x04, subscribe_ok(exists=flag))),
        ProtocolViolation,
    )
    case(
        f"PUBLISH content exists {value}",
        feed_control(frame(0x1D, publish(exists=flag))),
        ProtocolViolation,
    )
    case(
        f"FETCH_OK end of track {value}",
        feed_control(frame(0x18, fetch_ok(eot=flag))),
        ProtocolViolation,
    )
for value in (0, 4, 0x40):
    case(
        f"FETCH type {value}", feed_control(frame(0x16, fetch(ftype=vi(value)))), ProtocolViolation
    )

# ---------------------------------------------------------------- data streams and datagrams

SUBGROUP = vi(0x10, 1, 0) + b"\x80"
EXT_SUBGROUP = vi(0x11, 1, 0) + b"\x80"
for status in (2, 5, 6, 0x40):
    case(f"object status {status}", feed_stream(SUBGROUP + vi(0, 0, status)), ProtocolViolation)
    case(
        f"fetch object status {status}",
        feed_stream(vi(5, 1) + vi(0, 0, 0) + b"\x80" + vi(0, 0, status)),
        ProtocolViolation,
    )
    case(
        f"status datagram {status}",
        Input("datagram", vi(0x20, 3, 7, 5) + b"\x80" + vi(status)),
        ProtocolViolation,
    )
case(
    "Does-Not-Exist with extensions",
    feed_stream(EXT_SUBGROUP + vi(0, 2, 0x20, 1, 0, 1)),
    ProtocolViolation,
)
case(
    "object after End of Group",
    feed_stream(SUBGROUP + vi(0, 0, 3) + vi(0, 1) + b"x"),
    ProtocolViolation,
)
case(
    "object after End of Track",
    feed_stream(SUBGROUP + vi(0, 0, 4) + vi(0, 1) + b"x"),
    ProtocolViolation,
)
case(
    "extension block overrun",
    feed_stream(EXT_SUBGROUP + vi(0, 2, 0x21, 5) + b"abcde" + vi(1) + b"x"),
    ProtocolViolation,
)
case(
    "object ID overflows 2**62 via delta",
    feed_stream(SUBGROUP + vi((1 << 62) - 1, 1) + b"a" + vi(0, 1) + b"b"),
    ProtocolViolation,
)
case("fin before header", feed_stream(b""), ProtocolViolation)
case("fin inside header", feed_stream(vi(0x14, 1, 2)), ProtocolViolation)
for size in (1025, 1 << 20, (1 << 62) - 1):
    case(
        f"object length {size} over 1024 cap",
        feed_stream(SUBGROUP + vi(0, size), fin=False, max_object_size=1024),
        ObjectTooLarge,
        SessionError.INTERNAL_ERROR,
    )
    case(
        f"fetch object length {size} over cap",
        feed_stream(vi(5, 1, 0, 0, 0) + b"\x80" + vi(0, size), fin=False, max_object_size=1024),
        ObjectTooLarge,
        SessionError.INTERNAL_ERROR,
    )
case(
    "extension block over cap",
    feed_stream(EXT_SUBGROUP + vi(0, 4096), fin=False, max_extensions_size=1024),
    ObjectTooLarge,
    SessionError.INTERNAL_ERROR,
)
case(
    "datagram extensions bit with empty block",
    Input("datagram", vi(0x01, 3, 7, 5) + b"\x80" + vi(0) + b"hi"),
    ProtocolViolation,
)
case(
    "status datagram trailing bytes",
    Input("datagram", vi(0x20, 3, 7, 5) + b"\x80" + vi(3) + b"!"),
    ProtocolViolation,
)
case(
    "datagram extension overrun",
    Input("datagram", vi(0x01, 3, 7, 5) + b"\x80" + vi(9, 0x20) + b"\x05"),
    ProtocolViolation,
)

# ---------------------------------------------------------------- our own invalid values

for value in (-1, 1 << 62, 1 << 64):
    case(
        f"encode varint {value}",
        Input("varint", value),
        LocalProtocolError,
        SessionError.INTERNAL_ERROR,
    )


TRUNCATED = [c for c in CASES if c.exc is NeedMoreData]
"""Incomplete input: the parser asks for more bytes (no close, so no code)."""
MALFORMED = [
    c for c in CASES if issubclass(c.exc, RemoteProtocolError) and c.exc is not ObjectTooLarge
]
"""Malformed peer input: the session closes with the case's draft code."""
OVER_CAPS = [c for c in CASES if c.exc is ObjectTooLarge]
"""Well-formed input over our configured object/extension caps (no draft limit; we close with
INTERNAL_ERROR, the draft's code for "cannot continue")."""
OUR_VALUES = [c for c in CASES if issubclass(c.exc, LocalProtocolError)]
"""Invalid values we were asked to encode (LocalProtocolError; never sent)."""


def counts() -> dict[str, int]:
    """The suite's counts, each input counted once."""
    by_code = Counter(SessionError(c.code).name for c in MALFORMED if c.code is not None)
    return {
        "distinct inputs": len(CASES),
        "need more data (truncations)": len(TRUNCATED),
        "malformed": len(MALFORMED),
        **{f"malformed, closes {name}": n for name, n in sorted(by_code.items())},
        "over our caps, closes INTERNAL_ERROR": len(OVER_CAPS),
        "our own invalid values": len(OUR_VALUES),
        "generated duplicates dropped": len(DUPLICATES),
    }


EXPECTED_COUNTS = {
    "distinct inputs": 1083,
    "need more data (truncations)": 399,
    "malformed": 674,
    "malformed, closes KEY_VALUE_FORMATTING_ERROR": 16,
    "malformed, closes PROTOCOL_VIOLATION": 658,
    "over our caps, closes INTERNAL_ERROR": 7,
    "our own invalid values": 3,
    "generated duplicates dropped": 51,
}
"""Pinned, so a change in what the suite covers shows up in review."""


@pytest.mark.parametrize("c", CASES, ids=[c.name for c in CASES])
def test_malformed(c: Case) -> None:
    with pytest.raises(BaseException) as info:
        c.input.run()
    assert type(info.value) is c.exc, f"{c.name}: got {info.value!r}"
    if c.code is None:
        assert c.exc is NeedMoreData
    else:
        assert info.value.error_code == c.code  # type: ignore[attr-defined]


def test_every_case_is_classified_once() -> None:
    groups = (TRUNCATED, MALFORMED, OVER_CAPS, OUR_VALUES)
    assert sum(len(g) for g in groups) == len(CASES)
    assert len({c.input for c in CASES}) == len(CASES)
    assert all(c.code is None for c in TRUNCATED)
    assert all(c.code is not None for c in MALFORMED + OVER_CAPS + OUR_VALUES)


def test_close_codes_are_the_drafts() -> None:
    for name, value in DRAFT_CLOSE_CODES.items():
        assert SessionError[name] == value
    used = {SessionError(c.code).name for c in MALFORMED + OVER_CAPS if c.code is not None}
    assert used <= set(DRAFT_CLOSE_CODES)


@pytest.mark.parametrize(
    "summary", [counts()], ids=[" ".join(f"{k}={v}" for k, v in counts().items())]
)
def test_counts(summary: dict[str, int]) -> None:
    assert summary == EXPECTED_COUNTS


def test_non_minimal_varints_accepted() -> None:
    """§2.1: decoders accept non-minimal varints (RFC 9000 §16)."""
    unsubscribe = b"\x0a\x00\x08" + b"\xc0\x00\x00\x00\x00\x00\x00\x04"
    [msg] = ControlStreamParser().feed(unsubscribe)
    assert msg.request_id == 4  # type: ignore[union-attr]
    assert decode_varint(b"\x40\x25") == (37, 2)
    assert decode_varint(b"\xff" * 8) == ((1 << 62) - 1, 8)


def test_unknown_duplicates_and_repeated_tokens_accepted() -> None:
    """§2.5: unknown parameters may repeat; AUTHORIZATION_TOKEN may repeat."""
    token = vi(3, 0) + b"t"
    params = vi(4) + vi(0x40, 1, 0x40, 2) + vi(3) + bs(token) + vi(3) + bs(token)
    [msg] = ControlStreamParser().feed(frame(0x03, subscribe(params=params)))
    assert len(msg.parameters.auth_tokens) == 2  # type: ignore[union-attr]


def test_failed_parser_stays_failed() -> None:
    parser = ControlStreamParser()
    with pytest.raises(UnknownMessageType):
        parser.feed(vi(0x01))
    with pytest.raises(UnknownMessageType):
        parser.feed(CONTROL_VECTORS[0][1])
    stream = DataStreamParser()
    with pytest.raises(UnknownStreamType):
        stream.feed(b"\x00")
    with pytest.raises(UnknownStreamType):
        stream.feed(b"\x10")
