"""Silero VAD (16 kHz) in numpy: speech probability per 512-sample window.

Network (silero-vad 6.2.3 ``silero_vad.onnx``, 16 kHz branch), per window::

    64 context samples + 512 new samples (576)
    -> reflect-pad right by 64 (640) -> STFT as Conv1d(basis [258, 1, 256], stride 128)
    -> magnitude sqrt(re^2 + im^2): 129 bins x 4 frames
    -> Conv1d 129->128 k3 s1 p1, ReLU -> Conv1d 128->64 k3 s2 p1, ReLU
    -> Conv1d 64->64 k3 s2 p1, ReLU -> Conv1d 64->128 k3 s1 p1, ReLU     (1 frame left)
    -> LSTM cell (hidden 128; PyTorch gate order i, f, g, o; state carried across windows)
    -> ReLU -> Conv1d 128->1 k1 -> sigmoid = speech probability

Windows are scored the way the silero-vad package scores a file: the last window
zero-padded, each preceded by the previous window's last 64 samples (zeros before
the first), the recurrent state fresh for each stream.

Only the LSTM step is sequential. The convolutional front end runs over groups of
``GROUP_WINDOWS`` windows at once as a few float32 matrix products. A BLAS product's
rounding depends on the matrix shape, so every group is computed with the same
shape (a partial group is zero-filled, and the rows of a matrix product never depend
on the values of other rows): the probabilities are bit-identical however the audio
is split into blocks, which is what lets file transcription replay a fresh VAD and
require identical boundaries.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager, nullcontext
from pathlib import Path

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from onespeech.features.errors import (
    NonFiniteSampleError,
    PcmShapeError,
    VadModelError,
    VadModelNotFoundError,
)
from onespeech.features.pcm import validate_pcm
from onespeech.features.segments import WINDOW_SAMPLES, SpeechRegion, SpeechSegmenter, VadOptions
from onespeech.kernels.errors import TensorFileError
from onespeech.kernels.tensorfile import read_tensor_file
from onespeech.kernels.threads import thread_limit

CONTEXT_SAMPLES = 64  # carried from the previous window
GROUP_WINDOWS = 32  # windows per front-end batch (~1 s of audio)
HIDDEN = 128
_INPUT = CONTEXT_SAMPLES + WINDOW_SAMPLES  # 576
_N_BINS = 129  # n_fft 256 -> 129 one-sided bins
_N_FRAMES = 4  # (640 - 256) / 128 + 1


class SileroVad:
    """The Silero VAD network with weights laid out for numpy.

    Use :meth:`load` with the publisher ``silero_vad.onnx`` (converted once and
    cached) or a converted runtime tensor file.
    """

    def __init__(self, tensors: dict[str, np.ndarray], source: str = "<tensors>") -> None:
        from onespeech.features.silero_convert import TENSOR_SHAPES

        for name, shape in TENSOR_SHAPES.items():
            if name not in tensors or tuple(tensors[name].shape) != shape:
                got = tuple(tensors[name].shape) if name in tensors else "missing"
                raise VadModelError(f"{source}: tensor {name!r} is {got}, expected {shape}")
        t = {name: np.asarray(value, dtype=np.float32) for name, value in tensors.items()}
        self.source = source
        # STFT basis as a (256, 258) right operand: real rows 0..128, imaginary 129..257
        self._basis = np.ascontiguousarray(t["stft.forward_basis_buffer"][:, 0, :].T)
        # k=3 convolutions as (3 * c_in, c_out) matrices over [tap, channel] columns
        self._conv = [_conv_matrix(t[f"encoder.{i}.reparam_conv.weight"]) for i in range(3)]
        self._conv_bias = [t[f"encoder.{i}.reparam_conv.bias"] for i in range(4)]
        # encoder.3 sees one frame padded by zeros on both sides: only its middle tap counts
        self._conv3 = np.ascontiguousarray(t["encoder.3.reparam_conv.weight"][:, :, 1].T)
        # LSTM gates reordered from i, f, g, o to i, f, o, g: one sigmoid span, one tanh span
        order = np.r_[0:256, 384:512, 256:384]
        self._w_ih = np.ascontiguousarray(t["decoder.rnn.weight_ih"][order].T)  # (128, 512)
        self._w_hh = np.ascontiguousarray(t["decoder.rnn.weight_hh"][order].T)  # (128, 512)
        self._b_gates = (t["decoder.rnn.bias_ih"] + t["decoder.rnn.bias_hh"])[order]
        self._w_out = np.ascontiguousarray(t["decoder.decoder.2.weight"][0, :, 0])
        self._b_out = np.float32(t["decoder.decoder.2.bias"][0])

    @classmethod
    def load(cls, path: str | os.PathLike[str], *, cache_dir: str | os.PathLike[str] | None = None) -> SileroVad:
        """Load the publisher ONNX file or a converted runtime tensor file.

        Parameters
        ----------
        path : str or PathLike
            ``silero_vad.onnx`` (silero-vad 6.2.3) or a file written by
            ``convert_silero_onnx``.
        cache_dir : str or PathLike, optional
            Where the converted ONNX file is kept (default ``<ONESPEECH_HOME>/vad``);
            the conversion runs once per distinct ONNX file (keyed by SHA-256) and is
            installed and verified like every runtime file (``onespeech.kernels.resolve``).

        Raises
        ------
        VadModelNotFoundError
            ``path`` does not exist.
        VadModelError
            The file is neither a Silero VAD graph of the expected structure nor a
            runtime file for it.
        ModelIntegrityError
            The cached conversion is damaged (the message names the cache file to remove).
        """
        from onespeech.features.silero_convert import RUNTIME_FORMAT, is_onnx_file

        path = Path(path)
        if not path.is_file():
            raise VadModelNotFoundError(f"VAD model file {path} does not exist (or is not a file)")
        if is_onnx_file(path):
            path = _converted_onnx(path, cache_dir)
        try:
            with read_tensor_file(path) as tensor_file:
                if tensor_file.metadata.get("format") != RUNTIME_FORMAT:
                    raise VadModelError(f"{path}: not a Silero VAD runtime file "
                                        f"(format {tensor_file.metadata.get('format')!r})")
                tensors = {name: np.array(tensor_file[name]) for name in tensor_file}
        except TensorFileError as error:
            # the caller's own file: say what it is not, never ask to delete it
            raise VadModelError(
                f"{path} is neither a Silero VAD ONNX file (silero_vad.onnx) nor a OneSpeech VAD runtime "
                f"file ({error.reason})"
            ) from error
        return cls(tensors, source=str(path))

    def stream(self) -> VadStream:
        """A fresh stream: feed it blocks of any size, get the same probabilities."""
        return VadStream(self)

    def speech_probabilities(self, pcm: np.ndarray) -> np.ndarray:
        """Speech probability of every 512-sample window of one stream.

        Parameters
        ----------
        pcm : ndarray[float32], shape (n_samples,)
            16 kHz mono audio (checked with ``validate_pcm``; empty is allowed).

        Returns
        -------
        ndarray[float32], shape (ceil(n_samples / 512),)
            Window ``k`` covers samples ``512 k`` to ``512 k + 511``; the last window
            is zero-padded. The recurrent state starts fresh.
        """
        stream = self.stream()
        return np.concatenate([stream.feed(pcm), stream.finish()])

    def speech_regions(self, pcm: np.ndarray, options: VadOptions | None = None) -> list[SpeechRegion]:
        """Speech regions (sample indices on the 16 kHz clock) of one stream."""
        samples = validate_pcm(pcm)
        segmenter = SpeechSegmenter(options)
        regions = segmenter.feed(self.speech_probabilities(samples))
        return regions + segmenter.finish(samples.shape[0])

    # -- network -----------------------------------------------------------------

    def _gate_inputs(self, windows: np.ndarray) -> np.ndarray:
        """Front end of ``GROUP_WINDOWS`` windows: (G, 576) samples -> (G, 512) LSTM input gates."""
        n = windows.shape[0]
        # reflect-pad right by 64: padded[576 + j] = x[574 - j]
        padded = np.empty((n, _INPUT + CONTEXT_SAMPLES), dtype=np.float32)
        padded[:, :_INPUT] = windows
        padded[:, _INPUT:] = windows[:, _INPUT - 2 : _INPUT - 2 - CONTEXT_SAMPLES : -1]
        # STFT: 4 frames of 256 samples, hop 128, one product with the basis
        frames = sliding_window_view(padded, 256, axis=1)[:, ::128].reshape(n * _N_FRAMES, 256)
        spectrum = frames @ self._basis
        np.square(spectrum, out=spectrum)
        magnitude = np.sqrt(spectrum[:, :_N_BINS] + spectrum[:, _N_BINS:]).reshape(n, _N_FRAMES, _N_BINS)
        x = _conv_k3(magnitude, self._conv[0], self._conv_bias[0], stride=1)  # (n, 4, 128)
        x = _conv_k3(x, self._conv[1], self._conv_bias[1], stride=2)  # (n, 2, 64)
        x = _conv_k3(x, self._conv[2], self._conv_bias[2], stride=2)[:, 0]  # (n, 64)
        x = x @ self._conv3
        x += self._conv_bias[3]
        np.maximum(x, 0.0, out=x)  # (n, 128)
        gates = x @ self._w_ih
        gates += self._b_gates
        return gates

    def _run_lstm(self, gate_inputs: np.ndarray, state: np.ndarray, out: np.ndarray) -> None:
        """Step the LSTM over rows of ``gate_inputs``; ``state`` = [h; c] is updated in place.

        Writes the hidden state after each step into ``out`` (len(gate_inputs), 128).
        """
        h, c = state[0], state[1]
        w_hh = self._w_hh
        gates = np.empty(4 * HIDDEN, dtype=np.float32)
        sig = gates[: 3 * HIDDEN]  # i, f, o after the reorder
        i_gate, f_gate, o_gate = sig[:HIDDEN], sig[HIDDEN : 2 * HIDDEN], sig[2 * HIDDEN :]
        g_gate = gates[3 * HIDDEN :]
        scratch = np.empty(HIDDEN, dtype=np.float32)
        for k in range(gate_inputs.shape[0]):
            np.dot(h, w_hh, out=gates)
            gates += gate_inputs[k]
            # sigmoid(x) = (1 + tanh(x / 2)) / 2: one tanh over all four gates, no overflow
            sig *= 0.5
            np.tanh(gates, out=gates)
            sig *= 0.5
            sig += 0.5
            c *= f_gate
            np.multiply(i_gate, g_gate, out=scratch)
            c += scratch
            np.tanh(c, out=scratch)
            np.multiply(o_gate, scratch, out=h)
            out[k] = h

    def _probabilities(self, hidden: np.ndarray) -> np.ndarray:
        """Decoder: ReLU, 1x1 convolution, sigmoid; (n, 128) -> (n,)."""
        logits = np.maximum(hidden, 0.0) @ self._w_out + self._b_out
        return (0.5 * (1.0 + np.tanh(0.5 * logits))).astype(np.float32)


class VadStream:
    """Streaming Silero VAD: ``feed`` blocks of any size, then ``finish``.

    The concatenated results equal ``SileroVad.speech_probabilities`` of the whole
    audio, bit for bit, for any split into blocks.
    """

    def __init__(self, vad: SileroVad) -> None:
        self._vad = vad
        self.reset()

    def reset(self) -> None:
        """Start a new stream: zero context, fresh recurrent state."""
        self._state = np.zeros((2, HIDDEN), dtype=np.float32)
        # current group's audio: 64 context samples, then up to GROUP_WINDOWS windows
        self._audio = np.zeros(CONTEXT_SAMPLES + GROUP_WINDOWS * WINDOW_SAMPLES, dtype=np.float32)
        self._filled = CONTEXT_SAMPLES
        self._scored = 0  # windows of the current group already scored
        self._windows = np.zeros((GROUP_WINDOWS, _INPUT), dtype=np.float32)
        self._hidden = np.zeros((GROUP_WINDOWS, HIDDEN), dtype=np.float32)
        self.n_samples = 0  # samples fed so far
        self.n_windows = 0  # probabilities returned so far
        self._finished = False
        self._blas_limited = False

    def feed(self, pcm: np.ndarray) -> np.ndarray:
        """Score every window completed by this block.

        Parameters
        ----------
        pcm : ndarray[float32], shape (n,)
            The next samples of the stream (any length, including 0).

        Returns
        -------
        ndarray[float32], shape (k,)
            Probabilities of the ``k`` windows completed by these samples.
        """
        if self._finished:
            raise ValueError("this VAD stream is finished; call reset() to start a new one")
        samples = np.asarray(pcm)
        if samples.ndim != 1 or not np.issubdtype(samples.dtype, np.floating):
            raise PcmShapeError(f"VAD input has shape {samples.shape} and dtype {samples.dtype}; "
                                "expected 1-D float32 samples of 16 kHz mono audio")
        samples = samples.astype(np.float32, copy=False)
        if not np.isfinite(samples).all():
            index = int(np.argmin(np.isfinite(samples)))
            raise NonFiniteSampleError(self.n_samples + index, float(samples[index]))
        self.n_samples += samples.shape[0]
        out = []
        # a large block scores several groups: limit BLAS once for all of them
        with self._one_blas_thread() if samples.shape[0] >= WINDOW_SAMPLES else nullcontext():
            while samples.shape[0]:
                room = self._audio.shape[0] - self._filled
                take = min(room, samples.shape[0])
                self._audio[self._filled : self._filled + take] = samples[:take]
                self._filled += take
                samples = samples[take:]
                out.append(self._score_complete_windows())
        return np.concatenate(out) if out else np.zeros(0, dtype=np.float32)

    @contextmanager
    def _one_blas_thread(self) -> Iterator[None]:
        """Run the network with one BLAS thread.

        Its products are small (32-window groups, a 128 x 512 step per window):
        a multi-threaded BLAS pool only adds wake-ups, which on a busy machine made
        the VAD 15 times slower. One thread also keeps the rounding independent of
        the pool size.
        """
        if self._blas_limited:
            yield
            return
        self._blas_limited = True
        try:
            with thread_limit(1):
                yield
        finally:
            self._blas_limited = False

    def finish(self) -> np.ndarray:
        """Score the last, zero-padded partial window (if any) and end the stream."""
        if self._finished:
            return np.zeros(0, dtype=np.float32)
        self._finished = True
        if (self._filled - CONTEXT_SAMPLES) % WINDOW_SAMPLES == 0:
            return np.zeros(0, dtype=np.float32)
        pad = WINDOW_SAMPLES - (self._filled - CONTEXT_SAMPLES) % WINDOW_SAMPLES
        self._audio[self._filled : self._filled + pad] = 0.0
        self._filled += pad
        return self._score_complete_windows()

    def _score_complete_windows(self) -> np.ndarray:
        complete = (self._filled - CONTEXT_SAMPLES) // WINDOW_SAMPLES
        if complete == self._scored:
            return np.zeros(0, dtype=np.float32)
        with self._one_blas_thread():
            return self._score_group(complete)

    def _score_group(self, complete: int) -> np.ndarray:
        # the whole group is always computed with the same shape (see module docstring)
        self._windows[:complete] = sliding_window_view(self._audio[: CONTEXT_SAMPLES + complete * WINDOW_SAMPLES],
                                                       _INPUT)[::WINDOW_SAMPLES]
        self._windows[complete:] = 0.0
        gate_inputs = self._vad._gate_inputs(self._windows)
        first = self._scored
        self._vad._run_lstm(gate_inputs[first:complete], self._state, self._hidden[first:complete])
        # the decoder also runs on the whole (fixed-shape) group
        probabilities = self._vad._probabilities(self._hidden)[first:complete]
        self._scored = complete
        self.n_windows += complete - first
        if complete == GROUP_WINDOWS:  # start the next group; its context is our last 64 samples
            self._audio[:CONTEXT_SAMPLES] = self._audio[-CONTEXT_SAMPLES:]
            self._filled = CONTEXT_SAMPLES
            self._scored = 0
            self._hidden[:] = 0.0
        return probabilities


def _conv_k3(x: np.ndarray, weight: np.ndarray, bias: np.ndarray, stride: int) -> np.ndarray:
    """Conv1d, kernel 3, zero padding 1, then ReLU; x (n, t, c_in) -> (n, t_out, c_out)."""
    n, t, c_in = x.shape
    padded = np.zeros((n, t + 2, c_in), dtype=np.float32)
    padded[:, 1:-1] = x
    t_out = (t - 1) // stride + 1
    # columns [tap 0 channels, tap 1 channels, tap 2 channels] for each output frame
    columns = sliding_window_view(padded, 3, axis=1)[:, : stride * t_out : stride]  # (n, t_out, c_in, 3)
    columns = columns.transpose(0, 1, 3, 2).reshape(n * t_out, 3 * c_in)
    out = columns @ weight
    out += bias
    np.maximum(out, 0.0, out=out)
    return out.reshape(n, t_out, -1)


def _conv_matrix(weight: np.ndarray) -> np.ndarray:
    """(c_out, c_in, 3) convolution weight -> (3 * c_in, c_out) over [tap, channel] columns."""
    c_out, c_in, taps = weight.shape
    return np.ascontiguousarray(weight.transpose(2, 1, 0).reshape(taps * c_in, c_out))


def _converted_onnx(onnx: Path, cache_dir: str | os.PathLike[str] | None) -> Path:
    """The runtime file converted from ``onnx``, installed (once) under ``<cache>/vad/<sha256[:16]>``."""
    from onespeech.features.models import runtime_name
    from onespeech.features.silero_convert import convert_silero_onnx, sha256_of
    from onespeech.kernels.resolve import convert_directory, install_record_name, is_installed
    from onespeech.kernels.store import cache_root

    digest = sha256_of(onnx)
    target = (Path(cache_dir) if cache_dir is not None else cache_root() / "vad") / digest[:16]
    name = runtime_name(digest)
    if not is_installed(target, install_record_name("fp32")):

        def convert(publisher: Path, staging: Path, precision: str, revision: str | None) -> None:
            convert_silero_onnx(onnx, staging / name)

        convert_directory(onnx.parent, target, "fp32", kind="vad", converter=convert)
    return target / name
