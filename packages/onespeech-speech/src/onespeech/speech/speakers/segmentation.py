"""Speech pieces for speaker clustering: VAD regions, split where the speaker changes.

1. The VAD's speech regions, ended at pauses of ``min_silence_ms`` (a region between
   two short pauses is one speaker far more often than a fixed window is).
2. Partial embeddings over every region: 1.6 s windows every ``1 / partial_rate`` s
   (the last one kept when it covers 75 % of a window, as Resemblyzer does), each
   region's audio raised to -30 dBFS first as Resemblyzer's preprocessing does.
3. Inside a region, a change of speaker without a pause: for each boundary on the
   partial grid, the cosine similarity between the mean embedding of the partials
   wholly before it and of those wholly after it; where the lowest similarity is below
   ``split_similarity`` the region is cut there, and each side is examined again.

Stage 2 is the expensive one (the encoder); stages 1 and 3 only index its results, so
evaluation can re-run 3 with other thresholds without the encoder.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from onespeech.kernels.cancel import Cancel, raise_if_cancelled
from onespeech.speech.speakers.encoder import BATCH, EMBEDDING, HOP, SpeakerEncoder, partial_slices
from onespeech.speech.speakers.mel import mel_frames, normalize_volume

SAMPLE_RATE = 16000


@dataclass(frozen=True)
class RegionPartials:
    """One speech region (samples) and the embeddings of its 1.6 s partials."""

    start: int
    end: int
    partial_starts: np.ndarray  # sample offsets from the file start, int64 (m,)
    partial_ends: np.ndarray  # int64 (m,), may pass ``end`` (zero-padded last partial)
    embeddings: np.ndarray  # float32 (m, 256), L2-normalised


@dataclass(frozen=True)
class Piece:
    """A stretch of speech attributed to one speaker: samples ``start``-``end`` and its embedding."""

    start: int
    end: int
    embedding: np.ndarray  # float32 (256,), L2-normalised mean of its partials

    @property
    def seconds(self) -> float:
        return (self.end - self.start) / SAMPLE_RATE


def embed_regions(
    encoder: SpeakerEncoder,
    pcm: np.ndarray,
    regions: list[tuple[int, int]],
    *,
    partial_rate: float,
    progress: Callable[[int, int], None] | None = None,
    cancel: Cancel = None,
) -> list[RegionPartials]:
    """Partial embeddings of every region (batched across regions).

    ``progress(done, total)`` is called with partial counts after each batch;
    ``cancel`` is checked before each batch.
    """
    plans = []
    total = 0
    for start, end in regions:
        slices = partial_slices(end - start, rate=partial_rate)
        plans.append(slices)
        total += len(slices)
    out_embeddings = np.empty((total, EMBEDDING), dtype=np.float32)
    pending: list[np.ndarray] = []
    filled = 0

    def flush() -> None:
        nonlocal filled
        raise_if_cancelled(cancel, "speaker attribution")
        batch = np.concatenate(pending) if len(pending) > 1 else pending[0]
        out_embeddings[filled : filled + batch.shape[0]] = encoder.embed_partials(batch)
        filled += batch.shape[0]
        pending.clear()
        if progress is not None:
            progress(filled, total)

    queued = 0
    for (start, end), slices in zip(regions, plans, strict=True):
        wav = normalize_volume(pcm[start:end])
        needed = slices[-1][1] * HOP
        if needed >= wav.shape[0]:
            wav = np.pad(wav, (0, needed - wav.shape[0]))
        mel = mel_frames(wav)
        pending.append(np.stack([mel[a:b] for a, b in slices]))
        queued += len(slices)
        if queued >= BATCH:
            flush()
            queued = 0
    if pending:
        flush()
    out = []
    k = 0
    for (start, end), slices in zip(regions, plans, strict=True):
        frames = np.array(slices, dtype=np.int64)
        m = len(slices)
        out.append(
            RegionPartials(
                start, end, start + frames[:, 0] * HOP, start + frames[:, 1] * HOP, out_embeddings[k : k + m]
            )
        )
        k += m
    return out


def _unit_mean(e: np.ndarray) -> np.ndarray:
    m = e.mean(axis=0, dtype=np.float64)
    return (m / np.linalg.norm(m)).astype(np.float32)


def split_region(region: RegionPartials, split_similarity: float) -> list[Piece]:
    """Cut a region where the mean embeddings before and after a boundary differ most."""
    pieces: list[Piece] = []

    def examine(start: int, end: int, index: np.ndarray) -> None:
        best: tuple[float, int, np.ndarray, np.ndarray] | None = None
        starts, ends = region.partial_starts[index], region.partial_ends[index]
        for t in np.unique(starts[1:]):
            left, right = index[ends <= t], index[starts >= t]
            if left.size == 0 or right.size == 0:
                continue
            sim = float(_unit_mean(region.embeddings[left]) @ _unit_mean(region.embeddings[right]))
            if best is None or sim < best[0]:
                best = (sim, int(t), left, right)
        if best is None or best[0] >= split_similarity:
            pieces.append(Piece(start, end, _unit_mean(region.embeddings[index])))
            return
        _, cut, left, right = best
        examine(start, cut, left)
        examine(cut, end, right)

    examine(region.start, region.end, np.arange(region.partial_starts.shape[0]))
    return pieces


def resegment_region(
    region: RegionPartials, centroids: np.ndarray, *, grid_seconds: float = 0.1, min_run_seconds: float = 1.0
) -> list[tuple[int, int, int]]:
    """Label a region along time with the most similar speaker centroid.

    Each point of a ``grid_seconds`` grid scores every centroid by the mean cosine
    similarity of the partials covering it (the nearest partial where none does); runs
    shorter than ``min_run_seconds`` are absorbed by their longer neighbour. A region
    that stays one run takes the speaker of its mean embedding. Returns
    ``(start, end, speaker index)`` sample ranges covering the region.
    """
    sims = region.embeddings @ centroids.T  # (m, K)
    if sims.shape[0] == 1:
        return [(region.start, region.end, int(np.argmax(sims[0])))]
    step = max(1, int(round(grid_seconds * SAMPLE_RATE)))
    centres = np.arange(region.start + step // 2, region.end, step)
    if centres.size == 0:
        centres = np.array([(region.start + region.end) // 2])
    covering = (region.partial_starts[None, :] <= centres[:, None]) & (
        centres[:, None] < region.partial_ends[None, :]
    )
    mids = (region.partial_starts + region.partial_ends) // 2
    nearest = np.argmin(np.abs(mids[None, :] - centres[:, None]), axis=1)
    covering[np.arange(centres.size), nearest] |= ~covering.any(axis=1)
    scores = (covering.astype(np.float64) @ sims) / covering.sum(axis=1, keepdims=True)
    labels = np.argmax(scores, axis=1)
    runs = _runs(labels)
    min_cells = max(1, int(round(min_run_seconds / grid_seconds)))
    while len(runs) > 1:
        shortest = min(range(len(runs)), key=lambda k: runs[k][1] - runs[k][0])
        if runs[shortest][1] - runs[shortest][0] >= min_cells:
            break
        a, b, _ = runs[shortest]
        left = runs[shortest - 1] if shortest > 0 else None
        right = runs[shortest + 1] if shortest + 1 < len(runs) else None
        if left is None or (right is not None and right[1] - right[0] > left[1] - left[0]):
            into = right
        else:
            into = left
        assert into is not None  # two or more runs: one neighbour exists
        labels[a:b] = into[2]
        runs = _runs(labels)
    if len(runs) == 1:
        mean = region.embeddings.mean(axis=0)
        return [(region.start, region.end, int(np.argmax(centroids @ mean)))]
    out = []
    for k, (a, b, label) in enumerate(runs):
        start = region.start if k == 0 else int(centres[a] - step // 2)
        end = region.end if k == len(runs) - 1 else int(centres[b] - step // 2)
        out.append((start, end, int(label)))
    return out


def _runs(labels: np.ndarray) -> list[tuple[int, int, int]]:
    """(first cell, end cell, label) of each run of equal labels."""
    edges = np.flatnonzero(np.diff(labels)) + 1
    bounds = [0, *edges.tolist(), labels.size]
    return [(bounds[k], bounds[k + 1], int(labels[bounds[k]])) for k in range(len(bounds) - 1)]
