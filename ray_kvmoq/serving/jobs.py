"""What the ingress hands to prefill/decode replicas, and what they hand back.

Plain frozen dataclasses (pickled by Ray between processes). A :class:`Job` carries the prompt's
token ids and its chained chunk hashes (computed once, by the ingress, from the tenant's salt);
replicas stream back :class:`TokenEvent` s and one final :class:`DoneEvent` whose
:class:`KVStats` say how much KV was reused, from where, and what fell back to recomputing.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, kw_only=True)
class Job:
    """One generation request, as a replica sees it."""

    request_id: str
    """Unique id (the OpenAI response id)."""
    tokens: tuple[int, ...]
    """Prompt token ids."""
    hashes: tuple[bytes, ...]
    """Chained hashes of the prompt's full chunks (tenant-salted)."""
    prompt_id: str
    """Hex prompt id naming the prompt's KV track namespace."""
    max_tokens: int
    """Most tokens to generate."""
    temperature: float = 0.0
    """0 = greedy."""
    top_p: float = 1.0
    """Nucleus mass."""
    seed: int | None = None
    """Sampling seed."""
    reuse: bool = True
    """False: recompute the whole prompt and publish nothing."""
    ignore_eos: bool = False
    """Keep generating past EOS (benchmarks)."""
    received_at: float = 0.0
    """``time.perf_counter()`` in the ingress when the request arrived (TTFT's start; only
    meaningful in the ingress process)."""


@dataclass(frozen=True, kw_only=True)
class KVStats:
    """How a request's prompt KV was obtained."""

    reused_local: int = 0
    """Prompt tokens whose KV came from the same node (zero-copy)."""
    reused_remote: int = 0
    """Prompt tokens whose KV was pulled from another node over MoQT."""
    bytes_zero_copy: int = 0
    """KV bytes read from the same node's object store."""
    bytes_moqt: int = 0
    """KV bytes pulled over MoQT."""
    fallbacks: tuple[str, ...] = ()
    """One reason per KV fetch that fell back to recomputing."""
    prefill_node: str = ""
    """Node that ran prefill."""
    decode_node: str = ""
    """Node that ran decode."""

    def merged(self, other: KVStats) -> KVStats:
        """Sum of two stats (prefill's and decode's); nodes taken from whichever has them."""
        return KVStats(
            reused_local=self.reused_local + other.reused_local,
            reused_remote=self.reused_remote + other.reused_remote,
            bytes_zero_copy=self.bytes_zero_copy + other.bytes_zero_copy,
            bytes_moqt=self.bytes_moqt + other.bytes_moqt,
            fallbacks=self.fallbacks + other.fallbacks,
            prefill_node=self.prefill_node or other.prefill_node,
            decode_node=self.decode_node or other.decode_node,
        )

    @property
    def cached_tokens(self) -> int:
        """Prompt tokens not recomputed by prefill."""
        return self.reused_local + self.reused_remote


@dataclass(frozen=True, kw_only=True)
class TokenEvent:
    """Tokens produced since the previous event."""

    ids: tuple[int, ...]
    """New token ids."""


@dataclass(frozen=True, kw_only=True)
class StartedEvent:
    """Prefill (PD mode) has started on ``node_id``: decode can subscribe to the live track."""

    node_id: str
    """Node whose relay will hold the prompt's KV track."""
    reused_groups: int = 0
    """Leading groups prefill reused from earlier prompts (found by chunk hash, not
    re-published under this prompt's track); the track holds groups from here on."""


@dataclass(frozen=True, kw_only=True)
class DoneEvent:
    """The end of a replica's stream."""

    finish_reason: str = "stop"
    """``stop``, ``length`` or ``error``."""
    stats: KVStats = field(default_factory=KVStats)
    """KV accounting."""
    error: str | None = None
    """Error message when ``finish_reason == "error"``."""


Event = TokenEvent | StartedEvent | DoneEvent
