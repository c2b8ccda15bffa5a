"""JSON of model files (manifests, catalogs, configs, tensor indexes), parsed safely.

``json.loads`` recurses once per nesting level, so a small file of ``[[[[...``
escaped from every reader as a bare ``RecursionError``. `loads_json` turns that
into `JsonNestingError`, a ``json.JSONDecodeError`` that each reader already maps
to its own typed error naming the file. Valid files parse exactly as with
``json.loads`` and at the same cost: the nesting is measured only after a failure.
(onespeech.tokenizer, which may import only the standard library, keeps its own copy.)
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from .errors import JsonNestingError

__all__ = ["loads_json"]

# a JSON string (skipped whole, so brackets inside strings do not count; an unterminated one
# runs to the end, so no quote is scanned twice) or one bracket
_STRING_OR_BRACKET = re.compile(r'"(?:[^"\\]|\\.)*"?|[\[\]{}]', re.DOTALL)


def loads_json(text: str | bytes) -> Any:
    """``json.loads(text)``, raising `JsonNestingError` instead of ``RecursionError``.

    Raises
    ------
    json.JSONDecodeError
        Malformed JSON; `JsonNestingError` (a subclass) for nesting too deep to parse.
    UnicodeDecodeError
        ``bytes`` that are not UTF-8.
    """
    try:
        return json.loads(text)
    except RecursionError:
        doc = text.decode("utf-8") if isinstance(text, bytes) else text
        pos, depth = deepest_nesting(doc)
        raise JsonNestingError(doc, pos, depth) from None


def deepest_nesting(doc: str) -> tuple[int, int]:
    """(offset where the deepest nesting is first reached, that depth) of JSON text.

    Stops at Python's recursion limit (no parse goes deeper), so a huge file of
    brackets costs a short scan.
    """
    limit = sys.getrecursionlimit()
    depth = best = best_pos = 0
    for match in _STRING_OR_BRACKET.finditer(doc):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > best:
                best, best_pos = depth, match.start()
                if best >= limit:
                    break
        elif char in "]}":
            depth -= 1
    return best_pos, best
