"""Speech regions of a 16 kHz stream, with the samples they cover, as soon as they close.

:class:`SpeechRegionStream` scores each block with a fresh Silero VAD stream and hands
the probabilities to the segmenter (:class:`SpeechSegmenter`), which
closes a region once no later audio can change it. Both are exact for any split into
blocks, so the regions are those of ``SileroVad.speech_regions`` over the whole audio.

The stream holds audio only from the segmenter's horizon (the earliest sample a region
still to come can cover) or from what its caller still needs, whichever the caller
releases: memory follows the open region, not the length of the stream.
"""

from __future__ import annotations

import numpy as np

from onespeech.features.sample_buffer import SampleBuffer
from onespeech.features.segments import SpeechRegion, SpeechSegmenter, VadOptions
from onespeech.features.vad import SileroVad

__all__ = ["SpeechRegionStream"]


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
