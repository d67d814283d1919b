"""Paged-layout plumbing: tokens move between vLLM's block tensors and [L, 2, H, T, D] chunks.

The CPU layouts are checked against vLLM's own cache kernels for every ISA this machine runs:
tokens written by ``cpu_attn_reshape_and_cache`` (what vLLM's forward does) must read back
exactly, and tokens scattered by the connector must land where that kernel would put them. The
CUDA layout is checked against how FlashAttention's forward splits the cache.
"""

from __future__ import annotations

import random

import pytest
import torch

from ray_kvmoq.connector.paged import (
    ChannelLayout,
    CpuLayout,
    PagedLayout,
    gather_chunk,
    order_layers,
    scatter_chunk,
    slot_index,
)

L, H, D = 3, 2, 64


def _isas() -> list[str]:
    out = ["vec", "vec16"]
    if torch.cpu._is_amx_tile_supported():
        out.append("amx")
    return out


def _kernel_write(
    layer: torch.Tensor, slots: torch.Tensor, k: torch.Tensor, v: torch.Tensor, isa: str
) -> None:
    """What vLLM's CPU forward does with a step's new K/V ([T, H, D])."""
    from vllm import _custom_ops as ops

    b, h, n, c = layer.shape
    key_cache, value_cache = layer.view(b, h, 2 * n, c // 2).chunk(2, dim=2)
    ops.cpu_attn_reshape_and_cache(
        k, v, key_cache, value_cache, slots, isa, k_scale=1.0, v_scale=1.0, kv_cache_dtype="auto"
    )


@pytest.mark.parametrize("isa", _isas())
@pytest.mark.parametrize("block_size", [32, 128, 256])
def test_cpu_gather_reads_back_what_vllms_kernel_wrote(isa: str, block_size: int) -> None:
    if isa == "amx" and block_size % 32:
        pytest.skip("amx needs block sizes that are multiples of 32")
    layout = CpuLayout(isa, block_size, D, torch.bfloat16)
    layer = torch.zeros(8, H, block_size, 2 * D, dtype=torch.bfloat16)
    block_ids = random.Random(block_size).sample(range(8), 3)
    start, end = 7, min(3 * block_size, 7 + 200)
    blocks, offsets = slot_index(block_ids, start, end, block_size, torch.device("cpu"))
    k = torch.randn(end - start, H, D).bfloat16()
    v = torch.randn(end - start, H, D).bfloat16()
    _kernel_write(layer, blocks * block_size + offsets, k, v, isa)
    got = layout.gather(layer, blocks, offsets)
    assert torch.equal(got[:, :, 0], k)
    assert torch.equal(got[:, :, 1], v)


@pytest.mark.parametrize("isa", _isas())
def test_cpu_scatter_writes_exactly_what_the_kernel_would_and_nothing_else(isa: str) -> None:
    block_size = 128
    layout = CpuLayout(isa, block_size, D, torch.bfloat16)
    mine = torch.randn(6, H, block_size, 2 * D).bfloat16()
    theirs = mine.clone()
    blocks, offsets = slot_index([4, 1], 100, 140, block_size, torch.device("cpu"))  # spans 2
    src = torch.randn(40, H, 2, D).bfloat16()
    layout.scatter(mine, blocks, offsets, src)
    _kernel_write(
        theirs,
        blocks * block_size + offsets,
        src[:, :, 0].contiguous(),
        src[:, :, 1].contiguous(),
        isa,
    )
    assert torch.equal(mine, theirs)


def _flash_kv(layer: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V as FlashAttention reads them, both ``[B, N, H, D]``."""
    return layer.transpose(1, 2).split(D, dim=-1)


@pytest.mark.parametrize("block_size", [16, 128])
def test_channel_layout_matches_flashattentions_split(block_size: int) -> None:
    layer = torch.randn(10, H, block_size, 2 * D).half()
    blocks, offsets = slot_index([7, 2, 9], 3, 2 * block_size + 5, block_size, torch.device("cpu"))
    got = ChannelLayout().gather(layer, blocks, offsets)
    k, v = _flash_kv(layer)
    assert torch.equal(got[:, :, 0], k[blocks, offsets])
    assert torch.equal(got[:, :, 1], v[blocks, offsets])


@pytest.mark.parametrize(
    "make",
    [
        lambda bs: ChannelLayout(),
        *[(lambda isa: lambda bs: CpuLayout(isa, bs, D, torch.bfloat16))(i) for i in _isas()],
    ],
    ids=["channel", *[f"cpu-{i}" for i in _isas()]],
)
@pytest.mark.parametrize("block_size", [32, 128])
def test_chunks_round_trip_over_all_layers_and_other_tokens_stay(
    make: object, block_size: int
) -> None:
    layout: PagedLayout = make(block_size)  # type: ignore[operator]
    caches = {
        f"model.layers.{i}.self_attn.attn": torch.randn(6, H, block_size, 2 * D).bfloat16()
        for i in range(L)
    }
    before = {k: v.clone() for k, v in caches.items()}
    layers = order_layers(list(caches))
    block_ids = [5, 0, 3]
    start, end = block_size // 2, 2 * block_size + 3
    blocks, offsets = slot_index(block_ids, start, end, block_size, torch.device("cpu"))
    chunk = torch.randn(L, 2, H, end - start, D).bfloat16()
    scatter_chunk(layout, caches, layers, blocks, offsets, chunk)
    assert torch.equal(gather_chunk(layout, caches, layers, blocks, offsets), chunk)
    others = [b for b in range(6) if b not in block_ids]
    for name in layers:
        assert torch.equal(caches[name][others], before[name][others])
    # the tokens of the touched blocks outside start..end-1 read back unchanged
    rest = [p for p in range(3 * block_size) if not start <= p < end]
    rb, ro = slot_index(block_ids, 0, 3 * block_size, block_size, torch.device("cpu"))
    rb, ro = rb[rest], ro[rest]
    for name in layers:
        assert torch.equal(layout.gather(caches[name], rb, ro), layout.gather(before[name], rb, ro))


def test_slot_index_refuses_tokens_beyond_the_requests_blocks() -> None:
    with pytest.raises(ValueError, match="do not fit"):
        slot_index([0, 1], 0, 2 * 16 + 1, 16, torch.device("cpu"))


def test_layers_are_ordered_by_index_not_by_name() -> None:
    names = [f"model.layers.{i}.self_attn.attn" for i in (10, 2, 1, 0)]
    assert order_layers(names) == [f"model.layers.{i}.self_attn.attn" for i in (0, 1, 2, 10)]


def test_a_tensor_that_is_not_a_kv_layer_is_refused_with_its_shape() -> None:
    with pytest.raises(ValueError, match=r"\(4, 2, 16\)"):
        ChannelLayout().gather(torch.zeros(4, 2, 16), torch.tensor([0]), torch.tensor([0]))


@pytest.mark.parametrize(
    ("isa", "block_size"),
    [(i, n) for i in _isas() for n in (16, 32, 128) if i != "amx" or n % 32 == 0],  # amx: 32k
)
def test_cpu_gather_of_all_layers_at_once_equals_the_layer_by_layer_gather(
    isa: str, block_size: int
) -> None:
    layout = CpuLayout(isa, block_size, D, torch.bfloat16)
    layers = [torch.randn(7, H, block_size, 2 * D).bfloat16() for _ in range(L)]
    blocks, offsets = slot_index([6, 2, 4], 5, 2 * block_size + 9, block_size, torch.device("cpu"))
    one_by_one = PagedLayout.gather_layers(layout, layers, blocks, offsets)
    got = layout.gather_layers(layers, blocks, offsets)
    assert got.shape == (L, 2, H, len(blocks), D)
    assert torch.equal(got, one_by_one)
