"""A stretch of a 16 kHz source as exact sample indices: what a speech region and a chunk both are."""

from __future__ import annotations

from dataclasses import dataclass

from onespeech.features.pcm import SAMPLE_RATE

__all__ = ["SampleSpan"]


@dataclass(frozen=True)
class SampleSpan:
    """Samples ``start`` (inclusive) to ``end`` (exclusive) of a 16 kHz source."""

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
