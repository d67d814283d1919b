"""``kvmoq bench engine``: model load time, prefill and decode speed, and the KV break-even table.

Break-even: fetching a chunk's KV beats recomputing it when the fetch moves the KV faster than
prefill produces it, i.e. when the link reaches ``bytes per token / prefill seconds per token``.
Bytes per token come from the kvcache codecs (``object_size`` of each track's per-token object,
header included); AC's objects vary in size, so its size is measured by encoding real KV of the
model (codebook calibrated on the first chunk, the next chunk encoded).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from typing import Any

import click

__all__ = ["engine"]

_CODECS = ("FP16", "BF16", "FP8", "Int8", "FP4", "Int4", "AC")


def _best(fn: Any, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return min(times)


def _prompt(n: int, vocab: int, seed: int = 0) -> list[int]:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [int(x) for x in torch.randint(100, min(vocab, 30000), (n,), generator=g)]


def _decode_rate(eng: Any, batch: int, prompt_len: int, steps: int) -> float:
    """Tokens/s of ``steps`` batched decode steps after every sequence is prefilled."""
    from ray_kvmoq.engine import BatchScheduler, SamplingParams

    sched = BatchScheduler(eng, max_batch=batch)
    sp = SamplingParams(max_tokens=steps + 1, ignore_eos=True)
    for i in range(batch):
        sched.add(_prompt(prompt_len, eng.config.vocab, seed=i), sp)
    sched.step()  # admits (prefills) everyone: not timed
    t = time.perf_counter()
    produced = 0
    while sched.has_work:
        produced += sum(1 for o in sched.step() if o.token_id is not None)
    return produced / (time.perf_counter() - t)


def _kv_bytes_per_token(eng: Any) -> dict[str, float]:
    """Per-token object bytes for each compression (AC measured on real KV)."""
    from ray_kvmoq.kvcache import KVGeometry, build_codebook, get_codec

    c = eng.config
    geo = KVGeometry(num_layers=c.num_layers, num_kv_heads=c.num_kv_heads, head_dim=c.head_dim)
    out: dict[str, float] = {}
    for name in _CODECS:
        try:
            size = get_codec(name).object_size(geo)
        except Exception as exc:  # e.g. a group size the head dim does not allow
            click.echo(f"{name}: no size for this geometry ({exc})", err=True)
            continue
        if size is not None:
            out[name] = float(size)
    text = (
        "Rivers carve valleys over thousands of years, carrying sediment from the mountains "
        "to the sea. Towns grow along their banks for water, trade and transport. "
    ) * 20
    ids = eng.tokenizer.encode(text)[: 2 * c.chunk_size]
    res = eng.prefill(ids)
    chunks = res.kv.to(dtype="float32").chunks()
    book = build_codebook(chunks[0])
    objs = get_codec("AC").encode_chunk(chunks[1], codebook=book)
    out["AC"] = statistics.fmean(len(o) for o in objs)
    return out


def run_bench(
    model: str | None, dtype: str, device: str | None, threads: int | None, repeats: int
) -> dict[str, Any]:
    """Measure everything; return the JSON-able result."""
    from ray_kvmoq.engine import load_engine

    say = lambda s: click.echo(s, err=True)  # noqa: E731
    say("loading (a first load converts the built-in model into the cache) ...")
    load_engine(model, dtype=dtype, device=device, num_threads=threads)  # warm the cache
    t = time.perf_counter()
    eng = load_engine(model, dtype=dtype, device=device, num_threads=threads)
    load_s = time.perf_counter() - t
    import torch

    result: dict[str, Any] = {
        "model": eng.model_name,
        "dtype": eng.config.dtype,
        "device": str(eng.device),
        "threads": torch.get_num_threads(),
        "load_s": round(load_s, 3),
    }
    for n in (512, 2048):
        say(f"prefill {n} tokens ...")
        ids = _prompt(n, eng.config.vocab)
        eng.prefill(ids[:64])  # warm-up
        secs = _best(lambda ids=ids: eng.prefill(ids), repeats)
        result[f"prefill_s_{n}"] = round(secs, 4)
        result[f"prefill_tok_s_{n}"] = round(n / secs, 1)
    for b in (1, 8):
        say(f"decode batch {b} ...")
        rate = max(_decode_rate(eng, b, 512, 32) for _ in range(max(1, repeats - 1)))
        result[f"decode_tok_s_b{b}"] = round(rate, 1)
    say("KV sizes per compression ...")
    sizes = _kv_bytes_per_token(eng)
    table = {}
    for name, size in sizes.items():
        row: dict[str, float] = {"bytes_per_token": round(size, 1)}
        for n in (512, 2048):
            row[f"break_even_mb_s_{n}"] = round(size * result[f"prefill_tok_s_{n}"] / 1e6, 2)
        table[name] = row
    result["break_even"] = table
    return result


def _print_table(r: dict[str, Any]) -> None:
    click.echo(
        f"model {r['model']}  {r['dtype']} on {r['device']}, {r['threads']} threads\n"
        f"load (from cache)       {r['load_s']:8.2f} s\n"
        f"prefill 512 tokens      {r['prefill_s_512']:8.3f} s  {r['prefill_tok_s_512']:9.1f} tok/s\n"
        f"prefill 2048 tokens     {r['prefill_s_2048']:8.3f} s  {r['prefill_tok_s_2048']:9.1f} tok/s\n"
        f"decode batch 1          {r['decode_tok_s_b1']:8.1f} tok/s\n"
        f"decode batch 8          {r['decode_tok_s_b8']:8.1f} tok/s (all sequences)\n"
    )
    us512 = 1e6 / r["prefill_tok_s_512"]
    us2048 = 1e6 / r["prefill_tok_s_2048"]
    click.echo("Break-even: a KV fetch beats recompute above this rate (MB/s)")
    click.echo(f"prefill time per token: {us512:.0f} µs (T=512), {us2048:.0f} µs (T=2048)")
    click.echo(f"{'codec':<6} {'B/token':>9} {'vs FP16':>8} {'MB/s @512':>10} {'MB/s @2048':>11}")
    fp16 = r["break_even"]["FP16"]["bytes_per_token"]
    for name, row in r["break_even"].items():
        click.echo(
            f"{name:<6} {row['bytes_per_token']:9.0f} {fp16 / row['bytes_per_token']:7.2f}x "
            f"{row['break_even_mb_s_512']:10.1f} {row['break_even_mb_s_2048']:11.1f}"
        )


@click.command()
@click.option("--model", default=None, help="HF directory or .gguf (default: built-in SmolLM2).")
@click.option(
    "--dtype",
    default="bfloat16",
    show_default=True,
    type=click.Choice(["bfloat16", "float32", "float16"]),
)
@click.option("--device", default=None, help="cpu or cuda (default: cuda when present).")
@click.option("--threads", default=None, type=int, help="torch threads (default: torch's).")
@click.option("--repeats", default=3, show_default=True, help="Runs per measurement (best kept).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option(
    "--save-costs/--no-save-costs",
    default=True,
    show_default=True,
    help="Record prefill s/token and KV bytes/token for the serving router's cost model.",
)
def engine(
    model: str | None,
    dtype: str,
    device: str | None,
    threads: int | None,
    repeats: int,
    as_json: bool,
    save_costs: bool,
) -> None:
    """Model load time, prefill tok/s (512, 2048), decode tok/s (batch 1, 8), and the MB/s a
    KV fetch must reach, per compression, to beat recomputing the prefill."""
    from ray_kvmoq.engine import EngineError

    if repeats < 1:
        raise click.BadParameter("must be ≥ 1", param_hint="--repeats")
    try:
        result = run_bench(model, dtype, device, threads, repeats)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    if save_costs:
        _save_costs(result)
    if as_json:
        click.echo(json.dumps(result))
    else:
        _print_table(result)
    sys.stdout.flush()


def _save_costs(result: dict[str, Any]) -> None:
    """Feed the router's cost model (``serving.costmodel``) with what was just measured."""
    from ray_kvmoq.serving.costmodel import record_measurement

    lossless = result["break_even"].get("BF16") or result["break_even"]["FP16"]
    path = record_measurement(
        "engine",
        {
            "prefill_s_per_token": 1.0 / result["prefill_tok_s_2048"],
            "kv_bytes_per_token": lossless["bytes_per_token"],
        },
    )
    click.echo(f"cost figures recorded in {path}", err=True)
