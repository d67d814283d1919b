"""Fuzz target: MoQT control messages (draft-14 §9, and every other version the codec
supports) through the public codec.

Each input is one selector byte (its value modulo the number of supported versions picks the
version, and it seeds the chunking), then a control-stream byte string. Checked, per input:

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

VERSIONS = tuple(sorted(codec.SUPPORTED_VERSIONS))  # draft-14 first


def _parse(pieces: list[bytes], version: int) -> tuple[list[object], str | None]:
    parser = codec.ControlStreamParser(version=version)
    out: list[object] = []
    try:
        for i, piece in enumerate(pieces):
            out += parser.feed(piece, fin=i == len(pieces) - 1)
    except codec.MoqtError as exc:
        return out, type(exc).__name__
    return out, None


def test_one_input(data: bytes) -> None:
    if len(data) < 2:
        return
    version, stream = VERSIONS[data[0] % len(VERSIONS)], data[1:]
    whole, err = _parse([stream], version)
    split, split_err = _parse(list(chunked(stream, data[0])), version)
    # same verdict; a failing feed() returns nothing, so pieces before the error may have
    # yielded more messages than the one whole feed
    assert err == split_err and split[: len(whole)] == whole, (whole, err, split, split_err)
    if err is None:
        assert whole == split
    for msg in split:
        frame = codec.encode_control(msg, version=version)  # type: ignore[arg-type]
        msg_type, payload, _ = codec.read_control_frame(frame, version=version)
        again = codec.decode_control(msg_type, payload, version=version)
        assert again == msg, (msg, again)
    try:
        codec.decode_control(stream[0], stream[1:], version=version)
    except codec.MoqtError:
        pass


if __name__ == "__main__":
    main(test_one_input)
