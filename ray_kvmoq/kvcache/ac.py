"""AC: CacheGen-style quantisation plus interleaved rANS with a per-track codebook (§7, §8).

Quantiser: per token and (layer, K/V), ``amax`` as float16 (rounded up, so no value clips);
``M = bins/2 − 1`` and ``sym = round(x·M/amax) + M`` in ``[0, 2M]``. Default bins (K: 32 in every
layer; V: 32 for layers < 2, else 12) replace LMCache's recipe (K: 32 for layers < ⌈L/3⌉ else 16;
V: 32 for layers < 2 else 16): on SmolLM2 they lift top-1 agreement from 86.7% to 91.8% and cut KL
from 3.0e-2 to 1.7e-2 for 4% more bytes (docs/kv-payload-format.md §7.1 has the sweep). Keys
need the precision; values tolerate coarse bins.

Entropy stage: rans.py (16-bit renormalisation) with ``J`` interleaved coders per token (flags
bits 4–6 = log2 J) and frequency tables from the track's codebook (header ``param`` = codebook
id). The codebook holds the bins too, so an AC object plus its codebook is all a decoder needs.

Codebook granularity: one table per (layer, K/V, head) by default (``granularity`` 1). Per
channel tables (0) code ~5% smaller objects but the codebook grows from ~5 KB to ~420 KB,
which a track of a few groups never earns back; per (layer, K/V) (2) is the smallest.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, ClassVar

import numpy as np

from . import rans
from .codec import KVCodec
from .errors import (
    CodebookError,
    GeometryMismatchError,
    InvalidInputError,
    MalformedPayloadError,
    MissingCodebookError,
    TruncatedPayloadError,
    UnknownCodecError,
)
from .layout import (
    FORMAT_VERSION,
    HEADER_SIZE,
    KVGeometry,
    ObjectHeader,
    OutDType,
    absmax_rows,
    from_token_major,
    parse_header,
    to_float32,
    token_major,
)
from .naming import CodecId

CODEBOOK_VERSION = 1
_CB_HEAD = struct.Struct("<BBBBHBBHHH")  # 14 bytes
_MAX_LANES = 32
_FLAG_ZLIB = 1
_MAX_VALUES_PER_TOKEN = 1 << 22
"""Largest L·2·H·D a codebook may describe (16× a 405B-class model's 258k)."""


def default_bins(num_layers: int) -> np.ndarray:
    """Default bins per (layer, K/V), ``[L, 2]`` uint8: K 32 everywhere, V 32 then 12."""
    bins = np.full((num_layers, 2), 12, np.uint8)
    bins[:, 0] = 32
    bins[:2, 1] = 32
    return bins


def _bins_ok(bins: np.ndarray) -> bool:
    return bool(((bins >= 4) & (bins <= 64) & (bins % 2 == 0)).all())


def lanes_for(geometry: KVGeometry) -> int:
    """Interleaved coders per token: the largest power of two ≤ 32 dividing ``L·2·H·D``."""
    n = geometry.values_per_token
    return min(_MAX_LANES, n & -n)


@dataclass(frozen=True, eq=False)
class Codebook:
    """A parsed AC codebook (see :func:`build_codebook` for the bytes)."""

    codebook_id: int
    geometry: KVGeometry
    granularity: int
    bins: np.ndarray  # [L, 2] uint8
    freq: np.ndarray  # [NT, A] uint32, rows sum to 4096
    table_of: np.ndarray  # [N] int32: table of each value position (L-K/V-H-D order)

    @property
    def mids(self) -> np.ndarray:
        """``M`` per (layer, K/V) as float32 ``[L, 2, 1]``."""
        return (self.bins.astype(np.float32) / 2 - 1)[..., None]

    @property
    def decode_table(self) -> np.ndarray:
        """Packed slot → (symbol, frequency, bias) table for rans.decode (built lazily)."""
        cached: np.ndarray | None = self.__dict__.get("_table")
        if cached is None:
            cached = rans.pack_decode_table(self.freq)
            object.__setattr__(self, "_table", cached)
        return cached


def _table_of(geo: KVGeometry, granularity: int) -> np.ndarray:
    n_l, n_h, n_d = geo.num_layers, geo.num_kv_heads, geo.head_dim
    per = {0: 1, 1: n_d, 2: n_h * n_d}[granularity]
    return (np.arange(n_l * 2 * n_h * n_d, dtype=np.int32) // per).astype(np.int32)


def _alphabet_of_tables(geo: KVGeometry, bins: np.ndarray, granularity: int) -> np.ndarray:
    """Alphabet size ``2M+1`` of every table."""
    per_lkv = (bins.astype(np.int64) - 1).ravel()  # 2M+1 = bins - 1
    tables_per_lkv = {0: geo.num_kv_heads * geo.head_dim, 1: geo.num_kv_heads, 2: 1}[granularity]
    return np.repeat(per_lkv, tables_per_lkv)


def _normalise(counts: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Counts ``[NT, A]`` → frequencies summing to 4096, ≥ 1 inside each table's alphabet."""
    nt, a = counts.shape
    inside = np.arange(a)[None, :] < alpha[:, None]
    total = counts.sum(axis=1, keepdims=True).astype(np.int64)
    budget = rans.PROB_SCALE - alpha[:, None]
    freq = np.where(inside, 1 + (counts * budget) // np.maximum(total, 1), 0).astype(np.int64)
    freq[np.arange(nt), np.argmax(freq, axis=1)] += rans.PROB_SCALE - freq.sum(axis=1)
    return freq.astype(np.uint32)


def _quantise(tm: np.ndarray, mids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Token-major ``[T, L, 2, H·D]`` → (amax float16 ``[T, L, 2]``, symbols uint8 ``[T, N]``).

    ``amax`` is rounded *up* to float16, so ``|x·M/amax| ≤ M`` and no clipping pass is needed.
    """
    amax = absmax_rows(tm)
    a16 = np.minimum(amax, np.float32(65504)).astype(np.float16)
    low = a16.astype(np.float32) < amax
    if low.any():
        a16[low] = np.nextafter(a16[low], np.float16(np.inf))
    a16[~(a16 > 0)] = 1.0
    y = to_float32(tm) * (mids[None] / a16.astype(np.float32)[..., None])
    y += mids[None]
    sym = np.empty(y.shape, np.uint8)
    np.rint(y, out=sym, casting="unsafe")
    return a16, sym.reshape(tm.shape[0], -1)


def build_codebook(
    calibration_kv: Any,
    *,
    codebook_id: int = 0,
    bins: np.ndarray | None = None,
    granularity: int = 1,
) -> bytes:
    """Calibrate an AC codebook on a ``[L, 2, H, T, D]`` chunk (e.g. a prompt's first group).

    Layout (docs/kv-payload-format.md §8): ``u8 version=1, u8 prob_bits=12, u8 A, u8
    granularity, u16 num_tables, u8 codebook_id, u8 flags (bit0 zlib), u16 L, u16 H, u16 D,
    u8 bins[L][2], body = u16 freq[num_tables][A]`` (zlib-compressed when flag bit0).
    """
    tm, geo = token_major(calibration_kv)
    if granularity not in (0, 1, 2):
        raise InvalidInputError(f"granularity must be 0, 1 or 2, got {granularity}")
    if not 0 <= codebook_id <= 255:
        raise InvalidInputError("codebook_id must fit in one byte")
    b = default_bins(geo.num_layers) if bins is None else np.asarray(bins, np.uint8)
    if b.shape != (geo.num_layers, 2) or not _bins_ok(b):
        raise InvalidInputError("bins must be [L, 2] of even numbers in 4..64")
    a = int(b.max()) - 1
    cb_mids = (b.astype(np.float32) / 2 - 1)[..., None]
    _, sym = _quantise(tm, cb_mids)
    table_of = _table_of(geo, granularity)
    nt = int(table_of[-1]) + 1
    flat = (table_of.astype(np.int64)[None, :] * a + sym).ravel()
    counts = np.bincount(flat, minlength=nt * a).reshape(nt, a)
    freq = _normalise(counts, _alphabet_of_tables(geo, b, granularity))
    body = zlib.compress(freq.astype("<u2").tobytes(), 6)
    head = _CB_HEAD.pack(
        CODEBOOK_VERSION,
        rans.PROB_BITS,
        a,
        granularity,
        nt,
        codebook_id,
        _FLAG_ZLIB,
        geo.num_layers,
        geo.num_kv_heads,
        geo.head_dim,
    )
    return head + b.tobytes() + body


@lru_cache(maxsize=8)
def parse_codebook(blob: bytes) -> Codebook:
    """Parse and validate a codebook blob (cached: a track decodes many groups with one)."""
    if len(blob) < _CB_HEAD.size:
        raise CodebookError("codebook shorter than its 14-byte header")
    ver, pbits, a, gran, nt, cid, flags, n_l, n_h, n_d = _CB_HEAD.unpack_from(blob)
    if ver != CODEBOOK_VERSION or pbits != rans.PROB_BITS:
        raise CodebookError(f"codebook version {ver} / prob_bits {pbits} not supported")
    if gran not in (0, 1, 2) or not 3 <= a <= 63 or not (n_l and n_h and n_d):
        raise CodebookError("codebook header is malformed")
    geo = KVGeometry(num_layers=n_l, num_kv_heads=n_h, head_dim=n_d)
    # Checked before anything is sized by the geometry: three u16 fields can claim ~5.6e14
    # values per token, and the table index below holds one int32 per value.
    if geo.values_per_token > _MAX_VALUES_PER_TOKEN:
        raise CodebookError(f"codebook geometry of {geo.values_per_token} values per token")
    if nt != geo.values_per_token // {0: 1, 1: n_d, 2: n_h * n_d}[gran]:
        raise CodebookError(f"codebook has {nt} tables; its geometry needs another count")
    off = _CB_HEAD.size + 2 * n_l
    if len(blob) < off:
        raise CodebookError("codebook shorter than its bins table")
    bins = np.frombuffer(blob, np.uint8, 2 * n_l, _CB_HEAD.size).reshape(n_l, 2).copy()
    if not _bins_ok(bins) or bins.max() - 1 != a:
        raise CodebookError("codebook bins are malformed")
    table_of = _table_of(geo, gran)
    if nt != int(table_of[-1]) + 1:
        raise CodebookError(f"codebook has {nt} tables; its geometry needs {table_of[-1] + 1}")
    body = blob[off:]
    if flags & _FLAG_ZLIB:
        try:
            body = zlib.decompress(body)
        except zlib.error as exc:
            raise CodebookError(f"codebook body does not inflate: {exc}") from None
    if len(body) != 2 * nt * a:
        raise CodebookError("codebook body has the wrong size")
    freq = np.frombuffer(body, "<u2").reshape(nt, a).astype(np.uint32)
    inside = np.arange(a)[None, :] < _alphabet_of_tables(geo, bins, gran)[:, None]
    if (freq.sum(axis=1) != rans.PROB_SCALE).any() or (
        np.where(inside, freq == 0, freq != 0)
    ).any():
        raise CodebookError("codebook frequencies do not sum to 4096 over each alphabet")
    return Codebook(
        codebook_id=cid, geometry=geo, granularity=gran, bins=bins, freq=freq, table_of=table_of
    )


def _need_codebook(codebook: bytes | None) -> Codebook:
    if codebook is None:
        raise MissingCodebookError(
            "AC objects need the track's codebook (object 0 of the AC.codebook track)"
        )
    return parse_codebook(bytes(codebook))


class ACCodec(KVCodec):
    """CacheGen-like quantiser + rANS; objects decode with the track's codebook (§7)."""

    codec_id = CodecId.AC
    self_contained: ClassVar[bool] = False
    needs_codebook: ClassVar[bool] = True

    def encode_chunk(self, kv: Any, *, codebook: bytes | None = None) -> list[bytes]:
        cb = _need_codebook(codebook)
        tm, geo = token_major(kv)
        if geo != cb.geometry:
            raise GeometryMismatchError(f"chunk geometry {geo} differs from the codebook's")
        lanes = lanes_for(geo)
        a16, sym = _quantise(tm, cb.mids)
        states, data, lens = rans.encode(sym, cb.freq, cb.table_of, lanes)
        flags = 0b11 | (lanes.bit_length() - 1) << 4
        head = ObjectHeader(
            version=FORMAT_VERSION,
            codec=CodecId.AC,
            geometry=geo,
            param=cb.codebook_id,
            flags=flags,
        ).pack()
        fixed = np.concatenate(
            (
                a16.astype("<f2").reshape(len(a16), -1).view(np.uint8),
                states.astype(">u4").view(np.uint8),
            ),
            axis=1,
        )
        ends = 2 * np.cumsum(lens)  # in bytes: the stream is u16 words
        lens = 2 * lens
        raw = data.astype("<u2").tobytes()
        return [
            head + row.tobytes() + raw[e - n : e]
            for row, e, n in zip(fixed, ends.tolist(), lens.tolist(), strict=True)
        ]

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
        cb = _need_codebook(codebook)
        if cb.geometry != geometry:
            raise GeometryMismatchError(f"codebook geometry {cb.geometry} is not {geometry}")
        lanes = lanes_for(geometry)
        want = ObjectHeader(
            version=FORMAT_VERSION,
            codec=CodecId.AC,
            geometry=geometry,
            param=cb.codebook_id,
            flags=0b11 | (lanes.bit_length() - 1) << 4,
        )
        n_l = geometry.num_layers
        fixed = HEADER_SIZE + 4 * n_l + 4 * lanes
        sizes = np.fromiter(map(len, objects), np.int64, len(objects))
        heads = np.frombuffer(b"".join(obj[:10] for obj in objects), np.uint8)
        expected = np.frombuffer(want.pack()[:10], np.uint8)
        if heads.size != 10 * len(objects) or (sizes < fixed).any():
            bad = int(np.nonzero(sizes < fixed)[0][0])
            self._check_header(bad, objects[bad], want, fixed)  # raises the specific error
        mismatch = (heads.reshape(-1, 10) != expected).any(axis=1)
        if mismatch.any():
            bad = int(np.nonzero(mismatch)[0][0])
            self._check_header(bad, objects[bad], want, fixed)
        head = np.frombuffer(b"".join(obj[HEADER_SIZE:fixed] for obj in objects), np.uint8).reshape(
            len(objects), -1
        )
        a16 = head[:, : 4 * n_l].copy().view("<f2").astype(np.float32).reshape(-1, n_l, 2)
        if not (np.isfinite(a16).all() and (a16 > 0).all()):
            raise MalformedPayloadError("AC object has a bad amax")
        states = head[:, 4 * n_l :].copy().view(">u4").astype(np.uint32)
        if ((sizes - fixed) % 2).any():
            raise TruncatedPayloadError("AC stream is not a whole number of 16-bit words")
        buf = np.frombuffer(b"".join(obj[fixed:] for obj in objects), "<u2").astype(np.uint16)
        lens = (sizes - fixed) // 2
        ends = np.cumsum(lens)
        sym = rans.decode(
            states,
            buf,
            ends - lens,
            ends,
            cb.decode_table,
            cb.table_of,
            geometry.values_per_token,
        )
        mids = cb.mids
        vals = sym.reshape(len(objects), n_l, 2, -1).astype(np.float32)
        vals -= mids[None]
        vals *= (a16 / mids[..., 0][None])[..., None]
        return from_token_major(vals, geometry, dtype)

    @staticmethod
    def _check_header(i: int, obj: bytes | memoryview, want: ObjectHeader, fixed: int) -> None:
        got = parse_header(obj)
        if got.codec != CodecId.AC:
            raise UnknownCodecError(f"AC decoder got a {got.codec.name} object ({i})")
        if got.geometry != want.geometry:
            raise GeometryMismatchError(
                f"object {i} geometry {got.geometry} is not {want.geometry}"
            )
        if got.param != want.param:
            raise CodebookError(
                f"object {i} needs codebook {got.param}, given codebook {want.param}"
            )
        if got.flags != want.flags:
            raise MalformedPayloadError(f"object {i} AC flags {got.flags:#x} unsupported")
        if len(obj) < fixed:
            raise TruncatedPayloadError(f"AC object {i} is shorter than its fixed part")
        raise MalformedPayloadError(f"object {i} header is not a version-1 AC header")
