"""Resemblyzer's GE2E voice encoder in numpy: 3-layer LSTM, linear, ReLU, L2 norm.

The network of ``resemblyzer.VoiceEncoder`` (0.1.4): ``nn.LSTM(40, 256, 3,
batch_first=True)`` over 160-frame mel windows ("partials"), the last layer's final
hidden state through ``nn.Linear(256, 256)`` and a ReLU, divided by its L2 norm.
An utterance is cut into partials at 1.3 per second (every 77 frames); the last one
is kept (zero-padded) when it covers at least 75 % of a window; the utterance's
embedding is the L2-normalised mean of its partial embeddings
(``VoiceEncoder.embed_utterance``).

The LSTM runs over a whole batch of partials, all three layers advancing together
one block of ``STEP_BLOCK`` time steps at a time: a layer's input projection for the
block is one matrix product, then each step is one ``(batch, 256) @ (256, 1024)``
product plus the gate nonlinearities (PyTorch gate order i, f, g, o). Only a block's
buffers exist at once, so a batch of 128 partials needs about 12 MB, not the 130 MB
of projecting all 160 steps of a layer at once. Everything is float32 like the
reference.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from onespeech.features.errors import EncoderWeightsError
from onespeech.features.speaker_mel import N_MELS, mel_frames
from onespeech.kernels.tensorfile import read_tensor_file
from onespeech.kernels.threads import thread_limit

SAMPLE_RATE = 16000
HOP = 160
PARTIAL_FRAMES = 160  # 1.6 s
HIDDEN = 256
EMBEDDING = 256
LAYERS = 3
RATE = 1.3  # partials per second
MIN_COVERAGE = 0.75
BATCH = 128  # partials per LSTM pass: the gate buffers (128 x 1024 float32) stay in cache
STEP_BLOCK = 16  # time steps projected at once: 8 MB of input gates for a batch, not 84 MB for 160 steps

TENSOR_SHAPES: dict[str, tuple[int, ...]] = {
    **{
        name: shape
        for layer in range(LAYERS)
        for name, shape in (
            (f"lstm.weight_ih_l{layer}", (4 * HIDDEN, N_MELS if layer == 0 else HIDDEN)),
            (f"lstm.weight_hh_l{layer}", (4 * HIDDEN, HIDDEN)),
            (f"lstm.bias_ih_l{layer}", (4 * HIDDEN,)),
            (f"lstm.bias_hh_l{layer}", (4 * HIDDEN,)),
        )
    },
    "linear.weight": (EMBEDDING, HIDDEN),
    "linear.bias": (EMBEDDING,),
}


def partial_slices(
    n_samples: int, rate: float = RATE, min_coverage: float = MIN_COVERAGE
) -> list[tuple[int, int]]:
    """Frame ranges ``(start, stop)`` of the partials of an ``n_samples`` waveform.

    ``VoiceEncoder.compute_partial_slices``: windows of 160 frames every
    ``round(16000 / rate / 160)`` frames; the last is dropped when it covers less than
    ``min_coverage`` of a window, unless it is the only one. Multiply by 160 for samples.
    """
    if not 0 < min_coverage <= 1:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage}")
    n_frames = int(np.ceil((n_samples + 1) / HOP))
    step = int(np.round((SAMPLE_RATE / rate) / HOP))
    if not 0 < step <= PARTIAL_FRAMES:
        raise ValueError(f"rate {rate} gives a step of {step} frames; it must be in 1..{PARTIAL_FRAMES}")
    slices = [(i, i + PARTIAL_FRAMES) for i in range(0, max(1, n_frames - PARTIAL_FRAMES + step + 1), step)]
    start, stop = slices[-1]
    coverage = (n_samples - start * HOP) / ((stop - start) * HOP)
    if coverage < min_coverage and len(slices) > 1:
        slices.pop()
    return slices


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # 1 / (1 + exp(-x)) in place; exp overflows to inf for x < -88 and gives exactly 0, as wanted
    with np.errstate(over="ignore"):
        np.negative(x, out=x)
        np.exp(x, out=x)
    x += 1.0
    np.reciprocal(x, out=x)
    return x


@dataclass
class _Layer:
    w_ih_t: np.ndarray  # (in, 4H)
    w_hh_t: np.ndarray  # (H, 4H)
    bias: np.ndarray  # (4H,) = b_ih + b_hh


class SpeakerEncoder:
    """The GE2E encoder with weights in Resemblyzer's state-dict names (see ``TENSOR_SHAPES``)."""

    def __init__(self, weights: Mapping[str, np.ndarray], *, threads: int | None = None) -> None:
        missing = sorted(set(TENSOR_SHAPES) - set(weights))
        if missing:
            raise EncoderWeightsError(f"encoder weights lack {', '.join(missing)}")
        for name, shape in TENSOR_SHAPES.items():
            a = weights[name]
            if tuple(a.shape) != shape:
                raise EncoderWeightsError(f"{name} has shape {tuple(a.shape)}, expected {shape}")
            if not np.isfinite(a).all():
                raise EncoderWeightsError(f"{name} holds non-finite values")
        f32 = {name: np.asarray(weights[name], dtype=np.float32) for name in TENSOR_SHAPES}
        self.layers = [
            _Layer(
                np.ascontiguousarray(f32[f"lstm.weight_ih_l{i}"].T),
                np.ascontiguousarray(f32[f"lstm.weight_hh_l{i}"].T),
                (f32[f"lstm.bias_ih_l{i}"] + f32[f"lstm.bias_hh_l{i}"]).astype(np.float32),
            )
            for i in range(LAYERS)
        ]
        self.linear_t = np.ascontiguousarray(f32["linear.weight"].T)
        self.linear_bias = f32["linear.bias"].copy()
        self.threads = threads

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, threads: int | None = None) -> SpeakerEncoder:
        """Load a runtime tensor file written by :func:`onespeech.features.resemblyzer_convert.convert_resemblyzer`."""
        with read_tensor_file(path) as tf:
            return cls({name: np.array(tf[name]) for name in TENSOR_SHAPES if name in tf}, threads=threads)

    # -- network -------------------------------------------------------------------
    def embed_partials(self, mels: np.ndarray) -> np.ndarray:
        """L2-normalised embeddings of mel windows ``(n, frames, 40)`` -> ``(n, 256)`` float32."""
        mels = np.asarray(mels, dtype=np.float32)
        if mels.ndim != 3 or mels.shape[2] != N_MELS or mels.shape[1] == 0:
            raise ValueError(f"mels must have shape (n, frames > 0, {N_MELS}), got {mels.shape}")
        out = np.empty((mels.shape[0], EMBEDDING), dtype=np.float32)
        with thread_limit(self.threads):
            for start in range(0, mels.shape[0], BATCH):
                out[start : start + BATCH] = self._forward(mels[start : start + BATCH])
        return out

    def _forward(self, x: np.ndarray) -> np.ndarray:
        batch, steps, _ = x.shape
        hs = [np.zeros((batch, HIDDEN), dtype=np.float32) for _ in self.layers]
        cs = [np.zeros((batch, HIDDEN), dtype=np.float32) for _ in self.layers]
        gates = np.empty((batch, 4 * HIDDEN), dtype=np.float32)
        # all layers advance one block of steps at a time: a layer needs only the block below it,
        # so the buffers are (batch, STEP_BLOCK, ...) instead of (batch, steps, ...)
        for first in range(0, steps, STEP_BLOCK):
            block = x[:, first : first + STEP_BLOCK]
            n = block.shape[1]
            for layer, h, c in zip(self.layers, hs, cs, strict=True):
                projected = (np.ascontiguousarray(block).reshape(batch * n, -1) @ layer.w_ih_t).reshape(
                    batch, n, 4 * HIDDEN
                )
                projected += layer.bias
                outputs = np.empty((batch, n, HIDDEN), dtype=np.float32)
                for t in range(n):
                    np.matmul(h, layer.w_hh_t, out=gates)
                    gates += projected[:, t]
                    i = _sigmoid(gates[:, :HIDDEN])
                    f = _sigmoid(gates[:, HIDDEN : 2 * HIDDEN])
                    g = np.tanh(gates[:, 2 * HIDDEN : 3 * HIDDEN], out=gates[:, 2 * HIDDEN : 3 * HIDDEN])
                    o = _sigmoid(gates[:, 3 * HIDDEN :])
                    c *= f
                    c += i * g
                    np.tanh(c, out=h)
                    h *= o
                    outputs[:, t] = h
                block = outputs
        raw = np.maximum(hs[-1] @ self.linear_t + self.linear_bias, 0.0)
        norms = np.linalg.norm(raw, axis=1, keepdims=True)
        return (raw / norms).astype(np.float32)

    # -- utterances ------------------------------------------------------------------
    def utterance_mels(
        self, wav: np.ndarray, rate: float = RATE, min_coverage: float = MIN_COVERAGE
    ) -> tuple[np.ndarray, list[tuple[int, int]]]:
        """The partial mel windows of one preprocessed waveform and their frame ranges."""
        wav = np.asarray(wav, dtype=np.float32)
        slices = partial_slices(wav.shape[0], rate, min_coverage)
        needed = slices[-1][1] * HOP
        if needed >= wav.shape[0]:
            wav = np.pad(wav, (0, needed - wav.shape[0]))
        mel = mel_frames(wav)
        return np.stack([mel[a:b] for a, b in slices]), slices

    def embed_utterance(
        self, wav: np.ndarray, rate: float = RATE, min_coverage: float = MIN_COVERAGE
    ) -> np.ndarray:
        """``VoiceEncoder.embed_utterance(wav)``: the normalised mean of the partial embeddings."""
        mels, _ = self.utterance_mels(wav, rate, min_coverage)
        return mean_embedding(self.embed_partials(mels))


def mean_embedding(partials: np.ndarray) -> np.ndarray:
    """L2-normalised mean of embeddings (rows), float32."""
    raw = np.mean(partials, axis=0)
    return (raw / np.linalg.norm(raw, 2)).astype(np.float32)
