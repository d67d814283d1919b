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
from .layout import (
    KVGeometry,
    OutDType,
    block_absmax,
    one_thread,
    section,
    to_float32,
    token_major,
)
from .naming import CodecId

_FP16_MAX = np.float32(65504.0)


def _pack_nibbles(q: np.ndarray) -> np.ndarray:
    """``[T, N]`` uint8 codes < 16 → ``[T, N/2]`` bytes, even element in the low nibble.

    Each pair is read as one little-endian u16 ``e + 256·o``; ``(v | v >> 4)`` has ``e | o << 4``
    in its low byte.
    """
    v = np.ascontiguousarray(q).view(np.uint16)
    return (v | (v >> np.uint16(4))).astype(np.uint8)


def _unpack_nibbles(p: np.ndarray) -> np.ndarray:
    """Inverse of :func:`_pack_nibbles`: ``v = p | p << 4`` masked to ``0x0F0F`` is the pair."""
    v = p.astype(np.uint16)
    v |= v << np.uint16(4)
    v &= np.uint16(0x0F0F)
    return v.view(np.uint8).reshape(p.shape[0], -1)


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

    def _encode_into(self, body: np.ndarray, kv: np.ndarray) -> None:
        g = self.default_param
        tm, geo = token_major(kv)
        self._check(geo, g, self.default_flags)
        n_t = kv.shape[3]
        xg = to_float32(tm).reshape(-1, g)  # [R, G]: one row per group
        with one_thread():  # torch reduces short rows ~5x faster than numpy
            t = torch.from_numpy(xg)
            mn, mx = t.amin(dim=1).numpy(), t.amax(dim=1).numpy()
        mn16 = np.clip(mn, -_FP16_MAX, _FP16_MAX).astype(np.float16)
        mn32 = mn16.astype(np.float32)
        scale16 = _f16_up((mx - mn32) / np.float32(15))
        s32 = scale16.astype(np.float32)
        inv = np.divide(np.float32(1), s32, out=np.zeros_like(s32), where=s32 > 0)
        with one_thread():  # torch broadcasts per-row scalars over short rows ~2x faster
            y = (t - torch.from_numpy(mn32)[:, None]).mul_(torch.from_numpy(inv)[:, None])
            # minv rounds to fp16 and the scale may round: clamp keeps q in 0..15
            q = y.clamp_(0, 15).round_().to(torch.uint8).numpy()
        ng = xg.shape[0] // n_t
        section(body, 0, ng, "<f2")[:] = scale16.reshape(n_t, ng)
        section(body, 2 * ng, ng, "<f2")[:] = mn16.reshape(n_t, ng)
        body[:, 4 * ng :] = _pack_nibbles(q.reshape(n_t, -1))

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


# E2M1 code of trunc(4·y) for y = value / block scale, indexed by that int8's byte:
# |4y| → magnitude code at midpoints 0.25 0.75 1.25 1.75 2.5 3.5 5 (in units of y), sign in bit 3
_Q = np.arange(256).astype(np.uint8).view(np.int8).astype(np.int64)
_MAG = np.minimum(np.abs(_Q), 24)
_E2M1_OF_QUARTERS_I8 = (
    ((np.minimum(_MAG, 7) + 1) >> 1) + (_MAG >= 10) + (_MAG >= 14) + (_MAG >= 20) + 8 * (_Q < 0)
).astype(np.uint8)
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

    def _encode_into(self, body: np.ndarray, kv: np.ndarray) -> None:
        tm, geo = token_major(kv)
        n_t, n_l = kv.shape[3], geo.num_layers
        xg = to_float32(tm).reshape(-1, 16)  # [R, 16]: one row per block
        bamax = block_absmax(tm, 16)
        per_lkv = bamax.reshape(n_t * n_l * 2, -1)
        gscale = per_lkv.max(axis=1) / np.float32(448 * 6)
        gscale[~(gscale > 0)] = 1.0
        with one_thread():
            bs = torch.from_numpy(per_lkv / (np.float32(6) * gscale[:, None]))
            bcode = bs.clamp_(max=448).to(torch.float8_e4m3fn).view(torch.uint8).numpy()
        eff = (_E4M3_VALUES[bcode] * gscale[:, None]).reshape(-1)
        inv4 = np.divide(np.float32(4), eff, out=np.zeros_like(eff), where=eff > 0)
        # trunc(4·y) as int8 (|4y| ≤ 36: block scales round to within 1.5x of block amax / 6),
        # then one table maps it, sign included, to the E2M1 code
        with one_thread():  # float → int8 truncates toward zero, as astype does
            y4 = torch.from_numpy(xg) * torch.from_numpy(inv4)[:, None]
            quarters = y4.to(torch.int8).numpy()
        code = np.take(_E2M1_OF_QUARTERS_I8, quarters.view(np.uint8))
        section(body, 0, 2 * n_l, "<f4")[:] = gscale.reshape(n_t, 2 * n_l)
        nb = per_lkv.size // n_t
        body[:, 8 * n_l : 8 * n_l + nb] = bcode.reshape(n_t, nb)
        body[:, 8 * n_l + nb :] = _pack_nibbles(code.reshape(n_t, -1))

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
