"""Added tokens: whole-token spellings split out of the text before anything else.

An added token (``<|im_start|>``, ``<asr_text>``, ``<blank3>``...) is atomic:
where its spelling appears in the raw text it becomes its one id, and the text
around it is normalized and split on its own. Matching is leftmost-longest,
as tokenizers' ``AddedVocabulary`` does.
"""

from __future__ import annotations

import re
from dataclasses import dataclass


@dataclass(frozen=True)
class AddedToken:
    """One entry of ``added_tokens_decoder`` in tokenizer_config.json."""

    id: int
    content: str
    special: bool  # spelling it in text needs allow_special=True


class AddedVocabulary:
    """Finds added-token spellings in text.

    Parameters
    ----------
    tokens : list[AddedToken]
        Every added token; contents must be distinct and non-empty.
    """

    def __init__(self, tokens: list[AddedToken]) -> None:
        self.by_content = {t.content: t for t in tokens}
        self.by_id = {t.id: t for t in tokens}
        # re alternation is leftmost-first; longest-first order of the
        # alternatives makes it leftmost-longest.
        ordered = sorted(self.by_content, key=lambda c: (-len(c), c))
        self._pattern = re.compile("|".join(map(re.escape, ordered))) if ordered else None

    def split(self, text: str) -> list[str | AddedToken]:
        """Text stretches and matched tokens in order; empty stretches are dropped."""
        if self._pattern is None:
            return [text] if text else []
        parts: list[str | AddedToken] = []
        pos = 0
        for match in self._pattern.finditer(text):
            if match.start() > pos:
                parts.append(text[pos : match.start()])
            parts.append(self.by_content[match.group()])
            pos = match.end()
        if pos < len(text):
            parts.append(text[pos:])
        return parts
