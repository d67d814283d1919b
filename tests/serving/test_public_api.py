"""The serving package pins a sorted ``__all__`` and every name resolves."""

from __future__ import annotations

import ray_kvmoq.serving as serving


def test_all_is_sorted_and_resolves() -> None:
    assert serving.__all__ == sorted(serving.__all__)
    for name in serving.__all__:
        assert getattr(serving, name) is not None
