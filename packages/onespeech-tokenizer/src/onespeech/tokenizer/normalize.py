"""Unicode NFC, the tokenizer's only normalizer (as the reference's ``NFC`` step).

It runs on each stretch of text between added tokens, never across an added
token: the reference fast tokenizer splits added tokens out first, so
``"<|im_end|>" + "\\u0338"`` keeps its token (the slow class normalizes first and
composes ``">\\u0338"`` into U+226F; see docs/tokenizer.md).
"""

from __future__ import annotations

import unicodedata


def nfc(text: str) -> str:
    """Canonical composition of ``text`` (Python's ``unicodedata`` tables)."""
    # normalize() itself starts with the quick check, so ASCII and already
    # composed text cost one scan and no copy.
    return unicodedata.normalize("NFC", text)
