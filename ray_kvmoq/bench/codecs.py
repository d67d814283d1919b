"""``kvmoq bench codecs``: speed, size and quality of the seven KV track compressions.

Speed: one 128-token chunk of real SmolLM2 KV (bf16 bits, as the engine hands it over) is
encoded into 128 objects and decoded back to bf16, ``--repeat`` times; MB/s counts
FP16-equivalent bytes (``T·L·2·H·D·2``) over the best wall time of the runs (the least
disturbed one: this runs on shared 2-core machines); ``*_cpu_mb_s`` use process CPU time.
AC's codebook is built once per track outside the timed region (it is carried once per track). Quality: the teacher-forcing
protocol of ``ray_kvmoq.bench.quality`` on a float32 engine (512-token prefix of the shipped
text, 256 continuation tokens). ``--synthetic`` skips the model for both (no quality columns).

Progress goes to stderr; ``--json`` prints ``{"codecs": {NAME: {"encode_mb_s", "decode_mb_s",
"bytes_per_token", "ratio_vs_fp16", "top1", "kl", "rel_l2_k_layers", ...}}, ...}`` with the
seven track names as NAME (quality keys are null or absent with ``--synthetic``/``--no-quality``).
"""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click
import numpy as np

from ray_kvmoq.kvcache import HEADER_SIZE, TRACK_NAMES, KVGeometry, build_codebook, get_codec
from ray_kvmoq.kvcache.synthetic import synthetic_kv


def _say(msg: str) -> None:
    click.echo(msg, err=True)


def _timed(fn: Any, repeat: int) -> tuple[float, float]:
    """(best wall seconds, best process CPU seconds) over ``repeat`` runs."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return min(wall), max(min(cpu), 1e-9)


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    import torch

    return torch.from_numpy(np.ascontiguousarray(x)).to(torch.bfloat16).view(torch.uint16).numpy()


def speed_rows(chunk: np.ndarray, repeat: int) -> dict[str, dict[str, Any]]:
    """Encode/decode MB/s and bytes per token of every codec on one ``[L,2,H,T,D]`` chunk."""
    geo = KVGeometry.of(chunk)
    n_t = chunk.shape[3]
    mb = n_t * geo.fp16_bytes_per_token / 1e6
    codebook = build_codebook(chunk)
    fp16_object = HEADER_SIZE + geo.fp16_bytes_per_token  # the FP16 track's object size
    rows: dict[str, dict[str, Any]] = {}
    for name in TRACK_NAMES:
        codec = get_codec(name)
        cb = codebook if codec.needs_codebook else None
        objs = codec.encode_chunk(chunk, codebook=cb)  # warm-up
        codec.decode_objects(objs, geo, dtype="bf16", codebook=cb)
        t_enc, c_enc = _timed(lambda c=codec, b=cb: c.encode_chunk(chunk, codebook=b), repeat)
        t_dec, c_dec = _timed(
            lambda c=codec, o=objs, b=cb: c.decode_objects(o, geo, dtype="bf16", codebook=b),
            repeat,
        )
        per_token = sum(map(len, objs)) / n_t
        rows[name.decode()] = {
            "encode_mb_s": round(mb / t_enc, 1),
            "decode_mb_s": round(mb / t_dec, 1),
            "bytes_per_token": round(per_token, 1),
            "ratio_vs_fp16": round(fp16_object / per_token, 3),
            "encode_cpu_mb_s": round(mb / c_enc, 1),
            "decode_cpu_mb_s": round(mb / c_dec, 1),
        }
        _say(f"{name.decode():5s} enc {mb / t_enc:8.1f} MB/s  dec {mb / t_dec:8.1f} MB/s")
    return rows


def _table(out: dict[str, Any]) -> str:
    head = (
        f"{'codec':6s} {'enc MB/s':>9s} {'dec MB/s':>9s} {'B/token':>8s} {'ratio':>6s} "
        f"{'top-1':>7s} {'KL':>9s} {'relL2 K':>8s} {'relL2 V':>8s}"
    )
    lines = [head, "-" * len(head)]
    for name, r in out["codecs"].items():
        top1 = f"{r['top1']:.2%}" if r.get("top1") is not None else "-"
        kl = f"{r['kl']:.2e}" if r.get("kl") is not None else "-"
        rk = f"{r['rel_l2_k']:.4f}" if r.get("rel_l2_k") is not None else "-"
        rv = f"{r['rel_l2_v']:.4f}" if r.get("rel_l2_v") is not None else "-"
        lines.append(
            f"{name:6s} {r['encode_mb_s']:9.1f} {r['decode_mb_s']:9.1f} "
            f"{r['bytes_per_token']:8.0f} {r['ratio_vs_fp16']:6.2f} {top1:>7s} {kl:>9s} "
            f"{rk:>8s} {rv:>8s}"
        )
    lines.append(
        f"({out['source']}; geometry L={out['geometry'][0]} H={out['geometry'][1]} "
        f"D={out['geometry'][2]}; MB/s of FP16-equivalent bytes, best of {out['repeat']}; "
        "relL2 = mean over layers)"
    )
    return "\n".join(lines)


@click.command("codecs")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object to stdout.")
@click.option("--repeat", default=7, show_default=True, help="Timed runs per codec and direction.")
@click.option(
    "--synthetic", is_flag=True, help="Use synthetic SmolLM2-shaped KV; no model, no quality."
)
@click.option("--no-quality", is_flag=True, help="Skip the teacher-forced quality run.")
@click.option("--prefix", default=512, show_default=True, help="Quality: prefix tokens.")
@click.option("--continuation", default=256, show_default=True, help="Quality: forced tokens.")
def codecs(
    as_json: bool, repeat: int, synthetic: bool, no_quality: bool, prefix: int, continuation: int
) -> None:
    """KV codec speed (encode/decode MB/s), size (bytes per token, ratio to FP16) and
    quality (top-1 agreement, KL, relative L2) for the seven KV track compressions."""
    if repeat < 1:
        raise click.BadParameter("must be >= 1", param_hint="--repeat")
    quality: dict[str, Any] = {}
    if synthetic:
        chunk = _bf16_bits(synthetic_kv(seed=1))
        source = "synthetic KV"
    else:
        from ray_kvmoq.bench.quality import measure_quality, text_tokens
        from ray_kvmoq.engine import load_engine

        _say("loading the built-in SmolLM2 (float32) ...")
        engine = load_engine(None, dtype="float32")
        tokens = text_tokens(engine, 128)
        chunk = _bf16_bits(engine.prefill(tokens).kv.chunks()[0])
        source = f"real {engine.model_name} KV"
        if not no_quality:
            quality = measure_quality(
                engine, prefix=prefix, continuation=continuation, progress=_say
            )
    rows = speed_rows(chunk, repeat)
    for name, q in quality.items():
        rows[name].update(
            top1=round(q.top1, 4),
            kl=float(f"{q.kl:.4g}"),
            rel_l2_k=round(float(np.mean(q.rel_l2_k)), 5),
            rel_l2_v=round(float(np.mean(q.rel_l2_v)), 5),
            rel_l2_k_worst=round(q.worst_rel_l2[0], 5),
            rel_l2_v_worst=round(q.worst_rel_l2[1], 5),
            track_bytes_per_token=round(q.bytes_per_token, 1),
            rel_l2_k_layers=[round(v, 5) for v in q.rel_l2_k],
            rel_l2_v_layers=[round(v, 5) for v in q.rel_l2_v],
        )
    for r in rows.values():
        r.setdefault("top1", None)
    geo = KVGeometry.of(chunk)
    out = {
        "codecs": rows,
        "source": source,
        "geometry": [geo.num_layers, geo.num_kv_heads, geo.head_dim],
        "repeat": repeat,
        "quality": {"prefix": prefix, "continuation": continuation} if quality else None,
    }
    if as_json:
        click.echo(json.dumps(out))
    else:
        click.echo(_table(out))
    sys.stdout.flush()
