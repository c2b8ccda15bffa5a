"""Blocks of a live stream at any one rate -> 16 kHz float32: soxr's streaming resampler.

The live paths' input stage (``LiveSession.push``, the server's live WebSocket): the
file path resamples in ``AudioFileSource`` with the same soxr quality, so a stream and
a file of the same audio give the same 16 kHz samples.
"""

from __future__ import annotations

import numpy as np
import soxr

from onespeech.features.errors import PcmShapeError
from onespeech.features.pcm import SAMPLE_RATE, check_float_samples, check_sample_rate

__all__ = ["StreamResampler"]

_INT16_SCALE = 1.0 / 32768.0


class StreamResampler:
    """Blocks at one input rate -> 16 kHz float32, through soxr's streaming resampler.

    int16 blocks are scaled by 1/32768; float blocks are taken as they are. The rate
    is fixed by the first block; soxr's stream gives the samples of a one-shot
    resample of the whole stream (at "HQ" quality, as file decoding uses).

    ``convert`` checks a block completely (the rate by the rule of every input path,
    ``onespeech.features.pcm.check_sample_rate``; shape, dtype, finite values on the
    [-1, 1] scale) before anything changes, so a refused block leaves the stream as it
    was, and no resampler ever starts at a rate outside 1000..768000 Hz.
    """

    def __init__(self) -> None:
        self.sample_rate: int | None = None
        self.n_input = 0  # input samples taken so far (names a bad sample on the stream's clock)
        self._resampler: soxr.ResampleStream | None = None

    def convert(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
        """One block (1-D int16 or float) at ``sample_rate`` -> 16 kHz float32 samples (maybe fewer).

        Raises
        ------
        SampleRateError
            ``sample_rate`` outside 1000..768000 Hz, or not a whole number.
        ValueError
            ``sample_rate`` differs from the stream's (fixed by its first block).
        PcmShapeError
            Not 1-D, or a dtype other than int16 or floating point.
        NonFiniteSampleError, PcmScaleError
            A NaN or infinite sample, or float samples at integer scale (beyond +-2).
        """
        rate = check_sample_rate(sample_rate, "sample_rate", subject="a block is at")
        if self.sample_rate is not None and rate != self.sample_rate:
            raise ValueError(f"sample_rate={rate} differs from this stream's {self.sample_rate}; "
                             "one session has one input rate")
        samples = np.asarray(pcm)
        if samples.ndim != 1:
            raise PcmShapeError(f"a block has shape {samples.shape}; expected 1-D mono samples")
        if samples.dtype == np.int16:
            samples = samples.astype(np.float32) * np.float32(_INT16_SCALE)
        elif np.issubdtype(samples.dtype, np.floating):
            check_float_samples(samples, self.n_input)
            samples = samples.astype(np.float32, copy=False)
        else:
            raise PcmShapeError(f"a block has dtype {samples.dtype}; expected float32/float64 in [-1, 1] "
                                "or int16 samples")
        # checked: from here on the block is taken
        if self.sample_rate is None:
            self.sample_rate = rate
            if rate != SAMPLE_RATE:
                self._resampler = soxr.ResampleStream(rate, SAMPLE_RATE, 1, dtype="float32", quality="HQ")
        self.n_input += samples.shape[0]
        if self._resampler is None:
            return samples
        return np.ascontiguousarray(self._resampler.resample_chunk(samples), dtype=np.float32)

    def flush(self) -> np.ndarray:
        """The samples the resampler still holds (call once, at the end)."""
        if self._resampler is None:
            return np.zeros(0, dtype=np.float32)
        return np.ascontiguousarray(self._resampler.resample_chunk(np.zeros(0, np.float32), last=True),
                                    dtype=np.float32)
