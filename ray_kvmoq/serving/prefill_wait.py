"""The PD decode side's bound on its remote prefill (pure asyncio, no Serve, no vLLM).

Ray Serve LLM's concurrent PD hand-off awaits the prefill response before it ends the decode
response. :func:`bounded_prefill` wraps that response: chunks pass through untouched; a prefill
that raises (its replica or node died) or is still unfinished after ``timeout_s`` (no replica
can be placed) ends the stream quietly, is cancelled, is counted in :class:`PrefillStats`, and
calls ``on_lost`` (decode's server then tells its connector to stop waiting for that prefill's
track). Decode answers from the KV that arrived and recomputes the rest, so the lost prefill
costs time, never the answer. Used by :class:`~.server.KVDecodeServer`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["DEFAULT_PREFILL_TIMEOUT_S", "PREFILL_TIMEOUT_KEY", "PrefillStats", "bounded_prefill"]

log = logging.getLogger(__name__)

PREFILL_TIMEOUT_KEY = "kvmoq_prefill_timeout_s"
"""``LLMConfig.experimental_configs`` key of the decode deployment: seconds decode waits for its
remote prefill to finish (the app's ``pd_prefill_timeout_s``)."""
DEFAULT_PREFILL_TIMEOUT_S = 120.0
"""The app's default ``pd_prefill_timeout_s`` (and the decode server's, without the key)."""


@dataclass
class PrefillStats:
    """Remote prefills a decode replica gave up on."""

    prefill_timeouts: int = 0
    """Unfinished after the timeout."""
    prefill_failures: int = 0
    """Ended with an exception (the prefill replica or its node died)."""

    def as_dict(self) -> dict[str, int]:
        """A plain copy."""
        return asdict(self)


async def bounded_prefill(
    resp: Any,
    timeout_s: float,
    stats: PrefillStats,
    on_lost: Callable[[], None] | None = None,
) -> AsyncGenerator[Any, None]:
    """``resp``'s chunks until it ends, fails, or ``timeout_s`` passes (see the module
    docstring)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    it = resp.__aiter__()
    try:
        while True:
            try:
                chunk = await asyncio.wait_for(it.__anext__(), max(0.0, deadline - loop.time()))
            except StopAsyncIteration:
                return
            yield chunk
    except TimeoutError:
        stats.prefill_timeouts += 1
        log.warning(
            "remote prefill unfinished after %.0f s (no prefill replica placeable?): "
            "abandoned, decode answers from what it has",
            timeout_s,
        )
        _cancel(resp)
        _lost(on_lost)
    except Exception as exc:  # the prefill replica or its node died
        stats.prefill_failures += 1
        log.warning("remote prefill failed (%s: %s): decode recomputes", type(exc).__name__, exc)
        _cancel(resp)
        _lost(on_lost)


def _lost(on_lost: Callable[[], None] | None) -> None:
    if on_lost is None:
        return
    try:
        on_lost()
    except Exception as exc:  # decode then waits out its kv_timeout_s instead
        log.warning("could not report the lost prefill to the connector: %s", exc)


def _cancel(resp: Any) -> None:
    cancel = getattr(resp, "cancel", None)
    if cancel is not None:
        try:
            cancel()
        except Exception as exc:  # already finished or gone
            log.debug("cancelling the prefill response: %s", exc)
