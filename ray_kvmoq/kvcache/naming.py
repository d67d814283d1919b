"""KV track naming per draft-shi-moq-kvcache ("KVCache Data Model") and chained chunk hashes.

A prompt's KV cache is one MoQT track per compression:

* namespace tuple ``(b"moq://kvcache.moq.arpa/v1/", <model name>, <prompt id>)``;
* track name = the compression, one of ``FP16 BF16 FP8 Int8 FP4 Int4 AC``;
* group id = chunk index (``chunk_size`` tokens per chunk, 128 by default);
* object id = token index within the chunk.

The AC compression needs a codebook; it travels in the sibling track ``AC.codebook`` of the same
namespace, one object (group id = codebook id, object id 0) per codebook (docs/kv-payload-format.md).

Invariants:

* The prompt id is ``hex(BLAKE2b-128(len(salt) ‖ salt ‖ u32le tokens...))``: a tenant salt and the
  token ids, never the prompt text, so names leak nothing readable and stay short.
* Chained chunk hashes: ``h_-1 = H("root", salt, model, chunk_size)`` and
  ``h_k = H(h_{k-1} ‖ u32le tokens of chunk k)``; only *full* chunks get a hash. Two prompts with
  the same first ``(k+1)·C`` tokens (and tenant, model, chunk size) share ``h_0..h_k``, so a
  directory keyed by ``h_k`` finds the groups ``0..k`` of an older prompt's track.
* Names from the wire are parsed strictly: anything but the exact tuple shape, root, UTF-8 model
  name, 32-hex prompt id and a known track name raises :class:`KVNameError`.
"""

from __future__ import annotations

import hashlib
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from ..moqt.codec import MAX_FULL_TRACK_NAME
from .errors import KVNameError, UnknownCodecError

KV_NAMESPACE_ROOT = b"moq://kvcache.moq.arpa/v1/"
"""First field of every KV track namespace tuple (draft-shi-moq-kvcache)."""

DEFAULT_CHUNK_SIZE = 128
"""Tokens per group (chunk) unless the cluster configures another value."""

CODEBOOK_TRACK_SUFFIX = b".codebook"
_PROMPT_ID_LEN = 32
_HEX = frozenset(b"0123456789abcdef")


class CodecId(IntEnum):
    """Compression of a KV track: header codec byte (kv-payload-format §2) and track name."""

    FP16 = 1
    BF16 = 2
    FP8 = 3
    INT8 = 4
    FP4 = 5
    INT4 = 6
    AC = 7

    @property
    def track_name(self) -> bytes:
        """The draft's track name for this compression (``b"Int8"``, ``b"AC"``...)."""
        return _TRACK_NAMES[self]

    @classmethod
    def from_track_name(cls, name: bytes) -> CodecId:
        """The compression named by ``name``; :class:`UnknownCodecError` if none."""
        try:
            return _BY_TRACK_NAME[bytes(name)]
        except KeyError:
            raise UnknownCodecError(
                f"unknown KV track name {bytes(name)!r}; expected one of "
                + ", ".join(n.decode() for n in _TRACK_NAMES.values())
            ) from None


_TRACK_NAMES: dict[CodecId, bytes] = {
    CodecId.FP16: b"FP16",
    CodecId.BF16: b"BF16",
    CodecId.FP8: b"FP8",
    CodecId.INT8: b"Int8",
    CodecId.FP4: b"FP4",
    CodecId.INT4: b"Int4",
    CodecId.AC: b"AC",
}
_BY_TRACK_NAME = {v: k for k, v in _TRACK_NAMES.items()}

TRACK_NAMES: tuple[bytes, ...] = tuple(_TRACK_NAMES.values())
"""The seven KV track names in codec-id order."""


@dataclass(frozen=True, kw_only=True)
class KVTrackName:
    """A parsed KV track: who (model, prompt id) and which compression (or its codebook)."""

    model: str
    """Model name, the second namespace field (UTF-8)."""
    prompt_id: str
    """32 lowercase hex digits from :func:`prompt_id`."""
    codec: CodecId
    """The track's compression."""
    codebook: bool = False
    """True for the ``AC.codebook`` sibling track that carries AC codebooks."""

    def __post_init__(self) -> None:
        _check_model(self.model)
        _check_prompt_id(self.prompt_id.encode())
        if self.codebook and self.codec != CodecId.AC:
            raise KVNameError("only the AC compression has a codebook track")

    @property
    def namespace(self) -> tuple[bytes, ...]:
        """The MoQT track namespace tuple."""
        return kv_namespace(self.model, self.prompt_id)

    @property
    def name(self) -> bytes:
        """The MoQT track name."""
        base = self.codec.track_name
        return base + CODEBOOK_TRACK_SUFFIX if self.codebook else base

    def codebook_track(self) -> KVTrackName:
        """The ``AC.codebook`` track in the same namespace (for an AC track)."""
        return KVTrackName(
            model=self.model, prompt_id=self.prompt_id, codec=CodecId.AC, codebook=True
        )


def _check_model(model: str) -> None:
    if not isinstance(model, str) or not model:
        raise KVNameError("model name must be a non-empty string")
    if len(model.encode()) > 1024:
        raise KVNameError("model name longer than 1024 bytes")


def _check_prompt_id(pid: bytes) -> None:
    if len(pid) != _PROMPT_ID_LEN or not set(pid) <= _HEX:
        raise KVNameError(
            f"prompt id must be {_PROMPT_ID_LEN} lowercase hex digits, got {pid[:40]!r}"
        )


def kv_namespace(model: str, prompt_id: str) -> tuple[bytes, ...]:
    """The track namespace tuple ``(root, model, prompt id)`` for a prompt's KV tracks."""
    _check_model(model)
    pid = prompt_id.encode()
    _check_prompt_id(pid)
    return (KV_NAMESPACE_ROOT, model.encode(), pid)


def _tokens_bytes(tokens: Sequence[int] | np.ndarray) -> bytes:
    arr = np.asarray(tokens)
    if arr.ndim != 1:
        raise KVNameError("token ids must be a 1-D sequence")
    if arr.size and (arr.dtype.kind not in "iu" or arr.min() < 0 or arr.max() >= 2**32):
        raise KVNameError("token ids must be integers in [0, 2**32)")
    return arr.astype("<u4").tobytes()


def _lp(data: bytes) -> bytes:
    return struct.pack("<I", len(data)) + data


def prompt_id(salt: bytes, tokens: Sequence[int] | np.ndarray) -> str:
    """Hex digest naming a prompt: BLAKE2b-128 over the tenant salt and the token ids."""
    h = hashlib.blake2b(digest_size=16, person=b"kvmoq-prompt")
    h.update(_lp(bytes(salt)))
    h.update(_tokens_bytes(tokens))
    return h.hexdigest()


def chunk_hashes(
    salt: bytes,
    model: str,
    tokens: Sequence[int] | np.ndarray,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
) -> list[bytes]:
    """Chained 32-byte hashes ``h_0..h_{n-1}``, one per *full* chunk of ``tokens``.

    ``h_k`` identifies the first ``(k+1)·chunk_size`` tokens for this tenant, model and chunk
    size; equal ``h_k`` means group ``k`` of either prompt's track is valid for both.
    """
    if chunk_size < 1:
        raise KVNameError("chunk_size must be >= 1")
    _check_model(model)
    data = _tokens_bytes(tokens)
    root = hashlib.blake2b(digest_size=32, person=b"kvmoq-chunk-root")
    root.update(_lp(bytes(salt)) + _lp(model.encode()) + struct.pack("<I", chunk_size))
    prev = root.digest()
    out: list[bytes] = []
    step = 4 * chunk_size
    for k in range(len(data) // step):
        h = hashlib.blake2b(prev, digest_size=32, person=b"kvmoq-chunk")
        h.update(data[k * step : (k + 1) * step])
        prev = h.digest()
        out.append(prev)
    return out


def token_index(group_id: int, object_id: int, chunk_size: int = DEFAULT_CHUNK_SIZE) -> int:
    """Absolute token position of (group id, object id)."""
    if not 0 <= object_id < chunk_size or group_id < 0:
        raise KVNameError(f"object id {object_id} outside a chunk of {chunk_size} tokens")
    return group_id * chunk_size + object_id


def parse_kv_track(namespace: Sequence[bytes], track_name: bytes) -> KVTrackName:
    """Parse a (namespace tuple, track name) from the wire into a :class:`KVTrackName`.

    Raises :class:`KVNameError` for anything that is not a valid KV track (wrong root or arity,
    bad model or prompt id, unknown compression).
    """
    fields = tuple(namespace)
    if len(fields) != 3:
        raise KVNameError(f"KV namespace has 3 fields, got {len(fields)}")
    if not all(isinstance(f, bytes | bytearray | memoryview) for f in (*fields, track_name)):
        raise KVNameError("namespace fields and track name must be bytes")
    root, model_b, pid = (bytes(f) for f in fields)
    name = bytes(track_name)
    if root != KV_NAMESPACE_ROOT:
        raise KVNameError(f"not a KV namespace: first field {root[:64]!r}")
    if sum(map(len, fields)) + len(name) > MAX_FULL_TRACK_NAME:
        raise KVNameError("full track name longer than 4096 bytes")
    try:
        model = model_b.decode("utf-8")
    except UnicodeDecodeError:
        raise KVNameError("model name is not UTF-8") from None
    _check_prompt_id(pid)
    codebook = name.endswith(CODEBOOK_TRACK_SUFFIX)
    base = name[: -len(CODEBOOK_TRACK_SUFFIX)] if codebook else name
    try:
        codec = CodecId.from_track_name(base)
    except UnknownCodecError as exc:
        raise KVNameError(str(exc)) from None
    return KVTrackName(model=model, prompt_id=pid.decode(), codec=codec, codebook=codebook)
