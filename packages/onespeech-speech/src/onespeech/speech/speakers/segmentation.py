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

from dataclasses import dataclass

import numpy as np

from onespeech.features.speaker_encoder import BATCH, HOP, SpeakerEncoder, partial_slices
from onespeech.features.speaker_mel import mel_frames, normalize_volume
from onespeech.kernels.cancel import Cancel, raise_if_cancelled

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


class PartialEmbedder:
    """Partial embeddings of speech regions handed over one at a time, in file order.

    A region's audio is levelled and turned into its partials' mel windows at once, and
    not kept; the windows wait in a queue that runs through the encoder as one batch as
    soon as it holds ``BATCH`` or more (so a batch spans regions). The batches depend
    only on the regions' lengths and order, never on when the regions arrive, so
    feeding regions as a stream closes them gives the embeddings of feeding them all
    at once, bit for bit. Held between batches: fewer than ``BATCH`` queued windows
    plus the last region's (25.6 kB per window, two windows per second of speech).

    Parameters
    ----------
    encoder : SpeakerEncoder
    partial_rate : float
        Partial windows per second of a region.
    cancel : threading.Event-like, callable or None
        Checked before each batch.
    """

    def __init__(self, encoder: SpeakerEncoder, *, partial_rate: float, cancel: Cancel = None) -> None:
        self.encoder = encoder
        self.partial_rate = partial_rate
        self.cancel = cancel
        self.regions: list[RegionPartials] = []  # embedded so far, in order
        self.embedded = 0  # partial windows embedded so far
        self._queue: list[tuple[int, int, np.ndarray, np.ndarray]] = []  # start, end, frame ranges, mels
        self._queued = 0

    def add(self, start: int, end: int, pcm: np.ndarray) -> None:
        """Queue the region of samples ``start``-``end`` (``pcm``: its samples); embed once a batch is full."""
        if pcm.shape != (end - start,):
            raise ValueError(f"pcm has shape {pcm.shape}; expected ({end - start},) for samples {start}..{end}")
        slices = partial_slices(end - start, rate=self.partial_rate)
        wav = normalize_volume(pcm)
        needed = slices[-1][1] * HOP
        if needed >= wav.shape[0]:
            wav = np.pad(wav, (0, needed - wav.shape[0]))
        mel = mel_frames(wav)
        self._queue.append((start, end, np.array(slices, dtype=np.int64), np.stack([mel[a:b] for a, b in slices])))
        self._queued += len(slices)
        if self._queued >= BATCH:
            self._flush()

    def finish(self) -> list[RegionPartials]:
        """Embed what is queued; every region's partials, in order."""
        if self._queue:
            self._flush()
        return self.regions

    def _flush(self) -> None:
        raise_if_cancelled(self.cancel, "speaker attribution")
        mels = [q[3] for q in self._queue]
        embeddings = self.encoder.embed_partials(np.concatenate(mels) if len(mels) > 1 else mels[0])
        k = 0
        for start, end, frames, windows in self._queue:
            m = windows.shape[0]
            self.regions.append(
                RegionPartials(start, end, start + frames[:, 0] * HOP, start + frames[:, 1] * HOP, embeddings[k : k + m])
            )
            k += m
        self.embedded += k
        self._queue.clear()
        self._queued = 0


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
