"""Whisper log-mel front end (128 bins), as the pinned Qwen3 preprocessors request it.

16 kHz mono; 400-sample periodic Hann window; 160-sample hop; centered reflection
padding of 200 samples; |STFT|^2 through Slaney-normalised Slaney-scale mel filters;
power floor 1e-10; log10; clip to (max - 8); then (x + 4) / 4. The output is mel-major
with ``n_samples // 160`` frames: the final STFT frame is dropped, as transformers'
``WhisperFeatureExtractor`` does.

How the reference calls the extractor (qwen-asr 0.0.6, ``Qwen3ASRProcessor``): with
``padding=True`` (pad to the longest input of the batch), ``truncation=False`` and
``return_attention_mask=True``. For one utterance that means no padding to 30 s and
no truncation: the features cover exactly the utterance, ``n_samples // 160`` frames,
and the clip to (max - 8) uses the utterance's own maximum. That is what
``log_mel_spectrogram`` computes. (When the reference batches several utterances,
shorter ones are zero-padded to the longest before the STFT, which changes their last
frames and their maximum; OneSpeech recognizes one utterance at a time.)

Numerics: frames are windowed and transformed in float64 with one batched real FFT
(no per-frame Python loop), filtered in float64, then rounded to float32 after log10,
the same order as the transformers numpy path. The torch path of the reference
(float32 STFT) agrees within the 3e-5 feature tolerance.
"""

from __future__ import annotations

import functools

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from onespeech.features.pcm import ALIGNMENT_MAX_SECONDS, CHUNK_SECONDS, SAMPLE_RATE, validate_pcm
from onespeech.kernels.threads import thread_limit

N_FFT = 400  # 25 ms window at 16 kHz
HOP_LENGTH = 160  # 10 ms hop
N_MELS = 128  # feature_size of the pinned preprocessor_config.json
N_FREQS = N_FFT // 2 + 1  # 201 one-sided bins
POWER_FLOOR = 1e-10
_BLOCK_FRAMES = 256  # frames per FFT batch: the float64 temporaries (~0.8 MB each) stay in cache
_FILTERS_PER_BAND = 16


def log_mel_spectrogram(pcm: np.ndarray) -> np.ndarray:
    """Whisper log-mel features of one utterance of at most 30 s.

    Parameters
    ----------
    pcm : ndarray[float32], shape (n_samples,)
        16 kHz mono samples; empty, or more than 200 and at most 480000 samples.

    Returns
    -------
    ndarray[float32], shape (128, n_samples // 160)
        Mel-major features, as ``WhisperFeatureExtractor`` returns them for one
        unpadded utterance.

    Raises
    ------
    PcmError
        The samples fail ``validate_pcm``, or the input is longer than 30 s
        (``PcmTooLongError``).
    """
    return log_mel(pcm, max_seconds=CHUNK_SECONDS)  # chunk_length of the pinned preprocessor


def log_mel(pcm: np.ndarray, max_seconds: float = ALIGNMENT_MAX_SECONDS) -> np.ndarray:
    """Whisper log-mel features with a caller-chosen bound (the aligner allows 300 s).

    Same parameters, result and errors as :func:`log_mel_spectrogram`, with at most
    ``max_seconds * 16000`` samples.
    """
    samples = validate_pcm(pcm, max_samples=int(round(max_seconds * SAMPLE_RATE)))
    n_frames = samples.shape[0] // HOP_LENGTH
    if n_frames == 0:
        return np.zeros((N_MELS, 0), dtype=np.float32)
    # the filter products are small (256 x ~20 x 16): a multi-threaded BLAS pool only
    # adds wake-ups (twice slower on a busy machine), so they run on one thread
    with thread_limit(1):
        log_spec = _log10_mel_power(samples, n_frames)
    log_spec = np.maximum(log_spec, log_spec.max() - np.float32(8.0))
    log_spec += np.float32(4.0)
    log_spec /= np.float32(4.0)
    return np.ascontiguousarray(log_spec.T)


def _log10_mel_power(samples: np.ndarray, n_frames: int) -> np.ndarray:
    """log10(max(mel power, 1e-10)) rounded to float32, frame-major (n_frames, 128)."""
    padded = np.pad(samples.astype(np.float64), N_FFT // 2, mode="reflect")
    # frame t covers padded[160 t : 160 t + 400]; the last STFT frame is never computed
    frames = sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]
    window = hann_window()
    bands = _filter_bands()
    out = np.empty((n_frames, N_MELS), dtype=np.float32)
    mel_power = np.empty((_BLOCK_FRAMES, N_MELS), dtype=np.float64)
    # blocks of frames keep the float64 temporaries in cache
    for start in range(0, n_frames, _BLOCK_FRAMES):
        block = frames[start : start + _BLOCK_FRAMES] * window
        n = block.shape[0]
        spectrum = np.fft.rfft(block, axis=-1)
        power = np.square(spectrum.real)
        power += np.square(spectrum.imag)
        # each filter touches a narrow range of bins: multiply only the nonzero bands
        for first_mel, last_mel, first_bin, last_bin, weights in bands:
            np.matmul(power[:, first_bin:last_bin], weights, out=mel_power[:n, first_mel:last_mel])
        np.maximum(mel_power[:n], POWER_FLOOR, out=mel_power[:n])
        np.log10(mel_power[:n], out=mel_power[:n])
        out[start : start + n] = mel_power[:n]
    return out


@functools.cache
def _filter_bands() -> tuple[tuple[int, int, int, int, np.ndarray], ...]:
    """The filter bank cut into groups of 16 filters with the bin range they cover.

    Skipping the zero weights does not change any sum (they add exact zeros) and
    cuts the filter multiply about eightfold.
    """
    filters = mel_filters()
    bands = []
    for first_mel in range(0, N_MELS, _FILTERS_PER_BAND):
        last_mel = first_mel + _FILTERS_PER_BAND
        nonzero = np.nonzero(filters[:, first_mel:last_mel].any(axis=1))[0]
        first_bin, last_bin = int(nonzero[0]), int(nonzero[-1]) + 1
        weights = np.ascontiguousarray(filters[first_bin:last_bin, first_mel:last_mel])
        bands.append((first_mel, last_mel, first_bin, last_bin, weights))
    return tuple(bands)


@functools.cache
def hann_window() -> np.ndarray:
    """Periodic Hann window of 400 samples, float64 (``torch.hann_window(400)``)."""
    window = np.hanning(N_FFT + 1)[:-1]  # periodic: drop the last point of a 401-point window
    window.flags.writeable = False
    return window


@functools.cache
def mel_filters() -> np.ndarray:
    """Slaney mel filter bank, float64 array of shape (201, 128), read-only.

    Triangles between 130 points equally spaced on the Slaney mel scale from 0 to
    8000 Hz, evaluated at the 201 FFT bin frequencies and area-normalised (2 / band
    width), as transformers' ``mel_filter_bank(norm="slaney", mel_scale="slaney")``.
    """
    return slaney_mel_filters(N_MELS)


@functools.cache
def slaney_mel_filters(n_mels: int) -> np.ndarray:
    """Slaney-scale, Slaney-normalised mel filters for a 400-point FFT at 16 kHz, (201, n_mels).

    The bank of :func:`mel_filters` with any number of bands (``librosa.filters.mel``
    with ``sr=16000, n_fft=400`` and its defaults, in float64); read-only.
    """
    if not (isinstance(n_mels, int) and 0 < n_mels <= N_FREQS):
        raise ValueError(f"n_mels must be an integer in 1..{N_FREQS}, got {n_mels!r}")
    mel_points = np.linspace(_hz_to_mel(0.0), _hz_to_mel(8000.0), n_mels + 2)
    hz_points = _mel_to_hz(mel_points)
    fft_freqs = np.linspace(0, SAMPLE_RATE // 2, N_FREQS)
    band_widths = np.diff(hz_points)
    slopes = hz_points[None, :] - fft_freqs[:, None]
    down = -slopes[:, :-2] / band_widths[:-1]
    up = slopes[:, 2:] / band_widths[1:]
    filters = np.maximum(0.0, np.minimum(down, up))
    filters *= 2.0 / (hz_points[2:] - hz_points[:-2])
    filters.flags.writeable = False
    return filters


# Slaney mel scale: linear below 1 kHz (3 mels per 200 Hz), logarithmic above it.
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = 15.0
_MELS_PER_LOG_HZ = 27.0 / np.log(6.4)
_LOG_HZ_PER_MEL = np.log(6.4) / 27.0


def _hz_to_mel(hz: float) -> float:
    if hz >= _MIN_LOG_HZ:
        return _MIN_LOG_MEL + float(np.log(hz / _MIN_LOG_HZ)) * _MELS_PER_LOG_HZ
    return 3.0 * hz / 200.0


def _mel_to_hz(mels: np.ndarray) -> np.ndarray:
    hz = 200.0 * mels / 3.0
    log_region = mels >= _MIN_LOG_MEL
    hz[log_region] = _MIN_LOG_HZ * np.exp(_LOG_HZ_PER_MEL * (mels[log_region] - _MIN_LOG_MEL))
    return hz
