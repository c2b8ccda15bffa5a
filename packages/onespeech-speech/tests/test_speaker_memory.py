"""The speaker stage's clustering holds the same memory for a long file as for a short one."""

from __future__ import annotations

import tracemalloc

import numpy as np

from onespeech.speech.speakers.diarize import MAX_CLUSTERED, DiarizationOptions, cluster_pieces
from onespeech.speech.speakers.segmentation import Piece

SR = 16000


def _pieces(n: int, speakers: int = 3, seed: int = 0) -> list[Piece]:
    """``n`` pieces of 0.5-6 s, in turn from ``speakers`` well-separated voices."""
    rng = np.random.default_rng(seed)
    voices = rng.normal(size=(speakers, 256))
    pieces, start = [], 0
    for k in range(n):
        e = voices[k % speakers] + 0.3 * rng.normal(size=256)
        length = int(rng.uniform(0.5, 6.0) * SR)
        pieces.append(Piece(start, start + length, (e / np.linalg.norm(e)).astype(np.float32)))
        start += length + SR
    return pieces


def _peak_bytes(pieces: list[Piece]) -> tuple[int, np.ndarray]:
    tracemalloc.start()
    try:
        found = cluster_pieces(pieces, None, DiarizationOptions())
        return tracemalloc.get_traced_memory()[1], found
    finally:
        tracemalloc.stop()


def test_clustering_memory_does_not_grow_with_the_number_of_pieces() -> None:
    # an hour or two of talk gives thousands of pieces: the linkage's n x n distances grew with them
    # N vs 4N pieces, both with more than MAX_CLUSTERED of 1.5 s or more (about 82 % are)
    short, found_short = _peak_bytes(_pieces(3 * MAX_CLUSTERED // 2))
    long, found_long = _peak_bytes(_pieces(6 * MAX_CLUSTERED))
    assert found_short.shape == found_long.shape == (3, 256)  # the three voices, both times
    assert long <= 1.05 * short + (64 << 10), (short, long)
