"""Inputs the fuzzers found, each kept as a regression test naming its root cause (the input
also lives in ``fuzz/corpus/<target>/regress-*``, replayed by the smoke run)."""

from __future__ import annotations

import struct
import time
import tracemalloc
from pathlib import Path

import pytest

from ray_kvmoq.kvcache import CodebookError, parse_codebook

CORPUS = Path(__file__).resolve().parents[2] / "fuzz" / "corpus"


def _last_record(data: bytes) -> bytes:
    """The codebook blob of a ``kv_payload`` input (its last ``u16 length + bytes`` record)."""
    pos, last = 3, b""
    while pos + 2 <= len(data):
        (n,) = struct.unpack_from("<H", data, pos)
        last, pos = data[pos + 2 : pos + 2 + n], pos + 2 + n
    return last


@pytest.mark.timeout(30)
def test_ac_codebook_with_huge_geometry_is_refused_before_allocating() -> None:
    """Root cause: ``parse_codebook`` built its per-value table index (one int32 per value of
    L·2·H·D, three u16 header fields) before checking the table count, so a 17-byte codebook
    claiming H=61471, D=12559 allocated ~6 GB and hung the decoder (fuzz_kv_payload timeout)."""
    blob = _last_record((CORPUS / "kv_payload" / "regress-ac-codebook-huge-geometry").read_bytes())
    assert len(blob) == 17
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        with pytest.raises(CodebookError, match="values per token"):
            parse_codebook(blob)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert time.monotonic() - t0 < 1.0 and peak < 1 << 20
    # the same geometry bound holds for a header that is otherwise well formed
    head = struct.pack("<BBBBHBBHHH", 1, 12, 31, 2, 2, 0, 0, 1, 4096, 2048)
    with pytest.raises(CodebookError, match="values per token"):
        parse_codebook(head + bytes([32, 32]))


def test_d16_subscribe_ok_with_an_empty_largest_object_is_malformed() -> None:
    """Root cause: ``dec_subscribe_ok_16`` tested the LARGEST_OBJECT parameter for truthiness,
    so an empty value (present, but no Location in it) decoded as "no largest" while the
    parameter stayed in ``parameters``; re-encoding then dropped it (fuzz_control round trip,
    draft-16). An empty Location is a truncated one: PROTOCOL_VIOLATION."""
    from ray_kvmoq.moqt import codec

    # request 4, track alias 0, one parameter: type 9 (LARGEST_OBJECT), length 0
    payload = bytes.fromhex("0400010900")
    with pytest.raises(codec.ProtocolViolation, match="LARGEST_OBJECT"):
        codec.decode_control(
            int(codec.MessageTypeD16.SUBSCRIBE_OK), payload, version=codec.DRAFT_16
        )
    stream = (CORPUS / "control" / "regress-d16-subscribe-ok-empty-largest").read_bytes()[1:]
    with pytest.raises(codec.ProtocolViolation):
        codec.ControlStreamParser(version=codec.DRAFT_16).feed(stream)
