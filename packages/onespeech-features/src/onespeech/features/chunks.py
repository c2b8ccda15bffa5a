"""VAD-first chunk planning: speech regions -> recognition chunks of at most 30 s.

Consecutive speech regions are grouped greedily into chunks whose span (first
region's start to last region's end) stays within ``max_samples`` (480000 samples,
the recognizer's 30 s bound), so every cut between two chunks falls inside a
silence the VAD found. A single unbroken speech region longer than the bound is
split at its quietest point: the 100 ms stretch with the least energy in the last
5 s before the bound (keeping at least 1 s for the remainder), repeated until every
piece fits. All boundaries are exact sample indices on the source's 16 kHz clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onespeech.features.pcm import MAX_CHUNK_SAMPLES, SAMPLE_RATE
from onespeech.features.segments import SpeechRegion

_QUIET_WINDOW = SAMPLE_RATE // 10  # 100 ms energy window
_SEARCH = 5 * SAMPLE_RATE  # look for the quietest point in the last 5 s before the bound
_MIN_REST = SAMPLE_RATE  # never leave less than 1 s after a forced split


@dataclass(frozen=True)
class Chunk:
    """Samples ``start`` (inclusive) to ``end`` (exclusive) of the source, recognized as one input."""

    start: int
    end: int

    @property
    def n_samples(self) -> int:
        return self.end - self.start

    @property
    def start_s(self) -> float:
        return self.start / SAMPLE_RATE

    @property
    def end_s(self) -> float:
        return self.end / SAMPLE_RATE


def plan_chunks(
    regions: Sequence[SpeechRegion],
    n_samples: int,
    pcm: np.ndarray | None = None,
    max_samples: int = MAX_CHUNK_SAMPLES,
) -> list[Chunk]:
    """Group speech regions into chunks of at most ``max_samples`` samples.

    Parameters
    ----------
    regions : sequence of SpeechRegion
        Sorted, non-overlapping regions within ``[0, n_samples]`` (as
        ``SileroVad.speech_regions`` returns them).
    n_samples : int
        Length of the source audio.
    pcm : ndarray[float32], shape (n_samples,), optional
        The source audio, used only to find the quietest point of a region longer
        than ``max_samples``. Without it such a region is split into equal parts.
    max_samples : int
        Upper bound of a chunk (at least 2 s).

    Returns
    -------
    list of Chunk
        In source order, non-overlapping, each at most ``max_samples`` long.
    """
    if pcm is not None and np.asarray(pcm).shape != (n_samples,):
        raise ValueError(f"pcm has shape {np.asarray(pcm).shape}; expected ({n_samples},) to match n_samples")
    _check_regions(regions, n_samples)
    planner = ChunkPlanner(max_samples)
    chunks: list[Chunk] = []
    for region in regions:
        chunks.extend(planner.add(region, pcm))
    return chunks + planner.finish()


class ChunkPlanner:
    """:func:`plan_chunks` over a stream: regions go in as the VAD releases them.

    ``add`` returns the chunks that no later region can extend; ``finish`` the last
    one. The chunks are exactly those of ``plan_chunks`` over all the regions.
    ``open_start`` is the first sample of the chunk still open (None if none): a
    streaming caller must keep the audio from there on.
    """

    def __init__(self, max_samples: int = MAX_CHUNK_SAMPLES) -> None:
        if max_samples < 2 * _MIN_REST:
            raise ValueError(f"max_samples={max_samples} is below {2 * _MIN_REST} (2 s)")
        self.max_samples = max_samples
        self._start: int | None = None
        self._end = 0
        self._previous_end = 0

    @property
    def open_start(self) -> int | None:
        return self._start

    def add(self, region: SpeechRegion, pcm: np.ndarray | None = None, pcm_offset: int = 0) -> list[Chunk]:
        """Add the next region; return the chunks it closes.

        ``pcm`` holds samples ``pcm_offset`` onwards of the source and must cover the
        region; it is read only when the region is longer than ``max_samples``.
        """
        if not 0 <= region.start < region.end or region.start < self._previous_end:
            raise ValueError(f"region ({region.start}, {region.end}) is empty or starts before the previous "
                             f"region ends ({self._previous_end}); regions must be sorted and non-overlapping")
        self._previous_end = region.end
        closed = []
        for piece_start, piece_end in _split_long(region, pcm, self.max_samples, pcm_offset):
            if self._start is not None and piece_end - self._start <= self.max_samples:
                self._end = piece_end  # extend the open chunk across the silence
                continue
            if self._start is not None:
                closed.append(Chunk(self._start, self._end))
            self._start, self._end = piece_start, piece_end
        return closed

    def finish(self) -> list[Chunk]:
        """Close the open chunk (if any)."""
        if self._start is None:
            return []
        chunk = Chunk(self._start, self._end)
        self._start = None
        return [chunk]


def _split_long(
    region: SpeechRegion, pcm: np.ndarray | None, max_samples: int, offset: int = 0
) -> list[tuple[int, int]]:
    """Cut a region into pieces of at most ``max_samples`` at its quietest points.

    ``pcm[i]`` is source sample ``offset + i``.
    """
    pieces = []
    start, end = region.start, region.end
    if pcm is None and end - start > max_samples:
        n_pieces = -(-(end - start) // max_samples)
        cuts = [start + (end - start) * i // n_pieces for i in range(n_pieces + 1)]
        return list(zip(cuts[:-1], cuts[1:], strict=True))
    while end - start > max_samples:
        high = min(start + max_samples, end - _MIN_REST)
        low = max(start + _MIN_REST, high - _SEARCH)
        cut = offset + _quietest_point(pcm, low - offset, high - offset)  # type: ignore[arg-type]
        pieces.append((start, cut))
        start = cut
    pieces.append((start, end))
    return pieces


def _quietest_point(pcm: np.ndarray, low: int, high: int) -> int:
    """Centre of the 100 ms window with the least energy, for cut points in [low, high]."""
    half = _QUIET_WINDOW // 2
    lo, hi = max(0, low - half), min(pcm.shape[0], high + half)
    squares = np.square(pcm[lo:hi], dtype=np.float64)
    sums = np.concatenate([[0.0], np.cumsum(squares)])
    centres = np.arange(low, high + 1)
    first = np.clip(centres - half, lo, hi) - lo
    last = np.clip(centres + half, lo, hi) - lo
    energy = sums[last] - sums[first]
    return int(centres[int(np.argmin(energy))])  # first minimum: deterministic


def _check_regions(regions: Sequence[SpeechRegion], n_samples: int) -> None:
    previous_end = 0
    for index, region in enumerate(regions):
        if not 0 <= region.start < region.end <= n_samples:
            raise ValueError(f"region {index} ({region.start}, {region.end}) is empty or outside the "
                             f"audio's {n_samples} samples")
        if region.start < previous_end:
            raise ValueError(f"region {index} starts at {region.start}, before the previous region ends "
                             f"({previous_end}); regions must be sorted and non-overlapping")
        previous_end = region.end
