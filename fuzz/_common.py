"""Shared plumbing of the atheris targets in ``fuzz/`` (see ``fuzz/README.md``).

Stdlib and atheris only: each target imports the code under test itself, inside
``atheris.instrument_imports()``, so that code is instrumented for coverage (a module imported
here first would not be).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator

import atheris

__all__ = ["chunked", "main"]


def chunked(data: bytes, seed: int) -> Iterator[bytes]:
    """``data`` cut into pieces whose sizes (1..16 bytes, or the rest) follow ``seed``: the
    same input fed to an incremental parser in a reproducible, input-chosen way."""
    pos, state = 0, seed or 1
    while pos < len(data):
        state = (state * 1103515245 + 12345) & 0x7FFFFFFF
        step = len(data) - pos if state % 7 == 0 else 1 + state % 16
        yield data[pos : pos + step]
        pos += step


def main(test_one_input: Callable[[bytes], None]) -> None:
    """Run the fuzzer (libFuzzer flags and corpus directories come from ``sys.argv``)."""
    atheris.Setup(sys.argv, test_one_input)
    atheris.Fuzz()
