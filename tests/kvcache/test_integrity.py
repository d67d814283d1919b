"""Payload digests in the MoQT object extension header."""

from __future__ import annotations

import numpy as np
import pytest

from ray_kvmoq.kvcache import (
    KV_DIGEST_EXTENSION,
    DigestMismatchError,
    IntegrityError,
    KVErrorCode,
    KVGeometry,
    MissingDigestError,
    attach_digest,
    get_codec,
    verify,
)


def test_extension_type_is_odd_so_the_value_is_bytes() -> None:
    assert KV_DIGEST_EXTENSION % 2 == 1
    ext_type, value = attach_digest(b"payload")
    assert ext_type == KV_DIGEST_EXTENSION and isinstance(value, bytes) and len(value) == 17
    assert value[0] == 1  # BLAKE2b-128


def test_verify_accepts_pairs_and_mappings() -> None:
    payload = b"\x01" * 1000
    pair = attach_digest(payload)
    verify(payload, [pair])
    verify(payload, [(2, 5), pair, (0x41, b"other")])
    verify(memoryview(payload), {pair[0]: pair[1]})


def test_damaged_object_never_reaches_the_decoder(kv: np.ndarray, geo: KVGeometry) -> None:
    codec = get_codec("Int8")
    objs = codec.encode_chunk(kv)
    exts = [[attach_digest(o)] for o in objs]
    for o, e in zip(objs, exts, strict=True):
        verify(o, e)
    damaged = bytearray(objs[10])
    damaged[500] ^= 0x04  # still decodes to finite garbage without the digest
    assert np.isfinite(codec.decode_objects([bytes(damaged)], geo)).all()
    with pytest.raises(DigestMismatchError) as info:
        verify(bytes(damaged), exts[10])
    assert info.value.error_code == KVErrorCode.DIGEST_MISMATCH
    with pytest.raises(DigestMismatchError):
        verify(objs[10][:-1], exts[10])
    with pytest.raises(DigestMismatchError):
        verify(objs[11], exts[10])  # a digest of another object


def test_missing_or_malformed_digest() -> None:
    with pytest.raises(MissingDigestError):
        verify(b"x", [])
    with pytest.raises(MissingDigestError):
        verify(b"x", [(KV_DIGEST_EXTENSION + 1, 5)])
    good = attach_digest(b"x")
    for bad in (
        [good, good],
        [(KV_DIGEST_EXTENSION, b"\x02" + good[1][1:])],
        [(KV_DIGEST_EXTENSION, good[1][:-1])],
        [(KV_DIGEST_EXTENSION, 7)],
    ):
        with pytest.raises(IntegrityError):
            verify(b"x", bad)


def test_keyed_digests_verify_only_with_the_cluster_key() -> None:
    from ray_kvmoq.kvcache.integrity import (
        DIGEST_BLAKE2B_128_KEYED,
        attach_digest,
        digest_key,
        verify,
    )

    key, other = digest_key(b"a" * 32), digest_key(b"b" * 32)
    assert key != other and len(key) == 32 and digest_key(b"a" * 32) == key
    payload = b"KV payload bytes" * 64
    ext = [attach_digest(payload, key)]
    assert ext[0][1][0] == DIGEST_BLAKE2B_128_KEYED
    verify(payload, ext, key)
    with pytest.raises(DigestMismatchError):  # another cluster's key
        verify(payload, [attach_digest(payload, other)], key)
    with pytest.raises(IntegrityError, match="not signed with the cluster's digest key"):
        verify(payload, [attach_digest(payload)], key)  # a forger without the key
    with pytest.raises(IntegrityError, match="no cluster key"):
        verify(payload, ext)  # a receiver without the key cannot vouch for it
    with pytest.raises(DigestMismatchError):
        verify(payload[:-1] + b"!", ext, key)
