"""Resemblyzer's front end: volume normalisation and its 40-band mel power spectrogram.

``resemblyzer.audio.wav_to_mel_spectrogram`` is ``librosa.feature.melspectrogram``
with ``n_fft=400`` (25 ms), ``hop_length=160`` (10 ms), 40 Slaney mel bands, power 2,
a centred periodic Hann window and zero padding of 200 samples at both ends
(librosa >= 0.10's ``pad_mode="constant"``): ``1 + n_samples // 160`` frames, no log.
We transform in float64 and round once to float32, so our frames are at least as close
to the exact values as librosa's float32 ones (the parity bound is theirs).
"""

from __future__ import annotations

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from onespeech.features.mel import HOP_LENGTH, N_FFT, hann_window, slaney_mel_filters

N_MELS = 40
TARGET_DBFS = -30.0
INT16_MAX = 2**15 - 1
_BLOCK_FRAMES = 512


def normalize_volume(wav: np.ndarray, target_dbfs: float = TARGET_DBFS) -> np.ndarray:
    """Raise (never lower) the level of ``wav`` to ``target_dbfs`` RMS, as Resemblyzer's
    ``normalize_volume(wav, -30, increase_only=True)``; silence is returned unchanged."""
    wav = np.asarray(wav, dtype=np.float32)
    rms = float(np.sqrt(np.mean(np.square(wav.astype(np.float64) * INT16_MAX)))) if wav.size else 0.0
    if rms == 0.0:
        return wav
    change_db = target_dbfs - 20.0 * np.log10(rms / INT16_MAX)
    if change_db < 0:
        return wav
    return (wav * np.float32(10.0 ** (change_db / 20.0))).astype(np.float32)


def mel_frames(wav: np.ndarray) -> np.ndarray:
    """Mel power frames of a 16 kHz waveform, float32 array (1 + n // 160, 40)."""
    wav = np.asarray(wav)
    if wav.ndim != 1:
        raise ValueError(f"expected a 1-D waveform, got shape {wav.shape}")
    padded = np.pad(wav.astype(np.float64), N_FFT // 2, mode="constant")
    n_frames = 1 + wav.shape[0] // HOP_LENGTH
    frames = sliding_window_view(padded, N_FFT)[::HOP_LENGTH][:n_frames]
    filters = slaney_mel_filters(N_MELS)
    window = hann_window()
    out = np.empty((n_frames, N_MELS), dtype=np.float32)
    for start in range(0, n_frames, _BLOCK_FRAMES):
        spectrum = np.fft.rfft(frames[start : start + _BLOCK_FRAMES] * window, axis=-1)
        power = np.square(spectrum.real)
        power += np.square(spectrum.imag)
        out[start : start + power.shape[0]] = power @ filters
    return out
