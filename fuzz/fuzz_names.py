"""Fuzz target: KV track names and namespaces (``ray_kvmoq.kvcache.naming``) and chunk-hash
names, the strings a relay or connector reads back from the wire or the directory.

The input is split at ``/`` into namespace fields, the last field being the track name.
Checked: :func:`parse_kv_track` and ``CodecId.from_track_name`` raise nothing but
:class:`~ray_kvmoq.kvcache.KVNameError` / :class:`~ray_kvmoq.kvcache.KVCacheError`; a track
that parses rebuilds (``kv_namespace`` + name) into the same fields. Chunk hashes of the input
read as token ids: deterministic, 32 bytes each, one per full chunk, and each prefix of the
tokens has the matching prefix of the hashes (the prefix-reuse rule of DESIGN.md).
"""

from __future__ import annotations

import atheris

with atheris.instrument_imports(include=["ray_kvmoq"]):
    from ray_kvmoq import kvcache
    from ray_kvmoq.kvcache import KVCacheError, KVNameError

from _common import main


def _names(data: bytes) -> None:
    *fields, name = data.split(b"/")
    try:
        kvcache.CodecId.from_track_name(name)
    except KVCacheError:
        pass
    try:
        track = kvcache.parse_kv_track(tuple(fields), name)
    except KVNameError:
        return
    assert kvcache.kv_namespace(track.model, track.prompt_id) == tuple(fields)
    assert track.namespace == tuple(fields) and track.name == name


def _hashes(data: bytes) -> None:
    tokens = [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data) - 1, 2)]
    chunk = 1 + data[0] % 8
    salt = data[:3]
    hashes = kvcache.chunk_hashes(salt, "m", tokens, chunk)
    assert len(hashes) == len(tokens) // chunk and all(len(h) == 32 for h in hashes)
    cut = len(tokens) // 2
    assert kvcache.chunk_hashes(salt, "m", tokens[:cut], chunk) == hashes[: cut // chunk]


def test_one_input(data: bytes) -> None:
    _names(data)
    if data:
        _hashes(data)


if __name__ == "__main__":
    main(test_one_input)
