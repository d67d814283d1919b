"""Bad payloads, geometry, codec ids and codebooks raise specific errors, never tensors."""

from __future__ import annotations

import struct

import numpy as np
import pytest

from ray_kvmoq.kvcache import (
    HEADER_SIZE,
    TRACK_NAMES,
    CodebookError,
    GeometryMismatchError,
    InvalidInputError,
    KVErrorCode,
    KVGeometry,
    MalformedPayloadError,
    MissingCodebookError,
    PayloadError,
    TruncatedPayloadError,
    UnknownCodecError,
    UnsupportedVersionError,
    build_codebook,
    decode_any,
    get_codec,
)
from ray_kvmoq.kvcache.synthetic import synthetic_kv


@pytest.fixture(scope="module")
def small() -> np.ndarray:
    return synthetic_kv(num_layers=4, num_kv_heads=2, tokens=8, head_dim=32, seed=5)


@pytest.fixture(scope="module")
def small_cb(small: np.ndarray) -> bytes:
    return build_codebook(small, codebook_id=7)


def _objs(name: bytes, kv: np.ndarray, cb: bytes) -> list[bytes]:
    return get_codec(name).encode_chunk(kv, codebook=cb)


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_truncated_and_extended_objects(name: bytes, small: np.ndarray, small_cb: bytes) -> None:
    geo = KVGeometry.of(small)
    codec = get_codec(name)
    objs = _objs(name, small, small_cb)
    for cut in (0, 5, HEADER_SIZE, len(objs[2]) // 2, len(objs[2]) - 1):
        bad = [*objs[:2], objs[2][:cut], *objs[3:]]
        with pytest.raises(PayloadError):
            codec.decode_objects(bad, geo, codebook=small_cb)
    with pytest.raises(PayloadError):
        codec.decode_objects([objs[0] + b"\x00\x01"], geo, codebook=small_cb)
    with pytest.raises(PayloadError):
        codec.decode_objects([], geo, codebook=small_cb)


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_geometry_mismatch(name: bytes, small: np.ndarray, small_cb: bytes) -> None:
    objs = _objs(name, small, small_cb)
    other = KVGeometry(num_layers=4, num_kv_heads=2, head_dim=64)
    with pytest.raises(GeometryMismatchError) as info:
        get_codec(name).decode_objects(objs, other, codebook=small_cb)
    assert info.value.error_code == KVErrorCode.GEOMETRY_MISMATCH


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_header_damage(name: bytes, small: np.ndarray, small_cb: bytes) -> None:
    geo = KVGeometry.of(small)
    codec = get_codec(name)
    objs = _objs(name, small, small_cb)

    def patch(i: int, value: int, which: int = 0) -> list[bytes]:
        o = bytearray(objs[which])
        o[i] = value
        return [bytes(o) if k == which else x for k, x in enumerate(objs)]

    with pytest.raises(UnsupportedVersionError):
        codec.decode_objects(patch(0, 2), geo, codebook=small_cb)
    with pytest.raises(UnknownCodecError):
        codec.decode_objects(patch(1, 99), geo, codebook=small_cb)
    with pytest.raises(UnknownCodecError):
        decode_any(patch(1, 0), geo, codebook=small_cb)
    other = 1 if name != b"FP16" else 2
    with pytest.raises(UnknownCodecError):
        codec.decode_objects(patch(1, other), geo, codebook=small_cb)
    # a later object disagreeing with the first (geometry byte, param byte)
    with pytest.raises(PayloadError):
        codec.decode_objects(patch(2, 5, which=3), geo, codebook=small_cb)
    with pytest.raises(PayloadError):
        codec.decode_objects(patch(8, 77, which=3), geo, codebook=small_cb)
    # reserved bytes are ignored
    assert np.array_equal(
        codec.decode_objects(patch(10, 0xAA), geo, codebook=small_cb),
        codec.decode_objects(objs, geo, codebook=small_cb),
    )


@pytest.mark.parametrize("name", [b"FP8", b"Int8", b"FP4", b"Int4", b"AC"])
def test_garbled_scales_rejected(name: bytes, small: np.ndarray, small_cb: bytes) -> None:
    geo = KVGeometry.of(small)
    objs = _objs(name, small, small_cb)
    o = bytearray(objs[1])
    nan = struct.pack("<f", float("nan")) if name in (b"FP8", b"Int8", b"FP4") else b"\x00\x7e"
    o[HEADER_SIZE : HEADER_SIZE + len(nan)] = nan
    with pytest.raises(MalformedPayloadError):
        get_codec(name).decode_objects([objs[0], bytes(o)], geo, codebook=small_cb)


def test_fp_nan_values_rejected(small: np.ndarray) -> None:
    geo = KVGeometry.of(small)
    for name, bad in ((b"FP16", b"\x00\x7e"), (b"BF16", b"\xc0\x7f"), (b"FP8", b"\x7f")):
        objs = _objs(name, small, b"")
        o = bytearray(objs[0])
        o[-len(bad) :] = bad
        with pytest.raises(MalformedPayloadError):
            get_codec(name).decode_objects([bytes(o)], geo)


def test_garbled_ac_stream_rejected(small: np.ndarray, small_cb: bytes) -> None:
    geo = KVGeometry.of(small)
    codec = get_codec("AC")
    objs = _objs(b"AC", small, small_cb)
    rng = np.random.default_rng(0)
    fixed = HEADER_SIZE + 4 * 4 + 4 * 32
    caught = 0
    for _ in range(40):
        o = bytearray(objs[4])
        i = int(rng.integers(fixed - 4 * 32, len(o)))
        o[i] ^= 1 << int(rng.integers(0, 8))
        try:
            codec.decode_objects([bytes(o)], geo, codebook=small_cb)
        except PayloadError:
            caught += 1
    # the rANS end-state check catches nearly every flip; the digest catches the rest
    assert caught >= 36


def test_missing_wrong_and_garbled_codebook(small: np.ndarray, small_cb: bytes) -> None:
    geo = KVGeometry.of(small)
    codec = get_codec("AC")
    objs = _objs(b"AC", small, small_cb)
    with pytest.raises(MissingCodebookError) as info:
        codec.decode_objects(objs, geo)
    assert info.value.error_code == KVErrorCode.MISSING_CODEBOOK
    with pytest.raises(MissingCodebookError):
        codec.encode_chunk(small)
    other = build_codebook(small, codebook_id=8)
    with pytest.raises(CodebookError):
        codec.decode_objects(objs, geo, codebook=other)
    for bad in (small_cb[:5], small_cb[:20], small_cb[:-3], small_cb[:14] + b"\x00" * 60):
        with pytest.raises(CodebookError):
            codec.decode_objects(objs, geo, codebook=bad)
    wrong_geo = build_codebook(synthetic_kv(num_layers=4, num_kv_heads=1, tokens=4, head_dim=32))
    with pytest.raises(GeometryMismatchError):
        codec.decode_objects(objs, geo, codebook=wrong_geo)
    with pytest.raises(GeometryMismatchError):
        codec.encode_chunk(small, codebook=wrong_geo)


def test_bad_encoder_input(small: np.ndarray) -> None:
    codec = get_codec("Int8")
    for bad in (small[0], small.astype(np.float64), small[:, :1], "kv", small[:, :, :, :0]):
        with pytest.raises(InvalidInputError):
            codec.encode_chunk(bad)
    with pytest.raises(InvalidInputError):
        build_codebook(small, bins=np.full((4, 2), 7))
    with pytest.raises(InvalidInputError):
        codec.decode_objects(codec.encode_chunk(small), KVGeometry.of(small), dtype="int8")  # type: ignore[arg-type]


def test_fixed_size_lengths_reported(small: np.ndarray) -> None:
    geo = KVGeometry.of(small)
    objs = _objs(b"Int8", small, b"")
    with pytest.raises(TruncatedPayloadError, match="object 1 has"):
        get_codec("Int8").decode_objects([objs[0], objs[1][:-1]], geo)


def test_fp16_track_refuses_values_it_cannot_carry(small: np.ndarray) -> None:
    big = small.copy()
    big[0, 0, 0, 0, 0] = 1e6
    with pytest.raises(InvalidInputError, match="FP16"):
        get_codec("FP16").encode_chunk(big)
    assert get_codec("BF16").encode_chunk(big)  # BF16 has the range
