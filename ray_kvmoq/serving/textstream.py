"""Token ids → text deltas, with OpenAI ``stop`` strings (pure, no model).

Design: the replicas stream token ids; the ingress turns them into text here, so stop strings and
detokenization live in one place whatever the deployment mode.

Invariants:
- The concatenation of the deltas equals ``decode(all ids)`` cut at the first stop string
  (the stop string itself is not returned, as OpenAI does).
- A delta never ends inside a multi-byte character: while the decoded text ends with U+FFFD (an
  incomplete UTF-8 sequence) it is held back until the next token completes it or the stream ends.
- Text that could still become the start of a stop string is held back too, so no stop-string
  prefix is ever sent and then "taken back".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Decode = Callable[[Sequence[int]], str]


class TextStream:
    """Incremental detokenizer for one request."""

    def __init__(self, decode: Decode, stop: Sequence[str] = ()) -> None:
        self._decode = decode
        self._stop = [s for s in stop if s]
        self._ids: list[int] = []
        self._sent = 0  # characters of the decoded text already returned
        self.stopped = False
        """True once a stop string was seen; later tokens are ignored."""

    @property
    def token_count(self) -> int:
        """Tokens fed so far (up to and including the one that completed a stop string)."""
        return len(self._ids)

    def feed(self, ids: Sequence[int]) -> str:
        """Add tokens; return the new text that is safe to send."""
        if self.stopped or not ids:
            return ""
        self._ids.extend(ids)
        return self._emit(final=False)

    def finish(self) -> str:
        """The held-back tail at the end of the stream."""
        if self.stopped:
            return ""
        return self._emit(final=True)

    def _emit(self, *, final: bool) -> str:
        text = self._decode(self._ids)
        cut = self._first_stop(text)
        if cut is not None:
            self.stopped = True
            out = text[self._sent : cut] if cut > self._sent else ""
            self._sent = max(self._sent, cut)
            return out
        end = len(text)
        if not final:
            while end > self._sent and text[end - 1] == "\ufffd":
                end -= 1
            end = min(end, self._hold_for_stop(text, end))
        out = text[self._sent : end] if end > self._sent else ""
        self._sent = max(self._sent, end)
        return out

    def _first_stop(self, text: str) -> int | None:
        # Search from a little before what was sent: a stop string may straddle the boundary.
        start = max(0, self._sent - max((len(s) for s in self._stop), default=0))
        hits = [i for s in self._stop if (i := text.find(s, start)) != -1]
        return min(hits) if hits else None

    def _hold_for_stop(self, text: str, end: int) -> int:
        """The earliest index ≥ sent where a suffix of text[:end] starts some stop string."""
        for i in range(max(self._sent, end - max((len(s) for s in self._stop), default=0)), end):
            tail = text[i:end]
            if any(s.startswith(tail) for s in self._stop):
                return i
        return end
