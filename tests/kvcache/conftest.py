"""Fixtures for the kvcache tests: synthetic SmolLM2-shaped KV (L=30, H=3, D=64)."""

from __future__ import annotations

import numpy as np
import pytest

from ray_kvmoq.kvcache import KVGeometry, build_codebook
from ray_kvmoq.kvcache.synthetic import synthetic_kv


@pytest.fixture(scope="session")
def kv() -> np.ndarray:
    """One 128-token float32 chunk."""
    return synthetic_kv(seed=1)


@pytest.fixture(scope="session")
def geo(kv: np.ndarray) -> KVGeometry:
    return KVGeometry.of(kv)


@pytest.fixture(scope="session")
def codebook() -> bytes:
    """An AC codebook calibrated on a different chunk than ``kv`` (id 3)."""
    return build_codebook(synthetic_kv(seed=2), codebook_id=3)
