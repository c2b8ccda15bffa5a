"""Text built to be slow: one long pre-token of a repeated character or pattern.

1 MiB of one character is a single pre-token. BPE over it took ~7 s of CPU (the
issue saw ~15 s) in the heap against 0.6 s for 1 MiB of mixed text. Repetitive
pieces now finish in string passes that shrink the word geometrically (linear
work); the tests check that those pieces never reach the heap, that the ids
equal the heap's, and that the full 1 MiB cases run under a memory and time cap.
"""

from __future__ import annotations

import pytest

from onespeech.tokenizer import Qwen3Tokenizer
from onespeech.tokenizer.bytelevel import to_byte_chars

UNITS = ["a", " ", "!", "\n", "=", "'", "ab", "語", "é", "😀", "\u3000", "\xa0", "中文"]
FULL_SIZE = ["a", " ", "語", "😀"]  # one, two, three and four UTF-8 bytes per character


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir) -> Qwen3Tokenizer:
    return Qwen3Tokenizer.load(tokenizer_dir)


@pytest.mark.parametrize("unit", UNITS)
def test_repetitive_piece_never_reaches_the_heap(tokenizer: Qwen3Tokenizer, unit: str, monkeypatch) -> None:
    bpe = tokenizer._bpe
    bpe._cache.clear()
    text = unit * ((16 << 10) // len(unit.encode()))
    word = list(to_byte_chars(text))
    want = bpe._merge_heap(word)  # the previous path: exact for these (rank-monotone) merges

    def heap(word: list[str]) -> list[str]:
        raise AssertionError(f"{len(word)} symbols of {unit!r} reached the O(n log n) heap")

    monkeypatch.setattr(bpe, "_merge_heap", heap)
    ids = tokenizer.encode(text)
    assert ids == [tokenizer.token_to_id(s) for s in want]


def test_one_mebibyte_of_each_repeated_unit_is_bounded(run_case, tokenizer_dir) -> None:
    # a bound, not a benchmark: ~1 s of CPU each here, ~7 s each before
    got = run_case(
        """
        from onespeech.tokenizer import Qwen3Tokenizer
        tokenizer = Qwen3Tokenizer.load(args["dir"])
        result = {}
        for unit in args["units"]:
            text = unit * ((1 << 20) // len(unit.encode()))
            result[unit] = len(tokenizer.encode(text))
        """,
        args={"dir": str(tokenizer_dir), "units": FULL_SIZE},
        memory_mb=1536,
        timeout_s=120,
    ).expect_ok()
    assert set(got) == set(FULL_SIZE) and all(n > 0 for n in got.values())
