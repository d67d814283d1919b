"""Fuzz target: draft-16 MoQT data streams: SUBGROUP_HEADER / FETCH_HEADER streams
and their objects, through :class:`~ray_kvmoq.moqt.codec.StreamParser16` (draft-14 streams:
``fuzz_data_stream.py``).

Checked, for every input (the stream's bytes, then its FIN):

* only :class:`~ray_kvmoq.moqt.codec.MoqtError` escapes (ObjectTooLarge included: the cap is
  set to 4 KiB here so length-prefix checks are reached);
* fed all at once and in input-chosen pieces, the parser yields the same events (payloads
  compared by value), or fails with the same error type;
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["ray_kvmoq"]):
    from ray_kvmoq.moqt import codec

from _common import chunked, main

CAP = 4096


def _norm(ev: object) -> object:
    if isinstance(ev, codec.ObjectParsed):
        return (
            type(ev).__name__,
            ev.group,
            ev.subgroup,
            ev.object_id,
            ev.status,
            ev.publisher_priority,
            tuple(ev.extensions),
            bytes(ev.payload),
        )
    return ev


def _parse(pieces: list[bytes], total: int) -> tuple[list[object], str | None]:
    parser = codec.StreamParser16(max_object_size=CAP)
    out: list[object] = []
    try:
        for i, piece in enumerate(pieces):
            out += [_norm(e) for e in parser.feed(piece, fin=i == len(pieces) - 1)]
    except codec.MoqtError as exc:
        return out, type(exc).__name__
    return out, None


def test_one_input(data: bytes) -> None:
    if not data:
        return
    whole, err = _parse([data], len(data))
    split, split_err = _parse(list(chunked(data, data[-1])), len(data))
    assert err == split_err and split[: len(whole)] == whole, (whole, err, split, split_err)
    if err is None:
        assert whole == split


if __name__ == "__main__":
    main(test_one_input)
