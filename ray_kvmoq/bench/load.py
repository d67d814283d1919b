"""``kvmoq bench load`` and ``kvmoq bench soak``: many streaming clients, some walking away.

Both drive the app's OpenAI endpoint with closed-loop streaming chat clients (:func:`drive`)
over a mix of prompts sharing long prefixes and unique prompts, and classify every request by
how it ended (:class:`Outcome`):

* ``answered`` — the stream reached ``[DONE]``;
* ``disconnected`` — the client hung up on purpose after its first tokens (``--disconnect``);
* ``refused`` — 429 or 503: the bounded queues said no (the client backs off and retries);
* ``error`` — any other explicit error (an HTTP status, or an error event in the stream);
* ``lost`` — no answer and no error: the stream broke or nothing came back within the
  request's timeout. A healthy system has none.

``load`` (default 64 clients for 5 minutes, 20 % disconnecting) reports outcomes, TTFT
percentiles, and the engines' own evidence that generation stopped for the clients that left
(the connector's ``requests_aborted`` / ``tokens_not_generated`` counters from vLLM's
scheduler). ``soak`` (default 30 minutes) also samples, every ``--sample-s``, the resident
memory of every process of the cluster, each node's object-store bytes and each relay's cached
bytes against its budget, and reports their growth after warm-up.

Without ``--url`` each starts a private two-node Ray cluster on this machine and deploys the
app (``apps/local.yaml``'s defaults, one replica per node); with ``--url`` it drives an app
that is already running (cluster-side figures then come from ``--ray-address``, if given).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import statistics
import sys
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from typing import Any

import click

__all__ = ["Outcome", "Workload", "cluster_sample", "drive", "growth", "summarize"]


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Outcome:
    """How one request ended (see the module docstring for ``kind``)."""

    kind: str
    status: int
    ttft_s: float | None
    chunks: int
    detail: str = ""


@dataclass(frozen=True)
class Workload:
    """What the clients send."""

    model: str
    max_tokens: int = 32
    shared_fraction: float = 0.5
    """Share of requests that start with one of ``prefixes`` long system prompts."""
    prefixes: int = 2
    prefix_words: int = 400
    disconnect: float = 0.2
    """Share of requests whose client hangs up after its first ``disconnect_after`` chunks."""
    disconnect_after: int = 2
    request_timeout_s: float = 300.0


def _messages(wl: Workload, rng: random.Random, text: list[str]) -> list[dict[str, str]]:
    question = {"role": "user", "content": f"Question {uuid.uuid4().hex[:8]}: who is it about?"}
    if rng.random() < wl.shared_fraction:
        k = rng.randrange(wl.prefixes)
        system = " ".join(text[k * wl.prefix_words : (k + 1) * wl.prefix_words])
    else:  # a unique prompt: text from a random place, tagged so no two are alike
        at = rng.randrange(max(1, len(text) - wl.prefix_words))
        system = f"[{uuid.uuid4().hex}] " + " ".join(text[at : at + wl.prefix_words // 4])
    return [{"role": "system", "content": system}, question]


async def one_request(
    client: Any, base: str, wl: Workload, messages: list[dict[str, str]], hang_up: bool
) -> Outcome:
    """One streaming chat completion, classified."""
    import httpx

    body = {
        "model": wl.model,
        "messages": messages,
        "max_tokens": wl.max_tokens,
        "temperature": 0,
        "stream": True,
        "stream_options": {"include_usage": True},
        "ignore_eos": True,
    }
    t0 = time.perf_counter()
    ttft: float | None = None
    chunks = 0
    try:
        async with asyncio.timeout(wl.request_timeout_s):
            async with client.stream("POST", f"{base}/v1/chat/completions", json=body) as r:
                if r.status_code != 200:
                    text = (await r.aread()).decode(errors="replace")[:200]
                    kind = "refused" if r.status_code in (429, 503) else "error"
                    return Outcome(kind, r.status_code, None, 0, text)
                async for line in r.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return Outcome("answered", 200, ttft, chunks)
                    event = json.loads(data)
                    if "error" in event:
                        return Outcome("error", 200, ttft, chunks, str(event["error"])[:200])
                    choices = event.get("choices") or []
                    if choices and (choices[0].get("delta") or {}).get("content"):
                        chunks += 1
                        if ttft is None:
                            ttft = time.perf_counter() - t0
                        if hang_up and chunks >= wl.disconnect_after:
                            return Outcome("disconnected", 200, ttft, chunks)
                return Outcome("lost", 200, ttft, chunks, "stream ended without [DONE]")
    except TimeoutError:
        what = f"{chunks} chunks and no end" if chunks else "nothing"
        return Outcome("lost", 0, ttft, chunks, f"{what} in {wl.request_timeout_s:.0f} s")
    except (httpx.HTTPError, json.JSONDecodeError) as exc:
        return Outcome("lost", 0, ttft, chunks, repr(exc)[:200])


async def drive(
    base: str,
    wl: Workload,
    *,
    clients: int,
    duration_s: float,
    seed: int = 0,
    on_outcome: Callable[[Outcome], None] | None = None,
) -> list[Outcome]:
    """``clients`` closed-loop clients for ``duration_s``; every request's outcome.

    A refused client waits 0.5 s before its next request (what a polite client does)."""
    import httpx

    from ray_kvmoq.bench.quality import load_text

    logging.getLogger("httpx").setLevel(logging.WARNING)  # not one log line per request
    text = load_text().split()
    out: list[Outcome] = []
    end = time.monotonic() + duration_s
    limits = httpx.Limits(max_connections=clients * 2, max_keepalive_connections=clients)

    async def client_loop(i: int, http: Any) -> None:
        rng = random.Random(seed * 1000 + i)
        while time.monotonic() < end:
            hang_up = rng.random() < wl.disconnect
            o = await one_request(http, base, wl, _messages(wl, rng, text), hang_up)
            out.append(o)
            if on_outcome is not None:
                on_outcome(o)
            if o.kind == "refused":
                await asyncio.sleep(0.5)

    timeout = httpx.Timeout(wl.request_timeout_s, connect=30.0)
    async with httpx.AsyncClient(timeout=timeout, limits=limits) as http:
        await asyncio.gather(*(client_loop(i, http) for i in range(clients)))
    return out


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, round(q * (len(v) - 1)))]


def summarize(outcomes: list[Outcome], duration_s: float) -> dict[str, Any]:
    """Counts by kind, statuses, TTFT mean/p50/p99 (answered and disconnected), requests/s."""
    kinds = Counter(o.kind for o in outcomes)
    ttfts = [o.ttft_s for o in outcomes if o.ttft_s is not None and o.kind != "refused"]
    lost = [asdict(o) for o in outcomes if o.kind == "lost"]
    errors = [asdict(o) for o in outcomes if o.kind == "error"]
    return {
        "requests": len(outcomes),
        **{k: kinds.get(k, 0) for k in ("answered", "disconnected", "refused", "error", "lost")},
        "statuses": dict(Counter(str(o.status) for o in outcomes)),
        "ttft_mean_s": round(statistics.fmean(ttfts), 3) if ttfts else None,
        "ttft_p50_s": _round(_pct(ttfts, 0.50)),
        "ttft_p99_s": _round(_pct(ttfts, 0.99)),
        "completed_per_s": round((kinds["answered"] + kinds["disconnected"]) / duration_s, 3),
        "lost_examples": lost[:5],
        "error_examples": errors[:5],
    }


def _round(x: float | None) -> float | None:
    return None if x is None else round(x, 3)


# --- what the cluster says -------------------------------------------------------------------


def engine_counters() -> dict[str, int]:
    """The connector counters of every engine on the figures board, summed."""
    import ray

    from ray_kvmoq.connector.figures import figures_board

    total: Counter[str] = Counter()
    for counts in ray.get(figures_board().counters.remote(), timeout=30).values():
        total.update({k: int(v) for k, v in counts.items() if isinstance(v, int | float)})
    return dict(total)


def cluster_sample(pids: Callable[[], dict[int, str]] | None = None) -> dict[str, Any]:
    """One sample: RSS of every process (``pids()``: pid → label), object-store bytes used per
    node, and each relay's cached bytes and budget."""
    import psutil
    import ray
    from ray._private.internal_api import node_stats

    from ray_kvmoq.relay.actor import relay_name

    rss: dict[str, int] = {}
    for pid, label in (pids() if pids else {}).items():
        try:
            rss[f"{label}[{pid}]"] = psutil.Process(pid).memory_info().rss
        except psutil.Error:
            pass
    store: dict[str, int] = {}
    relays: dict[str, dict[str, int]] = {}
    for n in ray.nodes():
        if not n["Alive"]:
            continue
        node = n["NodeID"][:8]
        try:
            reply = node_stats(n["NodeManagerAddress"], n["NodeManagerPort"], False)
            store[node] = int(reply.store_stats.object_store_bytes_used)
        except Exception:
            pass
        try:
            relay: Any = ray.get_actor(relay_name(n["NodeID"]), namespace="kvmoq")
            st = ray.get(relay.stats.remote(), timeout=30)
            relays[node] = {"cached": st["bytes_cached"], "budget": st["budget_bytes"]}
        except Exception:
            pass
    return {"t": time.time(), "rss": rss, "store": store, "relays": relays}


def descendants() -> dict[int, str]:
    """This process's descendants (a private cluster: GCS, raylets, workers, engines)."""
    import psutil

    out = {}
    for p in psutil.Process(os.getpid()).children(recursive=True):
        try:
            out[p.pid] = p.name()
        except psutil.Error:
            pass
    return out


def growth(samples: list[dict[str, Any]], warmup_s: float, window: int = 3) -> dict[str, Any]:
    """Growth after warm-up: the median of the first ``window`` samples after ``warmup_s``
    against the median of the last ``window`` (one sample catches whatever loads are in flight
    at that instant), for the total RSS, the worst single process (of those alive throughout)
    and the object stores' bytes; and the relay budget check at every sample."""
    if not samples:
        return {}
    t0 = samples[0]["t"]
    after = [s for s in samples if s["t"] - t0 >= warmup_s] or samples[-1:]
    head, tail = after[:window], after[-window:]
    both = [k for k in head[0]["rss"] if all(k in s["rss"] for s in after)]

    def med(group: list[dict[str, Any]], f: Callable[[dict[str, Any]], float]) -> float:
        return float(statistics.median(f(s) for s in group))

    def rss_of(k: str) -> Callable[[dict[str, Any]], float]:
        return lambda s: float(s["rss"][k])

    rss0 = {k: med(head, rss_of(k)) for k in both}
    rss1 = {k: med(tail, rss_of(k)) for k in both}
    per = {k: rss1[k] / max(1.0, rss0[k]) - 1 for k in both}
    worst = max(per, key=lambda k: per[k]) if per else None
    tot0 = med(head, lambda s: sum(s["rss"][k] for k in both))
    tot1 = med(tail, lambda s: sum(s["rss"][k] for k in both))
    st0 = med(head, lambda s: sum(s["store"].values()))
    st1 = med(tail, lambda s: sum(s["store"].values()))
    over = [
        (s["t"] - t0, node, r)
        for s in samples
        for node, r in s["relays"].items()
        if r["cached"] > r["budget"]
    ]
    return {
        "samples": len(samples),
        "processes": len(both),
        "rss_total_mb": [round(tot0 / 2**20, 1), round(tot1 / 2**20, 1)],
        "rss_total_growth": round(tot1 / max(1.0, tot0) - 1, 4),
        "rss_worst_process": worst,
        "rss_worst_growth": round(per[worst], 4) if worst else None,
        "rss_top_growth": [  # the five that grew most: label, MiB after warm-up, at the end
            [k, round(rss0[k] / 2**20, 1), round(rss1[k] / 2**20, 1)]
            for k in sorted(per, key=lambda k: -per[k])[:5]
        ],
        "store_mb": [round(st0 / 2**20, 1), round(st1 / 2**20, 1)],
        "store_growth": round(st1 / st0 - 1, 4) if st0 else None,
        "relay_max_cached_mb": round(
            max((r["cached"] for s in samples for r in s["relays"].values()), default=0) / 2**20,
            1,
        ),
        "relay_over_budget_samples": len(over),
        "relay_budgets_mb": sorted(
            {r["budget"] >> 20 for s in samples for r in s["relays"].values()}
        ),
    }


# --- the commands ----------------------------------------------------------------------------


@contextmanager
def _target(url: str | None, ray_address: str | None, args: dict[str, Any]) -> Iterator[str]:
    """The base URL to drive: ``url`` as given, or our app on a private two-node cluster."""
    if url:
        if ray_address:
            import ray

            ray.init(address=ray_address, namespace="kvmoq", log_to_driver=False)
        yield url.rstrip("/")
        return
    from ray import serve

    from ray_kvmoq.serving.app import AppArgs, build

    from .cluster import two_node_cluster
    from .serve import _free_port, _wait_ready

    with two_node_cluster(store_bytes=1 << 30, num_cpus=4):
        port = _free_port()
        serve.start(http_options={"host": "127.0.0.1", "port": port})
        _log("deploying the app (two replicas, one per node) ...")
        serve.run(build(AppArgs(**args)), name="load", route_prefix="/load", blocking=False)
        base = f"http://127.0.0.1:{port}/load"
        try:
            _wait_ready(base, 900)
            yield base
        finally:
            serve.shutdown()


def _app_args(max_ongoing: int, max_queued: int, relay_budget_mb: int) -> dict[str, Any]:
    return {
        "mode": "combined",
        "relay_budget_mb": relay_budget_mb,
        "server": {"num_replicas": 2, "num_cpus": 1, "resources": {"engine_slot": 1}},
        "ingress": {"max_ongoing_requests": max_ongoing, "max_queued_requests": max_queued},
    }


class _Progress:
    def __init__(self, every_s: float = 15.0) -> None:
        self.kinds: Counter[str] = Counter()
        self.every_s, self._at = every_s, time.monotonic()

    def __call__(self, o: Outcome) -> None:
        self.kinds[o.kind] += 1
        if time.monotonic() - self._at >= self.every_s:
            self._at = time.monotonic()
            _log("  " + ", ".join(f"{k} {v}" for k, v in sorted(self.kinds.items())))


_common = [
    click.option("--url", help="Drive this running app (e.g. http://127.0.0.1:8000) instead."),
    click.option("--ray-address", help="With --url: the app's Ray cluster, for its counters."),
    click.option("--model", default="SmolLM2-135M-Instruct", show_default=True),
    click.option("--max-tokens", default=32, show_default=True, type=click.IntRange(1, 4096)),
    click.option(
        "--disconnect",
        default=0.2,
        show_default=True,
        type=click.FloatRange(0, 1),
        help="Share of requests whose client hangs up after its first tokens.",
    ),
    click.option(
        "--shared",
        default=0.5,
        show_default=True,
        type=click.FloatRange(0, 1),
        help="Share of requests starting with a shared long prefix.",
    ),
    click.option(
        "--max-ongoing",
        default=32,
        show_default=True,
        type=click.IntRange(1),
        help="Ingress max_ongoing_requests of the app this starts.",
    ),
    click.option(
        "--max-queued",
        default=16,
        show_default=True,
        type=click.IntRange(-1),
        help="Ingress max_queued_requests (beyond them: 503) of the app this starts.",
    ),
    click.option(
        "--relay-budget-mb",
        default=256,
        show_default=True,
        type=click.IntRange(16),
        help="Relay cache budget of the app this starts (the soak wants it full "
        "before warm-up ends).",
    ),
    click.option("--json", "as_json", is_flag=True, help="Print the result as one JSON object."),
]


def _with_common(f: Any) -> Any:
    for opt in reversed(_common):
        f = opt(f)
    return f


def _workload(model: str, max_tokens: int, disconnect: float, shared: float) -> Workload:
    return Workload(
        model=model, max_tokens=max_tokens, disconnect=disconnect, shared_fraction=shared
    )


def _emit(res: dict[str, Any], as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(res))
    else:
        click.echo(json.dumps(res, indent=2))


def _counter_delta(before: dict[str, int], after: dict[str, int]) -> dict[str, int]:
    keys = ("requests_finished", "requests_aborted", "tokens_not_generated", "load_errors")
    return {k: after.get(k, 0) - before.get(k, 0) for k in keys}


@click.command("load")
@click.option("--clients", default=64, show_default=True, type=click.IntRange(1, 4096))
@click.option("--duration-s", default=300.0, show_default=True, type=click.FloatRange(1))
@_with_common
def load(
    clients: int, duration_s: float, url: str | None, ray_address: str | None, model: str,
    max_tokens: int, disconnect: float, shared: float, max_ongoing: int, max_queued: int,
    relay_budget_mb: int, as_json: bool,
) -> None:  # fmt: skip
    """Many streaming clients at once, some hanging up mid-stream: nothing lost or hung,
    generation stops for clients that left, overload answered with 503."""
    wl = _workload(model, max_tokens, disconnect, shared)
    with _target(url, ray_address, _app_args(max_ongoing, max_queued, relay_budget_mb)) as base:
        before = _safe(engine_counters)
        _log(f"{clients} clients for {duration_s:.0f} s against {base}")
        outcomes = asyncio.run(
            drive(base, wl, clients=clients, duration_s=duration_s, on_outcome=_Progress())
        )
        time.sleep(3)  # connector counters reach the board every 2 s
        after = _safe(engine_counters)
    res = {"clients": clients, "duration_s": duration_s, **summarize(outcomes, duration_s)}
    if before is not None and after is not None:
        res["engines"] = _counter_delta(before, after)
    _emit(res, as_json)
    if res["lost"]:
        raise SystemExit(1)


@click.command("soak")
@click.option("--clients", default=16, show_default=True, type=click.IntRange(1, 4096))
@click.option("--duration-s", default=1800.0, show_default=True, type=click.FloatRange(1))
@click.option("--warmup-s", default=300.0, show_default=True, type=click.FloatRange(0))
@click.option("--sample-s", default=10.0, show_default=True, type=click.FloatRange(0.5))
@_with_common
def soak(
    clients: int, duration_s: float, warmup_s: float, sample_s: float, url: str | None,
    ray_address: str | None, model: str, max_tokens: int, disconnect: float, shared: float,
    max_ongoing: int, max_queued: int, relay_budget_mb: int, as_json: bool,
) -> None:  # fmt: skip
    """Mixed shared-prefix and unique traffic for a long time, sampling memory: process RSS and
    object-store bytes after warm-up must grow < 10 %, relays stay within their budgets."""
    wl = _workload(model, max_tokens, disconnect, shared)
    with _target(url, ray_address, _app_args(max_ongoing, max_queued, relay_budget_mb)) as base:
        pids = None if url else descendants
        res = asyncio.run(soak_run(base, wl, clients, duration_s, warmup_s, sample_s, pids))
    _emit(res, as_json)
    g = res["growth"]
    ok = (
        not res["lost"]
        and g.get("relay_over_budget_samples", 0) == 0
        and (g.get("rss_worst_growth") or 0) < 0.10
        and (g.get("store_growth") or 0) < 0.10
    )
    if not ok:
        raise SystemExit(1)


async def soak_run(
    base: str,
    wl: Workload,
    clients: int,
    duration_s: float,
    warmup_s: float,
    sample_s: float,
    pids: Callable[[], dict[int, str]] | None,
) -> dict[str, Any]:
    """:func:`drive` with a sampler beside it; the summary plus :func:`growth`."""
    samples: list[dict[str, Any]] = []

    async def sampler() -> None:
        end = time.monotonic() + duration_s
        while time.monotonic() < end:
            s = await asyncio.to_thread(_safe, lambda: cluster_sample(pids))
            if s is not None:
                samples.append(s)
                if len(samples) % 6 == 1:
                    rss = sum(s["rss"].values()) / 2**20
                    _log(f"  t={s['t'] - samples[0]['t']:.0f}s rss {rss:.0f} MiB, store "
                         f"{sum(s['store'].values()) / 2**20:.0f} MiB, relays {s['relays']}")  # fmt: skip
            await asyncio.sleep(sample_s)

    progress = _Progress(60.0)
    outcomes, _ = await asyncio.gather(
        drive(base, wl, clients=clients, duration_s=duration_s, on_outcome=progress), sampler()
    )
    return {
        "clients": clients,
        "duration_s": duration_s,
        **summarize(outcomes, duration_s),
        "growth": growth(samples, warmup_s),
    }


def _safe(fn: Callable[[], Any]) -> Any:
    """``fn()``, or None when the cluster cannot be asked (no Ray connection)."""
    try:
        return fn()
    except Exception as exc:
        _log(f"  (cluster figures unavailable: {exc})")
        return None
