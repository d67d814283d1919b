"""Incremental detokenization and stop strings."""

from __future__ import annotations

from collections.abc import Sequence

from hypothesis import given
from hypothesis import strategies as st

from ray_kvmoq.serving.textstream import TextStream

# A toy byte-level tokenizer: id = one UTF-8 byte, so multi-byte characters span tokens.


def _decode(ids: Sequence[int]) -> str:
    return bytes(ids).decode("utf-8", errors="replace")


def _ids(text: str) -> list[int]:
    return list(text.encode())


def _run(text: str, stop: list[str], step: int) -> str:
    ts = TextStream(_decode, stop)
    ids = _ids(text)
    out = [ts.feed(ids[i : i + step]) for i in range(0, len(ids), step)]
    return "".join(out) + ts.finish()


def test_multibyte_characters_are_never_split() -> None:
    ts = TextStream(_decode)
    ids = _ids("é!")
    assert ts.feed(ids[:1]) == ""
    assert ts.feed(ids[1:2]) == "é"
    assert ts.feed(ids[2:]) == "!" and ts.finish() == ""


def test_stop_string_cuts_and_is_not_sent() -> None:
    ts = TextStream(_decode, ["END"])
    assert ts.feed(_ids("abc E")) == "abc "
    assert ts.feed(_ids("N")) == ""
    assert ts.feed(_ids("D and more")) == "" and ts.stopped
    assert ts.feed(_ids("x")) == "" and ts.finish() == ""


def test_false_alarm_prefix_is_released() -> None:
    ts = TextStream(_decode, ["END"])
    assert ts.feed(_ids("aE")) == "a"
    assert ts.feed(_ids("x")) == "Ex"


@given(
    st.text(alphabet="abé€ E N D\n", max_size=40),
    st.lists(st.sampled_from(["END", "\n", "é€"]), max_size=2),
    st.integers(1, 5),
)
def test_deltas_concatenate_to_the_cut_text(text: str, stop: list[str], step: int) -> None:
    hits = [i for s in stop if (i := text.find(s)) != -1]
    expected = text[: min(hits)] if hits else text
    assert _run(text, stop, step) == expected
