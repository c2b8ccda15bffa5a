"""Exact pre-tokenizer splits (the Qwen2 pattern), and the stand-in table bound."""

from __future__ import annotations

import pytest

from onespeech.tokenizer import pretokenize
from onespeech.tokenizer.pretokenize import split


@pytest.mark.parametrize(
    ("text", "pieces"),
    [
        ("Hello, world!", ["Hello", ",", " world", "!"]),
        ("IT'S it's It'Ll x'ſa", ["IT", "'S", " it", "'s", " It", "'Ll", " x", "'ſ", "a"]),
        ("it’s", ["it", "’s"]),  # U+2019 is not the contraction apostrophe
        ("a    b", ["a", "   ", " b"]),  # the last space of a run goes with the word
        ("x  \n\n  y", ["x", "  \n\n", " ", " y"]),
        ("a\rb\r\n\r\nc", ["a", "\r", "b", "\r\n\r\n", "c"]),
        (" \xa0x", [" ", "\xa0x"]),  # NBSP is whitespace, but not the optional " "
        ("a\x1c\x1d b", ["a", "\x1c\x1d", " b"]),  # U+001C..U+001F are not \s
        ("1234 ١٢", ["1", "2", "3", "4", " ", "١", "٢"]),  # one numeric scalar per piece
        ("x²½Ⅻ", ["x", "²", "½", "Ⅻ"]),
        ("𝔘𝔫𝔦 𠀀😀!", ["𝔘𝔫𝔦", " 𠀀", "😀!"]),  # astral letters are letters, emoji are not
        ("...\n\nx", ["...\n\n", "x"]),
        ("नमस्ते", ["नमस", "्त", "े"]),  # combining marks are not letters: a mark may prefix a word
    ],
)
def test_split(text: str, pieces: list[str]) -> None:
    assert split(text) == pieces


def test_stand_in_table_stays_bounded() -> None:
    text = "".join(map(chr, range(0x10000, 0x10000 + 70_000)))  # more distinct code points than the cap
    assert "".join(split(text)) == text
    assert len(pretokenize._STAND_INS) <= pretokenize._MAX_ENTRIES
    assert split("语音 识别") == ["语音", " 识别"]
