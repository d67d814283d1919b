"""The vectorised interleaved rANS against a literal transcription of its spec.

docs/kv-payload-format.md §7.3: 32-bit state in [2^16, 2^32), 12-bit probabilities, one
16-bit little-endian word per renormalisation, states big-endian in front.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ray_kvmoq.kvcache import MalformedPayloadError, PayloadError, rans


def _spec_encode(syms: list[int], freqs: list[list[int]]) -> bytes:
    """Scalar rANS exactly as docs/kv-payload-format.md §7.3 writes it (J = 1)."""
    out = bytearray()
    x = 1 << 16
    for i in range(len(syms) - 1, -1, -1):
        f_tab = freqs[i]
        s = syms[i]
        f, c = f_tab[s], sum(f_tab[:s])
        x_max = ((1 << 16 >> 12) << 16) * f
        if x >= x_max:
            out[:0] = (x & 0xFFFF).to_bytes(2, "little")
            x >>= 16
        x = ((x // f) << 12) + (x % f) + c
    return x.to_bytes(4, "big") + bytes(out)


def _spec_decode(data: bytes, n: int, freqs: list[list[int]]) -> list[int]:
    x = int.from_bytes(data[:4], "big")
    pos = 4
    out = []
    for i in range(n):
        f_tab = freqs[i]
        slot = x & 4095
        s = next(k for k in range(len(f_tab)) if sum(f_tab[:k]) <= slot < sum(f_tab[: k + 1]))
        x = f_tab[s] * (x >> 12) + slot - sum(f_tab[:s])
        if x < 1 << 16:
            x = (x << 16) | int.from_bytes(data[pos : pos + 2], "little")
            pos += 2
        out.append(s)
    assert x == 1 << 16 and pos == len(data)
    return out


def _tables(rng: np.random.Generator, n_tables: int, alpha: int) -> np.ndarray:
    w = rng.dirichlet(np.full(alpha, 0.3), size=n_tables)
    f = 1 + np.floor(w * (4096 - alpha)).astype(np.int64)
    f[np.arange(n_tables), f.argmax(axis=1)] += 4096 - f.sum(axis=1)
    return f.astype(np.uint32)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.sampled_from([1, 2, 7, 64, 300]))
def test_single_lane_matches_the_spec_byte_for_byte(seed: int, n: int) -> None:
    rng = np.random.default_rng(seed)
    freq = _tables(rng, 3, 15)
    table_of = rng.integers(0, 3, n).astype(np.int32)
    sym = np.array([rng.choice(15, p=freq[t] / 4096) for t in table_of], dtype=np.uint8).reshape(
        1, n
    )
    states, data, lens = rans.encode(sym, freq, table_of, 1)
    ours = states.astype(">u4").tobytes() + data.astype("<u2").tobytes()
    tables = [freq[t].tolist() for t in table_of]
    assert ours == _spec_encode(sym[0].tolist(), tables)
    assert _spec_decode(ours, n, tables) == sym[0].tolist()
    got = rans.decode(states, data, np.array([0]), lens, rans.pack_decode_table(freq), table_of, n)
    assert np.array_equal(got, sym)


@pytest.mark.parametrize("lanes", [1, 4, 32])
def test_interleaved_round_trip_many_tokens(lanes: int) -> None:
    rng = np.random.default_rng(lanes)
    freq = _tables(rng, 8, 31)
    n = 64 * 8
    table_of = np.repeat(np.arange(8, dtype=np.int32), 64)
    sym = np.stack([rng.choice(31, p=freq[t] / 4096) for t in table_of], axis=0).T
    sym = np.repeat(sym.astype(np.uint8).reshape(1, n), 5, axis=0)
    sym[1:] = rng.permuted(sym[1:], axis=1)  # other tokens: any symbol of a table is codable
    states, data, lens = rans.encode(sym, freq, table_of, lanes)
    ends = np.cumsum(lens)
    got = rans.decode(states, data, ends - lens, ends, rans.pack_decode_table(freq), table_of, n)
    assert np.array_equal(got, sym)
    # a stream shorter than the coders consume, or an out-of-range state, is an error
    short = lens.copy()
    short[-1] -= 1
    s_end = np.cumsum(short)
    with pytest.raises(PayloadError):
        rans.decode(
            states, data[:-1], s_end - short, s_end, rans.pack_decode_table(freq), table_of, n
        )
    bad = states.copy()
    bad[0, 0] = 5  # below 2^16
    with pytest.raises(MalformedPayloadError):
        rans.decode(bad, data, ends - lens, ends, rans.pack_decode_table(freq), table_of, n)
