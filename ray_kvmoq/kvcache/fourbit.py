"""4-bit codecs: Int4 with fp16 group scale and minimum, and NVFP4 (E2M1 with E4M3 block scales).

Layouts are docs/kv-payload-format.md §5 (Int4) and §6 (FP4). Both pack two codes per byte, the
even element in the low nibble. Decoding never divides: a code maps to a value through bit
tricks (E2M1 → float16 bits) or a multiply-add, so a garbled code can only give a wrong finite
value, which the digest check (integrity.py) is there to catch; scales are validated.
"""

from __future__ import annotations

from typing import ClassVar

import numpy as np
import torch

from .codec import _check_kv_flags, _FixedCodec
from .errors import MalformedPayloadError
from .layout import KVGeometry, OutDType, one_thread, to_float32
from .naming import CodecId

_FP16_MAX = np.float32(65504.0)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """``[T, N]`` uint8 codes < 16 → ``[T, N/2]`` bytes, even element in the low nibble."""
    pairs = q.reshape(q.shape[0], -1, 2)
    return pairs[..., 0] | (pairs[..., 1] << 4)


def _unpack_nibbles(p: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_pack_nibbles`."""
    return np.stack((p & 15, p >> 4), axis=-1).reshape(p.shape[0], -1)


def _f16_up(x: np.ndarray) -> np.ndarray:
    """Round non-negative float32 to float16 without going below the input (clamped to max)."""
    h = np.minimum(x, _FP16_MAX).astype(np.float16)
    low = h.astype(np.float32) < x
    if low.any():
        h[low] = np.nextafter(h[low], np.float16(np.inf))
        h = np.minimum(h, np.float16(_FP16_MAX))
    return h


class Int4Codec(_FixedCodec):
    """Asymmetric int4 with fp16 scale and minimum per group of G values (§5; G = param)."""

    codec_id = CodecId.INT4
    default_param: ClassVar[int] = 32

    def _check(self, geo: KVGeometry, param: int, flags: int) -> None:
        _check_kv_flags(flags, "Int4")
        if param not in (16, 32, 64, 128) or geo.head_dim % param:
            raise MalformedPayloadError(f"Int4 group size {param} unusable for D={geo.head_dim}")

    def _body_size(self, geo: KVGeometry, param: int, flags: int) -> int:
        self._check(geo, param, flags)
        return 2 * 2 * (geo.values_per_token // param) + geo.values_per_token // 2

    def _encode_tm(self, tm: np.ndarray, geo: KVGeometry) -> list[np.ndarray]:
        g = self.default_param
        self._check(geo, g, self.default_flags)
        x = to_float32(tm)
        n_t = x.shape[0]
        xs = x.reshape(n_t, -1, g)
        mn = xs.min(axis=-1)
        mx = xs.max(axis=-1)
        mn16 = np.clip(mn, -_FP16_MAX, _FP16_MAX).astype(np.float16)
        mn32 = mn16.astype(np.float32)
        scale16 = _f16_up((mx - mn32) / np.float32(15))
        s32 = scale16.astype(np.float32)
        inv = np.divide(np.float32(1), s32, out=np.zeros_like(s32), where=s32 > 0)
        y = (xs - mn32[..., None]) * inv[..., None]
        np.clip(y, 0, 15, out=y)
        q = np.rint(y, out=y).astype(np.uint8).reshape(n_t, -1)
        return [scale16.astype("<f2"), mn16.astype("<f2"), _pack_nibbles(q)]

    def _decode_body(
        self, body: np.ndarray, geo: KVGeometry, param: int, flags: int, dtype: OutDType
    ) -> tuple[np.ndarray, str]:
        n_t = body.shape[0]
        ng = geo.values_per_token // param
        sm = np.ascontiguousarray(body[:, : 4 * ng]).view("<f2").astype(np.float32)
        scale, minv = sm[:, :ng, None], sm[:, ng:, None]
        if not (np.isfinite(sm).all() and (scale >= 0).all()):
            raise MalformedPayloadError("Int4 object has a bad scale or minimum")
        q = _unpack_nibbles(body[:, 4 * ng :])
        with one_thread():
            vals = torch.from_numpy(q).float().numpy().reshape(n_t, ng, param)
        vals *= scale
        vals += minv
        return vals, "float32"


# E2M1 magnitude code for floor(4·|y|), |y| clamped to 6: midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5.
_E2M1_OF_QUARTERS = np.array(
    [0, 1, 1, 2, 2, 3, 3, 4, 4, 4, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7], dtype=np.uint8
)
# byte of two E2M1 codes -> two float16 bit patterns (value · 2^-14) packed in one uint32
_n = np.arange(256, dtype=np.uint32)


def _e2m1_f16(c: np.ndarray) -> np.ndarray:
    return ((c & 7) << 9) | ((c & 8) << 12)


_E2M1_PAIR_F16 = (_e2m1_f16(_n & 15) | (_e2m1_f16(_n >> 4) << 16)).astype("<u4")
_E4M3_VALUES = torch.arange(256, dtype=torch.uint8).view(torch.float8_e4m3fn).float().numpy()


class FP4Codec(_FixedCodec):
    """NVFP4: E2M1 values, UE4M3 scale per block of 16, float32 scale per (layer, K/V) (§6)."""

    codec_id = CodecId.FP4
    default_param: ClassVar[int] = 16
    block: ClassVar[int] = 16

    def _check(self, geo: KVGeometry, param: int, flags: int) -> None:
        if flags & 0b100:
            raise MalformedPayloadError("FP4 MX variant (flag bit 2) is not supported")
        _check_kv_flags(flags, "FP4")
        if param != 16 or geo.head_dim % 16:
            raise MalformedPayloadError(f"NVFP4 needs block 16 dividing D, got param {param}")

    def _body_size(self, geo: KVGeometry, param: int, flags: int) -> int:
        self._check(geo, param, flags)
        n = geo.values_per_token
        return 4 * geo.num_layers * 2 + n // 16 + n // 2

    def _encode_tm(self, tm: np.ndarray, geo: KVGeometry) -> list[np.ndarray]:
        self._check(geo, self.default_param, self.default_flags)
        x = to_float32(tm)
        n_t = x.shape[0]
        xs = x.reshape(n_t, geo.num_layers, 2, -1, 16)
        bamax = np.maximum(xs.max(axis=-1), -xs.min(axis=-1))
        gscale = bamax.max(axis=-1) / np.float32(448 * 6)
        gscale[~(gscale > 0)] = 1.0
        with one_thread():
            bs = torch.from_numpy(np.abs(bamax) / (np.float32(6) * gscale[..., None]))
            bcode = bs.clamp_(max=448).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        eff = _E4M3_VALUES[bcode] * gscale[..., None]
        inv4 = np.divide(np.float32(4), eff, out=np.zeros_like(eff), where=eff > 0)
        y = xs * inv4[..., None]
        neg = np.signbit(y).view(np.uint8) << 3
        a = np.abs(y, out=y)
        np.minimum(a, 24, out=a)
        k = a.astype(np.uint8)
        codes = np.take(_E2M1_OF_QUARTERS, k) | neg
        return [gscale.astype("<f4"), bcode, _pack_nibbles(codes.reshape(n_t, -1))]

    def _decode_body(
        self, body: np.ndarray, geo: KVGeometry, param: int, flags: int, dtype: OutDType
    ) -> tuple[np.ndarray, str]:
        n_t = body.shape[0]
        n_l = geo.num_layers
        nb = geo.values_per_token // 16
        gscale = np.ascontiguousarray(body[:, : 8 * n_l]).view("<f4").reshape(n_t, n_l, 2, 1)
        if not (np.isfinite(gscale).all() and (gscale > 0).all()):
            raise MalformedPayloadError("FP4 object has a bad global scale")
        bcode = body[:, 8 * n_l : 8 * n_l + nb]
        if ((bcode & 0x7F) == 0x7F).any() or (bcode & 0x80).any():
            raise MalformedPayloadError("FP4 object has a NaN or negative block scale")
        bscale = _E4M3_VALUES[bcode].reshape(n_t, n_l, 2, -1) * (gscale * np.float32(2**14))
        pair = np.take(_E2M1_PAIR_F16, body[:, 8 * n_l + nb :])
        with one_thread():
            vals = torch.from_numpy(pair.view(np.float16)).float().numpy()
        out = vals.reshape(n_t, n_l, 2, -1, 16) * bscale[..., None]
        return out, "float32"
