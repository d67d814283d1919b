"""Fuzz target: the KV payload decoders of ``ray_kvmoq.kvcache`` (every codec: FP16 BF16 FP8
Int8 FP4 Int4 AC, the object header, the AC codebook, the payload digest check).

Input layout (:func:`pack`, also used by ``make_seeds.py``): one byte picks the codec, one the
geometry, one the output dtype and whether the AC codebook is the good one or taken from the
input, then ``u16 length + bytes`` records: the objects (and, last, a codebook blob).

Checked: nothing but :class:`~ray_kvmoq.kvcache.KVCacheError` escapes ``parse_header``,
``parse_codebook``, ``get_codec(..).decode_objects``, ``decode_any`` or ``verify``; a decode
that succeeds has shape ``[L, 2, H, T, D]`` for T objects.
"""

from __future__ import annotations

import struct

import atheris

with atheris.instrument_imports(include=["ray_kvmoq"]):
    import numpy as np

    from ray_kvmoq import kvcache
    from ray_kvmoq.kvcache import KVCacheError, KVGeometry

from _common import main

CODECS = kvcache.TRACK_NAMES
GEOMETRIES = (
    KVGeometry(num_layers=1, num_kv_heads=1, head_dim=32),
    KVGeometry(num_layers=2, num_kv_heads=2, head_dim=64),
    KVGeometry(num_layers=3, num_kv_heads=1, head_dim=16),  # too narrow for Int4: refused
)
DTYPES = ("float32", "float16", "bf16")
MAX_OBJECTS = 8


def _calibration(geo: KVGeometry, tokens: int = 4) -> np.ndarray:
    rng = np.random.default_rng(geo.num_layers * 7 + geo.head_dim)
    shape = (geo.num_layers, 2, geo.num_kv_heads, tokens, geo.head_dim)
    return rng.standard_normal(shape).astype(np.float32)


CODEBOOKS = [kvcache.build_codebook(_calibration(g)) for g in GEOMETRIES]


def pack(codec: int, geometry: int, flags: int, blobs: list[bytes]) -> bytes:
    """An input of this target's layout (see the module docstring)."""
    out = bytearray([codec, geometry, flags])
    for b in blobs:
        out += struct.pack("<H", len(b)) + b
    return bytes(out)


def _unpack(data: bytes) -> list[bytes]:
    blobs, pos = [], 3
    while pos + 2 <= len(data) and len(blobs) < MAX_OBJECTS + 1:
        (n,) = struct.unpack_from("<H", data, pos)
        blobs.append(data[pos + 2 : pos + 2 + n])
        pos += 2 + n
    return blobs


def test_one_input(data: bytes) -> None:
    if len(data) < 3:
        return
    name = CODECS[data[0] % len(CODECS)]
    g = data[1] % len(GEOMETRIES)
    geo, dtype, own_codebook = GEOMETRIES[g], DTYPES[data[2] % 3], bool(data[2] & 4)
    blobs = _unpack(data)
    codebook = CODEBOOKS[g]
    if own_codebook and blobs:
        codebook = blobs.pop()
        try:
            kvcache.parse_codebook(codebook)
        except KVCacheError:
            pass
    objects = blobs[:MAX_OBJECTS]
    for obj in objects[:1]:
        try:
            kvcache.parse_header(obj)
        except KVCacheError:
            pass
        try:
            kvcache.verify(obj, [(kvcache.KV_DIGEST_EXTENSION, data[3:20])], key=b"k" * 32)
        except KVCacheError:
            pass
    try:
        arr = kvcache.get_codec(name).decode_objects(
            objects,
            geo,
            dtype=dtype,
            codebook=codebook,  # type: ignore[arg-type]
        )
    except KVCacheError:
        pass
    else:
        assert arr.shape == (geo.num_layers, 2, geo.num_kv_heads, len(objects), geo.head_dim)
    try:
        kvcache.decode_any(list(objects), geo, codebook=codebook)
    except KVCacheError:
        pass


if __name__ == "__main__":
    main(test_one_input)
