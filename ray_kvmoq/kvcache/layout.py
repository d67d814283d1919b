"""Object header, model geometry and the tensor plumbing shared by every codec.

Every KV object payload starts with the 12-byte little-endian header of docs/kv-payload-format.md
§2: ``u8 version=1, u8 codec, u16 L, u16 H, u16 D, u8 param, u8 flags, u16 reserved``. Values in a
token are ordered L-K/V-H-D (a per-token slice of ``[L, 2, H, D]``).

Tensors: a chunk is ``[L, 2, H, T, D]`` (the engine's layout). Codecs work token-major
(``[T, L, 2, H·D]``) so that a token's object is one contiguous row; the transposes live here.
Accepted input dtypes: float32, float16, and uint16 holding bfloat16 bits (the engine's view).
Heavy dtype conversions use torch on one thread: on a busy 2-core box torch's OpenMP pool
loses badly to a single thread, and these ops are memory-bound anyway.
"""

from __future__ import annotations

import struct
import threading
import warnings
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import torch

from .errors import (
    GeometryMismatchError,
    InvalidInputError,
    TruncatedPayloadError,
    UnknownCodecError,
    UnsupportedVersionError,
)
from .naming import CodecId

FORMAT_VERSION = 1
HEADER = struct.Struct("<BBHHHBBH")
HEADER_SIZE = HEADER.size  # 12

OutDType = Literal["float32", "float16", "bf16"]
"""Decoded tensor dtype: float32, float16, or bfloat16 bits in a uint16 array."""


@dataclass(frozen=True, kw_only=True)
class KVGeometry:
    """Model KV geometry: what a decoder checks every object against."""

    num_layers: int
    """L, transformer layers."""
    num_kv_heads: int
    """H, KV heads (GQA is not expanded)."""
    head_dim: int
    """D, values per head."""

    def __post_init__(self) -> None:
        for name in ("num_layers", "num_kv_heads", "head_dim"):
            v = getattr(self, name)
            if not isinstance(v, int | np.integer) or not 1 <= int(v) <= 0xFFFF:
                raise InvalidInputError(f"{name} must be an int in 1..65535, got {v!r}")

    @property
    def values_per_token(self) -> int:
        """``L·2·H·D``."""
        return self.num_layers * 2 * self.num_kv_heads * self.head_dim

    @property
    def fp16_bytes_per_token(self) -> int:
        """Size of one token's K and V in FP16, without header (the ratio baseline)."""
        return 2 * self.values_per_token

    @classmethod
    def of(cls, kv: np.ndarray) -> KVGeometry:
        """Geometry of a ``[L, 2, H, T, D]`` chunk."""
        if kv.ndim != 5 or kv.shape[1] != 2:
            raise InvalidInputError(f"KV chunk must be [L, 2, H, T, D], got shape {kv.shape}")
        return cls(num_layers=kv.shape[0], num_kv_heads=kv.shape[2], head_dim=kv.shape[4])


@dataclass(frozen=True, kw_only=True)
class ObjectHeader:
    """The parsed 12-byte object header."""

    version: int
    """Format version (1)."""
    codec: CodecId
    """Codec id."""
    geometry: KVGeometry
    """L, H, D from the header."""
    param: int
    """Codec-specific parameter byte."""
    flags: int
    """Codec-specific flag bits."""

    def pack(self) -> bytes:
        """The 12 header bytes."""
        g = self.geometry
        return HEADER.pack(
            self.version,
            self.codec,
            g.num_layers,
            g.num_kv_heads,
            g.head_dim,
            self.param,
            self.flags,
            0,
        )


def parse_header(payload: bytes | memoryview) -> ObjectHeader:
    """Parse and sanity-check an object header (version, codec id, geometry non-zero)."""
    if len(payload) < HEADER_SIZE:
        raise TruncatedPayloadError(f"object of {len(payload)} bytes has no 12-byte header")
    version, codec, n_l, n_h, n_d, param, flags, _ = HEADER.unpack_from(payload)
    if version != FORMAT_VERSION:
        raise UnsupportedVersionError(f"KV payload version {version}; this decoder knows 1")
    try:
        cid = CodecId(codec)
    except ValueError:
        raise UnknownCodecError(f"unknown KV codec id {codec}") from None
    if not (n_l and n_h and n_d):
        raise GeometryMismatchError("object header has a zero dimension")
    geo = KVGeometry(num_layers=n_l, num_kv_heads=n_h, head_dim=n_d)
    return ObjectHeader(version=version, codec=cid, geometry=geo, param=param, flags=flags)


@contextmanager
def one_thread() -> Iterator[None]:
    """Run torch CPU ops on one thread (restoring the caller's setting afterwards).

    Only on the main thread: torch's thread count is process-wide, so a codec running on a
    helper thread (the vLLM connector's publisher) must not change what the engine's forward
    pass uses at the same time; there it keeps the process setting.
    """
    n = torch.get_num_threads()
    if n == 1 or threading.current_thread() is not threading.main_thread():
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def check_chunk(kv: Any) -> np.ndarray:
    if isinstance(kv, torch.Tensor):
        t = kv.detach().cpu()
        kv = t.view(torch.uint16).numpy() if t.dtype == torch.bfloat16 else t.numpy()
    if not isinstance(kv, np.ndarray):
        raise InvalidInputError(f"KV chunk must be a numpy array, got {type(kv).__name__}")
    if kv.dtype not in (np.float32, np.float16, np.uint16):
        raise InvalidInputError(
            f"KV chunk dtype must be float32, float16 or uint16 (bf16 bits), got {kv.dtype}"
        )
    if kv.ndim != 5 or kv.shape[1] != 2 or 0 in kv.shape:
        raise InvalidInputError(f"KV chunk must be a non-empty [L, 2, H, T, D], got {kv.shape}")
    return kv


def token_major(kv: Any) -> tuple[np.ndarray, KVGeometry]:
    """``[L,2,H,T,D]`` (any accepted dtype) → contiguous ``[T, L, 2, H·D]`` in the same dtype."""
    arr = check_chunk(kv)
    geo = KVGeometry.of(arr)
    n_l, _, n_h, n_t, n_d = arr.shape
    tm = np.ascontiguousarray(arr.transpose(3, 0, 1, 2, 4)).reshape(n_t, n_l, 2, n_h * n_d)
    return tm, geo


def to_float32(tm: np.ndarray) -> np.ndarray:
    """Token-major values as float32 (bf16 bits widened exactly; float16 converted)."""
    if tm.dtype == np.float32:
        return tm
    with one_thread():
        t = tensor(tm)
        if tm.dtype == np.uint16:
            t = t.view(torch.bfloat16)
        return t.float().numpy()


def to_float16(x: np.ndarray) -> np.ndarray:
    """float32 → float16 (round to nearest even, overflow to ±inf), or pass float16 through."""
    if x.dtype == np.float16:
        return x
    with one_thread():
        return tensor(to_float32(x)).half().numpy()


def to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """float32/float16 → bfloat16 bits (round to nearest even) as uint16; uint16 passes through."""
    if x.dtype == np.uint16:
        return x
    with one_thread():
        t = tensor(x).to(torch.bfloat16)
        return t.view(torch.uint16).numpy()


def from_token_major(
    tm: np.ndarray, geo: KVGeometry, dtype: OutDType, *, kind: str = "float32"
) -> np.ndarray:
    """``[T, ...]`` decoded values → ``[L, 2, H, T, D]`` in ``dtype``.

    ``kind`` names what ``tm`` holds: ``"float32"``, ``"float16"`` or ``"bf16"`` (uint16 bits).
    """
    if dtype not in ("float32", "float16", "bf16"):
        raise InvalidInputError(f"dtype must be 'float32', 'float16' or 'bf16', got {dtype!r}")
    if kind != dtype:
        if kind == "bf16" or kind == "float16":
            tm = to_float32(tm)
        if dtype == "float16":
            tm = to_float16(tm)
        elif dtype == "bf16":
            tm = to_bf16_bits(tm)
    n_t = tm.shape[0]
    g = geo
    shaped = tm.reshape(n_t, g.num_layers, 2, g.num_kv_heads, g.head_dim)
    return np.ascontiguousarray(shaped.transpose(1, 2, 3, 0, 4))


def join_objects(objects: Sequence[bytes | memoryview], size: int, what: str) -> np.ndarray:
    """Fixed-size objects → a ``[T, size]`` uint8 matrix; a wrong length raises Truncated."""
    if not objects:
        raise TruncatedPayloadError("no objects to decode")
    for i, obj in enumerate(objects):
        if len(obj) != size:
            raise TruncatedPayloadError(
                f"{what} object {i} has {len(obj)} bytes; this geometry needs {size}"
            )
    return np.frombuffer(b"".join(objects), dtype=np.uint8).reshape(len(objects), size)


def check_headers(
    mat: np.ndarray, expected: ObjectHeader, *, param_ok: tuple[int, ...] | None = None
) -> None:
    """Check every row's header against ``expected`` (version, codec, geometry, param, flags).

    The reserved field (bytes 10–11) is ignored, as the format requires.
    """
    want = np.frombuffer(expected.pack(), dtype=np.uint8)[:10]
    bad = np.nonzero((mat[:, :10] != want).any(axis=1))[0]
    if bad.size:
        got = parse_header(mat[bad[0]].tobytes())  # raises the specific error if it can
        if got.codec != expected.codec:
            raise UnknownCodecError(
                f"object {bad[0]} is codec {got.codec.name}, expected {expected.codec.name}"
            )
        if got.geometry != expected.geometry:
            raise GeometryMismatchError(
                f"object {bad[0]} geometry {got.geometry} does not match {expected.geometry}"
            )
        raise GeometryMismatchError(
            f"object {bad[0]} codec parameters (param={got.param}, flags={got.flags:#x}) "
            f"differ from the first object's (param={expected.param}, flags={expected.flags:#x})"
        )


def tensor(arr: np.ndarray) -> torch.Tensor:
    """``torch.from_numpy`` that accepts read-only arrays (we never write through them)."""
    if arr.flags.writeable:
        return torch.from_numpy(arr)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        return torch.from_numpy(arr)


def absmax_rows(x: np.ndarray) -> np.ndarray:
    """``max |x|`` over the last axis as float32, via integer max of the magnitude bits.

    Works on float32, float16 and bf16 bits (uint16): for finite values the order of
    ``bits & 0x7F..`` equals the order of ``|x|``, and integer max reductions are cheaper
    than ``abs`` + float max.
    """
    if x.dtype == np.float32:
        return (x.view(np.uint32) & np.uint32(0x7FFFFFFF)).max(axis=-1).view(np.float32)
    mag = (x.view(np.uint16) & np.uint16(0x7FFF)).max(axis=-1)
    if x.dtype == np.float16:
        return mag.view(np.float16).astype(np.float32)
    return (mag.astype(np.uint32) << np.uint32(16)).view(np.float32)


def block_absmax(tm: np.ndarray, block: int) -> np.ndarray:
    """``max |x|`` over consecutive blocks of ``block`` (a power of two) values, as float32.

    A cascade of pairwise maxima over the flat magnitude bits: each step is one long strided
    numpy loop, where a reduction over rows of 16 would pay per-row overhead 92 k times.
    """
    if tm.dtype == np.float32:
        mag = tm.reshape(-1).view(np.uint32) & np.uint32(0x7FFFFFFF)
    else:
        mag = tm.reshape(-1).view(np.uint16) & np.uint16(0x7FFF)
    k = block
    while k > 1:
        mag = np.maximum(mag[0::2], mag[1::2])
        k //= 2
    if tm.dtype == np.float32:
        return mag.view(np.float32)
    if tm.dtype == np.float16:
        return mag.view(np.float16).astype(np.float32)
    return (mag.astype(np.uint32) << np.uint32(16)).view(np.float32)


def section(body: np.ndarray, offset: int, count: int, dtype: Any) -> np.ndarray:
    """Typed ``[T, count]`` view of bytes ``offset..`` of every row of ``body``."""
    dt = np.dtype(dtype)
    return body[:, offset : offset + count * dt.itemsize].view(dt)
