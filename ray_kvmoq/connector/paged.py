"""vLLM's paged KV cache ↔ draft-shi-moq-kvcache chunks ``[L, 2, H, T, D]``.

vLLM 0.32 hands every attention layer's cache to connectors as one ``[B, H, N, C]`` tensor (B
blocks, H KV heads, N = block size, C = 2·head size), but what ``C`` holds depends on the
attention backend, so the split into K and V is backend-specific:

* ``CPU_ATTN`` (vLLM's CPU backend) reinterprets each (block, head) run as K rows then V rows:
  the memory is ``[B, H, 2, N, D]`` (``cpu_attn.py`` views it as ``[B, H, 2N, D]`` and chunks).
* FlashAttention and FlashInfer (CUDA) keep K and V side by side per token: ``[B, H, N, 2, D]``
  (``kv_cache.transpose(1, 2).split(head_size, dim=-1)`` in their forward).

:class:`PagedLayout` turns a layer tensor into that 5-D view (no copy) and moves the tokens of any
position range between the blocks of a request and a token-major ``[T, H, 2, D]`` array, for any
block size (a chunk may span many blocks, or a block many chunks). Gathers copy only the
requested tokens; scatters write in place through the view, so the engine's cache tensor itself
is updated. Chunks for the codecs are assembled by :func:`gather_chunk` and written back by
:func:`scatter_chunk` over all layers in layer order.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import torch

__all__ = [
    "KV_IN_BLOCK",
    "KV_IN_CHANNEL",
    "LayerCaches",
    "PagedLayout",
    "gather_chunk",
    "layout_for_backend",
    "order_layers",
    "scatter_chunk",
    "slot_index",
]


@dataclass(frozen=True, kw_only=True)
class PagedLayout:
    """Where K and V of a token sit inside vLLM's ``[B, H, N, 2·D]`` layer tensor."""

    name: str
    """``kv_in_block`` (CPU) or ``kv_in_channel`` (FlashAttention / FlashInfer)."""

    def view(self, layer: torch.Tensor) -> torch.Tensor:
        """The layer tensor as ``[B, H, 2, N, D]`` (kv_in_block) or ``[B, H, N, 2, D]``."""
        if layer.dim() != 4 or layer.shape[-1] % 2:
            raise ValueError(
                f"expected a [blocks, kv_heads, block_size, 2*head_size] KV layer, got "
                f"{tuple(layer.shape)}"
            )
        n_b, n_h, n_n, c = layer.shape
        if self.name == "kv_in_block":
            return layer.view(n_b, n_h, 2, n_n, c // 2)
        return layer.view(n_b, n_h, n_n, 2, c // 2)

    def gather(self, layer: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
        """Tokens at (``blocks[i]``, ``offsets[i]``) as a new ``[T, H, 2, D]`` tensor."""
        v = self.view(layer)
        if self.name == "kv_in_block":
            return v[blocks, :, :, offsets, :]  # advanced dims first: [T, H, 2, D]
        return v[blocks, :, offsets, :, :]

    def scatter(
        self, layer: torch.Tensor, blocks: torch.Tensor, offsets: torch.Tensor, src: torch.Tensor
    ) -> None:
        """Write ``src`` ``[T, H, 2, D]`` into the tokens at (``blocks[i]``, ``offsets[i]``)."""
        v = self.view(layer)
        if self.name == "kv_in_block":
            v[blocks, :, :, offsets, :] = src
        else:
            v[blocks, :, offsets, :, :] = src


KV_IN_BLOCK = PagedLayout(name="kv_in_block")
KV_IN_CHANNEL = PagedLayout(name="kv_in_channel")


def layout_for_backend(backend_name: str) -> PagedLayout:
    """The layout of a vLLM attention backend (by ``AttentionBackend.get_name()``)."""
    name = backend_name.upper()
    if name.startswith("CPU"):
        return KV_IN_BLOCK
    if "FLASH" in name or "TRITON" in name:
        return KV_IN_CHANNEL
    raise ValueError(
        f"attention backend {backend_name!r} is not supported by the MoQT KV connector "
        "(supported: CPU_ATTN, FLASH_ATTN, FLASHINFER, TRITON_ATTN)"
    )


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
    per_layer = [layout.gather(caches[name], blocks, offsets) for name in layers]  # [T, H, 2, D]
    return torch.stack(per_layer).permute(0, 3, 2, 1, 4)


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
