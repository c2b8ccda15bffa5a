"""Byte-level BPE over one pre-token, with merge ranks from merges.txt.

Merges apply lowest rank first; equal ranks (the same pair occurring more than
once) merge left to right without overlap, as transformers' ``Qwen2Tokenizer.bpe``
and tokenizers' ``BPE`` do. Results are cached per pre-token, so repeated words
cost one dict lookup.
"""

from __future__ import annotations

import heapq
import operator
from itertools import pairwise, repeat

from .bytelevel import to_byte_chars

# Pieces up to this many symbols use the simple pass loop; longer ones use the
# heap (O(n log n) instead of O(n) per distinct merge).
_HEAP_FROM_SYMBOLS = 48
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
        if len(word) >= _HEAP_FROM_SYMBOLS and self._use_heap():
            word = self._merge_heap(word)
        else:
            word = self._merge_passes(word)
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
