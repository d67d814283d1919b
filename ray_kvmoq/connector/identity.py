"""Which model a KV cache belongs to: the namespace's model field, with a weights fingerprint.

KV is only valid for the exact weights (and dtype) that computed it. Two checkpoints served
under one name — a fine-tune, another revision, another dtype — must never share KV, so the
model field of every KV namespace (and the root of every chunk-hash chain) is
``<served name>@<fingerprint>``, where the fingerprint is a BLAKE2b digest of the checkpoint's
``config.json``, the size and safetensors header (tensor names, dtypes, shapes, offsets) of
every weight file, the engine dtype and the KV cache dtype. Reading headers costs a few ms even
for large checkpoints; the weights themselves are not hashed (headers plus sizes change with
any re-export, and hashing hundreds of GB at every start is not an option).
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

__all__ = ["model_fingerprint", "namespace_model_name"]

_FINGERPRINT_HEX = 12
_MAX_HEADER = 100 << 20


def model_fingerprint(model_path: str, *, dtype: str, kv_cache_dtype: str = "auto") -> str:
    """Hex fingerprint of the checkpoint at ``model_path`` (a local dir; else its name)."""
    h = hashlib.blake2b(digest_size=16, person=b"kvmoq-weights")
    h.update(f"dtype={dtype};kv={kv_cache_dtype};".encode())
    path = Path(model_path).expanduser()
    if not path.is_dir():
        h.update(b"name:" + model_path.encode())  # a hub id: its name is all we know here
        return h.hexdigest()[:_FINGERPRINT_HEX]
    config = path / "config.json"
    if config.is_file():
        h.update(b"config:" + json.dumps(json.loads(config.read_text()), sort_keys=True).encode())
    for f in sorted(path.glob("*.safetensors")):
        h.update(f"file:{f.name}:{f.stat().st_size}:".encode())
        h.update(_safetensors_header(f))
    return h.hexdigest()[:_FINGERPRINT_HEX]


def _safetensors_header(f: Path) -> bytes:
    """The JSON header of a safetensors file (u64le length, then the header)."""
    with f.open("rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return b""
        (n,) = struct.unpack("<Q", head)
        return fh.read(min(n, _MAX_HEADER))


def namespace_model_name(served_name: str, fingerprint: str) -> str:
    """The KV namespace model field: ``<served name>@<fingerprint>``."""
    return f"{served_name}@{fingerprint}"
