"""vLLM's paged KV cache ↔ draft-shi-moq-kvcache chunks ``[L, 2, H, T, D]``.

vLLM 0.32 hands connectors every attention layer's cache as one ``[B, H, N, C]`` tensor (B
blocks, H KV heads, N = block size, C = 2·head size), but where a token's K and V sit inside a
block is backend-specific — and on the CPU backend even ISA-specific:

* **CPU** (``CPU_ATTN``): each (block, head) run holds a K region then a V region of ``N·D``
  values each, laid out for the attention kernel of the CPU's ISA: K transposed (``vec``,
  ``vec16``) or VNNI-paired (``amx``), V token-major or VNNI-paired. Rather than re-deriving
  those packings, :class:`CpuLayout` *probes* vLLM's own cache-write kernel
  (``cpu_attn_reshape_and_cache``) once at start-up with position-coded values, which yields the
  exact permutation from token-major ``[N, D]`` to each region; it writes loaded tokens with that
  same kernel and reads tokens back through the inverse permutation. Tests check the round trip
  against the kernel for every ISA this machine runs.
* **CUDA** (FlashAttention, FlashInfer): K and V side by side per token, ``[B, H, N, 2, D]``
  (their forward does ``kv_cache.transpose(1, 2).split(head_size, dim=-1)``), which
  :class:`ChannelLayout` indexes directly (not run here: no GPU in CI).

Both move the tokens of any position range between a request's blocks and ``[T, H, 2, D]``, for
any block size (a chunk may span many blocks, a block many chunks); gathers copy only the blocks
involved, scatters write in place, so the engine's cache tensor itself is updated.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

import torch

__all__ = [
    "ChannelLayout",
    "CpuLayout",
    "LayerCaches",
    "PagedLayout",
    "gather_chunk",
    "order_layers",
    "scatter_chunk",
    "slot_index",
]


def _check_layer(layer: torch.Tensor) -> tuple[int, int, int, int]:
    if layer.dim() != 4 or layer.shape[-1] % 2:
        raise ValueError(
            f"expected a [blocks, kv_heads, block_size, 2*head_size] KV layer, got "
            f"{tuple(layer.shape)}"
        )
    n_b, n_h, n_n, c = layer.shape
    return n_b, n_h, n_n, c // 2


class PagedLayout(ABC):
    """Where K and V of each token sit inside vLLM's ``[B, H, N, 2·D]`` layer tensor."""

    name = "abstract"

    @abstractmethod
    def gather(
        self, layer: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        """Tokens at (``blocks[i]``, ``offsets[i]``) as a new ``[T, H, 2, D]`` tensor."""

    @abstractmethod
    def scatter(
        self, layer: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor, src: torch.Tensor
    ) -> None:
        """Write ``src`` ``[T, H, 2, D]`` into the tokens at (``blocks[i]``, ``offsets[i]``)."""

    def gather_layers(
        self, layers: Sequence[torch.Tensor], blocks: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        """The tokens at (``blocks[i]``, ``offsets[i]``) of every layer as one new
        ``[L, 2, H, T, D]`` tensor (what :func:`gather_chunk` returns)."""
        per_layer = [self.gather(layer, blocks, offsets) for layer in layers]  # [T, H, 2, D]
        return torch.stack(per_layer).permute(0, 3, 2, 1, 4)


class ChannelLayout(PagedLayout):
    """FlashAttention / FlashInfer: ``[B, H, N, 2, D]`` (K and V side by side per token)."""

    name = "kv_in_channel"

    def _view(self, layer: torch.Tensor) -> torch.Tensor:
        n_b, n_h, n_n, d = _check_layer(layer)
        return layer.view(n_b, n_h, n_n, 2, d)

    def gather(
        self, layer: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        return self._view(layer)[blocks, :, offsets, :, :]  # advanced dims first: [T, H, 2, D]

    def scatter(
        self, layer: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor, src: torch.Tensor
    ) -> None:
        self._view(layer)[blocks, :, offsets, :, :] = src


class CpuLayout(PagedLayout):
    """vLLM's CPU backend for one ISA, block size and head size (see the module docstring)."""

    name = "cpu"

    def __init__(self, isa: str, block_size: int, head_dim: int, dtype: torch.dtype) -> None:
        self.isa = isa
        self.block_size = block_size
        self.head_dim = head_dim
        self.dtype = dtype
        src_k, src_v = _probe_cpu_kernel(isa, block_size, head_dim, dtype)
        # cache position j holds token-major value src[j]; reading back is the inverse map
        self._inv_k = torch.argsort(src_k)
        self._inv_v = torch.argsort(src_v)

    def __repr__(self) -> str:
        return f"<CpuLayout {self.isa} N={self.block_size} D={self.head_dim} {self.dtype}>"

    def gather(
        self, layer: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        n_b, n_h, n_n, d = _check_layer(layer)
        uniq, where = torch.unique(blocks, return_inverse=True)
        region = layer.view(n_b, n_h, 2, n_n * d)[uniq]  # only the blocks involved
        k = region[:, :, 0][..., self._inv_k].view(len(uniq), n_h, n_n, d)
        v = region[:, :, 1][..., self._inv_v].view(len(uniq), n_h, n_n, d)
        kv = torch.stack((k, v), dim=2)  # [nb, H, 2, N, D]
        return kv[where, :, :, offsets, :]  # [T, H, 2, D]

    def gather_layers(
        self, layers: Sequence[torch.Tensor], blocks: torch.Tensor, offsets: torch.Tensor
    ) -> torch.Tensor:
        """One ``index_select`` per layer, straight into the ``[L, 2, H, T, D]`` result: the
        positions are the same in every layer, so they are worked out once. (Per layer,
        :meth:`gather` copies the touched blocks, un-permutes K and V, stacks and indexes:
        ~6.5 ms a 128-token group of SmolLM2's 30 layers here, inside the engine step, against
        1.5-1.7 ms this way.)"""
        if not layers or any(layer.shape != layers[0].shape for layer in layers):
            return super().gather_layers(layers, blocks, offsets)
        _, n_h, n_n, d = _check_layer(layers[0])
        region = n_n * d  # one (block, head)'s K region, then its V region
        inside = offsets.to(torch.long).view(1, -1, 1) * d + torch.arange(d).view(1, 1, d)
        kv = torch.stack((self._inv_k[inside], self._inv_v[inside]))  # [2, 1, T, D]
        heads = torch.arange(n_h).view(1, n_h, 1, 1)
        base = (blocks.to(torch.long).view(1, 1, -1, 1) * n_h + heads) * 2  # [1, H, T, 1]
        sides = torch.arange(2).view(2, 1, 1, 1)
        index = ((base + sides) * region + kv).reshape(-1)  # [2, H, T, D] flat positions
        out = torch.empty((len(layers), 2, n_h, len(blocks), d), dtype=layers[0].dtype)
        for i, layer in enumerate(layers):
            torch.index_select(layer.view(-1), 0, index, out=out[i].view(-1))
        return out

    def scatter(
        self, layer: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor, src: torch.Tensor
    ) -> None:
        from vllm import _custom_ops as ops

        n_b, n_h, n_n, d = _check_layer(layer)
        key_cache, value_cache = layer.view(n_b, n_h, 2 * n_n, d).chunk(2, dim=2)
        src = src.to(layer.dtype)
        ops.cpu_attn_reshape_and_cache(
            src[:, :, 0].contiguous(),
            src[:, :, 1].contiguous(),
            key_cache,
            value_cache,
            (blocks * n_n + offsets).to(torch.long),
            self.isa,
            k_scale=1.0,
            v_scale=1.0,
            kv_cache_dtype="auto",
        )


def _probe_cpu_kernel(
    isa: str, block_size: int, head_dim: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each position of a block's K and V regions, the token-major index (``t·D + d``)
    vLLM's cache-write kernel stores there. Four writes of one base-16 digit of the index each
    (small integers are exact in every KV dtype) spell it out."""
    from vllm import _custom_ops as ops

    n = block_size * head_dim
    idx = torch.arange(n)
    src_k = torch.zeros(n, dtype=torch.long)
    src_v = torch.zeros(n, dtype=torch.long)
    for p in range((max(n - 1, 1).bit_length() + 3) // 4):
        cache = torch.zeros(1, 1, block_size, 2 * head_dim, dtype=dtype)
        key_cache, value_cache = cache.view(1, 1, 2 * block_size, head_dim).chunk(2, dim=2)
        digit = (((idx >> (4 * p)) & 15) + 1).to(dtype).view(block_size, 1, head_dim)
        ops.cpu_attn_reshape_and_cache(
            digit,
            digit,
            key_cache,
            value_cache,
            torch.arange(block_size),
            isa,
            k_scale=1.0,
            v_scale=1.0,
            kv_cache_dtype="auto",
        )
        flat = cache.view(2, n).float().round().long() - 1
        src_k |= flat[0] << (4 * p)
        src_v |= flat[1] << (4 * p)
    for name, src in (("K", src_k), ("V", src_v)):
        if not torch.equal(torch.sort(src).values, idx):
            raise ValueError(
                f"vLLM's CPU KV layout for isa={isa!r}, block size {block_size}, head size "
                f"{head_dim} is not a permutation of the {name} tokens; the MoQT connector "
                "cannot read it"
            )
    return src_k, src_v


LayerCaches = Mapping[str, torch.Tensor]
"""Layer name → that layer's paged KV tensor."""

_LAYER_INDEX = re.compile(r"\.(\d+)\.")


def order_layers(names: Sequence[str]) -> list[str]:
    """Attention layer names in model order (by the first ``.<index>.`` in each name)."""

    def key(n: str) -> tuple[int, str]:
        m = _LAYER_INDEX.search(n)
        return (int(m.group(1)) if m else 1 << 30, n)

    return sorted(names, key=key)


def slot_index(
    block_ids: Sequence[int], start: int, end: int, block_size: int, device: torch.device
) -> tuple[torch.Tensor, torch.Tensor]:
    """(block index, offset in block) of token positions ``start..end-1`` of a request whose
    blocks are ``block_ids`` (in order)."""
    if not 0 <= start <= end <= len(block_ids) * block_size:
        raise ValueError(
            f"tokens {start}..{end} do not fit the request's {len(block_ids)} blocks of "
            f"{block_size}"
        )
    pos = torch.arange(start, end)
    table = torch.as_tensor(list(block_ids), dtype=torch.long)
    blocks = table[pos // block_size]
    return blocks.to(device), (pos % block_size).to(device)


def gather_chunk(
    layout: PagedLayout,
    caches: LayerCaches,
    layers: Sequence[str],
    blocks: torch.Tensor,
    offsets: torch.Tensor,
) -> torch.Tensor:
    """The tokens at ``blocks``/``offsets`` of every layer as one ``[L, 2, H, T, D]`` tensor
    (the codecs' chunk layout), on the caches' device."""
    return layout.gather_layers([caches[name] for name in layers], blocks, offsets)


def scatter_chunk(
    layout: PagedLayout,
    caches: LayerCaches,
    layers: Sequence[str],
    blocks: torch.Tensor,
    offsets: torch.Tensor,
    chunk: torch.Tensor,
) -> None:
    """Write a ``[L, 2, H, T, D]`` chunk into the tokens at ``blocks``/``offsets`` of every layer."""
    if chunk.shape[0] != len(layers):
        raise ValueError(f"chunk has {chunk.shape[0]} layers, the engine {len(layers)}")
    token_major = chunk.permute(0, 3, 2, 1, 4)  # [L, T, H, 2, D]
    for i, name in enumerate(layers):
        cache = caches[name]
        layout.scatter(cache, blocks, offsets, token_major[i].to(cache.device, cache.dtype))
