"""Speech regions of a 16 kHz stream, with the samples they cover, as soon as they close.

:class:`SpeechRegionStream` scores each block with a fresh Silero VAD stream and hands
the probabilities to the segmenter (``onespeech.features.SpeechSegmenter``), which
closes a region once no later audio can change it. Both are exact for any split into
blocks, so the regions are those of ``SileroVad.speech_regions`` over the whole audio.

The stream holds audio only from the segmenter's horizon (the earliest sample a region
still to come can cover) or from what its caller still needs, whichever the caller
releases: memory follows the open region, not the length of the stream.
"""

from __future__ import annotations

import numpy as np

from onespeech.features import SileroVad, SpeechRegion, SpeechSegmenter, VadOptions

__all__ = ["SampleBuffer", "SpeechRegionStream"]

_MIN_CAPACITY = 1 << 16


class SpeechRegionStream:
    """Feed blocks, get the closed speech regions; read their samples, then release them.

    Parameters
    ----------
    vad : SileroVad
        Shared read-only; the stream has its own recurrent state.
    options : VadOptions, optional
        Segmentation settings.
    """

    def __init__(self, vad: SileroVad, options: VadOptions | None = None) -> None:
        self._vad_stream = vad.stream()
        self._segmenter = SpeechSegmenter(options)
        self.buffer = SampleBuffer()

    @property
    def n_samples(self) -> int:
        """Samples fed so far."""
        return self.buffer.end

    @property
    def horizon(self) -> int:
        """No region returned from now on starts before this sample."""
        return self._segmenter.horizon

    def feed(self, pcm: np.ndarray) -> list[SpeechRegion]:
        """Consume the next samples; return the regions they close (their samples are still held).

        Raises
        ------
        PcmShapeError, NonFiniteSampleError
            The block is not 1-D float PCM, or holds a NaN or infinity.
        """
        probabilities = self._vad_stream.feed(pcm)  # validates the block
        self.buffer.append(pcm)
        return self._segmenter.feed(probabilities)

    def finish(self) -> list[SpeechRegion]:
        """End of the stream: the regions still open."""
        return self._segmenter.feed(self._vad_stream.finish()) + self._segmenter.finish(self.n_samples)

    def samples(self, region: SpeechRegion) -> np.ndarray:
        """A copy of the region's samples (they must not be released yet)."""
        return self.buffer.view(region.start, region.end).copy()

    def release(self, before: int) -> None:
        """Drop the samples before ``before`` (the caller needs none of them any more)."""
        self.buffer.drop_before(before)


class SampleBuffer:
    """Samples ``start`` to ``end`` of a stream in one growable array (amortized O(1) append)."""

    def __init__(self) -> None:
        self._data = np.zeros(_MIN_CAPACITY, dtype=np.float32)
        self._head = 0  # index in _data of sample `start`
        self.start = 0
        self.end = 0

    def append(self, pcm: np.ndarray) -> None:
        n = pcm.shape[0]
        used = self.end - self.start
        if self._head + used + n > self._data.shape[0]:
            capacity = max(_MIN_CAPACITY, 2 * (used + n))
            # grow, or shrink once a long stretch was released, so a long region's peak is not kept for good
            if capacity > self._data.shape[0] or 2 * capacity <= self._data.shape[0]:
                data = np.zeros(capacity, dtype=np.float32)
            else:
                data = self._data
            data[:used] = self._data[self._head : self._head + used]  # numpy copies overlapping ranges correctly
            self._data, self._head = data, 0
        self._data[self._head + used : self._head + used + n] = pcm
        self.end += n

    def drop_before(self, sample: int) -> None:
        drop = min(max(0, sample - self.start), self.end - self.start)
        self._head += drop
        self.start += drop

    def held(self) -> np.ndarray:
        return self._data[self._head : self._head + self.end - self.start]

    def view(self, start: int, end: int) -> np.ndarray:
        if not self.start <= start <= end <= self.end:
            raise RuntimeError(f"samples {start}..{end} are not held (held: {self.start}..{self.end})")
        return self._data[self._head + start - self.start : self._head + end - self.start]
