"""``kvmoq bench serve``: TTFT under a shared-prefix workload against a running app.

Workload (SGLang's "generated shared prefix" / LMCache's long-document QA shape): ``--docs``
documents of ``--doc-tokens`` tokens (about; synthetic text), ``--questions`` questions about
each, sent in random order with Poisson arrivals at ``--rate`` requests/s, streaming, greedy.
The same schedule runs three times, each under its own fresh ``cache_salt`` so no run sees another
run's KV:

- ``no_reuse``: every prompt recomputed (``kv_reuse: false``), power-of-two placement;
- ``router``: KV reuse on, placed by the KV cost-model router;
- ``round_robin``: KV reuse on, placed round-robin (reuse only where the KV happens to be).

Per run: mean/p50/p99 TTFT (request sent → first streamed text), throughput (requests/s and
output tokens/s over the run's makespan), and the reused-token ratio (``cached_tokens`` /
``prompt_tokens`` from each answer's ``usage``). ``--json`` prints one object; ``--plot`` writes a
PNG; ``--save-costs`` records the measured prefill cost per token and service time in the cost
figures file the router reads (``serving.costmodel``).
"""

from __future__ import annotations

import asyncio
import json
import random
import statistics
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

MODES = ("no_reuse", "router", "round_robin")
_WORDS = [
    "river",
    "valley",
    "delta",
    "silt",
    "plain",
    "mountain",
    "glacier",
    "forest",
    "meadow",
    "harbor",
    "island",
    "coast",
    "city",
    "market",
    "bridge",
    "tower",
    "castle",
    "village",
    "farmer",
    "merchant",
    "sailor",
    "scholar",
    "library",
    "archive",
    "map",
    "storm",
    "summer",
    "winter",
    "harvest",
    "festival",
    "ancient",
    "modern",
    "quiet",
    "bright",
    "narrow",
    "wide",
    "golden",
    "stone",
    "trade",
    "route",
    "canal",
    "mill",
    "bakery",
    "printer",
    "engine",
    "signal",
    "letter",
    "journey",
    "season",
    "border",
    "treaty",
]


@dataclass
class Sample:
    """One request's measurements."""

    mode: str
    doc: int
    ttft_s: float
    latency_s: float
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    ok: bool
    error: str = ""


def make_documents(n: int, lo: int, hi: int, seed: int) -> list[str]:
    """``n`` synthetic documents of about ``lo``–``hi`` tokens (≈ 1.3 tokens per word here)."""
    rng = random.Random(seed)
    docs = []
    for i in range(n):
        words = int(rng.randint(lo, hi) / 1.3)
        body = " ".join(rng.choice(_WORDS) for _ in range(words))
        docs.append(f"Document {i}. {body}.")
    return docs


def schedule(n_docs: int, n_q: int, rate: float, seed: int) -> list[tuple[float, int, int]]:
    """(arrival time, doc, question) with Poisson arrivals, docs interleaved at random."""
    rng = random.Random(seed + 1)
    pairs = [(d, q) for d in range(n_docs) for q in range(n_q)]
    rng.shuffle(pairs)
    t, out = 0.0, []
    for d, q in pairs:
        out.append((t, d, q))
        t += rng.expovariate(rate) if rate > 0 else 0.0
    return out


async def _one(client: Any, url: str, body: dict[str, Any], mode: str, doc: int) -> Sample:
    t0 = time.perf_counter()
    ttft = None
    usage: dict[str, Any] = {}
    try:
        async with client.stream("POST", url, json=body) as r:
            if r.status_code != 200:
                text = (await r.aread()).decode(errors="replace")
                return Sample(
                    mode, doc, 0, 0, 0, 0, 0, False, f"HTTP {r.status_code}: {text[:200]}"
                )
            async for line in r.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                ev = json.loads(line[6:])
                if "error" in ev:
                    return Sample(mode, doc, 0, 0, 0, 0, 0, False, str(ev["error"])[:200])
                if ttft is None and any(c.get("text") for c in ev.get("choices", [])):
                    ttft = time.perf_counter() - t0
                if ev.get("usage"):
                    usage = ev["usage"]
    except Exception as exc:
        return Sample(mode, doc, 0, 0, 0, 0, 0, False, f"{type(exc).__name__}: {exc}")
    latency = time.perf_counter() - t0
    return Sample(
        mode,
        doc,
        ttft if ttft is not None else latency,
        latency,
        int(usage.get("prompt_tokens", 0)),
        int((usage.get("prompt_tokens_details") or {}).get("cached_tokens", 0)),
        int(usage.get("completion_tokens", 0)),
        True,
    )


async def run_mode(
    base: str, model: str, mode: str, docs: list[str], plan: list[tuple[float, int, int]],
    max_tokens: int, api_key: str | None,
) -> tuple[list[Sample], float]:  # fmt: skip
    """Run the schedule once in ``mode``; returns the samples and the makespan."""
    import httpx

    salt = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
    async with httpx.AsyncClient(timeout=600, headers=headers, limits=limits) as client:
        start = time.perf_counter()
        tasks = []
        for at, d, q in plan:
            delay = start + at - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            body = {
                "model": model,
                "prompt": f"{docs[d]}\n\nQuestion {q}: what does the document say about "
                f"{_WORDS[(d * 7 + q) % len(_WORDS)]}?\nAnswer:",
                "max_tokens": max_tokens,
                "temperature": 0,
                "stream": True,
                "stream_options": {"include_usage": True},
                "cache_salt": salt,
                "kv_reuse": mode != "no_reuse",
                "routing": {"no_reuse": "pow2", "router": "kv", "round_robin": "round_robin"}[mode],
            }
            tasks.append(asyncio.create_task(_one(client, base + "/v1/completions", body, mode, d)))
        samples = list(await asyncio.gather(*tasks))
        return samples, time.perf_counter() - start


def _pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p
    lo, hi = int(k), min(int(k) + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def summarize(samples: list[Sample], makespan: float) -> dict[str, Any]:
    """Aggregate one run."""
    ok = [s for s in samples if s.ok]
    ttft = [s.ttft_s for s in ok]
    prompt = sum(s.prompt_tokens for s in ok)
    return {
        "requests": len(samples),
        "errors": len(samples) - len(ok),
        "ttft_mean_s": statistics.fmean(ttft) if ttft else float("nan"),
        "ttft_p50_s": _pct(ttft, 0.5),
        "ttft_p99_s": _pct(ttft, 0.99),
        "latency_mean_s": statistics.fmean([s.latency_s for s in ok]) if ok else float("nan"),
        "throughput_rps": len(ok) / makespan if makespan > 0 else 0.0,
        "output_tok_s": sum(s.completion_tokens for s in ok) / makespan if makespan > 0 else 0.0,
        "prompt_tokens": prompt,
        "cached_tokens": sum(s.cached_tokens for s in ok),
        "reused_token_ratio": (sum(s.cached_tokens for s in ok) / prompt) if prompt else 0.0,
        "makespan_s": makespan,
    }


async def calibrate(
    base: str, model: str, doc: str, api_key: str | None
) -> tuple[float | None, float | None]:
    """(prefill s/token, service s of a whole document) from idle, sequential, no-reuse
    requests of two lengths."""
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    best: dict[int, float] = {}
    async with httpx.AsyncClient(timeout=600, headers=headers) as client:
        for _ in range(2):
            for text in (doc[: max(1, len(doc) // 8)], doc):
                body = {
                    "model": model, "prompt": text, "max_tokens": 1, "temperature": 0,
                    "stream": True, "stream_options": {"include_usage": True},
                    "kv_reuse": False, "routing": "pow2",
                }  # fmt: skip
                s = await _one(client, base + "/v1/completions", body, "calibrate", 0)
                if s.ok and s.prompt_tokens:
                    best[s.prompt_tokens] = min(best.get(s.prompt_tokens, s.ttft_s), s.ttft_s)
    if len(best) < 2:
        return None, None
    (n1, t1), (n2, t2) = sorted(best.items())[0], sorted(best.items())[-1]
    return ((t2 - t1) / (n2 - n1) if n2 > n1 and t2 > t1 else None), t2


def prefill_cost_fit(samples: list[Sample]) -> float | None:
    """Least-squares slope of TTFT over recomputed tokens (s/token), from the no-reuse run."""
    pts = [(s.prompt_tokens - s.cached_tokens, s.ttft_s) for s in samples if s.ok]
    if len(pts) < 3:
        return None
    mx = statistics.fmean(p[0] for p in pts)
    my = statistics.fmean(p[1] for p in pts)
    var = sum((p[0] - mx) ** 2 for p in pts)
    if var <= 0:
        return my / mx if mx else None
    return sum((p[0] - mx) * (p[1] - my) for p in pts) / var


def plot(result: dict[str, Any], samples: dict[str, list[Sample]], path: Path) -> None:
    """Bars of mean/p50/p99 TTFT per mode, and the TTFT CDFs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    stats = ("ttft_mean_s", "ttft_p50_s", "ttft_p99_s")
    width = 0.25
    for i, mode in enumerate(MODES):
        vals = [result["runs"][mode][k] for k in stats]
        ax1.bar([j + i * width for j in range(len(stats))], vals, width, label=mode)
    ax1.set_xticks([j + width for j in range(len(stats))], ["mean", "p50", "p99"])
    ax1.set_ylabel("TTFT (s)")
    ax1.set_title("Time to first token")
    ax1.legend()
    for mode in MODES:
        xs = sorted(s.ttft_s for s in samples[mode] if s.ok)
        if xs:
            ax2.plot(xs, [(i + 1) / len(xs) for i in range(len(xs))], label=mode)
    ax2.set_xlabel("TTFT (s)")
    ax2.set_ylabel("fraction of requests")
    ax2.set_title("TTFT CDF")
    ax2.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def table(result: dict[str, Any]) -> str:
    """The human-readable table."""
    rows = [
        f"{'mode':12s} {'reqs':>5s} {'err':>4s} {'TTFT mean':>10s} {'p50':>8s} {'p99':>8s} "
        f"{'req/s':>7s} {'out tok/s':>10s} {'reused':>7s}"
    ]
    for mode in MODES:
        r = result["runs"][mode]
        rows.append(
            f"{mode:12s} {r['requests']:5d} {r['errors']:4d} {r['ttft_mean_s']:10.3f} "
            f"{r['ttft_p50_s']:8.3f} {r['ttft_p99_s']:8.3f} {r['throughput_rps']:7.2f} "
            f"{r['output_tok_s']:10.1f} {r['reused_token_ratio']:7.1%}"
        )
    ratios = result["ratios"]
    rows.append(
        f"TTFT mean: no_reuse/router = {ratios['ttft_mean_no_reuse_over_router']:.2f}x, "
        f"round_robin/router = {ratios['ttft_mean_round_robin_over_router']:.2f}x; "
        f"p99 no_reuse/router = {ratios['ttft_p99_no_reuse_over_router']:.2f}x"
    )
    return "\n".join(rows)


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


@click.command("serve")
@click.option(
    "--url", default="http://127.0.0.1:8000", show_default=True, help="Base URL of the app."
)
@click.option(
    "--model", default=None, help="Model name (default: the app's first /v1/models entry)."
)
@click.option("--api-key", default=None, help="Bearer key if the app requires one.")
@click.option("--docs", "n_docs", type=int, default=8, show_default=True, help="Shared documents.")
@click.option(
    "--questions", "n_q", type=int, default=8, show_default=True, help="Questions per document."
)
@click.option(
    "--doc-tokens",
    default="1000:2000",
    show_default=True,
    help="Document length range, LO:HI tokens.",
)
@click.option(
    "--rate", type=float, default=1.0, show_default=True, help="Poisson arrivals, requests/s."
)
@click.option(
    "--max-tokens", type=int, default=8, show_default=True, help="Tokens generated per answer."
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--plot",
    "plot_path",
    type=click.Path(path_type=Path),
    default=Path("bench-out/serve.png"),
    show_default=True,
    help="PNG output ('' to skip).",
)
@click.option(
    "--save-costs",
    is_flag=True,
    help="Record the measured prefill s/token and service time for the router.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def serve(
    url: str, model: str | None, api_key: str | None, n_docs: int, n_q: int, doc_tokens: str,
    rate: float, max_tokens: int, seed: int, plot_path: Path, save_costs: bool, as_json: bool,
) -> None:  # fmt: skip
    """TTFT of no reuse vs the KV router vs round-robin, on a shared-prefix workload."""
    lo, hi = _parse_range(doc_tokens)
    base = url.rstrip("/")
    model = model or _first_model(base, api_key)
    docs = make_documents(n_docs, lo, hi, seed)
    plan = schedule(n_docs, n_q, rate, seed)
    samples: dict[str, list[Sample]] = {}
    runs: dict[str, Any] = {}
    for mode in MODES:
        click.echo(f"run {mode}: {len(plan)} requests at {rate}/s ...", err=True)
        got, makespan = asyncio.run(run_mode(base, model, mode, docs, plan, max_tokens, api_key))
        samples[mode], runs[mode] = got, summarize(got, makespan)
        r = runs[mode]
        click.echo(
            f"  mean TTFT {r['ttft_mean_s']:.3f} s, reused {r['reused_token_ratio']:.1%}, "
            f"errors {r['errors']}" + next((f" (first: {s.error})" for s in got if not s.ok), ""),
            err=True,
        )
    result = build_result(base, model, runs)
    result["workload"] = {
        "docs": n_docs, "questions": n_q, "doc_tokens": [lo, hi], "rate_rps": rate,
        "max_tokens": max_tokens, "seed": seed,
    }  # fmt: skip
    result["measured"] = {"prefill_s_per_token": prefill_cost_fit(samples["no_reuse"])}
    if save_costs:
        result["measured"] = _save_costs(base, model, docs[0], api_key)
    if str(plot_path):
        plot(result, samples, plot_path)
        result["plot"] = str(plot_path)
        click.echo(f"plot: {plot_path}", err=True)
    if as_json:
        click.echo(json.dumps(result, default=str))
    else:
        click.echo(table(result))
    sys.stdout.flush()


def _parse_range(text: str) -> tuple[int, int]:
    lo_s, _, hi_s = text.partition(":")
    try:
        lo, hi = int(lo_s), int(hi_s or lo_s)
    except ValueError:
        raise click.BadParameter(
            "expected LO:HI, e.g. 1000:2000", param_hint="--doc-tokens"
        ) from None
    if not 0 < lo <= hi:
        raise click.BadParameter("expected 0 < LO <= HI", param_hint="--doc-tokens")
    return lo, hi


def _first_model(base: str, api_key: str | None) -> str:
    import httpx

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    try:
        models = httpx.get(base + "/v1/models", timeout=30, headers=headers).json()
        return str(models["data"][0]["id"])
    except (httpx.HTTPError, ValueError, KeyError, IndexError) as exc:
        raise click.ClickException(
            f"no app at {base} ({exc}); start one with `make serve`"
        ) from None


def build_result(base: str, model: str, runs: dict[str, Any]) -> dict[str, Any]:
    """The JSON object: per-mode runs, per-metric maps keyed by mode, and the ratios."""
    r = runs
    return {
        "url": base,
        "model": model,
        "runs": runs,
        "ttft_mean_s": {m: r[m]["ttft_mean_s"] for m in MODES},
        "ttft_p50_s": {m: r[m]["ttft_p50_s"] for m in MODES},
        "ttft_p99_s": {m: r[m]["ttft_p99_s"] for m in MODES},
        "throughput_rps": {m: r[m]["throughput_rps"] for m in MODES},
        "reused_token_ratio": {m: r[m]["reused_token_ratio"] for m in MODES},
        "ratios": {
            "ttft_mean_no_reuse_over_router": _ratio(r["no_reuse"]["ttft_mean_s"], r["router"]["ttft_mean_s"]),
            "ttft_mean_round_robin_over_router": _ratio(r["round_robin"]["ttft_mean_s"], r["router"]["ttft_mean_s"]),
            "ttft_p99_no_reuse_over_router": _ratio(r["no_reuse"]["ttft_p99_s"], r["router"]["ttft_p99_s"]),
            "throughput_router_over_no_reuse": _ratio(r["router"]["throughput_rps"], r["no_reuse"]["throughput_rps"]),
        },
    }  # fmt: skip


def _save_costs(base: str, model: str, doc: str, api_key: str | None) -> dict[str, Any]:
    """Calibrate on the idle app and record the figures for the router."""
    from ray_kvmoq.serving.costmodel import record_measurement

    click.echo("calibrating prefill cost (sequential requests) ...", err=True)
    slope, service = asyncio.run(calibrate(base, model, doc, api_key))
    measured: dict[str, Any] = {"prefill_s_per_token": slope, "service_s": service}
    if slope is not None and slope > 0 and service is not None:
        path = record_measurement("serve", {"prefill_s_per_token": slope, "service_s": service})
        click.echo(f"cost figures recorded in {path}", err=True)
        measured["costs_file"] = str(path)
    return measured
