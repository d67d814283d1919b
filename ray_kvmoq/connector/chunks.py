"""One chunk of KV ↔ the objects of one group: codec, digest, and the AC codebook.

Encoding takes the ``[L, 2, H, T, D]`` tensor gathered from vLLM's blocks and returns one
:class:`~ray_kvmoq.relay.cache.CachedObject` per token (object id = token index in the chunk),
each with its payload digest as an extension header (DESIGN.md "Integrity"). Decoding verifies
every digest first and checks every header against the engine's geometry, so a damaged, forged
or foreign object raises a :class:`~ray_kvmoq.kvcache.errors.KVCacheError` and is never written
into the cache (the caller reports a load error and vLLM recomputes).

AC tracks need a codebook: the first chunk a prompt publishes calibrates one, which travels as
the sibling track ``AC.codebook`` (group = codebook id 0, one object). :class:`Codebooks` keeps
the blobs a process has made or fetched, per namespace.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence

import numpy as np
import torch

from ray_kvmoq.kvcache.ac import build_codebook
from ray_kvmoq.kvcache.errors import MalformedPayloadError
from ray_kvmoq.kvcache.integrity import KV_DIGEST_EXTENSION, attach_digest, verify
from ray_kvmoq.kvcache.layout import KVGeometry, OutDType, parse_header
from ray_kvmoq.kvcache.registry import get_codec
from ray_kvmoq.relay.cache import CachedObject
from ray_kvmoq.relay.packed import PackedGroup

__all__ = ["CODEBOOK_GROUP", "Codebooks", "decode_group", "encode_chunk", "to_codec_input"]

CODEBOOK_GROUP = 0
"""Group id (= codebook id) of a prompt's one AC codebook."""

Namespace = tuple[bytes, ...]


def to_codec_input(chunk: torch.Tensor) -> np.ndarray:
    """A gathered ``[L, 2, H, T, D]`` tensor as the numpy array the codecs take (bf16 as bits)."""
    t = chunk.detach().to("cpu").contiguous()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    if t.dtype not in (torch.float16, torch.float32):
        t = t.float()
    return t.numpy()


def encode_chunk(
    track: bytes,
    chunk: torch.Tensor,
    group_id: int,
    *,
    codebook: bytes | None = None,
    key: bytes | None = None,
) -> PackedGroup:
    """The group: one object per token, payload encoded by ``track``'s codec, digest (keyed
    with the cluster's digest ``key`` when there is one) attached. The payloads are copied once,
    into the group's one buffer, which the relay stores as it is (no copy on its side)."""
    payloads = get_codec(track).encode_chunk(to_codec_input(chunk), codebook=codebook)
    return PackedGroup.from_payloads(
        group_id, payloads, [(attach_digest(p, key),) for p in payloads]
    )


def decode_group(
    track: bytes,
    objects: Sequence[CachedObject],
    geometry: KVGeometry,
    dtype: torch.dtype,
    *,
    codebook: bytes | None = None,
    key: bytes | None = None,
) -> torch.Tensor:
    """Verify and decode a group into ``[L, 2, H, T, D]`` of ``dtype``.

    Objects must be ids ``0..T-1`` in order (a gap would shift tokens); every payload's digest
    must match (keyed with ``key`` when the cluster has one: a forged object never verifies)
    and every header must carry ``geometry``.
    """
    payloads: list[bytes | memoryview] = []  # views of the group's buffer: no copy
    for i, o in enumerate(objects):
        if o.object_id != i:
            raise MalformedPayloadError(f"group has object {o.object_id} where {i} belongs")
        verify(o.payload, [(t, v) for t, v in o.extensions if t == KV_DIGEST_EXTENSION], key)
        payloads.append(o.payload)
    if not payloads:
        raise MalformedPayloadError("empty group")
    head = parse_header(payloads[0])
    if head.geometry != geometry:
        raise MalformedPayloadError(
            f"group geometry {head.geometry} differs from the engine's {geometry}"
        )
    out: OutDType = (
        "bf16" if dtype == torch.bfloat16 else "float16" if dtype == torch.float16 else "float32"
    )
    arr = get_codec(track).decode_objects(payloads, geometry, dtype=out, codebook=codebook)
    t = torch.from_numpy(arr)
    return t.view(torch.bfloat16) if out == "bf16" else t


class Codebooks:
    """AC codebooks by namespace: made here for our own prompts, fetched for others'."""

    def __init__(self, capacity: int = 1024) -> None:
        self._blobs: OrderedDict[Namespace, bytes] = OrderedDict()
        self._cap = capacity
        self._lock = threading.Lock()

    def make(self, namespace: Namespace, chunk: torch.Tensor) -> tuple[bytes, bool]:
        """(the prompt's codebook, whether it is new and must be published)."""
        with self._lock:
            blob = self._blobs.get(namespace)
            if blob is not None:
                return blob, False
        blob = build_codebook(to_codec_input(chunk), codebook_id=CODEBOOK_GROUP)
        self._remember(namespace, blob)
        return blob, True

    def get(self, namespace: Namespace, fetch: Callable[[], bytes]) -> bytes:
        """The codebook of ``namespace``, fetched once with ``fetch``."""
        with self._lock:
            blob = self._blobs.get(namespace)
        if blob is None:
            blob = fetch()
            self._remember(namespace, blob)
        return blob

    def _remember(self, namespace: Namespace, blob: bytes) -> None:
        with self._lock:
            self._blobs[namespace] = blob
            self._blobs.move_to_end(namespace)
            while len(self._blobs) > self._cap:
                self._blobs.popitem(last=False)
