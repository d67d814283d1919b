"""``kvmoq bench connector``: loading a prefix through the MoQT KV connector vs vLLM recomputing it.

Two vLLM engines (CPU, the built-in SmolLM2, bf16, vLLM's own prefix cache off) on a private
two-node Ray cluster, each with the connector. For every prefix length and codec, in one run:

1. engine A computes ``prefix + s1`` under a fresh tenant salt and publishes its groups;
2. *recompute*: A answers ``prefix + s2`` (one token) with loading off — vLLM computes it all;
3. *same node*: A answers ``prefix + s2`` with loading on — the groups come from A's node relay
   (zero-copy object-store reads), only the suffix is computed;
4. *other node*: B (on 127.0.0.2) answers ``prefix + s2`` — its relay pulls the groups from A's
   relay over MoQT first.

Each row is the time to the first token (``max_tokens=1``); ``load_vs_recompute`` is that time
divided by the recompute time of the same engine (< 1: loading wins). Tokens/s and MB/s are
prefix tokens and encoded bytes per second of the load path; ``break_even_mb_s`` is the pull
bandwidth at which loading the codec's bytes takes as long as recomputing the tokens
(bytes/token ÷ recompute s/token). Prompts are seeded random token ids (speed does not depend on
text). Figures drift on a shared machine: compare rows of one run.
"""

from __future__ import annotations

import json
import random
import statistics
import sys
import time
import uuid
from dataclasses import asdict, dataclass
from typing import Any

import click

CODECS = ("FP16", "BF16", "FP8", "Int8", "FP4", "Int4", "AC")
_MODEL_LEN_MARGIN = 64


def _log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


@dataclass(frozen=True, kw_only=True)
class ConnectorRow:
    """One (prefix, codec, path) measurement (medians over the repeats)."""

    prefix: int
    codec: str
    path: str
    """``same_node`` or ``other_node``."""
    load_s: float
    recompute_s: float
    load_vs_recompute: float
    tokens_per_s: float
    mb_s: float
    bytes_per_token: float
    break_even_mb_s: float
    tokens_loaded: int


def _ttft(host: Any, prompt: list[int], salt: str, params: dict[str, Any]) -> tuple[float, Any]:
    import ray

    t0 = time.perf_counter()
    out = ray.get(host.generate.remote([prompt], max_tokens=1, kv_params=params, cache_salt=salt))
    return time.perf_counter() - t0, out[0]


def _metric_delta(host: Any, before: dict[str, float], key: str) -> float:
    import ray

    return float(ray.get(host.metrics.remote()).get(key, 0.0) - before.get(key, 0.0))


def _measure(
    a: Any, b: Any, prefix: list[int], codec: str, rng: random.Random
) -> dict[str, dict[str, float]]:
    """One repeat for one codec: recompute / same-node / other-node times and load figures."""
    import ray

    salt = f"bench-{uuid.uuid4().hex}"
    s1 = [rng.randrange(100, 40000) for _ in range(16)]
    s2 = [rng.randrange(100, 40000) for _ in range(16)]
    ours = {"kvmoq": {"codec": codec, "pull": "always"}}  # the raw load path, never declined
    off = {"kvmoq": {"codec": codec, "load": False, "publish": False}}
    ray.get(a.generate.remote([prefix + s1], max_tokens=1, kv_params=ours, cache_salt=salt))
    ray.get(a.flush.remote())
    out: dict[str, dict[str, float]] = {}
    for path, host in (("same_node", a), ("other_node", b)):
        rec_s, _ = _ttft(host, prefix + s2, salt, off)
        before = ray.get(host.metrics.remote())
        load_s, res = _ttft(host, prefix + s2, salt, ours)
        out[path] = {
            "load_s": load_s,
            "recompute_s": rec_s,
            "bytes": _metric_delta(host, before, "kvmoq_bytes_loaded"),
            "tokens": _metric_delta(host, before, "kvmoq_tokens_loaded"),
            "errors": _metric_delta(host, before, "kvmoq_load_errors"),
            "cached": float(res.num_cached_tokens),
        }
    return out


def _row(prefix: int, codec: str, path: str, runs: list[dict[str, float]]) -> ConnectorRow:
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    tokens_per_rec_s = med["recompute_s"] / prefix
    bpt = med["bytes"] / med["tokens"] if med["tokens"] else 0.0
    return ConnectorRow(
        prefix=prefix,
        codec=codec,
        path=path,
        load_s=round(med["load_s"], 4),
        recompute_s=round(med["recompute_s"], 4),
        load_vs_recompute=round(med["load_s"] / med["recompute_s"], 3),
        tokens_per_s=round(med["tokens"] / med["load_s"], 1),
        mb_s=round(med["bytes"] / med["load_s"] / 1e6, 1),
        bytes_per_token=round(bpt, 1),
        break_even_mb_s=round(bpt / tokens_per_rec_s / 1e6, 1) if bpt else 0.0,
        tokens_loaded=int(med["tokens"]),
    )


def run_bench(prefixes: list[int], codecs: list[str], repeat: int, seed: int = 0) -> dict[str, Any]:
    """Run the bench (see the module docstring); returns the JSON-able result."""
    import ray

    from ray_kvmoq.connector import kv_transfer_config
    from ray_kvmoq.connector.host import start_engine
    from ray_kvmoq.engine.loader import cached_builtin_dir
    from ray_kvmoq.relay.actor import start_relays

    from .cluster import two_node_cluster

    rng = random.Random(seed)
    model_len = max(prefixes) + _MODEL_LEN_MARGIN
    per_prefix_mb = max(prefixes) * 23_052 * len(codecs) * (repeat + 1) / 1e6
    budget = int(min(max(1024, 2 * per_prefix_mb), 4096)) << 20
    with two_node_cluster(store_bytes=budget + (512 << 20), namespace="kvmoq") as (head, other):
        start_relays(namespace="kvmoq", budget_bytes=budget)
        # the raw load path: the one prompt each repeat computes is published at once
        kv = kv_transfer_config("kv_both", load_timeout_s=60.0, publish_threshold=1)
        model = str(cached_builtin_dir())
        _log("starting two vLLM engines (head, 127.0.0.2)")
        a = start_engine(head, model, kv, max_model_len=model_len)
        b = start_engine(other, model, kv, max_model_len=model_len)
        rows: list[ConnectorRow] = []
        failures: list[str] = []
        for n in prefixes:
            prefix = [rng.randrange(100, 40000) for _ in range(n)]
            for codec in codecs:
                runs: dict[str, list[dict[str, float]]] = {"same_node": [], "other_node": []}
                for i in range(repeat):
                    _log(f"prefix {n}, {codec}, run {i + 1}/{repeat}")
                    got = _measure(a, b, prefix, codec, rng)
                    for path, run in got.items():
                        if run["errors"] or run["tokens"] < n - 128:
                            failures.append(
                                f"{n}/{codec}/{path}: loaded {run['tokens']:.0f} tokens"
                            )
                        runs[path].append(run)
                rows.extend(_row(n, codec, path, rs) for path, rs in runs.items())
        ray.get([h.shutdown.remote() for h in (a, b)])
    ratios: dict[str, dict[str, dict[str, float]]] = {}
    for row in rows:
        by_path = ratios.setdefault(row.codec, {}).setdefault(row.path, {})
        by_path[str(row.prefix)] = row.load_vs_recompute
    return {
        "rows": [asdict(r) for r in rows],
        "load_vs_recompute": ratios,
        "failures": failures,
        "repeat": repeat,
    }


def _print(res: dict[str, Any]) -> None:
    head = (
        f"{'prefix':>6} {'codec':>5} {'path':>10} {'load s':>8} {'recompute s':>11} "
        f"{'ratio':>6} {'tok/s':>8} {'MB/s':>7} {'B/token':>8} {'break-even MB/s':>15}"
    )
    print(head)
    for r in res["rows"]:
        print(
            f"{r['prefix']:>6} {r['codec']:>5} {r['path']:>10} {r['load_s']:>8.3f} "
            f"{r['recompute_s']:>11.3f} {r['load_vs_recompute']:>6.2f} {r['tokens_per_s']:>8.0f} "
            f"{r['mb_s']:>7.1f} {r['bytes_per_token']:>8.0f} {r['break_even_mb_s']:>15.1f}"
        )
    for f in res["failures"]:
        print(f"FAILED: {f}")


def _ints(value: str) -> list[int]:
    try:
        out = [int(v) for v in value.split(",") if v.strip()]
    except ValueError:
        raise click.BadParameter(f"expected comma-separated integers, got {value!r}") from None
    if not out or min(out) < 128:
        raise click.BadParameter("prefix lengths must be at least one 128-token group")
    return out


def _codecs(value: str) -> list[str]:
    out = [v.strip() for v in value.split(",") if v.strip()]
    bad = [c for c in out if c not in CODECS]
    if bad or not out:
        raise click.BadParameter(f"unknown codec(s) {bad}; choose from {', '.join(CODECS)}")
    return out


@click.command("connector")
@click.option(
    "--prefix",
    "prefixes",
    default="1024,4096",
    show_default=True,
    help="Prefix lengths in tokens (comma-separated).",
)
@click.option(
    "--codecs",
    default=",".join(CODECS),
    show_default=True,
    help="Track compressions to measure (comma-separated).",
)
@click.option(
    "--repeat",
    default=1,
    show_default=True,
    type=click.IntRange(1, 20),
    help="Runs per (prefix, codec); rows are medians.",
)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object instead of a table.")
def connector(prefixes: str, codecs: str, repeat: int, as_json: bool) -> None:
    """Load a prefix through the MoQT KV connector (same node, other node) vs vLLM recomputing
    it, per codec, on two vLLM engines on a private 2-node Ray cluster (CPU: several minutes)."""
    res = run_bench(_ints(prefixes), _codecs(codecs), repeat)
    if as_json:
        print(json.dumps(res))
    else:
        _print(res)
    if res["failures"]:
        raise SystemExit(1)
