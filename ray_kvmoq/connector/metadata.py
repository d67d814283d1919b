"""What the scheduler-side connector tells the worker-side one each step, and back.

vLLM serialises a :class:`MoqtConnectorMetadata` from the scheduler process to every worker
once per engine step. It names work only by MoQT coordinates (namespace, track, group) and by
the request's blocks; no tensors travel here. Token positions are absolute positions in the
request's prompt; group ``k`` of a prompt covers tokens ``k·C .. k·C + n - 1``.

Also here: the ``kv_transfer_params`` a producer returns when a request finishes (for PD, so a
consumer can load the prompt's groups), as a JSON-able dict under the ``"kvmoq"`` key.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorMetadata

__all__ = [
    "PARAMS_KEY",
    "GroupSource",
    "LoadSpec",
    "MoqtConnectorMetadata",
    "SaveSpec",
    "TransferParams",
]

PARAMS_KEY = "kvmoq"
"""Key of our entry in a request's ``kv_transfer_params``."""

Namespace = tuple[bytes, ...]


@dataclass(frozen=True, kw_only=True)
class GroupSource:
    """Where one group of KV can be had: a group of some prompt's track."""

    namespace: Namespace
    """The track's namespace tuple (root, model, prompt id)."""
    track: bytes
    """Track name = compression."""
    group_id: int
    """Group id within that track."""
    local: bool
    """True if this node's relay holds it (zero-copy read), else it is pulled over MoQT."""
    awaited: bool = False
    """Not published anywhere when the load was planned: a PD producer is computing it now
    (the only groups a lost hand-off stops waiting for)."""


@dataclass(frozen=True, kw_only=True)
class LoadSpec:
    """Load tokens ``start..end-1`` of a request from ``sources`` into its blocks."""

    req_id: str
    """vLLM request id."""
    block_ids: tuple[int, ...]
    """The request's blocks, in order (enough to hold ``end`` tokens)."""
    start: int
    """First token to write (what vLLM already holds ends here)."""
    end: int
    """One past the last token to write."""
    first_group: int
    """Group index (in the request's own chunking) of ``sources[0]``."""
    sources: tuple[GroupSource, ...]
    """One source per group from ``first_group`` on, covering ``start..end-1``."""
    is_async: bool
    """Loaded in the background (reported through ``get_finished``) rather than in the step."""
    follows_producer: bool = False
    """The groups come from a producer still publishing them (PD): waits are expected."""
    handoff: str = ""
    """The PD hand-off this load follows (``kv_transfer_params``' ``handoff``; empty: none).
    The serving layer reports a hand-off whose prefill failed, and the load stops waiting for
    the ``awaited`` groups that producer will never publish (``kvmoq_abandon_handoff``)."""


@dataclass(frozen=True, kw_only=True)
class SaveSpec:
    """Publish tokens ``start..end-1`` of a request as group ``group_id`` of its track."""

    req_id: str
    """vLLM request id."""
    namespace: Namespace
    """The prompt's track namespace."""
    track: bytes
    """Track name = compression."""
    group_id: int
    """Group (chunk) index; tokens ``group_id·C ..``."""
    block_ids: tuple[int, ...]
    """The request's blocks, in order."""
    start: int
    """First token of the group."""
    end: int
    """One past its last token (``start + C`` except for a prompt's partial tail)."""
    chunk_hash: bytes | None
    """The chained hash of a full chunk (None for a partial tail)."""
    end_of_track: bool
    """The prompt's last group: the track is complete after it."""


@dataclass(kw_only=True)
class MoqtConnectorMetadata(KVConnectorMetadata):
    """One engine step's load and save work."""

    loads: list[LoadSpec] = field(default_factory=list)
    """Loads to start this step."""
    saves: list[SaveSpec] = field(default_factory=list)
    """Groups completed by this step, to gather and publish."""


@dataclass(frozen=True, kw_only=True)
class TransferParams:
    """The ``kv_transfer_params["kvmoq"]`` a finished producer request returns (JSON-able)."""

    model: str
    """KV namespace model field."""
    tokens: int
    """Prompt tokens the groups cover."""
    chunk_size: int
    """Tokens per group."""
    groups: tuple[tuple[str, str, int], ...]
    """Per group of the prompt: (prompt id of the track holding it, track name, group id)."""

    def to_json(self) -> dict[str, Any]:
        """The dict form (travels through HTTP and Serve)."""
        return {
            "model": self.model,
            "tokens": self.tokens,
            "chunk_size": self.chunk_size,
            "groups": [list(g) for g in self.groups],
        }

    @classmethod
    def from_json(cls, obj: Any) -> TransferParams | None:
        """Parse the dict form; None if ``obj`` is not one (never raises on client input)."""
        if not isinstance(obj, dict):
            return None
        try:
            groups = tuple((str(p), str(t), int(g)) for p, t, g in obj["groups"])
            return cls(
                model=str(obj["model"]),
                tokens=int(obj["tokens"]),
                chunk_size=int(obj["chunk_size"]),
                groups=groups,
            )
        except (KeyError, TypeError, ValueError):
            return None
