"""Regenerate the seed corpus in ``fuzz/corpus/<target>/`` (committed; rerun after a wire
format change): ``python fuzz/make_seeds.py``.

* ``control``, ``data_stream``, ``datagram``: what the parsers were fed during the MoQT and
  relay test sessions (``seeds_capture.py``, a pytest plugin), plus encoder-made datagrams;
  control seeds once per version selector byte (draft-14 streams also seed draft-16);
* ``data_stream16``, ``datagram16``: encoder-made draft-16 streams and datagrams, plus the
  draft-14 captures (sessions speak draft-14 only so far);
* ``kv_payload``: every codec's objects for each target geometry (1-4 tokens), good codebooks;
* ``token``: signed tokens and claim bodies (valid, expired, odd prefixes);
* ``names``: KV namespaces + track names, valid and not.

Old ``live-*`` and ``gen-*`` seeds are replaced; files with other names (regression inputs,
``crash-*``) are kept.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
CORPUS = HERE / "corpus"
CAPTURE_TESTS = [
    "tests/moqt/test_api.py",
    "tests/moqt/test_session.py",
    "tests/moqt/test_data.py",
    "tests/moqt/test_vectors.py",
    "tests/relay/test_network.py",
]


def _write(target: str, seeds: list[bytes], prefix: str = "gen-") -> None:
    d = CORPUS / target
    d.mkdir(parents=True, exist_ok=True)
    for s in seeds:
        (d / (prefix + hashlib.sha1(s).hexdigest()[:16])).write_bytes(s)


def _clear() -> None:
    for p in CORPUS.glob("*/*"):
        if p.name.startswith(("live-", "gen-")):
            p.unlink()


def _captured() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "KVMOQ_SEED_DIR": tmp, "PYTHONPATH": str(HERE)}
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p"]
        cmd += ["seeds_capture", *CAPTURE_TESTS]
        subprocess.run(cmd, cwd=ROOT, env=env, check=False)  # seeds count, not the verdicts
        for d in Path(tmp).iterdir():
            seeds = sorted(p.read_bytes() for p in d.iterdir())
            if d.name == "control":  # a version selector byte first (fuzz_control.py)
                seeds = [bytes([v]) + s for s in seeds for v in (0, 1)]
            _write(d.name, seeds, prefix="live-")


def _datagrams(version: int | None = None) -> list[bytes]:
    from ray_kvmoq.moqt import codec

    version = codec.DRAFT_14 if version is None else version

    out = []
    for status in (None, codec.ObjectStatus.END_OF_GROUP, codec.ObjectStatus.DOES_NOT_EXIST):
        for ext in ((), ((2, 7), (0x4B57, b"\x01" * 17))):
            for eog in (False, True):
                d = codec.ObjectDatagram(
                    track_alias=3,
                    group=1,
                    object_id=2,
                    publisher_priority=128,
                    extensions=ext if status is not codec.ObjectStatus.DOES_NOT_EXIST else (),
                    status=status,
                    payload=b"" if status is not None else b"kv payload",
                    end_of_group=eog,
                )
                try:
                    out.append(codec.encode_datagram(d, version=version))
                except codec.MoqtError:
                    pass
    return out


def _streams16() -> list[bytes]:
    from ray_kvmoq.moqt import codec

    out = []
    for prio in (128, None):
        for ext in (False, True):
            for eog in (False, True):
                s = codec.encode_subgroup_header_16(
                    track_alias=2,
                    group=5,
                    subgroup=1,
                    publisher_priority=prio,
                    extensions=ext,
                    end_of_group=eog,
                )
                prev = None
                for o, payload in enumerate((b"kv", b"", b"x" * 300)):
                    s += codec.encode_subgroup_object_16(
                        previous_id=prev,
                        object_id=o * 2,
                        payload=payload,
                        extensions=((2, 7),) if ext else (),
                        with_extensions=ext,
                    )
                    prev = o * 2
                out.append(s)
    return out


def _kv_payloads() -> list[bytes]:
    import fuzz_kv_payload as t

    from ray_kvmoq import kvcache

    out = []
    for ci, name in enumerate(t.CODECS):
        for gi, geo in enumerate(t.GEOMETRIES):
            for tokens in (1, 4):
                kv = t._calibration(geo, tokens)
                cb = t.CODEBOOKS[gi] if name == b"AC" else None
                try:
                    objs = kvcache.get_codec(name).encode_chunk(kv, codebook=cb)
                except kvcache.KVCacheError:  # a geometry this codec cannot carry
                    continue
                out.append(t.pack(ci, gi, tokens % 3, objs))
                if cb is not None:
                    out.append(t.pack(ci, gi, 4, [*objs, cb]))
    return out


def _tokens() -> list[bytes]:
    import fuzz_token as t

    from ray_kvmoq.relay.auth import TokenSigner

    signer = TokenSigner("k1", t.KEY)
    good = [
        signer.issue("a", publish=[["kv", "a"]], subscribe=[["kv"]], now=t.NOW),
        signer.issue("b", subscribe=[[]], now=t.NOW - 7200, ttl_s=60),
        signer.issue("c", publish=[], subscribe=[["x"] * 32], now=t.NOW),
    ]
    bodies = [
        {"ten": "a", "exp": 2_000_000_000, "pub": [["kv"]], "sub": []},
        {"ten": "a", "exp": 2_000_000_000, "nbf": 1_900_000_000, "pub": [], "sub": [[]]},
        {"ten": "", "exp": 1, "pub": [], "sub": []},
        {"ten": "a", "exp": True, "pub": [], "sub": [], "aud": "x"},
    ]
    out = [b"\x00" + tok for tok in good]
    out += [b"\x01" + json.dumps(b).encode() for b in bodies]
    return out


def _names() -> list[bytes]:
    from ray_kvmoq import kvcache

    pid = kvcache.prompt_id(b"salt", [1, 2, 3])
    out = []
    for track in (*kvcache.TRACK_NAMES, b"AC.codebook", b"FP32"):
        for model in ("SmolLM2-135M", "m"):
            out.append(b"/".join((*kvcache.kv_namespace(model, pid), track)))
    out.append(b"moq://kvcache.moq.arpa/v1//" + pid.encode() + b"/FP16")
    out.append(bytes(range(1, 200)))
    return out


def main() -> None:
    sys.path.insert(0, str(HERE))
    _clear()
    _captured()
    _write("datagram", _datagrams())
    from ray_kvmoq.moqt import codec

    _write("datagram16", _datagrams(codec.DRAFT_16))
    _write("data_stream16", _streams16())
    for target, src in (("datagram16", "datagram"), ("data_stream16", "data_stream")):
        live = [p.read_bytes() for p in (CORPUS / src).glob("live-*")]
        _write(target, [b for b in live if len(b) <= 512], prefix="live-")  # the short ones
    _write("kv_payload", _kv_payloads())
    _write("token", _tokens())
    _write("names", _names())
    for d in sorted(CORPUS.iterdir()):
        print(d.name, len(list(d.iterdir())))


if __name__ == "__main__":
    main()
