"""Round trips, byte layouts and error bounds of the seven codecs on synthetic KV."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_kvmoq.kvcache import (
    HEADER_SIZE,
    TRACK_NAMES,
    CodecId,
    KVGeometry,
    UnknownCodecError,
    build_codebook,
    decode_any,
    get_codec,
    parse_header,
)
from ray_kvmoq.kvcache.synthetic import synthetic_kv

# Relative L2 bound per codec on synthetic KV (K, V); kv-payload.md §4.2 gates with headroom.
REL_L2 = {
    b"FP16": (1e-3, 1e-3),
    b"BF16": (4e-3, 4e-3),
    b"FP8": (0.03, 0.03),
    b"Int8": (0.03, 0.03),
    b"FP4": (0.12, 0.12),
    b"Int4": (0.13, 0.12),
    b"AC": (0.21, 0.25),
}
# object sizes for L=30, H=3, D=64 (docs/kv-payload-format.md)
SIZES = {b"FP16": 23052, b"BF16": 23052, b"FP8": 11772, b"Int8": 11772, b"FP4": 6732}


def _rel(a: np.ndarray, b: np.ndarray, kv: int) -> float:
    return float(np.linalg.norm(a[:, kv] - b[:, kv]) / np.linalg.norm(b[:, kv]))


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_round_trip_and_error_bound(
    name: bytes, kv: np.ndarray, geo: KVGeometry, codebook: bytes
) -> None:
    codec = get_codec(name)
    objs = codec.encode_chunk(kv, codebook=codebook)
    assert len(objs) == kv.shape[3]
    out = codec.decode_objects(objs, geo, codebook=codebook)
    assert out.shape == kv.shape and out.dtype == np.float32
    assert np.isfinite(out).all()
    k_bound, v_bound = REL_L2[name]
    assert _rel(out, kv, 0) < k_bound and _rel(out, kv, 1) < v_bound
    if name in SIZES:
        assert {len(o) for o in objs} == {SIZES[name]}
    if name == b"Int4":
        assert {len(o) for o in objs} == {7212}
    head = parse_header(objs[0])
    assert head.codec == CodecId.from_track_name(name) and head.geometry == geo
    # decode_any picks the codec from the header
    assert np.array_equal(decode_any(objs, geo, codebook=codebook), out)


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_each_object_decodes_alone(
    name: bytes, kv: np.ndarray, geo: KVGeometry, codebook: bytes
) -> None:
    codec = get_codec(name)
    objs = codec.encode_chunk(kv, codebook=codebook)
    whole = codec.decode_objects(objs, geo, codebook=codebook)
    for t in (0, 57, 127):
        alone = codec.decode_objects([objs[t]], geo, codebook=codebook)
        assert np.array_equal(alone[:, :, :, 0], whole[:, :, :, t])
    picked = codec.decode_objects([objs[9], objs[3]], geo, codebook=codebook)
    assert np.array_equal(picked[:, :, :, 1], whole[:, :, :, 3])


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_objects_decode_from_views_of_one_buffer_as_from_bytes(
    name: bytes, kv: np.ndarray, geo: KVGeometry, codebook: bytes
) -> None:
    """The connector decodes loaded groups from memoryviews of the group's one buffer (the
    object store's shared memory), without copying each object out first."""
    codec = get_codec(name)
    objs = codec.encode_chunk(kv, codebook=codebook)
    buf = memoryview(b"".join(objs))
    views, at = [], 0
    for o in objs:
        views.append(buf[at : at + len(o)])
        at += len(o)
    from_views = codec.decode_objects(views, geo, codebook=codebook)
    assert np.array_equal(from_views, codec.decode_objects(objs, geo, codebook=codebook))


@pytest.mark.parametrize("name", [b"FP16", b"BF16", b"FP8", b"Int8", b"Int4"])
def test_reencode_of_decoded_is_byte_identical(
    name: bytes, kv: np.ndarray, geo: KVGeometry
) -> None:
    codec = get_codec(name)
    objs = codec.encode_chunk(kv)
    assert codec.encode_chunk(codec.decode_objects(objs, geo)) == objs


def test_bf16_and_fp16_tracks_are_bit_exact_for_matching_input(kv: np.ndarray) -> None:
    geo = KVGeometry.of(kv)
    bf = torch.from_numpy(kv).to(torch.bfloat16)
    bits = bf.view(torch.uint16).numpy()
    out = get_codec("BF16").decode_objects(get_codec("BF16").encode_chunk(bits), geo, dtype="bf16")
    assert np.array_equal(out, bits)
    # a torch bf16 tensor is accepted as such
    assert get_codec("BF16").encode_chunk(bf) == get_codec("BF16").encode_chunk(bits)
    half = kv.astype(np.float16)
    out16 = get_codec("FP16").decode_objects(
        get_codec("FP16").encode_chunk(half), geo, dtype="float16"
    )
    assert np.array_equal(out16, half)


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_input_dtypes_agree(name: bytes, kv: np.ndarray, codebook: bytes) -> None:
    """float32, float16 and bf16 bits of the same (bf16-representable) values encode alike."""
    codec = get_codec(name)
    bits = torch.from_numpy(kv).to(torch.bfloat16).view(torch.uint16).numpy()
    as_f32 = (bits.astype(np.uint32) << 16).view(np.float32)
    assert codec.encode_chunk(bits, codebook=codebook) == codec.encode_chunk(
        as_f32, codebook=codebook
    )


def test_output_dtypes(kv: np.ndarray, geo: KVGeometry) -> None:
    codec = get_codec("Int8")
    objs = codec.encode_chunk(kv)
    f32 = codec.decode_objects(objs, geo)
    bf = codec.decode_objects(objs, geo, dtype="bf16")
    f16 = codec.decode_objects(objs, geo, dtype="float16")
    assert bf.dtype == np.uint16 and f16.dtype == np.float16
    back = (bf.astype(np.uint32) << 16).view(np.float32)
    assert np.allclose(back, f32, rtol=8e-3, atol=1e-6)
    assert np.allclose(f16.astype(np.float32), f32, rtol=1e-3, atol=1e-4)


def test_ac_is_at_least_5x_smaller_than_fp16(kv: np.ndarray, geo: KVGeometry) -> None:
    cb = build_codebook(kv)
    objs = get_codec("AC").encode_chunk(kv, codebook=cb)
    per_token = (sum(map(len, objs)) + len(cb)) / len(objs)  # codebook counted too
    assert geo.fp16_bytes_per_token / per_token > 5.0


def test_registry_lookups() -> None:
    assert get_codec("Int8") is get_codec(b"Int8") is get_codec(4) is get_codec(CodecId.INT8)
    assert get_codec("AC").needs_codebook and not get_codec("AC").self_contained
    assert all(get_codec(n).self_contained for n in TRACK_NAMES if n != b"AC")
    for bad in ("int8", b"FP32", 0, 8, 255, True, 3.0):
        with pytest.raises(UnknownCodecError):
            get_codec(bad)  # type: ignore[arg-type]


def test_zero_and_constant_chunks(geo: KVGeometry) -> None:
    """amax = 0 must not divide by zero anywhere."""
    zeros = np.zeros((30, 2, 3, 4, 64), np.float32)
    cb = build_codebook(zeros)
    for name in TRACK_NAMES:
        c = get_codec(name)
        out = c.decode_objects(c.encode_chunk(zeros, codebook=cb), geo, codebook=cb)
        assert np.array_equal(out, zeros)


@settings(max_examples=25, deadline=None)
@given(
    layers=st.integers(1, 3),
    heads=st.integers(1, 3),
    dim=st.sampled_from([16, 32, 64, 128]),
    tokens=st.integers(1, 9),
    seed=st.integers(0, 2**16),
    name=st.sampled_from(TRACK_NAMES),
)
def test_round_trip_any_geometry(
    layers: int, heads: int, dim: int, tokens: int, seed: int, name: bytes
) -> None:
    kv = synthetic_kv(num_layers=layers, num_kv_heads=heads, tokens=tokens, head_dim=dim, seed=seed)
    geo = KVGeometry.of(kv)
    codec = get_codec(name)
    if name == b"Int4" and dim % 32:
        return
    cb = build_codebook(kv) if codec.needs_codebook else None
    objs = codec.encode_chunk(kv, codebook=cb)
    assert all(len(o) > HEADER_SIZE for o in objs)
    out = codec.decode_objects(objs, geo, codebook=cb)
    assert out.shape == kv.shape and np.isfinite(out).all()
    assert _rel(out, kv, 0) < 0.5


@pytest.mark.parametrize("name", TRACK_NAMES)
def test_encoding_never_modifies_the_input(name: bytes) -> None:
    """Regression: a one-token chunk is already token-major, so a view reaches the codec."""
    for tokens in (1, 3):
        kv = synthetic_kv(num_layers=2, num_kv_heads=1, tokens=tokens, head_dim=32, seed=3)
        before = kv.copy()
        codec = get_codec(name)
        cb = build_codebook(kv) if codec.needs_codebook else None
        codec.encode_chunk(kv, codebook=cb)
        assert np.array_equal(kv, before)


@pytest.mark.parametrize(
    ("name", "param"), [(b"FP8", 1), (b"Int8", 1), (b"Int4", 16), (b"Int4", 64)]
)
def test_decoder_follows_the_header_param(
    name: bytes, param: int, kv: np.ndarray, geo: KVGeometry
) -> None:
    """Per-head scales (FP8/Int8 param 1) and other Int4 group sizes decode with the stock codec."""
    stock = get_codec(name)
    variant = type("Variant", (type(stock),), {"default_param": param})()
    objs = variant.encode_chunk(kv)
    assert parse_header(objs[0]).param == param
    assert len(objs[0]) == variant.object_size(geo) != stock.object_size(geo)
    out = stock.decode_objects(objs, geo)
    k_bound, v_bound = REL_L2[name]
    slack = 1.6 if param > 32 else 1.0  # coarser groups, larger error
    assert _rel(out, kv, 0) < k_bound * slack and _rel(out, kv, 1) < v_bound * slack
