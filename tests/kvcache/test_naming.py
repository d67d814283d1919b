"""Track naming per draft-shi-moq-kvcache, prompt ids and chained chunk hashes."""

from __future__ import annotations

import numpy as np
import pytest

from ray_kvmoq.kvcache import (
    KV_NAMESPACE_ROOT,
    TRACK_NAMES,
    CodecId,
    KVErrorCode,
    KVNameError,
    KVTrackName,
    chunk_hashes,
    kv_namespace,
    parse_kv_track,
    prompt_id,
    token_index,
)

SALT = b"tenant-a"
TOKENS = list(range(1000, 1300))


def test_track_names_are_the_drafts_table() -> None:
    assert TRACK_NAMES == (b"FP16", b"BF16", b"FP8", b"Int8", b"FP4", b"Int4", b"AC")
    assert [CodecId.from_track_name(n).track_name for n in TRACK_NAMES] == list(TRACK_NAMES)


def test_namespace_tuple() -> None:
    pid = prompt_id(SALT, TOKENS)
    assert kv_namespace("SmolLM2-135M", pid) == (
        b"moq://kvcache.moq.arpa/v1/",
        b"SmolLM2-135M",
        pid.encode(),
    )
    name = KVTrackName(model="SmolLM2-135M", prompt_id=pid, codec=CodecId.INT8)
    assert name.name == b"Int8" and name.namespace[0] == KV_NAMESPACE_ROOT
    assert parse_kv_track(name.namespace, name.name) == name


def test_prompt_id_is_a_salted_digest_of_tokens_not_text() -> None:
    pid = prompt_id(SALT, TOKENS)
    assert len(pid) == 32 and int(pid, 16) >= 0
    assert pid == prompt_id(SALT, np.array(TOKENS, dtype=np.int64))
    assert pid != prompt_id(b"tenant-b", TOKENS)
    assert pid != prompt_id(SALT, TOKENS[:-1])
    # salt and tokens are length-delimited: moving bytes between them changes the id
    assert prompt_id(b"ab", [1]) != prompt_id(b"a", [1])


def test_chunk_hashes_chain_and_share_prefixes() -> None:
    a = chunk_hashes(SALT, "m", TOKENS + [5] * 100, chunk_size=128)
    b = chunk_hashes(SALT, "m", TOKENS[:256] + [7] * 200, chunk_size=128)
    assert len(a) == 3 and len(b) == 3
    assert a[:2] == b[:2] and a[2] != b[2]  # same first 256 tokens, then divergence
    assert all(len(h) == 32 for h in a)
    # chained: same chunk content at a different position gets a different hash
    c = chunk_hashes(SALT, "m", [1] * 256, chunk_size=128)
    assert c[0] != c[1]
    # tenant, model and chunk size all separate the hash spaces
    assert chunk_hashes(b"x", "m", TOKENS, 128)[0] != a[0]
    assert chunk_hashes(SALT, "m2", TOKENS, 128)[0] != a[0]
    assert chunk_hashes(SALT, "m", TOKENS, 64)[1] != a[0]
    assert chunk_hashes(SALT, "m", TOKENS[:127], 128) == []


def test_codebook_track_and_token_index() -> None:
    name = KVTrackName(model="m", prompt_id="0" * 32, codec=CodecId.AC)
    cb = name.codebook_track()
    assert cb.name == b"AC.codebook"
    assert parse_kv_track(cb.namespace, cb.name) == cb
    assert token_index(2, 5) == 261
    with pytest.raises(KVNameError):
        token_index(0, 128)


@pytest.mark.parametrize(
    ("namespace", "track"),
    [
        ((KV_NAMESPACE_ROOT, b"m"), b"FP16"),  # arity
        ((b"moq://other/", b"m", b"0" * 32), b"FP16"),  # root
        ((KV_NAMESPACE_ROOT, b"", b"0" * 32), b"FP16"),  # empty model
        ((KV_NAMESPACE_ROOT, b"\xff\xfe", b"0" * 32), b"FP16"),  # not UTF-8
        ((KV_NAMESPACE_ROOT, b"m", b"0" * 31), b"FP16"),  # short prompt id
        ((KV_NAMESPACE_ROOT, b"m", b"A" * 32), b"FP16"),  # upper-case hex
        ((KV_NAMESPACE_ROOT, b"m", b"0" * 32), b"fp16"),  # unknown compression
        ((KV_NAMESPACE_ROOT, b"m", b"0" * 32), b"Int8.codebook"),  # codebook of non-AC
        ((KV_NAMESPACE_ROOT, b"m" * 5000, b"0" * 32), b"AC"),  # > 4096 bytes
        ((KV_NAMESPACE_ROOT, "m", b"0" * 32), b"AC"),  # str, not bytes
    ],
)
def test_parse_rejects_non_kv_tracks(namespace: tuple[bytes, ...], track: bytes) -> None:
    with pytest.raises(KVNameError) as info:
        parse_kv_track(namespace, track)
    assert info.value.error_code == KVErrorCode.INVALID_NAME


def test_bad_tokens_rejected() -> None:
    with pytest.raises(KVNameError):
        prompt_id(SALT, [-1])
    with pytest.raises(KVNameError):
        prompt_id(SALT, [2**32])
    with pytest.raises(KVNameError):
        chunk_hashes(SALT, "m", TOKENS, chunk_size=0)
