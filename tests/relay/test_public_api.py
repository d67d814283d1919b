"""The relay package pins its public surface (STYLE rule 11)."""

from __future__ import annotations

import ray_kvmoq.relay as relay


def test_all_is_sorted_and_exported() -> None:
    assert relay.__all__ == sorted(relay.__all__)
    for name in relay.__all__:
        assert getattr(relay, name) is not None
        assert getattr(relay, name).__doc__


def test_relay_never_imports_ray_at_package_import() -> None:
    import subprocess
    import sys

    code = "import sys, ray_kvmoq.relay; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"
