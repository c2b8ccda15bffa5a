"""Byte-level BPE over one pre-token, with merge ranks from merges.txt.

Merges apply lowest rank first; equal ranks (the same pair occurring more than
once) merge left to right without overlap, as transformers' ``Qwen2Tokenizer.bpe``
and tokenizers' ``BPE`` do. Results are cached per pre-token, so repeated words
cost one dict lookup.

Three ways to run the same merges, chosen per piece:
- short pieces: transformers' pass loop (one Python scan per merge applied);
- long pieces start with the same passes done by str methods: the word is one
  string with each symbol between its own delimiters, and ``str.replace`` merges
  every occurrence of the best pair left to right without overlap, as the scan
  does. This goes on while a pass shrinks the word by at least 1/8, so the passes
  cost O(n) in all. Repetitive pieces (1 MiB of one character is one piece) shrink
  geometrically and finish here (~7 s of CPU on the heap below, 0.5-1.2 s here);
- what remains of other long pieces goes to tokenizers' heap, O(n log n). With
  monotone ranks (see `_use_heap`) it continues the same sequence of merges.
"""

from __future__ import annotations

import heapq
import operator
from itertools import pairwise, repeat

from .bytelevel import to_byte_chars

# Pieces up to this many symbols use the simple pass loop; longer ones use the
# heap (O(n log n) instead of O(n) per distinct merge).
_HEAP_FROM_SYMBOLS = 48
# a string pass must remove at least 1/_SHRINK of the symbols, else the heap takes over
_SHRINK = 8
# delimits symbols in the string passes; no byte-level symbol holds a control character
_EDGE = "\x01"
# The word cache is dropped wholesale when full: simple, bounded memory.
_CACHE_ENTRIES = 1 << 17


class BytePairEncoder:
    """Encode pre-tokens to ids with a vocabulary and ranked merges.

    Parameters
    ----------
    vocab : dict[str, int]
        Byte-level token spelling -> id (vocab.json).
    merges : list[tuple[str, str]]
        Merge pairs in rank order (merges.txt without its header).
    """

    def __init__(self, vocab: dict[str, int], merges: list[tuple[str, str]]) -> None:
        self._vocab = vocab
        self._ranks = dict(zip(merges, range(len(merges)), strict=True))
        self._merges = merges
        self._cache: dict[str, tuple[int, ...]] = {}
        self._heap_ok: bool | None = None  # see _use_heap

    def _use_heap(self) -> bool:
        # The heap visits merges in a different order from the pass loop; the
        # two agree when every merge ranks after the merges that build its
        # parts (true of files derived from tiktoken ranks). Checked on the
        # first long piece, so loading stays fast.
        if self._heap_ok is None:
            self._heap_ok = _ranks_are_monotone(self._merges)
        return self._heap_ok

    def encode(self, pieces: list[str], out: list[int]) -> None:
        """Append the ids of every pre-token in ``pieces`` to ``out``."""
        cache = self._cache
        get = cache.get
        for piece in pieces:
            ids = get(piece)
            if ids is None:
                ids = self._encode_new(piece)
            out += ids

    def _encode_new(self, piece: str) -> tuple[int, ...]:
        word = list(to_byte_chars(piece))
        if len(word) >= _HEAP_FROM_SYMBOLS:
            word, done = self._merge_string_passes(word)
            if done:
                return self._ids(piece, word)
        if len(word) >= _HEAP_FROM_SYMBOLS and self._use_heap():
            word = self._merge_heap(word)
        else:
            word = self._merge_passes(word)
        return self._ids(piece, word)

    def _ids(self, piece: str, word: list[str]) -> tuple[int, ...]:
        vocab = self._vocab
        ids = tuple(vocab[symbol] for symbol in word)
        if len(self._cache) >= _CACHE_ENTRIES:
            self._cache.clear()
        self._cache[piece] = ids
        return ids

    def _merge_passes(self, word: list[str]) -> list[str]:
        """transformers' loop: merge every occurrence of the best pair, repeat."""
        ranks = self._ranks
        while len(word) > 1:
            best_rank, best = None, None
            for pair in pairwise(word):
                rank = ranks.get(pair)
                if rank is not None and (best_rank is None or rank < best_rank):
                    best_rank, best = rank, pair
            if best is None:
                break
            first, second = best
            merged = first + second
            new_word = []
            i, n = 0, len(word)
            while i < n:
                if i < n - 1 and word[i] == first and word[i + 1] == second:
                    new_word.append(merged)
                    i += 2
                else:
                    new_word.append(word[i])
                    i += 1
            word = new_word
        return word

    def _merge_string_passes(self, word: list[str]) -> tuple[list[str], bool]:
        """The pass loop with str methods (module doc); True if no merge is left.

        Stops, returning the word so far, once it is short or a pass shrinks it by
        less than 1/_SHRINK.
        """
        ranks = self._ranks
        while len(word) >= _HEAP_FROM_SYMBOLS:
            present = ranks.keys() & set(pairwise(word))
            if not present:
                return word, True
            first, second = min(present, key=ranks.__getitem__)
            # "\x01a\x01\x01b\x01...": a match starts at a symbol's opening delimiter only
            joined = _EDGE + (_EDGE + _EDGE).join(word) + _EDGE
            joined = joined.replace(f"{_EDGE}{first}{_EDGE}{_EDGE}{second}{_EDGE}", f"{_EDGE}{first}{second}{_EDGE}")
            merged = joined[1:-1].split(_EDGE + _EDGE)
            shrunk = len(word) - len(merged) >= len(word) // _SHRINK
            word = merged
            if not shrunk:
                break
        return word, False

    def _merge_heap(self, word: list[str]) -> list[str]:
        """tokenizers' order: pop (rank, position) from a heap over a linked list."""
        ranks = self._ranks
        n = len(word)
        symbols = word[:]
        nxt = list(range(1, n + 1))
        prv = list(range(-1, n - 1))
        heap = []
        for i in range(n - 1):
            rank = ranks.get((symbols[i], symbols[i + 1]))
            if rank is not None:
                heap.append((rank, i))
        heapq.heapify(heap)
        while heap:
            rank, i = heapq.heappop(heap)
            j = nxt[i] if symbols[i] else n
            # stale entry: the left symbol was absorbed or its right neighbour changed
            if j >= n or ranks.get((symbols[i], symbols[j])) != rank:
                continue
            symbols[i] += symbols[j]
            symbols[j] = ""
            nxt[i] = nxt[j]
            if nxt[i] < n:
                prv[nxt[i]] = i
                right = ranks.get((symbols[i], symbols[nxt[i]]))
                if right is not None:
                    heapq.heappush(heap, (right, i))
            if prv[i] >= 0:
                left = ranks.get((symbols[prv[i]], symbols[i]))
                if left is not None:
                    heapq.heappush(heap, (left, prv[i]))
        return [s for s in symbols if s]


def _ranks_are_monotone(merges: list[tuple[str, str]]) -> bool:
    """True if each merge ranks after the merges that produce its two parts."""
    ranks = range(len(merges))
    # token -> rank of the first merge making it (reversed, so the first one wins)
    made_at = dict(zip(map("".join, reversed(merges)), reversed(ranks), strict=True))
    firsts, seconds = zip(*merges, strict=True) if merges else ((), ())
    # C-level iterators throughout: this runs over ~151k merges
    return all(map(operator.lt, map(made_at.get, firsts, repeat(-1)), ranks)) and all(
        map(operator.lt, map(made_at.get, seconds, repeat(-1)), ranks)
    )
