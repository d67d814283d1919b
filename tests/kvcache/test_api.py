"""The public surface of ray_kvmoq.kvcache is pinned (STYLE.md rule 11)."""

from __future__ import annotations

import ray_kvmoq.kvcache as kvcache

EXPECTED = [
    "DEFAULT_CHUNK_SIZE",
    "HEADER_SIZE",
    "KV_DIGEST_EXTENSION",
    "KV_NAMESPACE_ROOT",
    "TRACK_NAMES",
    "Codebook",
    "CodebookError",
    "CodecId",
    "DigestMismatchError",
    "GeometryMismatchError",
    "IntegrityError",
    "InvalidInputError",
    "KVCacheError",
    "KVCodec",
    "KVErrorCode",
    "KVGeometry",
    "KVNameError",
    "KVTrackName",
    "MalformedPayloadError",
    "MissingCodebookError",
    "MissingDigestError",
    "ObjectHeader",
    "OutDType",
    "PayloadError",
    "TruncatedPayloadError",
    "UnknownCodecError",
    "UnsupportedVersionError",
    "attach_digest",
    "build_codebook",
    "chunk_hashes",
    "decode_any",
    "default_bins",
    "get_codec",
    "kv_namespace",
    "parse_codebook",
    "parse_header",
    "parse_kv_track",
    "payload_digest",
    "prompt_id",
    "token_index",
    "verify",
]


def _isort_key(name: str) -> tuple[int, str]:
    """ruff RUF022 order: CONSTANTS, then Classes, then functions."""
    kind = 0 if name.isupper() else 1 if name[0].isupper() else 2
    return kind, name


def test_all_is_pinned_and_sorted() -> None:
    assert kvcache.__all__ == EXPECTED
    assert sorted(kvcache.__all__, key=_isort_key) == kvcache.__all__


def test_every_export_exists_and_is_documented() -> None:
    for name in kvcache.__all__:
        obj = getattr(kvcache, name)
        if callable(obj) and not name.isupper() and name != "OutDType":
            assert obj.__doc__, name


def test_errors_carry_distinct_codes() -> None:
    errs = [getattr(kvcache, n) for n in kvcache.__all__ if n.endswith("Error")]
    codes = [e.error_code for e in errs]
    assert len(set(codes)) == len(codes)
    assert all(issubclass(e, kvcache.KVCacheError) for e in errs)
