"""Qwen3Backbone: the audio encoder and text decoder of a loaded Qwen3 checkpoint.

Both released model kinds are the same network below their heads: the AuT audio
encoder with its projector, and a Qwen3 text decoder whose input embeddings have the
audio pad rows replaced by the encoder output. The recognizer puts the language-model
head on top and decodes greedily; the forced aligner (``onespeech.align``) runs one
causal pass and applies its classify head at the timestamp rows. This is the public
surface both build on::

    backbone = Qwen3Backbone.load(directory, "fp32", kind="aligner")
    audio = backbone.encode_audio(log_mel)                    # f32[n_audio, D]
    embeds = backbone.embed_prompt(ids, audio, audio_start)   # f32[n, D]
    hidden = backbone.hidden_states(embeds)                   # f32[n, D], final-normed
    logits = backbone.linear(hidden[rows], backbone.tensor("thinker.lm_head.weight"))
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from onespeech.kernels import int8matrix
from onespeech.kernels.cancel import Cancel
from onespeech.kernels.int8matrix import Matrix
from onespeech.kernels.precision import Precision
from onespeech.kernels.threads import thread_limit
from onespeech.qwen3.config import Qwen3Config
from onespeech.qwen3.convert import runtime_head_name
from onespeech.qwen3.decoder import Qwen3Decoder
from onespeech.qwen3.encoder import AudioEncoder
from onespeech.qwen3.runtime import RuntimeModel, load_model

__all__ = ["Qwen3Backbone"]


class Qwen3Backbone:
    """The encoder and decoder over one loaded runtime model.

    Parameters
    ----------
    model : RuntimeModel
        Loaded runtime files (:meth:`load` loads them); the backbone closes them.
    bf16_activations : bool
        Round activations to bfloat16 at operator boundaries (BF16 precision).
    output_head : str | None
        "default": the decoder gets the language-model head of these runtime files
        (`onespeech.qwen3.convert.runtime_head_name`: the one the config names, its
        int8 copy under INT8; the recognizer). None: no head on the decoder (the
        aligner brings its own, read with :meth:`tensor`).

    Attributes
    ----------
    config : Qwen3Config
    directory : Path
        The directory holding the runtime files.
    bf16_activations : bool
    encoder : AudioEncoder
    decoder : Qwen3Decoder
    """

    def __init__(self, model: RuntimeModel, *, bf16_activations: bool = False,
                 output_head: str | None = "default") -> None:
        self._model = model
        self.config: Qwen3Config = model.config
        self.directory: Path = model.directory
        self.bf16_activations = bf16_activations
        self.encoder = AudioEncoder(model, self.config, bf16_activations=bf16_activations)
        if output_head == "default":
            output_head = runtime_head_name(self.config, model.precision)
        self.decoder = Qwen3Decoder(model, self.config, head=output_head, bf16_activations=bf16_activations)

    @classmethod
    def load(
        cls,
        directory: str | os.PathLike[str],
        precision: Precision | str = Precision.FLOAT32,
        *,
        kind: str,
        threads: int | None = None,
        output_head: str | None = "default",
    ) -> Qwen3Backbone:
        """Load the runtime files of ``directory`` (converting publisher files there on first use).

        Activations are rounded to bfloat16 under BF16 ``precision``.

        Parameters
        ----------
        directory : path
            A model directory (publisher or runtime files); catalog ids are resolved
            by the caller (``onespeech.kernels.resolve.resolve``).
        precision : Precision or "fp32"/"bf16"/"int8"
        kind : {"asr", "aligner"}
            The model kind the conversion expects.
        threads : int | None
            Threads for the conversion and verification.
        output_head : str | None
            See the class parameters.

        Raises
        ------
        FileNotFoundError, ModelIntegrityError, ConversionInProgressError
            As :func:`onespeech.qwen3.runtime.load_model`.
        """
        precision = Precision.parse(precision)
        with thread_limit(threads):
            model = load_model(directory, precision, kind=kind)
        try:
            return cls(model, bf16_activations=precision is Precision.BFLOAT16, output_head=output_head)
        except BaseException:
            model.close()
            raise

    def tensor(self, name: str) -> np.ndarray:
        """A weight by its publisher name (a read-only view of the mapped file)."""
        return self._model[name]

    def encode_audio(self, mel: np.ndarray, attention: str = "full", cancel: Cancel = None) -> np.ndarray:
        """Encoder and projector output f32[n_audio, hidden_size] of one log-mel f32[128, n_frames].

        ``attention``: "full" or "windowed" (see ``Qwen3Options.encoder_attention``).
        """
        return self.encoder.forward(mel, attention, cancel)

    def embed_prompt(self, ids: np.ndarray, audio_embeds: np.ndarray, audio_start: int) -> np.ndarray:
        """Token embeddings f32[n, hidden_size] of ``ids`` with the audio rows replaced.

        ``audio_embeds`` (from :meth:`encode_audio`) replaces the embeddings of
        ``ids[audio_start : audio_start + len(audio_embeds)]`` (the audio pad tokens).
        """
        embeds = self.decoder.embed(ids)
        end = audio_start + audio_embeds.shape[0]
        if audio_start < 0 or end > embeds.shape[0]:
            raise ValueError(f"{audio_embeds.shape[0]} audio rows from index {audio_start} do not fit "
                             f"a prompt of {embeds.shape[0]} tokens")
        embeds[audio_start:end] = audio_embeds
        return embeds

    def hidden_states(self, embeds: np.ndarray, cancel: Cancel = None, rows: np.ndarray | None = None) -> np.ndarray:
        """Final-normed hidden states f32[n, hidden_size] of one causal pass over ``embeds``.

        Keeps one layer's keys and values at a time (:meth:`Qwen3Decoder.hidden_states`).
        With ``rows`` (increasing indices), only those rows are computed through the
        last layer and returned, f32[len(rows), hidden_size].
        Raises ``RecognitionCancelled`` once ``cancel`` is set (checked between layers).
        """
        return self.decoder.hidden_states(embeds, cancel, rows)

    def linear(self, rows: np.ndarray, weight: Matrix) -> np.ndarray:
        """``rows @ weight.T`` as the decoder's own products compute it (bfloat16-rounded under BF16)."""
        return int8matrix.linear(rows, weight, round_to_bf16=self.bf16_activations)

    def close(self) -> None:
        """Drop the decoder's buffers and the mapped files; the backbone is unusable after."""
        self.decoder.release()
        self._model.close()
