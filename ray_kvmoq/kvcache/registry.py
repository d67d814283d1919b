"""The codec registry: ``get_codec("Int8")``, ``get_codec(4)``, ``get_codec(CodecId.INT8)``.

Codec instances are stateless and shared; they are built on first use (vLLM-style lazy
registry), one per compression in the draft's table.
"""

from __future__ import annotations

from functools import cache

import numpy as np

from .ac import ACCodec
from .codec import BF16Codec, FP8Codec, FP16Codec, Int8Codec, KVCodec
from .errors import MalformedPayloadError, UnknownCodecError
from .fourbit import FP4Codec, Int4Codec
from .layout import KVGeometry, OutDType, parse_header
from .naming import CodecId

_CLASSES: dict[CodecId, type[KVCodec]] = {
    CodecId.FP16: FP16Codec,
    CodecId.BF16: BF16Codec,
    CodecId.FP8: FP8Codec,
    CodecId.INT8: Int8Codec,
    CodecId.FP4: FP4Codec,
    CodecId.INT4: Int4Codec,
    CodecId.AC: ACCodec,
}


@cache
def _instance(cid: CodecId) -> KVCodec:
    return _CLASSES[cid]()


def get_codec(name_or_id: str | bytes | int) -> KVCodec:
    """The codec for a track name (``"Int8"`` / ``b"Int8"``) or codec id (``4``).

    Raises :class:`UnknownCodecError` for anything else.
    """
    if isinstance(name_or_id, bool):
        raise UnknownCodecError(f"not a codec: {name_or_id!r}")
    if isinstance(name_or_id, int):
        try:
            return _instance(CodecId(name_or_id))
        except ValueError:
            raise UnknownCodecError(f"unknown KV codec id {name_or_id}") from None
    if isinstance(name_or_id, str):
        name_or_id = name_or_id.encode()
    if isinstance(name_or_id, bytes):
        return _instance(CodecId.from_track_name(name_or_id))
    raise UnknownCodecError(f"not a codec name or id: {name_or_id!r}")


def decode_any(
    objects: list[bytes],
    geometry: KVGeometry,
    *,
    dtype: OutDType = "float32",
    codebook: bytes | None = None,
) -> np.ndarray:
    """Decode objects of any codec, picked from the first object's header."""
    if not objects:
        raise MalformedPayloadError("no objects to decode")
    codec = get_codec(int(parse_header(objects[0]).codec))
    return codec.decode_objects(objects, geometry, dtype=dtype, codebook=codebook)
