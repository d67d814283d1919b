"""The connector's settings: ``kv_transfer_config.kv_connector_extra_config``, validated once.

vLLM hands every connector the same free-form dict; a typo there would otherwise be ignored until
the first request behaves oddly, so unknown keys and bad values fail the engine's start with a
message naming the key and what it accepts.

Keys (all optional)::

    codec            "auto" (the lossless track of the KV cache dtype: BF16 or FP16) or one of
                     FP16 BF16 FP8 Int8 FP4 Int4 AC
    chunk_size       tokens per group (128; one value per cluster: it is part of every chunk hash)
    ray_namespace    Ray namespace of the node relays and the directory ("kvmoq")
    ray_address      Ray cluster to join from vLLM's processes (default $RAY_ADDRESS, else "auto")
    relay_budget_mb  cache budget of a node relay this connector has to start (1024)
    relay_datagram_size  QUIC datagram size of such a relay (1452)
    lookup_timeout_s how long the scheduler waits for the directory before counting a miss (1.0)
    directory_view   answer lookups from a copy of the directory kept current in the scheduler's
                     process (default true: no round trip, so no step is spent waiting); false:
                     ask the directory for each lookup
    load_timeout_s   a load slower than this is abandoned and recomputed (10.0)
    min_load_tokens  prefixes shorter than this are recomputed, never loaded (= chunk_size)
    tenant_salt      salt (str) for requests without ``cache_salt`` ("public")
    model_name       model field of KV namespaces (default: served model name + weights fingerprint)
    publish_tail     also publish a prompt's last, partial chunk (default: true for kv_producer)
    load             load prefixes at all (default true; false: this engine never reuses)
    publish          publish what this engine computes (default true)
    publish_threshold  publish a chunk once this engine has seen it this many times (2: on its
                     second sight, from this engine's own cache if it still holds it; 1: every
                     chunk as soon as it is computed). A kv_producer publishes every chunk.
    publish_when_evicting  publish on first sight while vLLM's prefix cache evicts chunks before
                     they come back (default true; connector/sightings.py says when); false:
                     publish_threshold always
    codec_param      encoder option passed to the codec where it has one (reserved; must be null)
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from typing import Any

from ray_kvmoq.kvcache.errors import UnknownCodecError
from ray_kvmoq.kvcache.naming import DEFAULT_CHUNK_SIZE, TRACK_NAMES

__all__ = ["ConnectorConfig", "ConnectorConfigError"]


class ConnectorConfigError(ValueError):
    """A ``kv_connector_extra_config`` entry is unknown or out of range."""


@dataclass(frozen=True, kw_only=True)
class ConnectorConfig:
    """Validated ``kv_connector_extra_config`` (see the module docstring)."""

    codec: str = "auto"
    """Track compression, or ``auto``."""
    chunk_size: int = DEFAULT_CHUNK_SIZE
    """Tokens per group."""
    ray_namespace: str = "kvmoq"
    """Ray namespace of the relays and the directory."""
    ray_address: str | None = None
    """Ray address to join (None: ``$RAY_ADDRESS`` or ``auto``)."""
    relay_budget_mb: int = 1024
    """Budget of a relay started by the connector."""
    relay_datagram_size: int = 1452
    """QUIC datagram size of a relay started by the connector."""
    lookup_timeout_s: float = 1.0
    """Directory lookups slower than this count as misses."""
    directory_view: bool = True
    """Answer lookups from a local copy of the directory (see the module docstring)."""
    load_timeout_s: float = 10.0
    """Loads slower than this are abandoned (recompute)."""
    min_load_tokens: int | None = None
    """Shortest prefix worth loading (None: one chunk)."""
    tenant_salt: str = "public"
    """Salt of requests that carry no ``cache_salt``."""
    model_name: str | None = None
    """KV namespace model field (None: derived from the model)."""
    publish_tail: bool | None = None
    """Publish the last partial chunk (None: only as kv_producer)."""
    load: bool = True
    """Load prefixes (False: every request computes its whole prompt)."""
    publish: bool = True
    """Publish computed groups."""
    publish_threshold: int = 2
    """Sightings of a chunk before this engine publishes it (see the module docstring)."""
    publish_when_evicting: bool = True
    """Publish on first sight while this engine's prefix cache evicts repeats."""
    codec_param: Any = None
    """Reserved."""

    @classmethod
    def from_extra(cls, extra: dict[str, Any] | None) -> ConnectorConfig:
        """Validate ``extra``; :class:`ConnectorConfigError` names the first bad entry."""
        extra = dict(extra or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(extra) - known)
        if unknown:
            raise ConnectorConfigError(
                f"unknown kv_connector_extra_config key(s) {unknown}; known: {sorted(known)}"
            )
        conf = cls(**extra)
        conf._check()
        return conf

    def _check(self) -> None:
        if self.codec != "auto" and self.codec not in {n.decode() for n in TRACK_NAMES}:
            raise ConnectorConfigError(
                f"codec {self.codec!r} is not a KV track compression; use 'auto' or one of "
                + ", ".join(n.decode() for n in TRACK_NAMES)
            )
        _positive_int("chunk_size", self.chunk_size, 1, 1 << 16)
        _positive_int("relay_budget_mb", self.relay_budget_mb, 16, 1 << 24)
        _positive_int("relay_datagram_size", self.relay_datagram_size, 1200, 65527)
        _positive_int("publish_threshold", self.publish_threshold, 1, 1000)
        for flag in ("directory_view", "publish_when_evicting"):
            if not isinstance(getattr(self, flag), bool):
                raise ConnectorConfigError(
                    f"{flag} must be true or false, got {getattr(self, flag)!r}"
                )
        for name in ("lookup_timeout_s", "load_timeout_s"):
            v = getattr(self, name)
            if not isinstance(v, int | float) or isinstance(v, bool) or not 0 < v <= 3600:
                raise ConnectorConfigError(f"{name} must be a number of seconds in (0, 3600]")
        if self.min_load_tokens is not None:
            _positive_int("min_load_tokens", self.min_load_tokens, 1, 1 << 30)
        if not isinstance(self.tenant_salt, str) or not self.tenant_salt:
            raise ConnectorConfigError("tenant_salt must be a non-empty string")
        if self.codec_param is not None:
            raise ConnectorConfigError("codec_param is reserved and must be null")

    def track_codec(self, kv_dtype: str) -> str:
        """The track name to publish for a KV cache of ``kv_dtype`` (resolving ``auto``)."""
        if self.codec != "auto":
            return self.codec
        return "BF16" if "bfloat16" in kv_dtype or kv_dtype == "bf16" else "FP16"

    @property
    def min_tokens(self) -> int:
        """Shortest prefix worth loading."""
        return self.min_load_tokens or self.chunk_size

    def address(self) -> str:
        """The Ray address vLLM's processes join."""
        return self.ray_address or os.environ.get("RAY_ADDRESS") or "auto"


def _positive_int(name: str, v: Any, lo: int, hi: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
        raise ConnectorConfigError(f"{name} must be an integer in [{lo}, {hi}], got {v!r}")


def check_codec(name: str) -> str:
    """``name`` if it is a track compression (for per-request overrides)."""
    if name not in {n.decode() for n in TRACK_NAMES}:
        raise UnknownCodecError(f"unknown KV track compression {name!r}")
    return name
