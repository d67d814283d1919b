"""Loaders: GGUF written the way llama.cpp's converter writes it, HF directories, bad checkpoints."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import torch

from ray_kvmoq.engine import ModelLoadError, UnsupportedModelError, load_engine
from ray_kvmoq.engine.loader import permute_for_gguf


def _write_gguf(src: Path, out: Path) -> dict[str, np.ndarray]:
    """Convert the tiny HF llama at ``src`` to GGUF like convert_hf_to_gguf.py: Q/K rows
    permuted, embeddings in Q8_0, the rest F32. Returns the HF tensors written."""
    import gguf
    from safetensors.numpy import load_file

    cfg = json.loads((src / "config.json").read_text())
    sd = load_file(str(src / "model.safetensors"))
    tok = json.loads((src / "tokenizer.json").read_text())
    vocab = sorted(tok["model"]["vocab"].items(), key=lambda kv: kv[1])
    tokens = [t for t, _ in vocab] + [a["content"] for a in tok["added_tokens"]]
    types = [1] * len(vocab) + [3] * len(tok["added_tokens"])
    w = gguf.GGUFWriter(str(out), "llama")
    w.add_block_count(cfg["num_hidden_layers"])
    w.add_context_length(cfg["max_position_embeddings"])
    w.add_embedding_length(cfg["hidden_size"])
    w.add_feed_forward_length(cfg["intermediate_size"])
    w.add_head_count(cfg["num_attention_heads"])
    w.add_head_count_kv(cfg["num_key_value_heads"])
    w.add_rope_freq_base(10000.0)
    w.add_layer_norm_rms_eps(cfg["rms_norm_eps"])
    w.add_tokenizer_model("gpt2")
    w.add_token_list(tokens)
    w.add_token_types(types)
    w.add_token_merges([])
    w.add_eos_token_id(tokens.index("<|im_end|>"))
    names = {
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
    }
    for name, arr in sd.items():
        if name == "model.embed_tokens.weight":
            q = gguf.quants.quantize(arr, gguf.GGMLQuantizationType.Q8_0)
            w.add_tensor("token_embd.weight", q, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
            continue
        if name == "model.norm.weight":
            w.add_tensor("output_norm.weight", arr)
            continue
        parts = name.split(".")
        layer, sub = parts[2], ".".join(parts[3:-1])
        if sub == "self_attn.q_proj":
            arr = permute_for_gguf(arr, cfg["num_attention_heads"])
        elif sub == "self_attn.k_proj":
            arr = permute_for_gguf(arr, cfg["num_key_value_heads"])
        w.add_tensor(f"blk.{layer}.{names[sub]}.weight", np.ascontiguousarray(arr))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return sd


def test_gguf_unpermutes_qk_and_dequantizes(tmp_path: Path) -> None:
    import gguf

    from tests.engine.conftest import make_tiny_checkpoint

    # plain RoPE (GGUF here carries no llama3 scaling) and tied embeddings
    src = make_tiny_checkpoint(tmp_path / "hf", "llama", rope_scaling=None)
    sd = _write_gguf(src, tmp_path / "tiny.gguf")
    eng = load_engine(str(tmp_path / "tiny.gguf"), dtype="float32", device="cpu")
    got = eng.model.state_dict()
    for name in (
        "model.layers.1.self_attn.q_proj.weight",
        "model.layers.0.self_attn.k_proj.weight",
    ):
        assert torch.equal(got[name], torch.from_numpy(sd[name])), name
    emb = sd["model.embed_tokens.weight"]
    q8 = gguf.quants.dequantize(
        gguf.quants.quantize(emb, gguf.GGMLQuantizationType.Q8_0), gguf.GGMLQuantizationType.Q8_0
    )
    assert torch.equal(got["model.embed_tokens.weight"], torch.from_numpy(q8))
    assert eng.model_config.tie_word_embeddings and eng.config.vocab == 320
    # logits equal the HF checkpoint's once it has the same (Q8_0-rounded) embedding
    ref = load_engine(str(src), dtype="float32", device="cpu")
    ref.model.model.embed_tokens.weight.copy_(torch.from_numpy(q8))
    toks = list(range(40, 90))
    a = eng.prefill(toks).logits_last
    b = ref.prefill(toks).logits_last
    torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    # the tokenizer built from GGUF metadata gives the HF tokenizer's ids
    text = "Hi there!\n\t<|im_start|>user 123"
    assert eng.tokenizer.encode(text) == ref.tokenizer.encode(text)
    assert eng.tokenizer.eos_token_ids == ref.tokenizer.eos_token_ids == (258, 256)


def test_unknown_architecture_is_named(tiny_dirs: Callable[[str], Path], tmp_path: Path) -> None:
    d = tmp_path / "gpt"
    d.mkdir()
    cfg = json.loads((tiny_dirs("llama") / "config.json").read_text())
    cfg["architectures"] = ["GPTNeoXForCausalLM"]
    cfg["model_type"] = "gpt_neox"
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="GPTNeoXForCausalLM"):
        load_engine(str(d), dtype="float32")


def test_unsupported_rope_scaling_is_named(
    tiny_dirs: Callable[[str], Path], tmp_path: Path
) -> None:
    import shutil

    d = tmp_path / "yarn"
    shutil.copytree(tiny_dirs("llama"), d)
    cfg = json.loads((d / "config.json").read_text())
    cfg.pop("rope_parameters", None)
    cfg["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0}
    (d / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="yarn"):
        load_engine(str(d), dtype="float32")


def test_missing_weights_and_paths_are_named(
    tiny_dirs: Callable[[str], Path], tmp_path: Path
) -> None:
    import shutil

    from safetensors.torch import load_file, save_file

    d = tmp_path / "partial"
    shutil.copytree(tiny_dirs("qwen2"), d)
    sd = load_file(str(d / "model.safetensors"))
    del sd["model.layers.1.mlp.up_proj.weight"]
    save_file(sd, str(d / "model.safetensors"))
    with pytest.raises(ModelLoadError, match=r"model\.layers\.1\.mlp\.up_proj\.weight"):
        load_engine(str(d), dtype="float32")
    with pytest.raises(ModelLoadError, match="neither"):
        load_engine(str(tmp_path / "nope"), dtype="float32")
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "config.json").write_text("{not json")
    with pytest.raises(ModelLoadError, match="not valid JSON"):
        load_engine(str(tmp_path / "empty"), dtype="float32")


def test_tokenizer_post_processor_bos_matches_transformers(
    tiny_dirs: Callable[[str], Path], tmp_path: Path
) -> None:
    """A Llama-3-style tokenizer.json adds BOS in its post-processor, not via add_bos_token."""
    import shutil

    from tokenizers import Tokenizer as HFTokenizer
    from tokenizers import processors
    from transformers import AutoTokenizer

    from ray_kvmoq.engine import Tokenizer

    d = tmp_path / "bos"
    shutil.copytree(tiny_dirs("llama"), d)
    tk = HFTokenizer.from_file(str(d / "tokenizer.json"))
    tk.post_processor = processors.TemplateProcessing(
        single="<|endoftext|> $A", special_tokens=[("<|endoftext|>", 256)]
    )
    tk.save(str(d / "tokenizer.json"))
    cfg = json.loads((d / "tokenizer_config.json").read_text())
    cfg["bos_token"] = "<|endoftext|>"
    (d / "tokenizer_config.json").write_text(json.dumps(cfg))
    ours = Tokenizer.from_dir(d)
    hf = AutoTokenizer.from_pretrained(str(d))
    for text in ("hello", "<|im_start|>user\nhi<|im_end|>"):
        assert ours.encode(text) == hf.encode(text) and ours.encode(text)[0] == 256
        assert ours.encode(text, add_special_tokens=False) == hf.encode(
            text, add_special_tokens=False
        )
