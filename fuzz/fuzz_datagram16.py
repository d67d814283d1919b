"""Fuzz target: draft-16 MoQT OBJECT_DATAGRAMs through
:func:`~ray_kvmoq.moqt.codec.decode_datagram`.

Checked: only :class:`~ray_kvmoq.moqt.codec.MoqtError` escapes, and every datagram that
decodes re-encodes (``encode_datagram``) to bytes that decode to the same datagram.
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["ray_kvmoq"]):
    from ray_kvmoq.moqt import codec

from _common import main


def test_one_input(data: bytes) -> None:
    try:
        dgram = codec.decode_datagram(data, version=codec.DRAFT_16)
    except codec.MoqtError:
        return
    again = codec.decode_datagram(
        codec.encode_datagram(dgram, version=codec.DRAFT_16), version=codec.DRAFT_16
    )
    assert again == dgram, (dgram, again)


if __name__ == "__main__":
    main(test_one_input)
