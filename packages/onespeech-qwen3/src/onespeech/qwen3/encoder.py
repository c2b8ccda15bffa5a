"""The AuT audio encoder and its projector, as the reference's CPU path computes it.

Architecture (qwen_asr ``Qwen3ASRAudioEncoder``)::

    mel f32[128, T]
      -> split into 100-frame convolution chunks (the last one shorter), each
         zero-padded on the right to the longest chunk of this input
      -> conv2d1/2/3 (3x3, stride 2, pad 1, GELU after each): 128 mel bins -> 16,
         100 frames -> 13 tokens
      -> conv_out (C*16 -> d_model, no bias) + sinusoidal positions that restart at 0
         in every chunk; keep each chunk's valid tokens (13 for a full chunk)
      -> encoder layers: pre-LN self-attention (full: every token sees every token
         of this input, which is what the reference does on CPU where its window
         metadata is only read by FlashAttention-2) and pre-LN GELU MLP
      -> ln_post -> proj1 -> GELU -> proj2  => f32[n_tokens, output_dim]

``attention="windowed"`` instead restricts attention to blocks of 104 tokens
(13 tokens x n_window_infer / 100 frames = 8 s), the block-diagonal pattern the
reference builds its ``cu_seqlens`` for and applies only under FlashAttention-2.

Convolutions run per batch of chunks (`ops.conv3x3s2`: the first, one input
channel, directly; the others as one product over their patches) in a
channels-last layout, so gathering a patch copies contiguous channel rows.
Under INT8 those two products are int8 ones (`int8matrix.conv3x3s2`), their
kernels quantized per output channel when the encoder is built.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import numpy as np

from onespeech.kernels import int8matrix, ops
from onespeech.kernels.cancel import Cancel
from onespeech.kernels.int8matrix import Int8Matrix, Matrix, matrix
from onespeech.qwen3.config import AudioEncoderConfig, Qwen3Config
from onespeech.qwen3.errors import ConfigError, raise_if_recognition_cancelled
from onespeech.qwen3.runtime import activation_rounding, tensor_bytes, tensors_under

ENCODER_ATTENTION = ("full", "windowed")
LAYER_NORM_EPS = 1e-5  # torch.nn.LayerNorm default, as the reference constructs them
_CONV_BATCH_CHUNKS = 2  # chunks per conv call: bounds the first one's output and the patches (~12-14 MB at 0.6B)


def conv_out_length(n: int) -> int:
    """Length after one 3x3 stride-2 pad-1 convolution: ceil(n / 2)."""
    return (n - 1) // 2 + 1


def chunk_tokens(n_frames: int) -> int:
    """Audio tokens of one convolution chunk of ``n_frames`` (1..100) frames."""
    return conv_out_length(conv_out_length(conv_out_length(n_frames)))


def output_length(n_frames: int, chunk_frames: int = 100) -> int:
    """Encoder output tokens for ``n_frames`` mel frames (13 per full chunk)."""
    full, rest = divmod(n_frames, chunk_frames)
    return full * chunk_tokens(chunk_frames) + (chunk_tokens(rest) if rest else 0)


def sinusoid_positions(length: int, channels: int, max_timescale: float = 10000.0) -> np.ndarray:
    """Whisper-style positions f32[length, channels]: sin half then cos half.

    Computed in float32 step by step like the reference's buffer.
    """
    increment = np.float32(math.log(max_timescale) / (channels // 2 - 1))
    inv_timescales = np.exp(-increment * np.arange(channels // 2, dtype=np.float32))
    scaled = np.arange(length, dtype=np.float32)[:, None] * inv_timescales[None, :]
    return np.concatenate([np.sin(scaled), np.cos(scaled)], axis=1).astype(np.float32)


class AudioEncoder:
    """AuT encoder + projector over one bounded input.

    Parameters
    ----------
    weights : mapping of str to ndarray
        Tensors by publisher name (``thinker.audio_tower.conv2d1.weight`` ...),
        float32 or bfloat16 (uint16). Matrices are kept as views; nothing is copied
        except the three convolution kernels, re-laid out channels-last (a few MB),
        and bfloat16 vectors, widened once (see `tensors_under`).
    config : Qwen3Config or AudioEncoderConfig
        The parsed config.json (its ``audio`` part is used).
    prefix : str
        Name prefix of the audio tower's tensors.
    bf16_activations : bool
        Round activations to bfloat16 at operator boundaries (BF16 precision).

    Attributes
    ----------
    weight_bytes : int
        Bytes of the tensors under ``prefix`` as given (every one is read), not
        counting the few MB of kernels and vectors copied at construction.
    """

    def __init__(
        self,
        weights: Mapping[str, np.ndarray],
        config: Qwen3Config | AudioEncoderConfig,
        prefix: str = "thinker.audio_tower.",
        bf16_activations: bool = False,
    ) -> None:
        dims = config.audio if isinstance(config, Qwen3Config) else config
        self.dims = dims
        self._w = tensors_under(weights, prefix)
        self.weight_bytes = tensor_bytes(weights, prefix)
        self._bf16 = bf16_activations
        self._round: Callable[[np.ndarray], np.ndarray] = activation_rounding(bf16_activations)
        # conv kernels [Co, Ci, kh, kw] -> [Co, kh, kw, Ci] to match channels-last im2col
        kernels = [
            np.ascontiguousarray(self._w[f"conv2d{i}.weight"].transpose(0, 2, 3, 1)).reshape(
                dims.downsample_hidden_size, -1
            )
            for i in (1, 2, 3)
        ]
        self._conv: list[Matrix] = list(kernels)
        if isinstance(matrix(self._w, "conv_out.weight"), Int8Matrix):
            # INT8: the convolutions over many channels are products like the Linear layers
            # (most of the encoder's work at 0.6B), quantized here per output channel from
            # the stored bfloat16 values (a few MB); the first, over one channel, stays float
            self._conv[1:] = [int8matrix.quantize(ops.bf16_to_f32(k) if k.dtype == np.uint16 else k)
                              for k in kernels[1:]]  # fmt: skip
        self.chunk_frames = 2 * dims.n_window  # convolution chunk in mel frames
        # positions restart at every convolution chunk: only one chunk's tokens need a row
        per_chunk = output_length(self.chunk_frames, self.chunk_frames)
        if dims.max_source_positions < per_chunk:
            raise ConfigError(
                f"audio_config.max_source_positions is {dims.max_source_positions}; one convolution chunk "
                f"({self.chunk_frames} mel frames) makes {per_chunk} tokens, each needing a position"
            )
        self._positions = sinusoid_positions(per_chunk, dims.d_model)
        if bf16_activations:  # the reference casts the position table to the model dtype
            self._positions = ops.round_bf16(self._positions)

    # -- public -----------------------------------------------------------------

    def output_length(self, n_frames: int) -> int:
        """Tokens this encoder produces for ``n_frames`` mel frames."""
        return output_length(n_frames, self.chunk_frames)

    def forward(self, mel: np.ndarray, attention: str = "full", cancel: Cancel = None) -> np.ndarray:
        """Encode one log-mel input.

        Parameters
        ----------
        mel : ndarray[float32], shape (num_mel_bins, n_frames), n_frames >= 1
        attention : {"full", "windowed"}
            "full" (default): every token attends every token, as the reference on CPU.
            "windowed": block-diagonal windows of 104 tokens (FlashAttention-2 behaviour).
        cancel : threading.Event-like, callable or None
            Checked between convolution batches and between encoder layers.

        Returns
        -------
        ndarray[float32], shape (n_tokens, output_dim)
        """
        if attention not in ENCODER_ATTENTION:
            raise ValueError(f"encoder attention {attention!r} is unknown; use one of {ENCODER_ATTENTION}")
        mel = np.asarray(mel)
        if mel.dtype != np.float32 or mel.ndim != 2 or mel.shape[0] != self.dims.num_mel_bins or mel.shape[1] < 1:
            raise ValueError(
                f"mel has shape {mel.shape} and dtype {mel.dtype}; expected float32 "
                f"({self.dims.num_mel_bins}, n_frames >= 1)"
            )
        # BF16: qwen-asr casts the input features to the model dtype
        mel = np.ascontiguousarray(mel)
        if self._bf16:  # into a new array: the caller's features are never rounded in place
            mel = ops.round_bf16(mel)
        hidden, window = self._embed_chunks(mel, cancel)
        bounds = self._attention_blocks(hidden.shape[0], window if attention == "windowed" else None)
        for layer in range(self.dims.num_layers):
            raise_if_recognition_cancelled(cancel)
            hidden = self._layer(hidden, layer, bounds)
        x = self._layer_norm(hidden, "ln_post")
        x = self._gelu(self._linear(x, "proj1"))
        return self._linear(x, "proj2")

    # -- stages ---------------------------------------------------------------------

    def _embed_chunks(self, mel: np.ndarray, cancel: Cancel) -> tuple[np.ndarray, int]:
        """Convolution front end: f32[n_tokens, d_model] and the attention window size.

        The convolutions run a few chunks at a time (the first one's output and
        the second one's patches are the encoder's largest arrays); conv_out, a per-token product, runs once over the
        valid tokens of every chunk, a GEMM of n_tokens rows instead of one of 13
        rows per chunk.
        """
        d = self.dims
        n_mels, n_frames = mel.shape
        n_chunks = -(-n_frames // self.chunk_frames)
        lengths = [self.chunk_frames] * n_chunks
        lengths[-1] = n_frames - self.chunk_frames * (n_chunks - 1)
        width = max(lengths)  # every chunk is zero-padded to the longest one
        valid = [chunk_tokens(n) for n in lengths]
        window = chunk_tokens(width) * (d.n_window_infer // self.chunk_frames)
        rows, positions = [], []
        for c0 in range(0, n_chunks, _CONV_BATCH_CHUNKS):
            raise_if_recognition_cancelled(cancel)
            c1 = min(n_chunks, c0 + _CONV_BATCH_CHUNKS)
            # channels-last input [n, mel, time, 1], zero beyond each chunk's frames
            x = np.zeros((c1 - c0, n_mels, width, 1), dtype=np.float32)
            for j in range(c0, c1):
                start = j * self.chunk_frames
                x[j - c0, :, : lengths[j], 0] = mel[:, start : start + lengths[j]]
            flat = self._conv_stack(x)  # [n, t, C * F]
            for j in range(c0, c1):
                rows.append(flat[j - c0, : valid[j]])
                positions.append(self._positions[: valid[j]])
        emb = self._linear(np.concatenate(rows, axis=0), "conv_out")
        return self._round(emb + np.concatenate(positions, axis=0)), window

    def _conv_stack(self, x: np.ndarray) -> np.ndarray:
        """Three GELU convolutions, flattened per time step as conv_out reads them: [n, t, C * F]."""
        for i, kernel in enumerate(self._conv, start=1):
            x = self._gelu(int8matrix.conv3x3s2(x, kernel, self._w[f"conv2d{i}.bias"], round_to_bf16=self._bf16))
        n, f, t, c = x.shape
        # the reference flattens (channel, frequency) per time step: index c * f + freq
        return np.ascontiguousarray(x.transpose(0, 2, 3, 1)).reshape(n, t, c * f)

    def _linear(self, x: np.ndarray, name: str) -> np.ndarray:
        """Product with weight ``name``.weight (and its bias, if it has one), rounded under BF16 by the kernel."""
        weight = matrix(self._w, name + ".weight")  # an Int8Matrix under INT8 precision
        return int8matrix.linear(x, weight, self._w.get(name + ".bias"), round_to_bf16=self._bf16)

    def _layer_norm(self, x: np.ndarray, name: str) -> np.ndarray:
        """Layer norm ``name`` (weight and bias), rounded under BF16 by the kernel."""
        w = self._w
        return ops.layer_norm(x, w[name + ".weight"], w[name + ".bias"], LAYER_NORM_EPS, round_to_bf16=self._bf16)

    def _gelu(self, fresh: np.ndarray) -> np.ndarray:
        """GELU over an operator's fresh output, in place (rounded to bfloat16 values under BF16)."""
        return ops.gelu(fresh, out=fresh, round_to_bf16=self._bf16)

    @staticmethod
    def _attention_blocks(n_tokens: int, window: int | None) -> list[tuple[int, int]]:
        """Token ranges that attend among themselves: one block, or 104-token windows."""
        if window is None or window >= n_tokens:
            return [(0, n_tokens)]
        return [(s, min(n_tokens, s + window)) for s in range(0, n_tokens, window)]

    def _layer(self, hidden: np.ndarray, layer: int, bounds: list[tuple[int, int]]) -> np.ndarray:
        """One pre-LN encoder layer (self-attention, then GELU MLP), residuals added."""
        r = self._round
        d = self.dims
        p = f"layers.{layer}."
        n = hidden.shape[0]
        # self-attention
        x = self._layer_norm(hidden, p + "self_attn_layer_norm")
        shape = (n, d.num_heads, d.head_dim)
        q = self._linear(x, p + "self_attn.q_proj").reshape(shape)
        k = self._linear(x, p + "self_attn.k_proj").reshape(shape)
        v = self._linear(x, p + "self_attn.v_proj").reshape(shape)
        scale = d.head_dim**-0.5
        blocks = [ops.attention(q[a:b], k[a:b], v[a:b], scale, None, round_to_bf16=self._bf16) for a, b in bounds]
        attn = (blocks[0] if len(blocks) == 1 else np.concatenate(blocks)).reshape(n, d.d_model)
        hidden = r(hidden + self._linear(attn, p + "self_attn.out_proj"))
        # MLP
        x = self._layer_norm(hidden, p + "final_layer_norm")
        x = self._gelu(self._linear(x, p + "fc1"))
        return r(hidden + self._linear(x, p + "fc2"))
