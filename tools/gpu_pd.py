"""One prefill/decode hand-off on a CUDA machine, KV moved as a MoQT track through a relay.

The GPU check of the PD path (``apps/gpu.yaml``) where Ray Serve LLM and vLLM cannot run: a
machine that reaches no package index and takes at most 64 MiB of carried files (no vLLM
wheel, no model weights). Three processes, as on three nodes:

* relay:   ``kvmoq relay``'s code (``serve_plain_relay``): caches the track, fans it out;
* prefill: the reference engine (``ray_kvmoq.engine``) computes the prompt's KV on the GPU,
  encodes it with the track's codec (one object per token, a BLAKE2b digest extension on each),
  announces the namespace ``moq://kvcache.moq.arpa/v1/<model>/<prompt id>`` to the relay and
  publishes one group per 128-token chunk once decode subscribed;
* decode:  subscribes through the relay, checks every digest, decodes the groups onto the GPU
  and generates from them; then computes the same prompt itself, as the references.

The model has the architecture of the model ``apps/gpu.yaml`` serves (SmolLM2-1.7B-Instruct)
with seeded random weights (the weights cannot travel); the tokenizer is the built-in model's.
What is checked: the pulled KV equals decode's own KV bit for bit (lossless BF16 track), and
greedy tokens from the pulled KV equal those from decode's own prefix KV. What is timed: the
pull (subscribe to the last group on the GPU) against computing the prefix (prefill on the GPU),
the figure the KV router weighs. Prints one JSON object (and writes it to ``--out``).

    python tools/gpu_pd.py --tokens 1024 --out result.json
    python tools/gpu_pd.py --device cpu --arch tiny --tokens 256    # a smoke run without a GPU
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ARCHS: dict[str, dict[str, Any]] = {
    # SmolLM2-1.7B-Instruct's config.json (what apps/gpu.yaml serves)
    "smollm2-1.7b": {
        "hidden_size": 2048,
        "intermediate_size": 8192,
        "num_hidden_layers": 24,
        "num_attention_heads": 32,
        "num_key_value_heads": 32,
        "head_dim": 64,
        "rope_theta": 130000.0,
        "max_position_embeddings": 8192,
    },
    # a small one for a CPU smoke run
    "tiny": {
        "hidden_size": 256,
        "intermediate_size": 512,
        "num_hidden_layers": 4,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "rope_theta": 100000.0,
        "max_position_embeddings": 8192,
    },
}
CHUNK = 128


def write_model(
    arch: str, tokenizer_dir: Path, out: Path, *, seed: int = 0, device: str = "cpu"
) -> Path:
    """A Llama checkpoint directory with ``arch``'s shape and seeded random bf16 weights."""
    import torch
    from safetensors.torch import save_file

    a = ARCHS[arch]
    hf = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": 49152,
        "rms_norm_eps": 1e-5,
        "rope_scaling": None,
        "tie_word_embeddings": True,
        "hidden_act": "silu",
        "torch_dtype": "bfloat16",
        "attention_bias": False,
        "mlp_bias": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "ray_kvmoq_name": f"{arch}-random-seed{seed}",
        **a,
    }
    h, inter, n_l = a["hidden_size"], a["intermediate_size"], a["num_hidden_layers"]
    q, kv = a["num_attention_heads"] * a["head_dim"], a["num_key_value_heads"] * a["head_dim"]
    shapes = {"model.embed_tokens.weight": (hf["vocab_size"], h), "model.norm.weight": (h,)}
    for i in range(n_l):
        p = f"model.layers.{i}."
        shapes |= {
            p + "self_attn.q_proj.weight": (q, h),
            p + "self_attn.k_proj.weight": (kv, h),
            p + "self_attn.v_proj.weight": (kv, h),
            p + "self_attn.o_proj.weight": (h, q),
            p + "mlp.gate_proj.weight": (inter, h),
            p + "mlp.up_proj.weight": (inter, h),
            p + "mlp.down_proj.weight": (h, inter),
            p + "input_layernorm.weight": (h,),
            p + "post_attention_layernorm.weight": (h,),
        }
    gen = torch.Generator(device).manual_seed(seed)

    def init(shape: tuple[int, ...]) -> Any:
        if len(shape) == 1:  # norms
            return torch.ones(shape, dtype=torch.bfloat16)
        w = torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * 0.02
        return w.to(torch.bfloat16).cpu()

    sd = {k: init(s) for k, s in shapes.items()}
    out.mkdir(parents=True, exist_ok=True)
    save_file(sd, str(out / "model.safetensors"), metadata={"format": "pt"})
    (out / "config.json").write_text(json.dumps(hf, indent=1))
    for f in ("tokenizer.json", "tokenizer_config.json"):
        (out / f).write_bytes((tokenizer_dir / f).read_bytes())
    return out


def prompt_tokens(engine: Any, n: int) -> list[int]:
    """``n`` tokens of the built-in text (repeated as needed)."""
    from ray_kvmoq.bench.quality import load_text

    toks: list[int] = engine.tokenizer.encode(load_text())
    while len(toks) < n:
        toks = toks + toks
    return toks[:n]


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def timed_prefill(engine: Any, tokens: list[int], device: str, reps: int = 3) -> tuple[Any, float]:
    """The prefix's KV and the best of ``reps`` timed prefills (after one warm-up)."""
    out = engine.prefill(tokens)
    best = float("inf")
    for _ in range(reps):
        _sync(device)
        t0 = time.perf_counter()
        out = engine.prefill(tokens)
        _sync(device)
        best = min(best, time.perf_counter() - t0)
    return out.kv, best


# ---------------------------------------------------------------------------- processes


def relay_main(conn: Any, datagram: int) -> None:
    from ray_kvmoq.relay.downstream import serve_plain_relay

    async def run() -> None:
        opts = {"max_datagram_size": datagram}
        async with serve_plain_relay(
            "127.0.0.1", 0, budget_bytes=2 << 30, transport_options=opts
        ) as (relay, port):
            conn.send(port)
            while not conn.poll():
                await asyncio.sleep(0.05)
            conn.recv()
            conn.send(relay.stats())

    asyncio.run(run())


def prefill_main(conn: Any, args: dict[str, Any]) -> None:
    import torch

    from ray_kvmoq.connector.chunks import encode_chunk
    from ray_kvmoq.engine import load_engine
    from ray_kvmoq.kvcache import KVTrackName, prompt_id
    from ray_kvmoq.kvcache.naming import CodecId
    from ray_kvmoq.moqt import api

    engine = load_engine(args["model_dir"], dtype="bfloat16", device=args["device"])
    tokens = prompt_tokens(engine, args["tokens"])
    kv, prefill_s = timed_prefill(engine, tokens, args["device"])
    name = KVTrackName(
        model=engine.model_name,
        prompt_id=prompt_id(b"gpu-pd", tokens),
        codec=CodecId[args["codec"]],
    )
    t0 = time.perf_counter()
    # what the connector publishes: one object per token, each with its digest extension
    assert kv.chunk_size == CHUNK, kv.chunk_size  # the engine's chunks are the track's groups
    groups = [encode_chunk(name.name, c, g).objects() for g, c in enumerate(kv.tensors())]
    encode_s = time.perf_counter() - t0
    conn.send({"namespace": name.namespace, "track": name.name, "prefill_s": prefill_s,
               "encode_s": encode_s, "groups": len(groups),
               "bytes": sum(len(o.payload) for g in groups for o in g)})  # fmt: skip
    del kv
    if args["device"] == "cuda":
        torch.cuda.empty_cache()

    async def run() -> None:
        track = api.MemoryTrack(max_groups=len(groups) + 1)
        handler = api.TrackServer({api.FullTrackName(name.namespace, name.name): track})
        transport = api.TransportConfig(max_datagram_size=args["datagram"], verify_peer=False)
        async with api.connect(
            f"moqt://127.0.0.1:{args['relay_port']}", transport=transport, handler=handler
        ) as s:
            await s.publish_namespace(name.namespace)
            conn.send("announced")
            await track.wait_subscribers(1, timeout=120)
            for g, objs in enumerate(groups):
                await track.publish_group(g, objs)
            await track.finish()
            while not conn.poll():  # decode says when it has everything
                await asyncio.sleep(0.05)

    asyncio.run(run())


def decode_main(conn: Any, args: dict[str, Any], meta: dict[str, Any]) -> None:
    import torch

    from ray_kvmoq.connector.chunks import decode_group
    from ray_kvmoq.engine import KVCache, SamplingParams, load_engine
    from ray_kvmoq.kvcache import KVGeometry
    from ray_kvmoq.moqt import api
    from ray_kvmoq.moqt.api_types import FilterType, Location
    from ray_kvmoq.moqt.objects import ObjectStatus

    dev = args["device"]
    engine = load_engine(args["model_dir"], dtype="bfloat16", device=dev)
    cfg = engine.config
    geo = KVGeometry(
        num_layers=cfg.num_layers, num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim
    )
    n = args["tokens"]
    full = prompt_tokens(engine, n + 1)  # decode computes the last token itself
    engine.generate(full, SamplingParams(max_tokens=2, ignore_eos=True))  # warm-up
    conn.send("ready")
    conn.recv()  # prefill announced

    async def pull() -> tuple[dict[int, list[Any]], float, float]:
        transport = api.TransportConfig(max_datagram_size=args["datagram"], verify_peer=False)
        got: dict[int, list[Any]] = {}
        async with api.connect(f"moqt://127.0.0.1:{args['relay_port']}", transport=transport) as s:
            t0 = time.perf_counter()
            sub = await s.subscribe(
                meta["namespace"], meta["track"],
                filter_type=FilterType.ABSOLUTE_START, start=Location(0, 0),
            )  # fmt: skip
            first = None
            count = 0
            async for obj in sub:
                if obj.status != ObjectStatus.NORMAL:
                    continue
                if first is None:
                    first = time.perf_counter() - t0
                got.setdefault(obj.group, []).append(obj)
                count += 1
                if count == n:
                    break
            return got, first or 0.0, time.perf_counter() - t0

    got, first_s, wire_s = asyncio.run(pull())
    t0 = time.perf_counter()
    # what the connector loads: every digest verified (a corrupted object is never used),
    # every header checked against the engine's geometry
    chunks = [
        decode_group(meta["track"], sorted(got[g], key=lambda o: o.object_id), geo, torch.bfloat16)
        for g in sorted(got)
    ]
    pulled = KVCache.from_chunks(chunks, chunk_size=CHUNK).to(device=dev)
    _sync(dev)
    load_s = time.perf_counter() - t0
    conn.send("done")

    sp = SamplingParams(max_tokens=args["decode_tokens"], ignore_eos=True)
    _sync(dev)
    t0 = time.perf_counter()
    from_pull = engine.generate(full, sp, prefix_kv=pulled).token_ids
    _sync(dev)
    gen_pull_s = time.perf_counter() - t0
    own, prefill_s = timed_prefill(engine, full[:n], dev)
    from_own = engine.generate(full, sp, prefix_kv=own).token_ids
    _sync(dev)
    t0 = time.perf_counter()
    recomputed = engine.generate(full, sp).token_ids
    _sync(dev)
    gen_full_s = time.perf_counter() - t0
    got_kv, own_kv = pulled.to_tensor(), own.to_tensor()
    conn.send({
        "pulled_groups": len(got), "first_object_s": first_s, "pull_s": wire_s,
        "load_to_device_s": load_s, "decode_prefill_s": prefill_s,
        "kv_bit_exact": bool(torch.equal(got_kv, own_kv)),
        "kv_max_abs_err": float((got_kv.float() - own_kv.float()).abs().max()),
        "greedy_pulled_equals_own_prefix": from_pull == from_own,
        "greedy_pulled_equals_recompute": from_pull == recomputed,
        "generate_from_pull_s": gen_pull_s, "generate_recompute_s": gen_full_s,
    })  # fmt: skip


def run_once(args: dict[str, Any]) -> dict[str, Any]:
    """One hand-off: relay, prefill and decode processes; their figures merged."""
    ctx = multiprocessing.get_context("spawn")
    pipes = {k: ctx.Pipe() for k in ("relay", "prefill", "decode")}
    relay = ctx.Process(target=relay_main, args=(pipes["relay"][1], args["datagram"]))
    relay.start()
    procs = [relay]
    try:
        r, p, d = (pipes[k][0] for k in ("relay", "prefill", "decode"))
        if not r.poll(60):
            raise RuntimeError("the relay did not start in 60 s")
        args = {**args, "relay_port": r.recv()}
        prefill = ctx.Process(target=prefill_main, args=(pipes["prefill"][1], args))
        prefill.start()
        procs.append(prefill)
        if not p.poll(600):
            raise RuntimeError("prefill gave no KV in 600 s")
        meta = p.recv()
        decode = ctx.Process(target=decode_main, args=(pipes["decode"][1], args, meta))
        decode.start()
        procs.append(decode)
        for conn, what in ((p, "announced"), (d, "ready")):
            if not conn.poll(600) or conn.recv() != what:
                raise RuntimeError(f"no '{what}' in 600 s")
        d.send("go")
        if not d.poll(600) or d.recv() != "done":
            raise RuntimeError("decode did not get the whole track in 600 s")
        p.send("stop")
        if not d.poll(600):
            raise RuntimeError("decode gave no result in 600 s")
        out = {**{k: v for k, v in meta.items() if k not in ("namespace", "track")}, **d.recv()}
        r.send("stats")
        stats = r.recv() if r.poll(30) else {}
        ns = [x.decode() for x in meta["namespace"]]
        out["namespace"] = ns[0] + "/".join(ns[1:])  # the draft's URI form
        out["track"] = meta["track"].decode()
        out["relay_upstream_bytes"] = stats.get("upstream_bytes")
        out["pull_mb_s"] = out["bytes"] / out["pull_s"] / 1e6
        # what the router weighs: the prefix over MoQT vs computing it here
        out["pull_over_prefill"] = (out["pull_s"] + out["load_to_device_s"]) / out["prefill_s"]
        return out
    finally:
        for proc in reversed(procs):
            proc.join(30)
            if proc.is_alive():
                proc.terminate()
                proc.join(5)


def _parse_run(spec: str, ap: argparse.ArgumentParser) -> tuple[str, int]:
    """``CODEC@DATAGRAM`` → (codec, datagram size); a bad one stops with a message."""
    from ray_kvmoq.kvcache import TRACK_NAMES, get_codec

    names = [t.decode() for t in TRACK_NAMES if not get_codec(t).needs_codebook]  # AC: no
    codec, _, size = spec.strip().partition("@")
    if codec not in names or not size.isdigit() or not 1200 <= int(size) <= 65527:
        ap.error(
            f"--runs: {spec!r} is not CODEC@DATAGRAM with CODEC one of {', '.join(names)} "
            "and DATAGRAM 1200..65527 (e.g. BF16@1452)"
        )
    return codec, int(size)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--arch", choices=sorted(ARCHS), default="smollm2-1.7b")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--tokens", type=int, default=1024, help="prefix length (a multiple of 128)")
    ap.add_argument("--decode-tokens", type=int, default=16)
    ap.add_argument("--runs", default="BF16@1452,BF16@9000,FP8@9000",
                    help="CODEC@DATAGRAM, comma-separated")  # fmt: skip
    ap.add_argument("--tokenizer-dir", default=None, help="default: the built-in model's")
    ap.add_argument("--prefill-lengths", default="1024,4096,8000",
                    help="also time prefill alone at these lengths")  # fmt: skip
    ap.add_argument("--out", default=None)
    a = ap.parse_args()
    if a.tokens <= 0 or a.tokens % CHUNK:
        ap.error(f"--tokens must be a positive multiple of {CHUNK}, got {a.tokens}")
    specs = [_parse_run(spec, ap) for spec in a.runs.split(",")]
    if a.tokenizer_dir is None:
        from ray_kvmoq.engine.loader import cached_builtin_dir

        a.tokenizer_dir = str(cached_builtin_dir())
    tmp = Path(tempfile.mkdtemp(prefix="gpu-pd-"))
    t0 = time.perf_counter()
    model_dir = write_model(a.arch, Path(a.tokenizer_dir), tmp / "model", device=a.device)
    print(
        f"random {a.arch} checkpoint written in {time.perf_counter() - t0:.1f} s", file=sys.stderr
    )
    result: dict[str, Any] = {"arch": a.arch, "device": a.device, "tokens": a.tokens}
    if a.device == "cuda":
        import torch

        result["gpu"] = torch.cuda.get_device_name(0)
        result["torch"] = torch.__version__
        from ray_kvmoq.engine import load_engine

        eng = load_engine(str(model_dir), dtype="bfloat16", device="cuda")
        times = {}
        for n in (int(x) for x in a.prefill_lengths.split(",") if x):
            times[n] = round(timed_prefill(eng, prompt_tokens(eng, n), "cuda")[1], 4)
        result["prefill_s_by_length"] = times
        del eng
        torch.cuda.empty_cache()
    runs = []
    for codec, datagram in specs:
        args = {"model_dir": str(model_dir), "device": a.device, "tokens": a.tokens,
                "decode_tokens": a.decode_tokens, "codec": codec, "datagram": datagram}  # fmt: skip
        print(f"run {codec}@{datagram} ...", file=sys.stderr, flush=True)
        row = {"codec": codec, "datagram": datagram, **run_once(args)}
        print(json.dumps(row), file=sys.stderr, flush=True)
        runs.append(row)
    result["runs"] = runs
    text = json.dumps(result, indent=1)
    print(text)
    if a.out:
        Path(a.out).write_text(text)


if __name__ == "__main__":
    main()
