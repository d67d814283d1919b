"""ray_kvmoq.kvcache: KV caches as draft-shi-moq-kvcache tracks (pure: no I/O, no Ray).

* naming: track namespace ``(moq://kvcache.moq.arpa/v1/, model, prompt id)``, track name = the
  compression, group = chunk, object = token; chained chunk hashes for prefix reuse.
* codecs: per-token object payloads for ``FP16 BF16 FP8 Int8 FP4 Int4 AC``
  (docs/kv-payload-format.md), whole-chunk vectorised.
* integrity: a BLAKE2b payload digest in MoQT object extension header 0x4B57.
"""

from .ac import Codebook, build_codebook, default_bins, parse_codebook
from .codec import KVCodec
from .errors import (
    CodebookError,
    DigestMismatchError,
    GeometryMismatchError,
    IntegrityError,
    InvalidInputError,
    KVCacheError,
    KVErrorCode,
    KVNameError,
    MalformedPayloadError,
    MissingCodebookError,
    MissingDigestError,
    PayloadError,
    TruncatedPayloadError,
    UnknownCodecError,
    UnsupportedVersionError,
)
from .integrity import KV_DIGEST_EXTENSION, attach_digest, payload_digest, verify
from .layout import HEADER_SIZE, KVGeometry, ObjectHeader, OutDType, parse_header
from .naming import (
    DEFAULT_CHUNK_SIZE,
    KV_NAMESPACE_ROOT,
    TRACK_NAMES,
    CodecId,
    KVTrackName,
    chunk_hashes,
    kv_namespace,
    parse_kv_track,
    prompt_id,
    token_index,
)
from .registry import decode_any, get_codec

__all__ = [
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
