"""``kvmoq bench serve`` helpers: the vLLM client's arguments, the row summary, the ratios."""

from __future__ import annotations

from typing import Any

from click.testing import CliRunner

from ray_kvmoq.bench.serve import (
    client_args,
    median_row,
    ratios,
    router_summary,
    row_summary,
    run_order,
    summarize,
    table,
)
from ray_kvmoq.cli import main


def test_client_args_drive_the_completions_endpoint_with_the_asked_dataset_and_seed() -> None:
    a = client_args(base="http://x/app", model="m", tokenizer="/t", dataset="prefix_repetition",
                    num_prompts=5, rate=2.0, result_dir="/r", prefix_len=100, suffix_len=10,
                    num_prefixes=3, output_len=7)  # fmt: skip
    s = " ".join(a)
    assert "--endpoint /v1/completions" in s and "--dataset-name prefix_repetition" in s
    assert "--prefix-repetition-num-prefixes 3" in s and "--request-rate 2.0" in s
    r = client_args(base="http://x", model="m", tokenizer="/t", dataset="random", num_prompts=5,
                    rate=1.0, result_dir="/r", prefix_len=100, suffix_len=10, num_prefixes=3,
                    output_len=7)  # fmt: skip
    assert "--random-input-len 110" in " ".join(r)
    assert "--seed 0" in s and "--seed 3" in " ".join(client_args(
        base="http://x", model="m", tokenizer="/t", dataset="random", num_prompts=5, rate=1.0,
        result_dir="/r", prefix_len=100, suffix_len=10, num_prefixes=3, output_len=7, seed=3))  # fmt: skip


def _raw(ttft: float, tpot: float, rps: float, failed: int = 0) -> dict:
    return {"mean_ttft_ms": ttft, "median_ttft_ms": ttft, "p99_ttft_ms": 2 * ttft,
            "mean_tpot_ms": tpot, "median_tpot_ms": tpot - 1, "p99_tpot_ms": 2 * tpot,
            "median_itl_ms": tpot - 2, "p99_itl_ms": 3 * tpot,
            "request_throughput": rps, "completed": 10, "failed": failed}  # fmt: skip


def test_summary_ratios_and_medians() -> None:
    before = {"prefix_cache_hits": 10.0, "external_prefix_cache_hits": 0.0, "prompt_tokens": 0.0,
              "prompt_tokens@10.0.0.1": 0.0}  # fmt: skip
    after = {"prefix_cache_hits": 110.0, "external_prefix_cache_hits": 50.0, "prompt_tokens": 900.0,
             "prompt_tokens@10.0.0.1": 300.0, "prompt_tokens@10.0.0.2": 600.0}  # fmt: skip
    a = summarize(_raw(1000, 50, 1.0), before, after)
    assert a["reused_tokens"] == 150 and a["prompt_tokens"] == 900
    assert a["prompt_tokens_by_node"] == {"10.0.0.1": 300, "10.0.0.2": 600}
    b = summarize(_raw(400, 45, 1.2), before, after)
    rows = {"prefix:a-2": a, "prefix:b-2": b, "random:b-2": b}
    rat = ratios(rows)
    assert set(rat) == {"prefix:b-2"}  # no random:a-2 to compare with
    assert (
        rat["prefix:b-2"]["ttft_mean_ms"] == 0.4 and rat["prefix:b-2"]["request_throughput"] == 1.2
    )
    assert rat["prefix:b-2"]["ttft_p50_ms"] == 0.4 and rat["prefix:b-2"]["ttft_p99_ms"] == 0.4
    m = median_row([summarize(_raw(t, 50, 1.0, failed=1), before, after) for t in (3, 1, 2)])
    assert m["ttft_mean_ms"] == 2 and m["failed"] == 3 and m["repeats"] == 3
    assert m["prompt_tokens_by_node"] == {"10.0.0.1": 300, "10.0.0.2": 600}  # the last run's
    assert "Ray Serve LLM" in table({"rows": rows, "ratios_to_a": rat})


def test_repetitions_run_rows_in_the_order_abba_baab_so_no_row_always_runs_first_or_mid_block() -> (
    None
):
    order = run_order(["a", "b", "c"], [1, 2], ["random"], repeat=2)
    assert [(n, i, r) for _, n, i, r in order] == [
        (1, 0, "a"), (1, 0, "b"), (1, 0, "c"), (1, 1, "c"), (1, 1, "b"), (1, 1, "a"),
        (2, 0, "a"), (2, 0, "b"), (2, 0, "c"), (2, 1, "c"), (2, 1, "b"), (2, 1, "a"),
    ]  # fmt: skip
    assert [r for *_, r in run_order(["a", "b"], [2], ["random"], repeat=1)] == ["a", "b"]
    # four repetitions: a b b a b a a b, each row in the middle of one block of four
    order = [r for *_, r in run_order(["a", "b"], [2], ["random"], repeat=4)]
    assert "".join(order) == "abbabaab"


def test_bad_rows_or_datasets_are_refused_before_anything_starts() -> None:
    res = CliRunner().invoke(main, ["bench", "serve", "--rows", "a,z"])
    assert res.exit_code != 0 and "rows must be among" in res.output
    res = CliRunner().invoke(main, ["bench", "serve", "--datasets", "sharegpt"])
    assert res.exit_code != 0 and "datasets must be among" in res.output


def test_a_zero_rate_a_third_replica_or_more_prefixes_than_prompts_are_refused_up_front() -> None:
    res = CliRunner().invoke(main, ["bench", "serve", "--request-rate", "0"])
    assert (
        res.exit_code != 0
        and "--request-rate" in res.output
        and "not in the range x>0" in res.output
    )
    res = CliRunner().invoke(main, ["bench", "serve", "--replicas", "1,3"])
    assert res.exit_code != 0 and "replicas must be among 1, 2" in res.output
    res = CliRunner().invoke(main, ["bench", "serve", "--num-prefixes", "16", "--num-prompts", "8"])
    assert (
        res.exit_code != 0 and "--num-prefixes (16) must not exceed --num-prompts (8)" in res.output
    )


def test_router_summary_counts_decisions_by_outcome_and_their_mean_time() -> None:
    from ray_kvmoq.serving.metrics import ServingMetrics

    m = ServingMetrics()
    for outcome, n in (("cost", 3), ("pow2", 1)):
        for _ in range(n):
            m.router_decisions.labels("llm", "kv", outcome).inc()
    for s in (0.002, 0.004, 0.003, 0.003):
        m.router_decision_seconds.labels("llm").observe(s)
    got = router_summary(m.render().decode())
    assert got == {"outcomes": {"cost": 3, "pow2": 1}, "decision_mean_ms": 3.0}
    assert router_summary("") == {"outcomes": {}, "decision_mean_ms": None}


def test_kv_by_node_sums_each_nodes_connector_counters_and_the_table_shows_them() -> None:
    from ray_kvmoq.bench.serve import KV_COUNTERS, kv_by_node

    counters = {
        "e1:scheduler": {
            "node_id": "n1",
            "lookups_skipped": 5,
            "tokens_matched_local": 256,
            "lookups_answered_at_once": 3,
            "chunks_evicted_seen": 16,
            "requests_first_sight": 4,
        },
        "e1:worker": {"node_id": "n1", "groups_saved": 8, "load_errors": 1},
        "e2:scheduler": {
            "node_id": "n2",
            "tokens_matched_remote": 1024,
            "pulls_declined": 2,
            "pulls_probed": 1,
        },
        "e3:scheduler": {"node_id": "n2", "lookups_skipped": 1, "unrelated": 99},
    }
    got = kv_by_node(counters, {"n1": "127.0.0.1", "n2": "127.0.0.2"})
    assert list(got) == ["127.0.0.1", "127.0.0.2"]
    assert got["127.0.0.1"] == {**dict.fromkeys(KV_COUNTERS, 0), "lookups_skipped": 5,
                                "tokens_matched_local": 256, "groups_saved": 8, "load_errors": 1,
                                "lookups_answered_at_once": 3, "chunks_evicted_seen": 16,
                                "requests_first_sight": 4}  # fmt: skip
    assert got["127.0.0.2"] == {**dict.fromkeys(KV_COUNTERS, 0), "lookups_skipped": 1,
                                "tokens_matched_remote": 1024, "pulls_declined": 2,
                                "pulls_probed": 1}  # fmt: skip
    row = {"ttft_mean_ms": 1.0, "ttft_p50_ms": 1.0, "ttft_p99_ms": 1.0, "tpot_mean_ms": 1.0,
           "request_throughput": 1.0, "failed": 0, "reused_tokens": 0, "kv_by_node": got}  # fmt: skip
    text = table({"rows": {"prefix:b-2": row}})
    assert (
        "prefix:b-2 KV: 127.0.0.1 engine-cache hits 5, lookups answered at once 3, tokens from "
        "own relay 256, pulled 0, pulls declined 0, pulls probed 0, load errors 1, evicted "
        "repeats 16, requests published on first sight 4; 127.0.0.2 engine-cache hits 1" in text
    )


def _without_cluster(monkeypatch: Any) -> Any:
    """``ray_kvmoq.bench.serve`` with no Ray cluster and no Serve behind ``run_bench``."""
    import contextlib

    import ray.serve

    from ray_kvmoq.bench import cluster, serve

    monkeypatch.setattr(cluster, "two_node_cluster", lambda **kw: contextlib.nullcontext())
    monkeypatch.setattr(ray.serve, "start", lambda **kw: None)
    monkeypatch.setattr(ray.serve, "shutdown", lambda: None)
    return serve


def test_a_row_that_fails_is_reported_and_the_other_rows_are_kept(monkeypatch: Any) -> None:
    """One failing run must not cost the others' results (every run is minutes of CPU)."""
    serve = _without_cluster(monkeypatch)
    monkeypatch.setattr(serve, "_stock_app", lambda *a: "stock")
    monkeypatch.setattr(serve, "_our_app", lambda *a, **kw: "ours")

    def one_row(app: str, base: str, key: str, wl: dict[str, Any]) -> dict[str, Any]:
        if app == "stock":
            raise RuntimeError("metrics endpoint said 404")
        return {"ttft_mean_ms": 5.0, "failed": 0, "completed": 4}

    monkeypatch.setattr(serve, "_one_row", one_row)
    res = serve.run_bench(rows=["a", "b"], replicas=[2], datasets=["prefix_repetition"],
                          num_prompts=4, rate=1.0, prefix_len=8, suffix_len=4, num_prefixes=2,
                          output_len=2, datagram=1452)  # fmt: skip
    assert list(res["rows"]) == ["prefix:b-2"] and res["rows"]["prefix:b-2"]["ttft_mean_ms"] == 5.0
    assert res["failures"] == ["prefix:a-2 run 1: metrics endpoint said 404"]
    assert res["ratios_to_a"] == {}


def test_each_run_prints_its_figures_on_one_line_as_it_ends(monkeypatch: Any, capsys: Any) -> None:
    zero = dict.fromkeys(("prefix_cache_hits", "external_prefix_cache_hits", "prompt_tokens"), 0.0)
    after = {**zero, "prefix_cache_hits": 512.0, "external_prefix_cache_hits": 128.0}
    row = summarize(_raw(1234.4, 56.7, 0.876, failed=2), zero, after)
    assert row_summary(row) == (
        "TTFT mean 1,234 ms, p50 1,234, p99 2,469; TPOT 57 ms (p50 56, p99 113), ITL p50 55, "
        "p99 170; 0.88 req/s; 2 failed; 640 tokens reused"
    )
    assert row_summary({}) == (
        "TTFT mean - ms, p50 -, p99 -; TPOT - ms (p50 -, p99 -), ITL p50 -, p99 -; - req/s; "
        "0 failed; - tokens reused"
    )
    test_a_row_that_fails_is_reported_and_the_other_rows_are_kept(monkeypatch)
    err = capsys.readouterr().err
    assert "[prefix:b-2] run 1/1: TTFT mean 5 ms" in err and "[prefix:a-2] FAILED" in err


def test_a_step_budget_reaches_the_stock_and_our_engines_alike(monkeypatch: Any) -> None:
    """``--max-num-batched-tokens`` must change every row, or the comparison is not fair."""
    serve = _without_cluster(monkeypatch)
    seen: dict[str, dict[str, Any]] = {}
    monkeypatch.setattr(serve, "_stock_app", lambda *a: seen.setdefault("a", a[-1]) and "a")
    monkeypatch.setattr(
        serve, "_our_app", lambda *a, **kw: seen.setdefault("bc"[not a[1]], a[-1]) and "b"
    )
    monkeypatch.setattr(serve, "_one_row", lambda *a: {"ttft_mean_ms": 1.0, "failed": 0})
    res = serve.run_bench(rows=["a", "b", "c"], replicas=[1], datasets=["random"], num_prompts=2,
                          rate=1.0, prefix_len=8, suffix_len=4, num_prefixes=1, output_len=2,
                          datagram=1452, max_num_batched_tokens=64)  # fmt: skip
    budget = {"max_num_batched_tokens": 64, "max_num_seqs": 64}
    assert seen == {"a": budget, "b": budget, "c": budget}
    assert res["workload"]["max_num_batched_tokens"] == 64
    assert serve.step_budget(512) == {"max_num_batched_tokens": 512}


def test_the_step_budget_goes_into_the_stock_and_our_engines_arguments() -> None:
    from ray_kvmoq.bench.serve import our_args, step_budget, stock_config
    from ray_kvmoq.serving.graph import _llm_config

    budget = step_budget(128)
    stock = stock_config("/nonexistent", "m", 1, 512, 64, budget).engine_kwargs
    args = our_args(1, True, 512, 1452, 64, budget)
    ours = _llm_config(args, args.server, "kv_both", "server").engine_kwargs
    assert stock["max_num_batched_tokens"] == ours["max_num_batched_tokens"] == 128
    assert "max_num_seqs" not in stock and "max_num_seqs" not in ours  # 128: vLLM's default


def test_our_cpu_apps_get_the_cpu_step_budget_unless_engine_kwargs_set_one() -> None:
    from ray_kvmoq.serving.app import AppArgs, ReplicaArgs
    from ray_kvmoq.serving.engine_args import CPU_STEP_BUDGET
    from ray_kvmoq.serving.graph import _llm_config

    def engine(**kw: Any) -> dict[str, Any]:
        args = AppArgs(mode="combined", server=ReplicaArgs(num_replicas=1), **kw)
        return dict(_llm_config(args, args.server, "kv_both", "server").engine_kwargs)

    assert engine()["max_num_batched_tokens"] == CPU_STEP_BUDGET
    set_64 = engine(engine_kwargs={"max_num_batched_tokens": 64})
    assert set_64["max_num_batched_tokens"] == set_64["max_num_seqs"] == 64
    gpu = engine(device="gpu")
    assert "max_num_batched_tokens" not in gpu  # GPUs keep vLLM's own budget


def test_the_publish_threshold_and_first_sight_rule_reach_our_rows_connectors_and_default_to_the_apps() -> (
    None
):
    from ray_kvmoq.bench.serve import our_args, step_budget
    from ray_kvmoq.serving.app import AppArgs, ReplicaArgs
    from ray_kvmoq.serving.graph import _llm_config

    def connector_extra(**kw: Any) -> dict[str, Any]:
        args = our_args(1, True, 512, 1452, 64, step_budget(128), **kw)
        cfg = _llm_config(args, args.server, "kv_both", "server").engine_kwargs
        return dict(cfg["kv_transfer_config"]["kv_connector_extra_config"])

    default = AppArgs(mode="combined", server=ReplicaArgs(num_replicas=1)).kv_publish_threshold
    assert connector_extra()["publish_threshold"] == default
    assert connector_extra(publish_threshold=1000)["publish_threshold"] == 1000
    on = AppArgs(mode="combined", server=ReplicaArgs(num_replicas=1)).kv_publish_when_evicting
    assert on is True and connector_extra()["publish_when_evicting"] is True
    assert connector_extra(when_evicting=False)["publish_when_evicting"] is False


def test_a_rows_counters_are_read_once_they_count_every_prompt_token_sent(monkeypatch: Any) -> None:
    """Ray exports vLLM's counters every 10 s: the row waits until they show every prompt token
    the client sent, and gives up (reading them as they are) after ``_METRICS_SETTLE_S``."""
    import ray_kvmoq.bench.serve as bs

    clock = [0.0]
    monkeypatch.setattr(bs.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(bs.time, "monotonic", lambda: clock[0])
    scrapes = iter([100.0, 900.0, 1100.0, 1500.0])
    monkeypatch.setattr(bs, "_scrape", lambda: {"prompt_tokens": next(scrapes)})
    got = bs._scrape_settled({"prompt_tokens": 100.0}, 1000)
    assert got["prompt_tokens"] == 1100.0

    monkeypatch.setattr(bs, "_scrape", lambda: {"prompt_tokens": 500.0})
    clock[0] = 0.0
    assert bs._scrape_settled({"prompt_tokens": 100.0}, 1000)["prompt_tokens"] == 500.0
    assert bs._METRICS_SETTLE_S <= clock[0] < bs._METRICS_SETTLE_S + 2.0 + 1e-9


def test_the_rows_of_a_repetition_share_a_client_seed_and_repetitions_differ(
    monkeypatch: Any,
) -> None:
    """Rows are compared on the same requests; repetitions sample other arrival patterns."""
    serve = _without_cluster(monkeypatch)
    monkeypatch.setattr(serve, "_stock_app", lambda *a: "a")
    monkeypatch.setattr(serve, "_our_app", lambda *a, **kw: "b")
    seeds: list[tuple[str, int]] = []

    def one_row(app: str, base: str, key: str, wl: dict[str, Any]) -> dict[str, Any]:
        seeds.append((app, wl["seed"]))
        return {"ttft_mean_ms": 1.0, "failed": 0}

    monkeypatch.setattr(serve, "_one_row", one_row)
    serve.run_bench(rows=["a", "b"], replicas=[2], datasets=["random"], num_prompts=2, rate=1.0,
                    prefix_len=8, suffix_len=4, num_prefixes=1, output_len=2, datagram=1452,
                    repeat=3)  # fmt: skip
    assert seeds == [("a", 0), ("b", 0), ("b", 1), ("a", 1), ("b", 2), ("a", 2)]
