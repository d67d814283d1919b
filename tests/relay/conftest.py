"""Relay test helpers.

``ray.cluster_utils.Cluster.add_node`` writes ``/tmp/ray/ray_current_cluster`` even when the head
uses a private temp dir, and fails if ``/tmp/ray`` does not exist (fresh machines). Creating the
directory is harmless; the shared fixture in ``tests/conftest.py`` is the right long-term home.
"""

from __future__ import annotations

import os

os.makedirs("/tmp/ray", exist_ok=True)
