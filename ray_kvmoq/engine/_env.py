"""Process settings that must be in place before torch is first imported.

``OMP_WAIT_POLICY=PASSIVE``: torch's OpenMP workers otherwise spin while waiting at barriers.
On a small, shared machine (2 cores, several Ray replicas or test processes) that spinning
starves the thread the barrier waits for, and a 2-thread forward pass runs 10-25x slower than
a 1-thread one (measured here); passive waiting removes the cliff at a negligible cost. Only a
default: a value set by the user (or by Ray's runtime_env) wins, and it has no effect if torch
was imported before this package.
"""

from __future__ import annotations

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
