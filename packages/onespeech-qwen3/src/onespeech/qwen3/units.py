"""Written and spoken units: the words of a transcript, and what the forced aligner is fed.

A *written unit* is a piece of the text exactly as written: the recognizer's words
and the forced aligner's timed units are both written units. A *spoken unit* is the
cleaned string the aligner sees between two pairs of ``<timestamp>`` tokens. One
written unit maps to zero or more spoken units:

- Outside Chinese, Cantonese and Japanese, whitespace delimits written units
  (``str.split()``, as the reference toolkit does). Each unit is cleaned; a cleaned
  unit that still holds CJK ideographs is split around them, one spoken unit per
  ideograph, exactly as the reference's ``tokenize_space_lang``. A unit made only of
  punctuation has no spoken unit and gets no time.
- In Chinese, Cantonese and Japanese every Unicode character (code point, with any
  combining marks that follow it) is a written unit. This does not claim the
  reference's morphological segmentation (nagisa for Japanese).

Cleaning keeps letters (``L*``), numbers (``N*``) and the ASCII apostrophe and drops
everything else without inserting spaces (``"state-of-the-art"`` -> ``"stateoftheart"``).
The tokenizer later applies NFC; a kept character whose NFC form contains a combining
mark (for example U+0958, which NFC decomposes into U+0915 U+093C) would bring back a
mark that cleaning is meant to remove, so cleaning repeats on the NFC form until it is
stable. The text itself is never changed: written units keep their exact form and
their character offsets into the caller's text.
"""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass

# Languages whose written units are single characters (no spaces between words).
CHARACTER_LANGUAGES = frozenset({"zh", "yue", "ja"})

# The reference's CJK ideograph ranges (qwen_asr Qwen3ForceAlignProcessor.is_cjk_char):
# unified ideographs, extensions A-E and the compatibility block.
_CJK_RANGES = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
)


@dataclass(frozen=True)
class WrittenUnit:
    """One written unit of the caller's text.

    Attributes
    ----------
    text : str
        The unit exactly as written (``document[start:end]``).
    start, end : int
        Code-point offsets of the unit in the text it came from.
    spoken : tuple[str, ...]
        The cleaned spoken units fed to the model for this written unit (may be empty).
    """

    text: str
    start: int
    end: int
    spoken: tuple[str, ...]


def is_kept_char(ch: str) -> bool:
    """True for characters the spoken input keeps: letters, numbers, ASCII apostrophe."""
    return ch == "'" or unicodedata.category(ch)[0] in "LN"


def is_cjk_ideograph(ch: str) -> bool:
    """True for a CJK ideograph in the reference toolkit's ranges."""
    code = ord(ch)
    return any(lo <= code <= hi for lo, hi in _CJK_RANGES)


def clean(token: str) -> str:
    """Keep letters, numbers and ASCII apostrophes; the result is stable under NFC.

    Other characters are removed without inserting anything. If NFC of the cleaned
    string differs (a kept character decomposes, or adjacent jamo compose), the NFC
    form is cleaned again, so the tokenizer's NFC cannot bring a removed mark back.
    """
    cleaned = "".join(ch for ch in token if is_kept_char(ch))
    # Each pass only removes characters or composes them, so this ends quickly.
    while (normalized := unicodedata.normalize("NFC", cleaned)) != cleaned:
        cleaned = "".join(ch for ch in normalized if is_kept_char(ch))
    return cleaned


def split_ideographs(cleaned: str) -> list[str]:
    """Split a cleaned unit around CJK ideographs, one unit per ideograph.

    ``"hello世界ok"`` -> ``["hello", "世", "界", "ok"]`` (the reference's
    ``split_segment_with_chinese``).
    """
    pieces: list[str] = []
    run: list[str] = []
    for ch in cleaned:
        if is_cjk_ideograph(ch):
            if run:
                pieces.append("".join(run))
                run = []
            pieces.append(ch)
        else:
            run.append(ch)
    if run:
        pieces.append("".join(run))
    return pieces


def written_units(text: str, language: str | None) -> list[WrittenUnit]:
    """Split ``text`` into written units with their spoken units.

    Parameters
    ----------
    text : str
        The caller's text; it is not modified.
    language : str | None
        A language tag (``"en"``, ``"zh"``, ...); ``zh``, ``yue`` and ``ja`` use
        character units, every other language (and None) whitespace units.

    Returns
    -------
    list[WrittenUnit]
        In text order. ``"".join`` of their texts equals ``text`` without whitespace.
    """
    if language in CHARACTER_LANGUAGES:
        return _character_units(text)
    return _whitespace_units(text)


def join_texts(pieces: Iterable[tuple[str, str | None]]) -> str:
    """Join texts of consecutive pieces ``(text, language)`` as one document's text.

    One space between two pieces, none between two pieces both in a language written
    without spaces (``zh``, ``yue``, ``ja``).
    """
    parts: list[str] = []
    previous: str | None | bool = False  # False: no piece yet
    for text, language in pieces:
        if previous is not False and not (language in CHARACTER_LANGUAGES and previous in CHARACTER_LANGUAGES):
            parts.append(" ")
        parts.append(text)
        previous = language
    return "".join(parts)


def spoken_units(units: list[WrittenUnit]) -> list[str]:
    """The model's input units in order (all written units' spoken units, flattened)."""
    return [spoken for unit in units for spoken in unit.spoken]


def _whitespace_units(text: str) -> list[WrittenUnit]:
    units: list[WrittenUnit] = []
    start: int | None = None
    for i, ch in enumerate(text + " "):
        if ch.isspace() or i == len(text):
            if start is not None:
                units.append(_whitespace_unit(text, start, i))
                start = None
        elif start is None:
            start = i
    return units


def _whitespace_unit(text: str, start: int, end: int) -> WrittenUnit:
    written = text[start:end]
    cleaned = clean(written)
    spoken = tuple(split_ideographs(cleaned)) if cleaned else ()
    return WrittenUnit(written, start, end, spoken)


def _character_units(text: str) -> list[WrittenUnit]:
    units: list[WrittenUnit] = []
    i = 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        # a base character keeps the combining marks that follow it (one visible character)
        end = i + 1
        while end < len(text) and unicodedata.category(text[end]).startswith("M"):
            end += 1
        written = text[i:end]
        cleaned = clean(written)
        units.append(WrittenUnit(written, i, end, (cleaned,) if cleaned else ()))
        i = end
    return units
