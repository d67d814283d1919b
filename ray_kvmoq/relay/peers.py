"""Former home of the relay's client side, now split by role: :mod:`.security`
(:class:`ClusterSecurity`, token helpers) and :mod:`.upstream` (:class:`PeerPool`,
:class:`SessionUpstream`). The names stay importable from here for existing callers.
"""

from __future__ import annotations

from .security import CLUSTER_TENANT, ClusterSecurity, token_value, use_value
from .upstream import IMPLEMENTATION, PeerPool, SessionUpstream

__all__ = [
    "CLUSTER_TENANT",
    "IMPLEMENTATION",
    "ClusterSecurity",
    "PeerPool",
    "SessionUpstream",
    "token_value",
    "use_value",
]
