"""The Qwen2 pre-tokenizer split, with the standard library's ``re`` only.

The reference pattern is::

    (?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+

``re`` has no ``\\p{..}`` classes and its ``\\s`` is ``str.isspace`` (which also
matches U+001C..U+001F), so the classes are spelled out from the generated
tables in ``_unicode_tables`` (the reference engine's own letter, number and
whitespace sets). Matching a huge class in ``re`` costs a scan of its astral
ranges, so text with non-ASCII characters is first mapped, one code point to one
code point, onto ASCII stand-ins of the same class ("a" letter, "0" number,
"\\x0b" other whitespace, "!" anything else); the ASCII pattern then runs on the
stand-ins and the pieces are cut from the original text at the same offsets.
The case-insensitive contractions keep their real letters: U+017F LATIN SMALL
LETTER LONG S folds to "s" in the reference engine, so it maps to "s".
"""

from __future__ import annotations

import re
from bisect import bisect_right

from ._unicode_tables import LETTER_RANGES, NUMBER_RANGES, SPACE_RANGES

# ASCII members of the reference classes. Not re's \s: that also matches U+001C..U+001F.
_S = r"\t\n\x0b\x0c\r "
_LN = "A-Za-z0-9"

# The pattern on ASCII stand-ins, alternatives in the reference order; re
# backtracks exactly as the reference engines do for this pattern.
_PATTERN = re.compile(
    "'(?:[sS]|[tT]|[rR][eE]|[vV][eE]|[mM]|[lL][lL]|[dD])"  # (?i:'s|'t|'re|'ve|'m|'ll|'d)
    f"|[^\\r\\n{_LN}]?[A-Za-z]+"  # [^\r\n\p{L}\p{N}]?\p{L}+
    "|[0-9]"  # \p{N}: one numeric scalar per piece
    f"| ?[^{_S}{_LN}]+[\\r\\n]*"  # ' ?[^\s\p{L}\p{N}]+[\r\n]*'
    f"|[{_S}]*[\\r\\n]+"  # \s*[\r\n]+
    f"|[{_S}]+(?![^{_S}])"  # \s+(?!\S)
    f"|[{_S}]+"  # \s+
)

_LETTER, _NUMBER, _SPACE, _OTHER = "a", "0", "\x0b", "!"
# U+017F folds to "s" under the reference's case-insensitive contractions.
_FOLDS_TO_CONTRACTION_LETTER = {0x17F: "s"}


def _build_bounds() -> tuple[list[int], list[str]]:
    """Sorted range starts and the stand-in for each stretch of code points."""
    spans = [(a, b, _LETTER) for a, b in LETTER_RANGES]
    spans += [(a, b, _NUMBER) for a, b in NUMBER_RANGES]
    spans += [(a, b, _SPACE) for a, b in SPACE_RANGES]
    spans.sort()
    starts, kinds, end = [0], [_OTHER], 0
    for first, last, kind in spans:
        if first < end:
            raise RuntimeError("overlapping Unicode class tables")  # generator bug, not user input
        if first > end:
            starts.append(first)
            kinds.append(_OTHER)
        starts.append(first)
        kinds.append(kind)
        end = last + 1
        starts.append(end)
        kinds.append(_OTHER)
    return starts, kinds


_STARTS, _KINDS = _build_bounds()


def _kind(code: int) -> str:
    return _FOLDS_TO_CONTRACTION_LETTER.get(code) or _KINDS[bisect_right(_STARTS, code) - 1]


# str.translate table, code point -> ASCII stand-in: ASCII maps to itself, other
# code points are added the first time a text holds them. A plain dict (no
# __missing__) keeps translate at C speed; it is restarted past _MAX_ENTRIES so
# adversarial text cannot grow it without bound.
_MAX_ENTRIES = 1 << 16
_ASCII_IDENTITY = {c: chr(c) for c in range(128)}
_STAND_INS: dict[int, str] = dict(_ASCII_IDENTITY)


def stand_ins(text: str) -> str:
    """``text`` with every code point replaced by the ASCII stand-in of its class."""
    out = text.translate(_STAND_INS)
    if out.isascii():
        return out
    # code points missing from the table were left as they are
    missing = {ord(c) for c in set(out) if not c.isascii()}
    table = _STAND_INS
    if len(table) + len(missing) > _MAX_ENTRIES:
        table.clear()
        table.update(_ASCII_IDENTITY)
        if len(missing) > _MAX_ENTRIES - len(table):
            table = dict(_ASCII_IDENTITY)  # this text alone is too varied to cache
    table.update((code, _kind(code)) for code in missing)
    return text.translate(table)


def split(text: str) -> list[str]:
    """Split NFC text into pre-tokens exactly as the Qwen2 pattern does.

    Parameters
    ----------
    text : str
        Normalized text without added-token spellings.

    Returns
    -------
    list[str]
        The pieces in order; ``"".join(pieces) == text``.
    """
    if text.isascii():
        return _PATTERN.findall(text)
    pieces = _PATTERN.findall(stand_ins(text))
    out = []
    pos = 0
    for piece in pieces:
        end = pos + len(piece)
        out.append(text[pos:end])
        pos = end
    return out

