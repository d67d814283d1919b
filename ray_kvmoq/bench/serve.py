"""``kvmoq bench serve``: our stack against stock Ray Serve LLM, driven by vLLM's own benchmark client.

In one run, on one machine and one model (the built-in SmolLM2 on vLLM's CPU backend), on a
private two-node Ray cluster, each row deploys an app, waits for it, drives it with
``vllm bench serve`` (``vllm.benchmarks.serve``, run as a subprocess; datasets
``prefix_repetition`` or ``random``, OpenAI completions endpoint), and tears it down with the
cluster (every run gets a fresh one; with ``--repeat`` the rows run in the order a b c, c b a,
c b a, a b c, and again, so no row always runs first or mid-block; repetition ``i`` drives
every row with client seed ``i``, the same requests at the same times: :func:`run_order`):

* **a** — Ray Serve LLM as shipped: ``build_openai_app``, vLLM with its prefix cache, the
  ``PrefixCacheAffinityRouter``, no connector;
* **b** — ours: the same engines with the MoQT KV connector, the KV router, our ingress;
* **c** — ours with KV reuse off (no prefix cache, connector neither loads nor publishes);

each at 1 and 2 replicas (one per node; each node's engines bind to their own half of the
machine's cores, as on two real nodes, unless ``--engine-cores shared``; every engine gets the
same per-step token budget, ``--max-num-batched-tokens``: by default the one our apps use on
CPU, :data:`~ray_kvmoq.serving.engine_args.CPU_STEP_BUDGET`, as a Ray Serve LLM user who tuned
it would; vLLM's own 2,048 stalls every row for seconds a step). Per row: TTFT mean/p50/p99,
TPOT mean/p50/p99, inter-token latency p50/p99 (in the JSON and each run's log line),
requests/s and failed requests from the client's result file, and reused prompt
tokens from vLLM's own counters
(``vllm:prefix_cache_hits`` + ``vllm:external_prefix_cache_hits``, scraped from every node's Ray
metrics endpoint), and the prompt tokens each node computed, and the cores each part of the
stack used while the client drove the row (``cpu_cores``: vLLM's workers, Serve's ingress, our
relays...; see :mod:`ray_kvmoq.bench.cpu`). Rows b and c also carry the figures the KV router
priced with at the end (by node), its decisions (by outcome, mean time per decision), and
``kv_by_node``: where each node's engines got their prompts' prefixes (engine-cache hits, tokens
from their own relay, pulled, pulls declined, load errors; the connectors' counters on the
figures board; with ``--repeat``, the last repetition's). Ratios are to row **a** with the same
replica count. A run that fails is listed in ``failures``; the other runs are kept. A PNG plot
goes to ``--out``. ``--json`` prints one object keyed by row (``prefix:a-1``, ``random:b-2``...:
dataset, row, replicas).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import click

from ray_kvmoq.bench.cpu import CpuSampler
from ray_kvmoq.serving.engine_args import CPU_STEP_BUDGET, step_budget

ROWS = ("a", "b", "c")
ROW_NAMES = {
    "a": "Ray Serve LLM (PrefixCacheAffinityRouter)",
    "b": "ours (MoQT connector + KV router)",
    "c": "ours, reuse off",
}
_APP = "bench"
_SHORT = {"prefix_repetition": "prefix", "random": "random"}
_METRICS = ("prefix_cache_hits", "external_prefix_cache_hits", "prompt_tokens")
_METRICS_LAG_S = 6.0
"""How long vLLM's counters take to reach Ray's metrics exporter, mostly."""
_METRICS_SETTLE_S = 40.0
"""How long a row waits at most, after its client ends, for the counters to show every prompt
token the client sent (Ray exports metrics every 10 s; 6 s missed up to 3 requests' worth)."""
_RATIO_METRICS = (
    "ttft_mean_ms",
    "ttft_p50_ms",
    "ttft_p99_ms",
    "tpot_mean_ms",
    "request_throughput",
)


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stock_app(
    model_dir: str, name: str, replicas: int, max_len: int, kv_cache_mb: int,
    engine_extra: dict[str, Any],
) -> Any:  # fmt: skip
    from ray.serve.llm import build_openai_app

    cfg = stock_config(model_dir, name, replicas, max_len, kv_cache_mb, engine_extra)
    return build_openai_app({"llm_configs": [cfg]})


def stock_config(
    model_dir: str, name: str, replicas: int, max_len: int, kv_cache_mb: int,
    engine_extra: dict[str, Any],
) -> Any:  # fmt: skip
    """Row a's ``LLMConfig``: Ray Serve LLM as shipped, with the engine arguments every row
    shares."""
    from ray.serve.llm import LLMConfig

    return LLMConfig(
        model_loading_config={"model_id": name, "model_source": model_dir},
        engine_kwargs={
            "dtype": "bfloat16",
            "max_model_len": max_len,
            "enforce_eager": True,
            "enable_prefix_caching": True,
            "kv_cache_memory_bytes": kv_cache_mb << 20,
            **engine_extra,
        },
        placement_group_config={"bundles": [{"CPU": 1, "engine_slot": 1}]},
        deployment_config={
            "num_replicas": replicas,
            "ray_actor_options": {"num_cpus": 0},
            "request_router_config": {
                "request_router_class": "ray.serve.llm.request_router:PrefixCacheAffinityRouter"
            },
        },
        runtime_env={"env_vars": {"HF_HUB_OFFLINE": "1"}},
    )


def _our_app(
    replicas: int, reuse: bool, max_len: int, datagram: int, kv_cache_mb: int,
    engine_extra: dict[str, Any], *, publish_threshold: int | None = None,
    when_evicting: bool | None = None,
) -> Any:  # fmt: skip
    from ray_kvmoq.serving.app import build

    return build(
        our_args(
            replicas, reuse, max_len, datagram, kv_cache_mb, engine_extra,
            publish_threshold=publish_threshold, when_evicting=when_evicting,
        )
    )  # fmt: skip


def our_args(
    replicas: int, reuse: bool, max_len: int, datagram: int, kv_cache_mb: int,
    engine_extra: dict[str, Any], *, publish_threshold: int | None = None,
    when_evicting: bool | None = None,
) -> Any:  # fmt: skip
    """Rows b and c's app arguments (c: ``reuse`` False; ``publish_threshold`` and
    ``when_evicting`` None: the apps' defaults ``kv_publish_threshold`` and
    ``kv_publish_when_evicting``)."""
    from ray_kvmoq.serving.app import AppArgs, ReplicaArgs

    threshold: dict[str, Any] = (
        {} if publish_threshold is None else {"kv_publish_threshold": publish_threshold}
    )
    if when_evicting is not None:
        threshold["kv_publish_when_evicting"] = when_evicting
    return AppArgs(
        mode="combined",
        max_model_len=max_len,
        kv_reuse=reuse,
        **threshold,
        kv_cache_gib=kv_cache_mb / 1024,
        relay_datagram_size=datagram,
        engine_kwargs=engine_extra,
        server=ReplicaArgs(num_replicas=replicas, num_cpus=1, resources={"engine_slot": 1}),
    )


def _wait_ready(base: str, timeout_s: float) -> None:
    import httpx

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"{base}/v1/models", timeout=10).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(1.0)
    raise TimeoutError(f"{base} not ready in {timeout_s:.0f} s")


def _scrape_settled(before: dict[str, float], sent_tokens: int) -> dict[str, float]:
    """The counters once they count at least ``sent_tokens`` prompt tokens more than ``before``
    (every request the client sent has reached Ray's exporter), or after
    :data:`_METRICS_SETTLE_S`, whichever comes first."""
    time.sleep(_METRICS_LAG_S)
    deadline = time.monotonic() + _METRICS_SETTLE_S - _METRICS_LAG_S
    after = _scrape()
    while after["prompt_tokens"] - before["prompt_tokens"] < sent_tokens:
        if time.monotonic() >= deadline:
            _log(
                f"counters still short of the {sent_tokens} prompt tokens sent: reading them as is"
            )
            break
        time.sleep(2.0)
        after = _scrape()
    return after


def _scrape() -> dict[str, float]:
    """vLLM's prompt-token counters summed over every node's Ray metrics endpoint, and each
    node's own prompt tokens (``prompt_tokens@<node ip>``: where the router sent the work)."""
    import httpx
    import ray

    out = dict.fromkeys(_METRICS, 0.0)
    for n in ray.nodes():
        port = n.get("MetricsExportPort")
        if not n["Alive"] or not port:
            continue
        try:
            text = httpx.get(f"http://{n['NodeManagerAddress']}:{port}/metrics", timeout=10).text
        except httpx.HTTPError:
            continue
        for line in text.splitlines():
            if line.startswith("#"):
                continue
            for m in _METRICS:
                if line.startswith(f"ray_vllm_{m}_total") or line.startswith(f"ray_vllm_{m}{{"):
                    value = float(line.rsplit(" ", 1)[1])
                    out[m] += value
                    if m == "prompt_tokens":
                        node = f"prompt_tokens@{n['NodeManagerAddress']}"
                        out[node] = out.get(node, 0.0) + value
    return out


def client_args(
    *, base: str, model: str, tokenizer: str, dataset: str, num_prompts: int, rate: float,
    result_dir: str, prefix_len: int, suffix_len: int, num_prefixes: int, output_len: int,
    seed: int = 0,
) -> list[str]:  # fmt: skip
    """``vllm bench serve`` arguments for one row (``seed``: the client's prompts and arrival
    times)."""
    args = [
        "--backend", "openai", "--base-url", base, "--endpoint", "/v1/completions",
        "--model", model, "--tokenizer", tokenizer, "--dataset-name", dataset,
        "--num-prompts", str(num_prompts), "--request-rate", str(rate), "--seed", str(seed),
        "--temperature", "0", "--ignore-eos", "--save-result", "--result-dir", result_dir,
        "--result-filename", "result.json", "--percentile-metrics", "ttft,tpot,itl",
        "--metric-percentiles", "50,99",
    ]  # fmt: skip
    if dataset == "prefix_repetition":
        args += [
            "--prefix-repetition-prefix-len", str(prefix_len),
            "--prefix-repetition-suffix-len", str(suffix_len),
            "--prefix-repetition-num-prefixes", str(num_prefixes),
            "--prefix-repetition-output-len", str(output_len),
        ]  # fmt: skip
    else:
        args += ["--random-input-len", str(prefix_len + suffix_len),
                 "--random-output-len", str(output_len)]  # fmt: skip
    return args


_CLIENT = (
    "import sys\n"
    "from vllm.utils.argparse_utils import FlexibleArgumentParser\n"
    "from vllm.benchmarks.serve import add_cli_args, main\n"
    "p = FlexibleArgumentParser(); add_cli_args(p); main(p.parse_args(sys.argv[1:]))\n"
)


def _drive(args: list[str], result_dir: str, timeout_s: float) -> dict[str, Any]:
    proc = subprocess.run(
        [sys.executable, "-c", _CLIENT, *args],
        capture_output=True,
        text=True,
        timeout=timeout_s,
        env={**os.environ, "TOKENIZERS_PARALLELISM": "false"},
    )
    path = Path(result_dir) / "result.json"
    if proc.returncode != 0 or not path.exists():
        tail = (proc.stderr or proc.stdout)[-2000:]
        raise RuntimeError(f"vllm bench serve failed (exit {proc.returncode}): {tail}")
    return dict(json.loads(path.read_text()))


def _our_state(base: str) -> dict[str, Any]:
    """Rows b and c: the figures the KV router priced with at the end of the run (figures
    board, by node IP) and its decisions (the ingress's ``/metrics``): by outcome, and the mean
    time one took. Empty for stock, which has neither."""
    import httpx
    import ray

    from ray_kvmoq.connector.figures import FIGURES_NAME
    from ray_kvmoq.serving.app import RAY_NAMESPACE

    try:
        board: Any = ray.get_actor(FIGURES_NAME, namespace=RAY_NAMESPACE)
        snap: dict[str, Any] = ray.get(board.snapshot.remote(), timeout=30)
        counters: dict[str, Any] = ray.get(board.counters.remote(), timeout=30)
        text = httpx.get(f"{base}/metrics", timeout=30).raise_for_status().text
    except (ValueError, ray.exceptions.RayError, httpx.HTTPError):
        return {}
    ip = {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}
    figures = {
        kind: {ip.get(node, node): v for node, v in sorted(per_node.items())}
        for kind, per_node in snap.get("values", {}).items()
        if per_node
    }
    return {
        "figures": figures,
        "router": router_summary(text),
        "kv_by_node": kv_by_node(counters, ip),
    }


KV_COUNTERS = (
    "lookups_skipped",
    "lookups_answered_at_once",
    "tokens_matched_local",
    "tokens_matched_remote",
    "pulls_declined",
    "pulls_probed",
    "load_errors",
    "groups_saved",
    "chunks_evicted_seen",
    "requests_first_sight",
)
"""The connector counters ``kv_by_node`` reports: how each node's engines got their prompts'
prefixes (engine cache, own relay, pulled, recomputed after a declined pull or a failed load;
of the pulls, those made against a figure that said recompute, to measure it again),
how many directory lookups were answered from the engine's copy of the directory in the step
that made them, and what they published."""


def kv_by_node(
    counters: dict[str, dict[str, Any]], ip: dict[str, str]
) -> dict[str, dict[str, int]]:
    """The figures board's connector counters (``source`` → node id and totals since each
    engine started) summed per node IP, :data:`KV_COUNTERS` only."""
    out: dict[str, dict[str, int]] = {}
    for totals in counters.values():
        node = str(totals.get("node_id", ""))
        acc = out.setdefault(ip.get(node, node), dict.fromkeys(KV_COUNTERS, 0))
        for name in KV_COUNTERS:
            acc[name] += int(totals.get(name, 0) or 0)
    return dict(sorted(out.items()))


def router_summary(metrics_text: str) -> dict[str, Any]:
    """The KV router's decisions by outcome and the mean milliseconds one took, from the
    ingress's Prometheus text (``kvmoq_router_decisions_total``,
    ``kvmoq_router_decision_seconds``)."""
    from prometheus_client.parser import text_string_to_metric_families

    outcomes: dict[str, int] = {}
    seconds = decisions = 0.0
    for fam in text_string_to_metric_families(metrics_text):
        for smp in fam.samples:
            if smp.name == "kvmoq_router_decisions_total":
                out = smp.labels.get("outcome", "?")
                outcomes[out] = outcomes.get(out, 0) + int(smp.value)
            elif smp.name == "kvmoq_router_decision_seconds_sum":
                seconds += smp.value
            elif smp.name == "kvmoq_router_decision_seconds_count":
                decisions += smp.value
    mean_ms = round(1000 * seconds / decisions, 3) if decisions else None
    return {"outcomes": outcomes, "decision_mean_ms": mean_ms}


def summarize(
    raw: dict[str, Any], before: dict[str, float], after: dict[str, float]
) -> dict[str, Any]:
    """One row's figures from the client's result and the scraped counters."""
    reused = (after["prefix_cache_hits"] - before["prefix_cache_hits"]) + (
        after["external_prefix_cache_hits"] - before["external_prefix_cache_hits"]
    )
    prompt = after["prompt_tokens"] - before["prompt_tokens"]
    per_node = {
        k.split("@", 1)[1]: int(v - before.get(k, 0.0))
        for k, v in sorted(after.items())
        if k.startswith("prompt_tokens@")
    }
    return {
        "ttft_mean_ms": raw.get("mean_ttft_ms"),
        "ttft_p50_ms": raw.get("median_ttft_ms", raw.get("p50_ttft_ms")),
        "ttft_p99_ms": raw.get("p99_ttft_ms"),
        "tpot_mean_ms": raw.get("mean_tpot_ms"),
        # where a mean moves, the percentiles tell a slower engine step (p50 moves) from stalls
        # (p99 moves); ITL is per token, TPOT per request
        "tpot_p50_ms": raw.get("median_tpot_ms"),
        "tpot_p99_ms": raw.get("p99_tpot_ms"),
        "itl_p50_ms": raw.get("median_itl_ms"),
        "itl_p99_ms": raw.get("p99_itl_ms"),
        "request_throughput": raw.get("request_throughput"),
        "completed": raw.get("completed"),
        "failed": raw.get("failed"),
        "reused_tokens": int(reused),
        "prompt_tokens": int(prompt),
        "prompt_tokens_by_node": per_node,
    }


def ratios(rows: dict[str, dict[str, Any]]) -> dict[str, dict[str, float | None]]:
    """Each row's figures divided by row ``a`` at the same replica count."""
    out: dict[str, dict[str, float | None]] = {}
    for key, r in rows.items():
        dataset, row_n = key.split(":", 1)
        ref = rows.get(f"{dataset}:a-{row_n.split('-', 1)[1]}")
        if ref is None or row_n.startswith("a-"):
            continue
        out[key] = {m: (r[m] / ref[m] if r.get(m) and ref.get(m) else None) for m in _RATIO_METRICS}
    return out


def run_bench(
    *, rows: list[str], replicas: list[int], datasets: list[str], num_prompts: int, rate: float,
    prefix_len: int, suffix_len: int, num_prefixes: int, output_len: int, datagram: int,
    repeat: int = 1, kv_cache_mb: int = 1024, split_cores: bool = True,
    max_num_batched_tokens: int = CPU_STEP_BUDGET, publish_threshold: int | None = None,
    when_evicting: bool | None = None,
) -> dict[str, Any]:  # fmt: skip
    """Run every (row, replicas, repetition), each on a fresh cluster; see the module docstring."""
    from ray import serve

    from ray_kvmoq.engine.loader import BUILTIN_MODEL, cached_builtin_dir
    from ray_kvmoq.serving.app import AppArgs

    from .cluster import two_node_cluster

    model_dir = str(cached_builtin_dir())
    max_len = prefix_len + suffix_len + output_len + 64
    engine_extra = step_budget(max_num_batched_tokens)  # every row alike
    if publish_threshold is None:
        publish_threshold = AppArgs.model_fields["kv_publish_threshold"].default
    if when_evicting is None:
        when_evicting = AppArgs.model_fields["kv_publish_when_evicting"].default
    workload = {
        "model": BUILTIN_MODEL, "tokenizer": model_dir,
        "num_prompts": num_prompts, "rate": rate, "prefix_len": prefix_len,
        "suffix_len": suffix_len, "num_prefixes": num_prefixes, "output_len": output_len,
    }  # fmt: skip
    out: dict[str, Any] = {"rows": {}, "failures": [], "workload": {
        "datasets": datasets, "num_prompts": num_prompts, "request_rate": rate,
        "prefix_len": prefix_len, "suffix_len": suffix_len, "num_prefixes": num_prefixes,
        "output_len": output_len, "relay_datagram_size": datagram, "kv_cache_mb": kv_cache_mb,
        "engine_cores": "split" if split_cores else "shared",
        "max_num_batched_tokens": max_num_batched_tokens, "publish_threshold": publish_threshold,
        "publish_when_evicting": when_evicting,
    }}  # fmt: skip
    runs: dict[str, list[dict[str, Any]]] = {}
    for dataset, n, rep, row in run_order(rows, replicas, datasets, repeat):
        key = f"{_SHORT[dataset]}:{row}-{n}"
        _log(f"[{key}] {ROW_NAMES[row]}, {n} replica(s), run {rep + 1}/{repeat}: deploying")
        try:
            # a fresh cluster per run, so no row inherits another's leftovers. Later runs still
            # come out slower (the same stock row: 1.28x TTFT, 1.44x TPOT run again in one
            # cluster; 1.22x, 1.48x in a fresh one 22 min later): run_order's alternation
            # spreads that drift over every row
            with two_node_cluster(store_bytes=1 << 30, num_cpus=4, split_cores=split_cores):
                port = _free_port()
                serve.start(http_options={"host": "127.0.0.1", "port": port})
                try:
                    app = (
                        _stock_app(model_dir, BUILTIN_MODEL, n, max_len, kv_cache_mb, engine_extra)
                        if row == "a"
                        else _our_app(
                            n,
                            row == "b",
                            max_len,
                            datagram,
                            kv_cache_mb,
                            engine_extra,
                            publish_threshold=publish_threshold,
                            when_evicting=when_evicting,
                        )
                    )
                    # every row of a repetition gets the same requests at the same times;
                    # each repetition other ones (run_order)
                    wl = {**workload, "dataset": dataset, "seed": rep}
                    base = f"http://127.0.0.1:{port}/{_APP}"
                    result = _one_row(app, base, key, wl)
                    runs.setdefault(key, []).append(result)
                    _log(f"[{key}] run {rep + 1}/{repeat}: {row_summary(result)}")
                finally:
                    serve.shutdown()
        except Exception as exc:
            out["failures"].append(f"{key} run {rep + 1}: {exc}")
            _log(f"[{key}] FAILED: {exc}")
    out["rows"] = {k: median_row(v) for k, v in runs.items() if v}
    out["runs"] = runs
    out["ratios_to_a"] = ratios(out["rows"])
    return out


def run_order(
    rows: list[str], replicas: list[int], datasets: list[str], repeat: int
) -> list[tuple[str, int, int, str]]:
    """(dataset, replicas, repetition, row) in the order they run: the rows of a repetition
    back to back, in the order a b, b a, b a, a b (then again), so neither a row's position nor
    the machine's drift over the run favours one row.

    a b b a alone cancels a steady drift but not one that peaks mid-block: in one A/A block
    (stock in both rows, 2026-12-07) the middle two runs read 8 % higher TPOT than the outer
    two. Over four repetitions (a b b a b a a b) each row gets the middle of one
    block and the ends of the other (docs/benchmarks.md).

    Repetition ``i`` drives every row with client seed ``i``: the rows of a repetition are
    compared on the same prompts arriving at the same times, and repetitions sample different
    arrival patterns. With one seed for all, every repetition replayed one pattern, and how its
    bursts happened to fall on two replicas weighed in every median (docs/benchmarks.md)."""
    return [
        (d, n, i, r)
        for d in datasets
        for n in replicas
        for i in range(repeat)
        for r in (rows if i % 4 in (0, 3) else rows[::-1])
    ]


def _one_row(app: Any, base: str, key: str, workload: dict[str, Any]) -> dict[str, Any]:
    """Deploy ``app``, drive it with vLLM's client, delete it; the row's figures."""
    from ray import serve

    serve.run(app, name=_APP, route_prefix=f"/{_APP}", blocking=False)
    try:
        _wait_ready(base, 900)
        time.sleep(_METRICS_LAG_S)  # the replicas' start-up probes must be in ``before``
        before = _scrape()
        with tempfile.TemporaryDirectory() as rd:
            _log(f"[{key}] driving it with vllm bench serve ({workload['dataset']})")
            with CpuSampler() as cpu:
                raw = _drive(client_args(base=base, result_dir=rd, **workload), rd, timeout_s=1800)
        after = _scrape_settled(before, int(raw.get("total_input_tokens") or 0))
        return {**summarize(raw, before, after), "cpu_cores": cpu.cores, **_our_state(base)}
    finally:
        serve.delete(_APP)


def median_row(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-metric median of a row's repetitions (failed: the sum; ``cpu_cores``: the
    median of each part)."""
    import statistics

    out: dict[str, Any] = {}
    for k in runs[0]:
        vals = [r[k] for r in runs if isinstance(r.get(k), int | float)]
        if k in ("failed", "completed"):
            out[k] = int(sum(vals))
        elif k == "cpu_cores":
            parts = {p for r in runs for p in r.get(k) or {}}
            med = {p: statistics.median((r.get(k) or {}).get(p, 0.0) for r in runs) for p in parts}
            out[k] = dict(sorted(med.items(), key=lambda kv: -kv[1]))
        else:
            out[k] = statistics.median(vals) if vals else runs[-1].get(k)
    out["repeats"] = len(runs)
    return out


def row_summary(r: dict[str, Any]) -> str:
    """One run's figures on one line (printed as each run ends: a long bench shows its results
    as it goes, and a bench cut short still leaves them in its log)."""

    def ms(name: str) -> str:
        v = r.get(name)
        return f"{v:,.0f}" if isinstance(v, int | float) else "-"

    rps = r.get("request_throughput")
    return (
        f"TTFT mean {ms('ttft_mean_ms')} ms, p50 {ms('ttft_p50_ms')}, p99 {ms('ttft_p99_ms')}; "
        f"TPOT {ms('tpot_mean_ms')} ms (p50 {ms('tpot_p50_ms')}, p99 {ms('tpot_p99_ms')}), "
        f"ITL p50 {ms('itl_p50_ms')}, p99 {ms('itl_p99_ms')}; "
        f"{f'{rps:.2f}' if isinstance(rps, int | float) else '-'} req/s; "
        f"{r.get('failed') or 0} failed; {r.get('reused_tokens', '-')} tokens reused"
    )


def table(res: dict[str, Any]) -> str:
    """The rows as a text table."""
    head = (
        f"{'row':12} {'':42} {'TTFT mean':>10} {'p50':>8} {'p99':>8} {'TPOT':>7} "
        f"{'req/s':>6} {'failed':>6} {'reused':>7}"
    )
    lines = [head]
    for key, r in res["rows"].items():
        f = lambda v: f"{v:.0f}" if isinstance(v, int | float) else "-"  # noqa: E731
        lines.append(
            f"{key:12} {ROW_NAMES[key.split(':')[1][0]]:42} {f(r['ttft_mean_ms']):>10} {f(r['ttft_p50_ms']):>8} "
            f"{f(r['ttft_p99_ms']):>8} {f(r['tpot_mean_ms']):>7} "
            f"{(r['request_throughput'] or 0):6.2f} {r['failed'] or 0:6d} {r['reused_tokens']:7d}"
        )
    for key, rat in res.get("ratios_to_a", {}).items():
        shown = ", ".join(f"{k} {v:.2f}x" for k, v in rat.items() if v is not None)
        lines.append(f"{key} / a: {shown}")
    for key, r in res["rows"].items():
        cores = r.get("cpu_cores") or {}
        if cores:
            top = ", ".join(f"{p} {c:.2f}" for p, c in list(cores.items())[:6])
            lines.append(f"{key} cores: {sum(cores.values()):.2f} ({top})")
    for key, r in res["rows"].items():
        by_node = r.get("kv_by_node") or {}
        if by_node:
            shown = "; ".join(
                f"{node} engine-cache hits {c['lookups_skipped']}, lookups answered at once "
                f"{c['lookups_answered_at_once']}, tokens from own relay "
                f"{c['tokens_matched_local']}, pulled {c['tokens_matched_remote']}, pulls "
                f"declined {c['pulls_declined']}, pulls probed {c['pulls_probed']}, load errors "
                f"{c['load_errors']}, evicted repeats {c['chunks_evicted_seen']}, requests "
                f"published on first sight {c['requests_first_sight']}"
                for node, c in by_node.items()
            )
            lines.append(f"{key} KV: {shown}")
    lines += [f"FAILED: {f}" for f in res.get("failures", [])]
    return "\n".join(lines)


def plot(res: dict[str, Any], path: Path) -> None:
    """Bar charts of TTFT mean/p99 and req/s per row."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = list(res["rows"])
    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for ax, metric, label in zip(
        axes,
        ("ttft_mean_ms", "ttft_p99_ms", "request_throughput"),
        ("TTFT mean (ms)", "TTFT p99 (ms)", "requests/s"),
        strict=True,
    ):
        vals = [res["rows"][k][metric] or 0 for k in keys]
        ax.bar(keys, vals, color=["#888" if ":a-" in k else "#2a7" for k in keys])
        ax.set_title(label)
        ax.tick_params(axis="x", labelrotation=45)  # "prefix:b-2" and the like: no overlap
    fig.suptitle("kvmoq bench serve: a = Ray Serve LLM, b = ours, c = ours without reuse")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


def _csv(kind: type, value: str) -> list[Any]:
    try:
        return [kind(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected a comma-separated list, got {value!r}") from None


@click.command("serve")
@click.option(
    "--rows",
    default="a,b,c",
    show_default=True,
    help="a: stock Ray Serve LLM, b: ours, c: ours with reuse off.",
)
@click.option("--replicas", default="1,2", show_default=True, help="Replica counts to run.")
@click.option(
    "--datasets",
    default="prefix_repetition,random",
    show_default=True,
    help="vLLM benchmark datasets to run (comma-separated: prefix_repetition, random).",
)
@click.option("--num-prompts", default=48, show_default=True, type=click.IntRange(1, 10000))
@click.option(
    "--request-rate",
    "rate",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0, min_open=True),
    help="Requests per second (Poisson).",
)
@click.option("--prefix-len", default=1024, show_default=True, type=click.IntRange(1, 32768))
@click.option("--suffix-len", default=64, show_default=True, type=click.IntRange(1, 32768))
@click.option("--num-prefixes", default=2, show_default=True, type=click.IntRange(1, 1000))
@click.option("--output-len", default=32, show_default=True, type=click.IntRange(1, 4096))
@click.option(
    "--datagram",
    default=1452,
    show_default=True,
    type=click.IntRange(1200, 65527),
    help="QUIC datagram size between our relays.",
)
@click.option(
    "--kv-cache-mb",
    default=1024,
    show_default=True,
    type=click.IntRange(16, 1 << 20),
    help="Each engine's own KV cache (vLLM's prefix cache lives in it), every row alike; "
    "make it smaller than the workload's prefixes to see reuse beyond the engines' memory.",
)
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    type=click.IntRange(1, 10),
    help="Repetitions, in the row order a b, b a, b a, a b (use 4 to give each row the ends "
    "and the middle of a block); each row reports medians.",
)
@click.option(
    "--out",
    type=click.Path(path_type=Path),
    default=Path("bench-out/serve.png"),
    show_default=True,
    help="Where to write the plot.",
)
@click.option(
    "--engine-cores",
    type=click.Choice(["split", "shared"]),
    default="split",
    show_default=True,
    help="split: each node's engines bind to their own half of this machine's cores, as on two "
    "real nodes; shared: vLLM's own binding, which puts every engine on the same cores "
    "($VLLM_CPU_OMP_THREADS_BIND, if set, overrides both).",
)
@click.option(
    "--max-num-batched-tokens",
    type=click.IntRange(16, 1 << 20),
    default=CPU_STEP_BUDGET,
    show_default=True,
    help="vLLM's per-step token budget, every row alike (the default is what our apps use on "
    "CPU; 2048 is vLLM's own CPU default). On CPU a step's time grows with its tokens, and "
    "streams stall and aborts wait for the step; below 128 max_num_seqs follows it down.",
)
@click.option(
    "--publish-threshold",
    type=click.IntRange(1, 1000),
    default=None,
    help="Rows b and c: an engine publishes a chunk once it has seen it this many times "
    "[default: the apps' kv_publish_threshold]. 1 publishes every prompt on first sight; 1000 "
    "publishes nearly nothing, which measures our stack without the cost of publishing "
    "(with --fixed-threshold).",
)
@click.option(
    "--publish-when-evicting/--fixed-threshold",
    "when_evicting",
    default=None,
    help="Rows b and c: publish on first sight while an engine's prefix cache evicts chunks "
    "before they come back, or keep --publish-threshold always [default: the apps' "
    "kv_publish_when_evicting, on].",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object keyed by row.")
def serve(
    rows: str, replicas: str, datasets: str, num_prompts: int, rate: float, prefix_len: int,
    suffix_len: int, num_prefixes: int, output_len: int, datagram: int, kv_cache_mb: int,
    repeat: int, out: Path, engine_cores: str, max_num_batched_tokens: int,
    publish_threshold: int | None, when_evicting: bool | None, as_json: bool,
) -> None:  # fmt: skip
    """Stock Ray Serve LLM vs ours vs ours without reuse, with vLLM's benchmark client, on a
    private 2-node Ray cluster (CPU: tens of minutes)."""
    picked = _csv(str, rows)
    if not picked or set(picked) - set(ROWS):
        raise click.BadParameter(f"rows must be among {', '.join(ROWS)}")
    sets = _csv(str, datasets)
    if not sets or set(sets) - set(_SHORT):
        raise click.BadParameter(f"datasets must be among {', '.join(_SHORT)}")
    counts = _csv(int, replicas)
    if not counts or not set(counts) <= {1, 2}:
        raise click.BadParameter("replicas must be among 1, 2 (one per node of the 2-node cluster)")
    if "prefix_repetition" in sets and num_prefixes > num_prompts:
        raise click.BadParameter(
            f"--num-prefixes ({num_prefixes}) must not exceed --num-prompts ({num_prompts}): "
            "vLLM's prefix_repetition dataset gives every prefix at least one prompt"
        )
    res = run_bench(
        rows=picked, replicas=counts, datasets=sets, num_prompts=num_prompts,
        rate=rate, prefix_len=prefix_len, suffix_len=suffix_len, num_prefixes=num_prefixes,
        output_len=output_len, datagram=datagram, repeat=repeat, kv_cache_mb=kv_cache_mb,
        split_cores=engine_cores == "split", max_num_batched_tokens=max_num_batched_tokens,
        publish_threshold=publish_threshold, when_evicting=when_evicting,
    )  # fmt: skip
    if res["rows"]:
        plot(res, out)
        res["plot"] = str(out)
    click.echo(json.dumps(res) if as_json else table(res))
    if res["failures"]:
        raise SystemExit(1)
