"""PCM validation shared by every model entry point.

Input to the models is 16 kHz mono float32 PCM. Empty input is valid (callers return
an empty result); nonempty input must exceed 200 samples, because the log-mel front
end reflects 200 samples on each side of the signal. Nonfinite samples and inputs
whose power overflows float32 are refused, naming the offending index or value.
Audio that arrives in blocks (a decoded file, a live stream) is checked with
``StreamedPcm``: the value rules per block, the length and power rules on the whole.
"""

from __future__ import annotations

import os

import numpy as np

from onespeech.features.errors import (
    NonFiniteSampleError,
    PcmPowerOverflowError,
    PcmScaleError,
    PcmShapeError,
    PcmTooLongError,
    PcmTooShortError,
    SampleRateError,
)

#: The only sample rate the models take, in Hz (mono float32 PCM).
SAMPLE_RATE = 16000
MIN_SAMPLES_EXCLUSIVE = 200  # n_fft // 2: the reflection pad needs more samples than this
CHUNK_SECONDS = 30  # one recognition, and the public Whisper extractor, see at most 30 s
#: Samples in the longest chunk one recognition sees (30 s at 16 kHz).
MAX_CHUNK_SAMPLES = CHUNK_SECONDS * SAMPLE_RATE  # 480000
ALIGNMENT_MAX_SECONDS = 300  # the forced aligner's bounded input
#: Samples in the longest audio one forced alignment takes (300 s at 16 kHz).
ALIGNMENT_MAX_SAMPLES = ALIGNMENT_MAX_SECONDS * SAMPLE_RATE  # 4800000
_FLOAT32_MAX = float(np.finfo(np.float32).max)
# every input path (a file header, a live push, the WebSocket's query, stdin) takes rates in this range
MIN_INPUT_SAMPLE_RATE = 1000  # at most 16x upsampling to 16 kHz (8 kHz telephony and every real rate pass)
MAX_INPUT_SAMPLE_RATE = 768_000  # the highest rate in use (768 kHz PCM)
MAX_FLOAT_PEAK = 2.0  # float input: [-1, 1] plus 6 dB for unclipped float audio; int16 scale is far beyond


def validate_pcm(pcm: np.ndarray, *, max_samples: int | None = None, allow_empty: bool = True) -> np.ndarray:
    """Check 16 kHz mono PCM and return it as a C-contiguous float32 array.

    Parameters
    ----------
    pcm : ndarray[floating], shape (n_samples,)
        Mono samples, nominally in [-1, 1]. float64 input is converted to float32.
    max_samples : int or None
        Upper bound of the calling entry point, if any.
    allow_empty : bool
        Whether empty input is valid (it is for recognition, whose result is then
        empty; alignment needs audio).

    Returns
    -------
    ndarray[float32], shape (n_samples,)
        The same samples (no copy when already float32 and contiguous).

    Raises
    ------
    PcmShapeError
        Not a one-dimensional floating-point array.
    PcmTooShortError
        200 samples or fewer (nonempty, or empty when ``allow_empty`` is False).
    PcmTooLongError
        More than ``max_samples`` samples.
    NonFiniteSampleError
        A NaN or infinite sample (the first one is named).
    PcmPowerOverflowError
        The sum of squared samples exceeds the float32 maximum (this includes float64
        samples beyond the float32 range).
    """
    array = _pcm_array(pcm)
    n_samples = array.shape[0]
    if n_samples == 0 and allow_empty:
        return np.zeros(0, dtype=np.float32)
    if n_samples <= MIN_SAMPLES_EXCLUSIVE:
        raise PcmTooShortError(n_samples, allow_empty)
    if max_samples is not None and n_samples > max_samples:
        raise PcmTooLongError(n_samples, max_samples)
    _check_finite(array)
    power = _power(array)
    if power > _FLOAT32_MAX:
        raise PcmPowerOverflowError(power)
    samples = np.ascontiguousarray(array, dtype=np.float32)
    return samples


class StreamedPcm:
    """``validate_pcm``'s rules for audio that arrives in blocks of any size.

    The rules on values (1-D floating point, finite) hold for every block; the rules on
    the whole audio (nonempty audio exceeds 200 samples, its power fits float32) are
    about the audio, not its blocks: a 98 s file may well end with a block of 100
    samples. ``block`` checks one block and keeps the totals; ``finish`` checks the length.
    """

    def __init__(self) -> None:
        self.n_samples = 0
        self.power = 0.0

    def block(self, pcm: np.ndarray) -> np.ndarray:
        """Check the next block; return it as C-contiguous float32.

        Raises
        ------
        PcmShapeError
            Not a one-dimensional floating-point array.
        NonFiniteSampleError
            A NaN or infinite sample, named by its index in the whole audio.
        PcmPowerOverflowError
            The audio so far has a sum of squared samples beyond the float32 maximum.
        """
        array = _pcm_array(pcm)
        try:
            _check_finite(array)
        except NonFiniteSampleError as error:  # name the sample on the audio's clock, not the block's
            raise NonFiniteSampleError(self.n_samples + error.index, error.value) from None
        self.power += _power(array)
        if self.power > _FLOAT32_MAX:
            raise PcmPowerOverflowError(self.power)
        self.n_samples += array.shape[0]
        return np.ascontiguousarray(array, dtype=np.float32)

    def finish(self) -> int:
        """The end of the audio: its length in samples.

        Raises
        ------
        PcmTooShortError
            Nonempty audio of 200 samples or fewer.
        """
        if 0 < self.n_samples <= MIN_SAMPLES_EXCLUSIVE:
            raise PcmTooShortError(self.n_samples)
        return self.n_samples


def _pcm_array(pcm: np.ndarray) -> np.ndarray:
    """``pcm`` as an array, refused unless it is 1-D floating point."""
    if isinstance(pcm, (str, bytes, os.PathLike)):
        raise PcmShapeError(
            f"got {type(pcm).__name__} {pcm!r} where 16 kHz mono PCM samples are expected; "
            "read a file with onespeech.features.load_audio(path) first"
        )
    array = np.asarray(pcm)
    if array.ndim != 1:
        raise PcmShapeError(
            f"PCM has shape {array.shape}; expected a 1-D array of 16 kHz mono samples "
            "(downmix multichannel audio first)"
        )
    if not np.issubdtype(array.dtype, np.floating):
        raise PcmShapeError(
            f"PCM has dtype {array.dtype}; expected float32 samples in [-1, 1] "
            "(convert integer PCM by dividing by its full-scale value)"
        )
    return array


def _power(array: np.ndarray) -> float:
    """Sum of squared samples, in float64.

    A float32 square is at most ~1.2e77, so only float64 input beyond the float32 range
    can overflow here, and that overflows float32 too.
    """
    wide = array.astype(np.float64, copy=False)
    with np.errstate(over="ignore"):
        return float(np.dot(wide, wide))


def _check_finite(array: np.ndarray) -> None:
    finite = np.isfinite(array)
    if not finite.all():
        index = int(np.argmin(finite))
        raise NonFiniteSampleError(index, float(array[index]))


def check_sample_rate(rate: object, source: str, *, subject: str = "the sample rate is") -> int:
    """The input sample-rate rule of every path, checked before any resampler starts.

    A rate outside 1000..768000 Hz turns a small input into unbounded work: a 1 Hz
    header made 48 KB of WAV into 384 M samples, and soxr spins on a rate of 10**14.

    Parameters
    ----------
    rate : int
        The rate the input declares (a file header, a ``push`` argument, a query parameter).
    source : str
        Names the input in the message (a file name, ``<stdin>``, ``sample_rate``).
    subject : str
        Words before the rate in the message ("the header declares a sample rate of").

    Returns
    -------
    int
        The rate as a Python int.

    Raises
    ------
    SampleRateError
        Not a whole number of Hz, or outside 1000..768000 Hz (the message gives the range).
    """
    accepted = f"audio from {MIN_INPUT_SAMPLE_RATE} to {MAX_INPUT_SAMPLE_RATE} Hz is accepted"
    if isinstance(rate, (bool, np.bool_)) or not isinstance(rate, (int, np.integer)):
        raise SampleRateError(source, f"{subject} {rate!r}, not a whole number of Hz; {accepted}")
    if not MIN_INPUT_SAMPLE_RATE <= rate <= MAX_INPUT_SAMPLE_RATE:
        raise SampleRateError(source, f"{subject} {rate} Hz; {accepted} (outside it a small input turns into "
                              "unbounded resampling work)")
    return int(rate)


def check_float_samples(array: np.ndarray, offset: int = 0) -> None:
    """The value rules for float samples that arrive in blocks: finite, and on the [-1, 1] scale.

    ``validate_pcm`` does not bound values (decoded files are on that scale by
    construction); a live block is refused when a sample exceeds ``MAX_FLOAT_PEAK`` in
    magnitude, which catches integer PCM passed as floats (peaks in the thousands)
    while leaving room for the overs of unclipped float audio. ``offset`` is the
    block's first index in the whole stream, so the message names the stream's sample.

    Raises
    ------
    NonFiniteSampleError
        A NaN or infinite sample.
    PcmScaleError
        A sample beyond +-``MAX_FLOAT_PEAK``.
    """
    try:
        _check_finite(array)
    except NonFiniteSampleError as error:
        raise NonFiniteSampleError(offset + error.index, error.value) from None
    if array.shape[0]:
        index = int(np.argmax(np.abs(array)))
        if abs(float(array[index])) > MAX_FLOAT_PEAK:
            raise PcmScaleError(offset + index, float(array[index]), MAX_FLOAT_PEAK)
