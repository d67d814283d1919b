"""``KVCache``: the keys and values of a run of tokens, kept chunk by chunk.

Layout (kv-payload.md §5.1): one chunk is ``[L, 2, H, n, D]`` — layers, K/V, KV heads, tokens,
head dim — with keys post-RoPE and GQA not expanded. Chunk boundaries sit at absolute positions
that are multiples of ``chunk_size`` (128 by default), so chunk ``g`` of a cache that starts at 0
is exactly group ``g`` of the KV track.

Each chunk is its own contiguous tensor. That makes ``chunks()`` free: it returns numpy views
(bf16 as ``uint16`` bit patterns, which Ray's object store passes zero-copy, runtime-notes §3.6),
and ``from_chunks()`` wraps arrays that came out of the object store without copying them (they
are read-only there; the engine never writes into a KV it was given).

A ``KVCache`` pickles as its numpy chunks, so passing one through Ray (an argument or a return
value) stays zero-copy on the receiving side.

Invariants: every chunk has the same L, H, D and dtype; all chunks are full except the first (if
``start`` is not on a boundary) and the last.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch

__all__ = ["KVCache"]

_NUMPY_OF = {torch.float32: np.float32, torch.float16: np.float16, torch.bfloat16: np.uint16}


def _to_tensor(a: np.ndarray | torch.Tensor, dtype: torch.dtype | None) -> torch.Tensor:
    if isinstance(a, torch.Tensor):
        return a if dtype is None or a.dtype == dtype else a.to(dtype)
    if a.dtype == np.uint16:
        # bf16 bit patterns; from_numpy warns on read-only (object store) arrays — we never write.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(np.ascontiguousarray(a)).view(torch.bfloat16)
    elif a.dtype in (np.float32, np.float16, np.float64):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)
            t = torch.from_numpy(np.ascontiguousarray(a))
    else:
        raise TypeError(f"KV arrays must be float16/32/64 or uint16 (bf16 bits), not {a.dtype}")
    return t if dtype is None or t.dtype == dtype else t.to(dtype)


class KVCache:
    """Keys and values of tokens ``start .. start+length-1``, stored per chunk.

    Build with ``from_chunks`` (numpy arrays or tensors) or ``from_tensor`` (``[L, 2, H, T, D]``);
    read with ``chunks()`` (numpy views), ``tensors()`` or ``to_tensor()``.
    """

    def __init__(
        self, chunks: Sequence[torch.Tensor], *, start: int = 0, chunk_size: int = 128
    ) -> None:
        if not chunks:
            raise ValueError("a KVCache needs at least one chunk")
        first = chunks[0]
        if first.dim() != 5 or first.shape[1] != 2:
            raise ValueError(f"KV chunks must be [L, 2, H, n, D], got {tuple(first.shape)}")
        for c in chunks:
            if c.shape[:3] != first.shape[:3] or c.shape[4] != first.shape[4]:
                raise ValueError(
                    f"KV chunk shapes differ: {tuple(c.shape)} vs {tuple(first.shape)}"
                )
            if c.dtype != first.dtype:
                raise ValueError(f"KV chunk dtypes differ: {c.dtype} vs {first.dtype}")
        pos = start
        for i, c in enumerate(chunks):
            n = c.shape[3]
            ends_on_boundary = (pos + n) % chunk_size == 0
            if (
                n < 1
                or pos // chunk_size != (pos + n - 1) // chunk_size
                or (i < len(chunks) - 1 and not ends_on_boundary)
            ):
                sizes = [int(x.shape[3]) for x in chunks]
                raise ValueError(
                    f"chunk sizes {sizes} do not follow {chunk_size}-token boundaries "
                    f"from position {start}"
                )
            pos += n
        self._chunks = list(chunks)
        self.start = start
        """Absolute position of the first token."""
        self.chunk_size = chunk_size
        """Tokens per chunk (chunk boundaries at multiples of it)."""

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_chunks(
        cls,
        chunks: Sequence[np.ndarray | torch.Tensor],
        *,
        start: int = 0,
        chunk_size: int = 128,
        dtype: torch.dtype | str | None = None,
    ) -> KVCache:
        """Wrap ``[L, 2, H, n, D]`` chunks (numpy: ``uint16`` = bf16 bits, float16, float32; or
        tensors), without copying when no ``dtype`` conversion is asked for. A reconstructed
        (lossy) KV is injected the same way: the engine casts it to its own dtype."""
        dt = _parse_dtype(dtype) if dtype is not None else None
        return cls([_to_tensor(c, dt) for c in chunks], start=start, chunk_size=chunk_size)

    @classmethod
    def from_tensor(cls, kv: torch.Tensor, *, start: int = 0, chunk_size: int = 128) -> KVCache:
        """Split ``[L, 2, H, T, D]`` into contiguous chunks on ``chunk_size`` boundaries (copies)."""
        total = kv.shape[3]
        if total == 0:
            raise ValueError("empty KV")
        cuts, pos = [], start
        while pos < start + total:
            end = min((pos // chunk_size + 1) * chunk_size, start + total)
            cuts.append((pos - start, end - start))
            pos = end
        chunks = [kv[:, :, :, a:b].contiguous() for a, b in cuts]
        return cls(chunks, start=start, chunk_size=chunk_size)

    @staticmethod
    def cat(parts: Sequence[KVCache]) -> KVCache:
        """Join caches that follow each other (``a.end == b.start``) into one."""
        if not parts:
            raise ValueError("nothing to concatenate")
        for a, b in itertools.pairwise(parts):
            if a.end != b.start:
                raise ValueError(f"KV ranges do not touch: {a.start}..{a.end} then {b.start}..")
        aligned = all(p.end % p.chunk_size == 0 for p in parts[:-1])
        if aligned and all(p.chunk_size == parts[0].chunk_size for p in parts):
            chunks = [c for p in parts for c in p._chunks]
            return KVCache(chunks, start=parts[0].start, chunk_size=parts[0].chunk_size)
        full = torch.cat([p.to_tensor() for p in parts], dim=3)
        return KVCache.from_tensor(full, start=parts[0].start, chunk_size=parts[0].chunk_size)

    # ------------------------------------------------------------------ properties
    @property
    def length(self) -> int:
        """Number of tokens held."""
        return sum(c.shape[3] for c in self._chunks)

    @property
    def end(self) -> int:
        """Absolute position one past the last token."""
        return self.start + self.length

    @property
    def dtype(self) -> torch.dtype:
        """Torch dtype of the values (bf16 chunks read back as ``uint16`` numpy)."""
        return self._chunks[0].dtype

    @property
    def shape(self) -> tuple[int, int, int, int, int]:
        """``(L, 2, H, length, D)``."""
        l_, two, h, _, d = self._chunks[0].shape
        return (l_, two, h, self.length, d)

    @property
    def nbytes(self) -> int:
        """Bytes held by the values."""
        return sum(c.numel() * c.element_size() for c in self._chunks)

    def __len__(self) -> int:
        return self.length

    def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
        # Pickle as numpy chunks: Ray's pickle-5 serializer then ships them out of band and
        # ``ray.get`` rebuilds the cache on read-only views of the object store (no copy).
        return (_rebuild, (self.chunks(), self.start, self.chunk_size, str(self.dtype)))

    def __repr__(self) -> str:
        return (
            f"KVCache(shape={self.shape}, start={self.start}, dtype={self.dtype}, "
            f"chunks={len(self._chunks)})"
        )

    # ------------------------------------------------------------------ access
    def tensors(self) -> list[torch.Tensor]:
        """The chunk tensors themselves (no copy)."""
        return list(self._chunks)

    def chunks(self, chunk_size: int | None = None) -> list[np.ndarray]:
        """Numpy ``[L, 2, H, n, D]`` per chunk: zero-copy views of CPU tensors (bf16 as
        ``uint16``). A different ``chunk_size`` than the stored one re-splits (copies)."""
        kv = self
        if chunk_size is not None and chunk_size != self.chunk_size:
            kv = KVCache.from_tensor(self.to_tensor(), start=self.start, chunk_size=chunk_size)
        out = []
        for c in kv._chunks:
            c = c.detach().cpu()
            out.append(c.view(torch.uint16).numpy() if c.dtype == torch.bfloat16 else c.numpy())
        return out

    def to_tensor(self) -> torch.Tensor:
        """All tokens as one ``[L, 2, H, T, D]`` tensor (a copy unless there is one chunk)."""
        if len(self._chunks) == 1:
            return self._chunks[0]
        return torch.cat(self._chunks, dim=3)

    def to(self, dtype: torch.dtype | str | None = None, device: str | None = None) -> KVCache:
        """A copy in another dtype and/or device (self when nothing changes)."""
        dt = _parse_dtype(dtype) if dtype is not None else self.dtype
        dev = torch.device(device) if device is not None else self._chunks[0].device
        if dt == self.dtype and dev == self._chunks[0].device:
            return self
        return KVCache(
            [c.to(device=dev, dtype=dt) for c in self._chunks],
            start=self.start,
            chunk_size=self.chunk_size,
        )

    def prefix(self, n: int) -> KVCache:
        """The first ``n`` tokens (views of whole chunks; the cut chunk is sliced)."""
        if not 0 < n <= self.length:
            raise ValueError(f"prefix length {n} not in 1..{self.length}")
        out, left = [], n
        for c in self._chunks:
            if left <= 0:
                break
            take = min(left, c.shape[3])
            out.append(c if take == c.shape[3] else c[:, :, :, :take].contiguous())
            left -= take
        return KVCache(out, start=self.start, chunk_size=self.chunk_size)

    def copy_into(self, dest: torch.Tensor) -> None:
        """Copy the tokens into ``dest`` ([L, 2, H, length, D]), casting as needed."""
        pos = 0
        for c in self._chunks:
            n = c.shape[3]
            dest[:, :, :, pos : pos + n].copy_(c)
            pos += n


def _rebuild(chunks: list[np.ndarray], start: int, chunk_size: int, dtype: str) -> KVCache:
    kv = KVCache.from_chunks(chunks, start=start, chunk_size=chunk_size)
    want = _parse_dtype(dtype.removeprefix("torch."))
    return kv if kv.dtype == want else kv.to(want)


def _parse_dtype(dtype: torch.dtype | str) -> torch.dtype:
    if isinstance(dtype, torch.dtype):
        return dtype
    names = {
        "bfloat16": torch.bfloat16,
        "bf16": torch.bfloat16,
        "float16": torch.float16,
        "fp16": torch.float16,
        "half": torch.float16,
        "float32": torch.float32,
        "fp32": torch.float32,
        "float": torch.float32,
    }
    if dtype not in names:
        raise ValueError(f"unknown dtype {dtype!r}; use one of {sorted(names)}")
    return names[dtype]
