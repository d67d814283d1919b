"""Fuzz target: MoQT control messages (draft-14 §9) through the public codec.

Each input is a control-stream byte string. Checked, for every input:

* :class:`~ray_kvmoq.moqt.codec.ControlStreamParser` raises nothing but
  :class:`~ray_kvmoq.moqt.codec.MoqtError` (the documented peer-input errors); NeedMoreData never
  escapes it;
* fed all at once and fed in input-chosen pieces it yields the same messages, or fails with the
  same error type (a failing ``feed()`` returns nothing, so the pieces may yield more first);
* every decoded message re-encodes (``encode_control``) and decodes back to itself;
* :func:`~ray_kvmoq.moqt.codec.decode_control` of (first byte as type, rest as payload) raises
  only MoqtError.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["ray_kvmoq"]):
    from ray_kvmoq.moqt import codec

from _common import chunked, main

VERSION = codec.DRAFT_14


def _parse(pieces: list[bytes]) -> tuple[list[object], str | None]:
    parser = codec.ControlStreamParser(version=VERSION)
    out: list[object] = []
    try:
        for i, piece in enumerate(pieces):
            out += parser.feed(piece, fin=i == len(pieces) - 1)
    except codec.MoqtError as exc:
        return out, type(exc).__name__
    return out, None


def test_one_input(data: bytes) -> None:
    if not data:
        return
    whole, err = _parse([data])
    split, split_err = _parse(list(chunked(data, data[0])))
    # same verdict; a failing feed() returns nothing, so pieces before the error may have
    # yielded more messages than the one whole feed
    assert err == split_err and split[: len(whole)] == whole, (whole, err, split, split_err)
    if err is None:
        assert whole == split
    for msg in split:
        msg_type, payload, _ = codec.read_control_frame(codec.encode_control(msg, version=VERSION))
        again = codec.decode_control(msg_type, payload, version=VERSION)
        assert again == msg, (msg, again)
    try:
        codec.decode_control(data[0], data[1:], version=VERSION)
    except codec.MoqtError:
        pass


if __name__ == "__main__":
    main(test_one_input)
