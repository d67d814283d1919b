"""``kvmoq chat "prompt"``: answer one prompt with the local model, streaming the answer."""

from __future__ import annotations

import json
import sys
import time
from typing import Any

import click

__all__ = ["chat"]


@click.command()
@click.argument("prompt")
@click.option(
    "--model",
    default=None,
    help="A local HF checkpoint directory or .gguf file (default: built-in SmolLM2-135M-Instruct).",
)
@click.option("--system", default=None, help="System message (default: the model's own).")
@click.option("--raw", is_flag=True, help="Send PROMPT as plain text, without the chat template.")
@click.option("--max-tokens", default=256, show_default=True, help="Most tokens to generate.")
@click.option("--temperature", default=0.0, show_default=True, help="0 = greedy.")
@click.option("--top-p", default=1.0, show_default=True, help="Nucleus sampling mass.")
@click.option("--top-k", default=0, show_default=True, help="Keep the k most likely (0 = off).")
@click.option("--seed", default=None, type=int, help="Sampling seed.")
@click.option("--stop", multiple=True, help="Stop string (repeatable).")
@click.option(
    "--dtype",
    default="bfloat16",
    show_default=True,
    type=click.Choice(["bfloat16", "float32", "float16"]),
    help="Compute dtype (float16 needs CUDA).",
)
@click.option("--device", default=None, help="cpu or cuda (default: cuda when present).")
@click.option("--threads", default=None, type=int, help="torch threads (default: torch's).")
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of text.")
def chat(
    prompt: str,
    model: str | None,
    system: str | None,
    raw: bool,
    max_tokens: int,
    temperature: float,
    top_p: float,
    top_k: int,
    seed: int | None,
    stop: tuple[str, ...],
    dtype: str,
    device: str | None,
    threads: int | None,
    as_json: bool,
) -> None:
    """Answer PROMPT with the local model and print the reply as it is generated.

    Example: kvmoq chat "What is the capital of France?"
    """
    from ray_kvmoq.engine import EngineError, SamplingParams, load_engine

    if not prompt.strip():
        raise click.UsageError("the prompt is empty: give the question to answer as PROMPT")
    try:
        params = SamplingParams(
            max_tokens=max_tokens,
            temperature=temperature,
            top_p=top_p,
            top_k=top_k,
            seed=seed,
            stop=stop,
        )
        t0 = time.perf_counter()
        click.echo("loading model ...", err=True)
        engine = load_engine(model, dtype=dtype, device=device, num_threads=threads)
        load_s = time.perf_counter() - t0
        click.echo(f"{engine.model_name} loaded in {load_s:.1f} s", err=True)
        if raw:
            request: str | list[dict[str, str]] = prompt
        else:
            request = [{"role": "system", "content": system}] if system else []
            request.append({"role": "user", "content": prompt})
        text, reason, n, ttft, total = _answer(engine, request, params, echo=not as_json)
    except EngineError as exc:
        raise click.ClickException(str(exc)) from exc
    if as_json:
        obj = {
            "model": engine.model_name,
            "text": text,
            "finish_reason": reason,
            "tokens": n,
            "load_s": round(load_s, 3),
            "ttft_s": round(ttft, 3),
            "total_s": round(total, 3),
        }
        click.echo(json.dumps(obj))
    else:
        sys.stdout.write("\n")
        rate = n / total if total > 0 else 0.0
        click.echo(f"[{n} tokens, {reason}, {total:.2f} s, {rate:.1f} tok/s]", err=True)


def _answer(
    engine: Any, request: Any, params: Any, *, echo: bool
) -> tuple[str, str, int, float, float]:
    """Stream the answer (printing it when ``echo``); return (text, finish reason, tokens,
    seconds to first token, total seconds)."""
    t1 = time.perf_counter()
    ttft: float | None = None
    pieces: list[str] = []
    reason, n = "length", 0
    for out in engine.stream(request, params):
        if ttft is None:
            ttft = time.perf_counter() - t1
        pieces.append(out.text)
        n = out.num_generated
        if echo and out.text:
            sys.stdout.write(out.text)
            sys.stdout.flush()
        reason = out.finish_reason or reason
    return "".join(pieces), reason, n, ttft or 0.0, time.perf_counter() - t1
