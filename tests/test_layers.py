"""Imports flow one way (DESIGN.md): walk every module's AST and fail on an upward or sideways import."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "ray_kvmoq"

# layer -> the ray_kvmoq layers it may import. Anything not listed is forbidden.
ALLOWED: dict[str, set[str]] = {
    "moqt": set(),
    "kvcache": {"moqt"},
    "relay": {"moqt"},  # the relay never looks inside a payload: no kvcache
    "engine": {"kvcache"},
    "connector": {"moqt", "kvcache", "relay", "engine"},
    "serving": {"moqt", "kvcache", "relay", "engine", "connector"},
    "bench": {"moqt", "kvcache", "relay", "engine", "connector", "serving", "commands"},
    "commands": {"moqt", "kvcache", "relay", "engine", "connector", "serving", "bench"},
    "cli": {"moqt", "kvcache", "relay", "engine", "connector", "serving", "bench", "commands"},
}
# Third-party packages a layer must not touch (DESIGN.md: "ray only in actor.py").
FORBIDDEN_THIRD_PARTY: dict[str, set[str]] = {
    "moqt": {"ray", "torch", "numpy"},
    "kvcache": {"ray", "aioquic"},
}
RAY_ALLOWED_IN_RELAY = {"actor.py"}
RAY_ALLOWED_IN_CONNECTOR = {"bridge.py", "figures.py", "host.py"}


def _layer_of(path: Path) -> str:
    rel = path.relative_to(PKG)
    return rel.parts[0].removesuffix(".py") if rel.parts else ""


def _imports(path: Path, pkg_parts: tuple[str, ...]) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in ``path``, which sits in package ``pkg_parts``."""
    # with the garbage collector paused: CPython 3.11.7's AST conversion raised "SystemError:
    # AST constructor recursion depth mismatch" once in a full suite run (objects of earlier
    # tests finalized mid-conversion are the suspect); the parse itself is deterministic
    enabled = gc.isenabled()
    gc.disable()
    try:
        tree = ast.parse(path.read_text(), filename=str(path))
    finally:
        if enabled:
            gc.enable()
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg_parts[: len(pkg_parts) - node.level + 1]
                mod = ".".join((*base, node.module)) if node.module else ".".join(base)
            else:
                mod = node.module or ""
            out.append((node.lineno, mod))
    return out


def _modules() -> list[Path]:
    return sorted(p for p in PKG.rglob("*.py") if p.name != "__init__.py" or p.parent != PKG)


def _violations(path: Path, layer: str, pkg_parts: tuple[str, ...]) -> list[str]:
    bad = []
    for lineno, mod in _imports(path, pkg_parts):
        parts = mod.split(".")
        if parts[0] == "ray_kvmoq" and len(parts) > 1:
            target = parts[1]
            if target != layer and target not in ALLOWED[layer]:
                bad.append(f"line {lineno}: {mod} ({layer} -> {target})")
        elif parts[0] in FORBIDDEN_THIRD_PARTY.get(layer, set()):
            bad.append(f"line {lineno}: {mod} (third-party {parts[0]} not allowed in {layer})")
        elif layer == "relay" and parts[0] == "ray" and path.name not in RAY_ALLOWED_IN_RELAY:
            bad.append(f"line {lineno}: {mod} (ray only in relay/actor.py)")
        elif (
            layer == "connector" and parts[0] == "ray" and path.name not in RAY_ALLOWED_IN_CONNECTOR
        ):
            bad.append(
                f"line {lineno}: {mod} (ray only in connector/bridge.py, figures.py, host.py)"
            )
    return bad


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_flow_downward(path: Path) -> None:
    layer = _layer_of(path)
    assert layer in ALLOWED, f"{path.relative_to(PKG)} is in no known layer; add it to ALLOWED"
    pkg_parts = ("ray_kvmoq", *path.relative_to(PKG).parent.parts)
    bad = _violations(path, layer, pkg_parts)
    assert not bad, f"{path.relative_to(PKG)} imports against the layer order:\n" + "\n".join(bad)


def test_checker_catches_upward_and_forbidden_imports(tmp_path: Path) -> None:
    """The walker itself must see absolute, relative and third-party imports."""
    probe = tmp_path / "probe.py"
    probe.write_text("from ..engine import model\nimport ray_kvmoq.serving\nimport torch\n")
    bad = _violations(probe, "moqt", ("ray_kvmoq", "moqt"))
    assert [b.split(" (")[1] for b in bad] == [
        "moqt -> engine)",
        "moqt -> serving)",
        "third-party torch not allowed in moqt)",
    ]
    relay_probe = tmp_path / "relay.py"
    relay_probe.write_text("from ray_kvmoq.kvcache import naming\nimport ray\n")
    assert len(_violations(relay_probe, "relay", ("ray_kvmoq", "relay"))) == 2
