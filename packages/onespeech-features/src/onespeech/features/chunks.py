"""VAD-first chunk planning: speech regions -> recognition chunks of at most 30 s.

The one planner of every recognition path (file, live, the recognizer's long input).
A single unbroken speech region longer than the bound is split at its quietest
point: the 100 ms stretch with the least energy in the last 5 s before the bound
(keeping at least 1 s for the remainder), repeated until every piece fits. With
``group=True`` (the file plan) consecutive regions and pieces are then grouped
greedily into chunks whose span (first start to last end) stays within
``max_samples`` (480000 samples, the recognizer's 30 s bound), so every cut between
two chunks falls inside a silence the VAD found or at a quietest point; with
``group=False`` (the live plan) every region or piece is a chunk of its own, closed
as soon as it is known. Both plans have the same pieces, so a file chunk is always a
run of consecutive live chunks. All boundaries are exact sample indices on the
source's 16 kHz clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from onespeech.features.pcm import MAX_CHUNK_SAMPLES, SAMPLE_RATE
from onespeech.features.segments import SpeechRegion
from onespeech.features.spans import SampleSpan

_QUIET_WINDOW = SAMPLE_RATE // 10  # 100 ms energy window
_SEARCH = 5 * SAMPLE_RATE  # look for the quietest point in the last 5 s before the bound
_MIN_REST = SAMPLE_RATE  # never leave less than 1 s after a forced split


@dataclass(frozen=True)
class Chunk(SampleSpan):
    """Samples ``start`` (inclusive) to ``end`` (exclusive) of the source, recognized as one input."""


def plan_chunks(
    regions: Sequence[SpeechRegion],
    n_samples: int,
    pcm: np.ndarray | None = None,
    max_samples: int = MAX_CHUNK_SAMPLES,
    group: bool = True,
) -> list[Chunk]:
    """Plan the chunks of speech regions, each at most ``max_samples`` samples.

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
    group : bool
        True (the file plan): consecutive regions grouped into chunks of at most
        ``max_samples``. False (the live plan): each region (or piece of a long
        region) is a chunk.

    Returns
    -------
    list of Chunk
        In source order, non-overlapping, each at most ``max_samples`` long.
    """
    if pcm is not None and np.asarray(pcm).shape != (n_samples,):
        raise ValueError(f"pcm has shape {np.asarray(pcm).shape}; expected ({n_samples},) to match n_samples")
    _check_regions(regions, n_samples)
    planner = ChunkPlanner(max_samples, group)
    chunks: list[Chunk] = []
    for region in regions:
        chunks.extend(planner.add(region, pcm))
    return chunks + planner.finish()


class ChunkPlanner:
    """:func:`plan_chunks` over a stream: regions go in as the VAD releases them.

    ``add`` takes a closed region and returns the chunks that can no longer change;
    ``cut_open`` takes the region still in progress (its start final, its end known
    to come at or after ``min_end``) and hands out the pieces of it that no later
    audio can move; ``finish`` closes the last chunk. Fed any way, the chunks are
    exactly those of ``plan_chunks`` over all the regions: a piece is cut in progress
    only once the region is certain to run 1 s past the bound from the piece's start,
    where the quietest-point search no longer depends on the region's end.
    ``open_start`` is the first sample of the chunk still open and ``cut_until`` the
    end of the pieces already cut from the region in progress (None if none): a
    streaming caller keeps the audio from the earlier of the two on.
    """

    def __init__(self, max_samples: int = MAX_CHUNK_SAMPLES, group: bool = True) -> None:
        if max_samples < 2 * _MIN_REST:
            raise ValueError(f"max_samples={max_samples} is below {2 * _MIN_REST} (2 s)")
        self.max_samples = max_samples
        self.group = group
        self._start: int | None = None
        self._end = 0
        self._previous_end = 0
        self._cut: int | None = None  # the region in progress is already cut up to here

    @property
    def open_start(self) -> int | None:
        return self._start

    @property
    def cut_until(self) -> int | None:
        return self._cut

    def add(self, region: SpeechRegion, pcm: np.ndarray | None = None, pcm_offset: int = 0) -> list[Chunk]:
        """Add the next region; return the chunks it closes.

        ``pcm`` holds samples ``pcm_offset`` onwards of the source and must cover the
        region (from ``cut_until`` if it was cut in progress); it is read only when the
        region is longer than ``max_samples``.
        """
        if not 0 <= region.start < region.end or region.start < self._previous_end:
            raise ValueError(f"region ({region.start}, {region.end}) is empty or starts before the previous "
                             f"region ends ({self._previous_end}); regions must be sorted and non-overlapping")
        start = region.start
        if self._cut is not None:
            if not region.start <= self._cut < region.end:
                raise ValueError(f"region ({region.start}, {region.end}) is not the region cut in progress "
                                 f"up to {self._cut}")
            start, self._cut = self._cut, None
        self._previous_end = region.end
        closed: list[Chunk] = []
        for piece in _split_long(SpeechRegion(start, region.end), pcm, self.max_samples, pcm_offset):
            closed += self._take(*piece)
        return closed

    def cut_open(self, start: int, min_end: int, pcm: np.ndarray, pcm_offset: int = 0) -> list[Chunk]:
        """Cut the region in progress (from ``start``, ending at or after ``min_end``) where it is certain.

        ``pcm`` holds samples ``pcm_offset`` onwards and must cover the region so far
        (from ``cut_until`` if it was cut before). Returns the chunks this closes.
        """
        if start < self._previous_end:
            raise ValueError(f"the region in progress starts at {start}, before the previous region ends "
                             f"({self._previous_end})")
        closed: list[Chunk] = []
        piece_start = start if self._cut is None else self._cut
        # _split_long's next cut searches below piece_start + max_samples as long as the region runs to
        # piece_start + max_samples + 1 s or later: from min_end on, that cut is final
        while min_end - piece_start >= self.max_samples + _MIN_REST:
            cut = _next_cut(piece_start, piece_start + self.max_samples, pcm, pcm_offset)
            closed += self._take(piece_start, cut)
            piece_start = self._cut = cut
        return closed

    def finish(self) -> list[Chunk]:
        """Close the open chunk (if any)."""
        if self._start is None:
            return []
        chunk = Chunk(self._start, self._end)
        self._start = None
        return [chunk]

    def _take(self, piece_start: int, piece_end: int) -> list[Chunk]:
        """The next piece: it extends the open chunk or closes it (the live plan: every piece closes at once)."""
        if not self.group:
            return [Chunk(piece_start, piece_end)]
        if self._start is not None and piece_end - self._start <= self.max_samples:
            self._end = piece_end  # extend the open chunk across the silence
            return []
        closed = [Chunk(self._start, self._end)] if self._start is not None else []
        self._start, self._end = piece_start, piece_end
        return closed


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
        cut = _next_cut(start, min(start + max_samples, end - _MIN_REST), pcm, offset)  # type: ignore[arg-type]
        pieces.append((start, cut))
        start = cut
    pieces.append((start, end))
    return pieces


def _next_cut(start: int, high: int, pcm: np.ndarray, offset: int) -> int:
    """The quietest point in the last 5 s before ``high`` (at least 1 s after ``start``)."""
    low = max(start + _MIN_REST, high - _SEARCH)
    return offset + _quietest_point(pcm, low - offset, high - offset)


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
