"""The codec interface and the byte-exact FP16 / BF16 / FP8 / Int8 codecs.

A codec turns a ``[L, 2, H, T, D]`` chunk into ``T`` object payloads (one token each) and back.
Layouts are in docs/kv-payload-format.md; this module implements §3 and §4 of it. The encoders
and decoders are whole-chunk numpy programs (no per-token or per-value Python), then the rows of
one ``[T, object size]`` byte matrix become the objects.

Contract (``KVCodec``):

* ``encode_chunk(kv) -> list[bytes]``: one payload per token, in token order.
* ``decode_objects(objects, geometry) -> [L, 2, H, T, D]``: the objects of one or more tokens
  (any subset, any order the caller chooses) decode together; every header is checked against
  ``geometry`` and against the first object's codec parameters. Anything inconsistent raises a
  :class:`~ray_kvmoq.kvcache.errors.PayloadError` subclass; no partial tensor is ever returned.
* Capability flags are class attributes: ``self_contained`` (any object decodes alone) and
  ``needs_codebook`` (AC: the track's codebook must be supplied).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np
import torch

from .errors import (
    GeometryMismatchError,
    InvalidInputError,
    MalformedPayloadError,
    UnknownCodecError,
)
from .layout import (
    FORMAT_VERSION,
    HEADER_SIZE,
    KVGeometry,
    ObjectHeader,
    OutDType,
    absmax_rows,
    check_chunk,
    check_headers,
    from_token_major,
    join_objects,
    one_thread,
    parse_header,
    section,
    tensor,
    to_bf16_bits,
    to_float16,
    to_float32,
    token_major,
)
from .naming import CodecId


class KVCodec(ABC):
    """A KV track compression: per-token object encoder and decoder."""

    codec_id: ClassVar[CodecId]
    self_contained: ClassVar[bool] = True
    """Every object decodes on its own (no codebook, no other object)."""
    needs_codebook: ClassVar[bool] = False
    """``encode_chunk`` / ``decode_objects`` need the track's codebook blob."""

    @property
    def track_name(self) -> bytes:
        """Track name of this compression (``b"Int8"``...)."""
        return self.codec_id.track_name

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.track_name.decode()}>"

    # ---- data plane -------------------------------------------------------------------------
    @abstractmethod
    def encode_chunk(self, kv: Any, *, codebook: bytes | None = None) -> list[bytes]:
        """Encode a ``[L, 2, H, T, D]`` chunk (float32, float16 or bf16 bits) into T payloads."""

    @abstractmethod
    def decode_objects(
        self,
        objects: Sequence[bytes | memoryview],
        geometry: KVGeometry,
        *,
        dtype: OutDType = "float32",
        codebook: bytes | None = None,
    ) -> np.ndarray:
        """Decode payloads of ``len(objects)`` tokens into ``[L, 2, H, len(objects), D]``."""

    def object_size(self, geometry: KVGeometry) -> int | None:
        """Bytes per object for ``geometry`` (None when it varies per object, as for AC)."""
        return None


class _FixedCodec(KVCodec):
    """Codecs whose objects have a size fixed by (geometry, param, flags)."""

    default_param: ClassVar[int] = 0
    default_flags: ClassVar[int] = 0b11  # K and V present

    def _header(self, geo: KVGeometry, param: int, flags: int) -> ObjectHeader:
        return ObjectHeader(
            version=FORMAT_VERSION, codec=self.codec_id, geometry=geo, param=param, flags=flags
        )

    @abstractmethod
    def _body_size(self, geo: KVGeometry, param: int, flags: int) -> int:
        """Bytes after the header; raises MalformedPayloadError for unsupported param/flags."""

    @abstractmethod
    def _encode_into(self, body: np.ndarray, kv: np.ndarray) -> None:
        """Encode the checked ``[L,2,H,T,D]`` chunk into ``body`` (``[T, body bytes]``)."""

    @abstractmethod
    def _decode_body(
        self, body: np.ndarray, geo: KVGeometry, param: int, flags: int, dtype: OutDType
    ) -> tuple[np.ndarray, str]:
        """``[T, body]`` bytes → (token-major values, their kind: float32/float16/bf16)."""

    def object_size(self, geometry: KVGeometry) -> int:
        return HEADER_SIZE + self._body_size(geometry, self.default_param, self.default_flags)

    def encode_chunk(self, kv: Any, *, codebook: bytes | None = None) -> list[bytes]:
        arr = check_chunk(kv)
        geo = KVGeometry.of(arr)
        header = self._header(geo, self.default_param, self.default_flags).pack()
        size = self._body_size(geo, self.default_param, self.default_flags)
        mat = np.empty((arr.shape[3], HEADER_SIZE + size), np.uint8)
        mat[:, :HEADER_SIZE] = np.frombuffer(header, np.uint8)
        self._encode_into(mat[:, HEADER_SIZE:], arr)
        return [row.tobytes() for row in mat]

    def decode_objects(
        self,
        objects: Sequence[bytes | memoryview],
        geometry: KVGeometry,
        *,
        dtype: OutDType = "float32",
        codebook: bytes | None = None,
    ) -> np.ndarray:
        if not objects:
            raise MalformedPayloadError("no objects to decode")
        first = parse_header(objects[0])
        if first.codec != self.codec_id:
            raise UnknownCodecError(f"{self.codec_id.name} decoder got a {first.codec.name} object")
        if first.geometry != geometry:
            raise GeometryMismatchError(
                f"object geometry {first.geometry} does not match the model's {geometry}"
            )
        size = HEADER_SIZE + self._body_size(geometry, first.param, first.flags)
        mat = join_objects(objects, size, self.codec_id.name)
        check_headers(mat, first)
        tm, kind = self._decode_body(
            mat[:, HEADER_SIZE:], geometry, first.param, first.flags, dtype
        )
        return from_token_major(tm, geometry, dtype, kind=kind)


def _check_kv_flags(flags: int, name: str) -> None:
    if flags != 0b11:
        raise MalformedPayloadError(f"{name} object flags {flags:#x}: only K+V objects exist")


class FP16Codec(_FixedCodec):
    """IEEE half precision, 2 bytes a value (§3)."""

    codec_id = CodecId.FP16

    def _body_size(self, geo: KVGeometry, param: int, flags: int) -> int:
        _check_kv_flags(flags, "FP16")
        return 2 * geo.values_per_token

    def _encode_into(self, body: np.ndarray, kv: np.ndarray) -> None:
        tm, _ = token_major(kv)
        src = tm if tm.dtype == np.float16 else to_float16(to_float32(tm))
        if ((src.view(np.uint16) & 0x7C00) == 0x7C00).any():
            raise InvalidInputError("KV values overflow FP16 (or are not finite); use BF16")
        body.view(np.float16)[:] = src.reshape(len(tm), -1)

    def _decode_body(
        self, body: np.ndarray, geo: KVGeometry, param: int, flags: int, dtype: OutDType
    ) -> tuple[np.ndarray, str]:
        bits = body.view("<u2")
        if ((bits & 0x7C00) == 0x7C00).any():
            raise MalformedPayloadError("FP16 object holds an infinity or NaN")
        return bits.view(np.float16), "float16"


class BF16Codec(_FixedCodec):
    """bfloat16, 2 bytes a value, round to nearest even from float32 (§3)."""

    codec_id = CodecId.BF16

    def _body_size(self, geo: KVGeometry, param: int, flags: int) -> int:
        _check_kv_flags(flags, "BF16")
        return 2 * geo.values_per_token

    def _encode_into(self, body: np.ndarray, kv: np.ndarray) -> None:
        tm, _ = token_major(kv)
        bits = to_bf16_bits(tm if tm.dtype != np.float16 else to_float32(tm))
        body.view(np.uint16)[:] = bits.reshape(len(tm), -1)

    def _decode_body(
        self, body: np.ndarray, geo: KVGeometry, param: int, flags: int, dtype: OutDType
    ) -> tuple[np.ndarray, str]:
        bits = body.view("<u2")
        if ((bits & 0x7F80) == 0x7F80).any():
            raise MalformedPayloadError("BF16 object holds an infinity or NaN")
        return bits, "bf16"


def _e4m3_to_f16_bits(codes: np.ndarray) -> np.ndarray:
    """E4M3FN bytes → float16 bits of value·2⁻⁸ (exact, subnormals included)."""
    u = np.left_shift(codes, 8, dtype=np.uint16)
    u = (u.view(np.int16) >> 1).view(np.uint16)
    u &= np.uint16(0xBFFF)
    return u.view(np.float16)


class _ScaledByteCodec(_FixedCodec):
    """FP8 and Int8: ``f32 scale[L][2][S]`` then one byte per value (§4)."""

    qmax: ClassVar[float]

    def _groups(self, geo: KVGeometry, param: int) -> int:
        if param == 0:
            return 1
        if param == 1:
            return geo.num_kv_heads
        raise MalformedPayloadError(f"{self.codec_id.name} scale granularity {param} unknown")

    def _body_size(self, geo: KVGeometry, param: int, flags: int) -> int:
        _check_kv_flags(flags, self.codec_id.name)
        return 4 * geo.num_layers * 2 * self._groups(geo, param) + geo.values_per_token

    def _quantise(self, body: np.ndarray, kv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Write the scales; return (values/scale as float32 ``[T, N]``, code section)."""
        tm, geo = token_major(kv)
        n_t = tm.shape[0]
        s = self._groups(geo, self.default_param)
        rows = tm.reshape(n_t, geo.num_layers * 2 * s, -1)
        scale = absmax_rows(rows) / np.float32(self.qmax)
        scale[~(scale > 0)] = 1.0
        nsc = scale.shape[1]
        section(body, 0, nsc, "<f4")[:] = scale
        inv = (np.float32(1.0) / scale)[..., None]
        with one_thread():  # widen and scale in one torch pass when the input is bf16/fp16
            t = tensor(rows).view(torch.bfloat16) if rows.dtype == np.uint16 else tensor(rows)
            wide = t.float() if t.dtype != torch.float32 else t.clone()  # never scale in place
            y = wide.mul_(torch.from_numpy(inv)).numpy()
        return y.reshape(n_t, -1), body[:, 4 * nsc :]

    def _unscale(self, body: np.ndarray, geo: KVGeometry, param: int) -> np.ndarray:
        n_t = body.shape[0]
        s = self._groups(geo, param)
        nsc = geo.num_layers * 2 * s
        scale = np.ascontiguousarray(body[:, : 4 * nsc]).view("<f4").reshape(n_t, -1, 2, s, 1)
        if not (np.isfinite(scale).all() and (scale > 0).all()):
            raise MalformedPayloadError(f"{self.codec_id.name} object has a bad scale")
        return scale


class FP8Codec(_ScaledByteCodec):
    """OCP FP8 E4M3FN with a float32 per-token scale per (layer, K/V) (§4)."""

    codec_id = CodecId.FP8
    qmax = 448.0

    def _encode_into(self, body: np.ndarray, kv: np.ndarray) -> None:
        y, codes = self._quantise(body, kv)
        with one_thread():
            torch.from_numpy(codes).view(torch.float8_e4m3fn).copy_(torch.from_numpy(y))

    def _decode_body(
        self, body: np.ndarray, geo: KVGeometry, param: int, flags: int, dtype: OutDType
    ) -> tuple[np.ndarray, str]:
        scale = self._unscale(body, geo, param)
        codes = body[:, scale[0].size * 4 :]
        if ((codes & 0x7F) == 0x7F).any():
            raise MalformedPayloadError("FP8 object holds a NaN code")
        n_t = body.shape[0]
        half = _e4m3_to_f16_bits(codes)
        with one_thread():
            vals = torch.from_numpy(half).float().numpy()
        out = vals.reshape(n_t, geo.num_layers, 2, scale.shape[3], -1)
        out *= scale * np.float32(256)
        return out, "float32"


class Int8Codec(_ScaledByteCodec):
    """Symmetric int8 with a float32 per-token scale per (layer, K/V) (§4)."""

    codec_id = CodecId.INT8
    qmax = 127.0

    def _encode_into(self, body: np.ndarray, kv: np.ndarray) -> None:
        y, codes = self._quantise(body, kv)
        np.rint(y, out=codes.view(np.int8), casting="unsafe")

    def _decode_body(
        self, body: np.ndarray, geo: KVGeometry, param: int, flags: int, dtype: OutDType
    ) -> tuple[np.ndarray, str]:
        scale = self._unscale(body, geo, param)
        n_t = body.shape[0]
        vals = body[:, scale[0].size * 4 :].view(np.int8).astype(np.float32)
        out = vals.reshape(n_t, geo.num_layers, 2, scale.shape[3], -1)
        out *= scale
        return out, "float32"
