"""ray_kvmoq: share LLM KV caches across a Ray Serve cluster as MoQT tracks.

Layers, bottom to top (imports flow downward only; ``tests/test_layers.py`` enforces it):

    moqt      MoQT draft-14: sans-I/O codec and session, one aioquic/asyncio shell (aio.py)
    kvcache   draft-shi-moq-kvcache: naming, chunk hashing, payload codecs, integrity
    relay     payload-agnostic caching MoQT relay; Ray only in actor.py (never imports kvcache)
    engine    Llama-family torch model, loaders, tokenizer, prefill with prefix KV, batched decode
    serving   Ray Serve deployments, KV-placement router, OpenAI-compatible HTTP
    cli, commands, bench   the ``kvmoq`` command line and benchmarks (may import everything)
"""

__version__ = "0.1.0"
