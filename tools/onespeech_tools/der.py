"""Diarization error rate in numpy, on a 10 ms grid (no pyannote needed).

As pyannote.metrics' ``DiarizationErrorRate(collar, skip_overlap)`` defines it: a
collar of ``collar`` seconds centred on every reference boundary (half before, half
after) is not scored; with ``skip_overlap`` neither is time where the reference has
two or more speakers. Over the scored time,
``DER = (missed + false alarm + confusion) / reference speech``, each frame counting
``max(n_ref, n_hyp) - n_matched`` where ``n_matched`` is the number of reference
speakers active in the frame whose mapped hypothesis speaker is active too, under the
one-to-one speaker mapping that matches the most time. The 10 ms grid makes it differ
from pyannote's exact segment arithmetic by at most a frame per boundary.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import permutations

import numpy as np

__all__ = ["diarization_error_rate"]

STEP = 0.01  # seconds per frame

Segments = Sequence[tuple[float, float, str]]


def _activity(segments: Segments, labels: list[str], frames: int) -> np.ndarray:
    active = np.zeros((len(labels), frames), dtype=bool)
    for start, end, label in segments:
        active[labels.index(label), int(round(start / STEP)) : int(round(end / STEP))] = True
    return active


def _best_mapping(matched: np.ndarray) -> float:
    """The most frames matched by a one-to-one mapping (rows: reference, columns: hypothesis)."""
    n_ref, n_hyp = matched.shape
    size = max(n_ref, n_hyp)
    if size > 9:
        raise ValueError(f"{n_ref} reference and {n_hyp} hypothesis speakers: too many for the exact mapping")
    square = np.zeros((size, size))
    square[:n_ref, :n_hyp] = matched
    orders = np.array(list(permutations(range(size))), dtype=np.int64)
    return float(square[np.arange(size), orders].sum(axis=1).max())


def diarization_error_rate(
    reference: Segments, hypothesis: Segments, *, collar: float = 0.25, skip_overlap: bool = True
) -> float:
    """DER of ``hypothesis`` against ``reference`` ((start s, end s, label) segments)."""
    end = max([e for _, e, _ in [*reference, *hypothesis]], default=0.0)
    frames = int(round(end / STEP)) + 1
    ref_labels = sorted({label for _, _, label in reference})
    hyp_labels = sorted({label for _, _, label in hypothesis})
    ref = _activity(reference, ref_labels, frames)
    hyp = _activity(hypothesis, hyp_labels, frames)
    scored = np.ones(frames, dtype=bool)
    half = int(round(collar / 2 / STEP))
    for start, stop, _ in reference:
        for edge in (int(round(start / STEP)), int(round(stop / STEP))):
            scored[max(0, edge - half) : edge + half] = False
    if skip_overlap:
        scored &= ref.sum(axis=0) < 2
    ref, hyp = ref[:, scored], hyp[:, scored]
    total = float(ref.sum())
    if total == 0:
        raise ValueError("the reference has no scored speech")
    matched = ref.astype(np.float64) @ hyp.T.astype(np.float64)
    n_ref, n_hyp = ref.sum(axis=0), hyp.sum(axis=0)
    errors = float(np.maximum(n_ref, n_hyp).sum()) - _best_mapping(matched)
    return errors / total
