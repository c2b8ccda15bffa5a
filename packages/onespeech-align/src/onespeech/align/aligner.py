"""Qwen3ForcedAligner: word times from one forward pass of Qwen3-ForcedAligner-0.6B.

Architecture (the reference's ``Qwen3ASRForConditionalGeneration`` with the
``qwen3_forced_aligner`` thinker)::

    pcm f32[n]  -> log-mel f32[128, n // 160]      (features' 300 s alignment path)
                -> AuT encoder + projector          f32[n_audio, hidden]
    ids = <|audio_start|> <|audio_pad|> x n_audio <|audio_end|>
          unit_1 <timestamp> <timestamp> unit_2 <timestamp> <timestamp> ...
    embeddings(ids) with the audio pad rows replaced by the encoder output
                -> Qwen3 decoder (causal, one full-sequence pass)  f32[n_tokens, hidden]
                -> classify head (classify_num = 5000 rows) at the <timestamp> rows only
                -> argmax: start slot, end slot per unit; time = slot x 80 ms

The slots are predicted in one pass, not generated. See ``slots.py`` for how they
become word times and ``units.py`` for what a unit is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from onespeech.features.mel import log_mel
from onespeech.features.pcm import SAMPLE_RATE, validate_pcm
from onespeech.kernels import ops
from onespeech.kernels.threads import thread_limit
from onespeech.qwen3.config import ALIGNER_MODEL_TYPE, Qwen3Config, load_config
from onespeech.qwen3.decoder import Qwen3Decoder
from onespeech.qwen3.encoder import AudioEncoder
from onespeech.qwen3.errors import Cancel, RecognitionCancelled, raise_if_cancelled
from onespeech.qwen3.runtime import RuntimeModel, load_model
from onespeech.qwen3.transcript import Segment, Transcript, Word
from onespeech.tokenizer import Qwen3Tokenizer

from .errors import (
    AlignmentCancelledError,
    AudioLengthError,
    ModelKindError,
    TextEncodingError,
    TextTooLongError,
    TooManyUnitsError,
)
from .inputs import SpecialIds, build_input
from .languages import check_language
from .passes import causal_hidden_states
from .slots import SlotClock, SlotPredictions, timed_word, untimed
from .units import WrittenUnit, spoken_units, written_units

MAX_SECONDS = 300  # the features' bounded alignment path
MAX_SAMPLES = MAX_SECONDS * SAMPLE_RATE  # 4,800,000
MIN_SAMPLES_EXCLUSIVE = 200  # the log-mel reflection pad needs more than n_fft / 2 samples
MAX_TEXT_BYTES = 1024 * 1024  # 1 MiB of UTF-8
MAX_UNITS = 4096


@dataclass(frozen=True)
class TimestampLogits:
    """The head's raw output at the timestamp tokens of one input.

    Attributes
    ----------
    input_ids : ndarray[int64], shape (n_tokens,)
    logits : ndarray[float32], shape (2 * n_units, classify_num)
    """

    input_ids: np.ndarray
    logits: np.ndarray


class Qwen3ForcedAligner:
    """Forced alignment with Qwen3-ForcedAligner on the OneSpeech runtime.

    Build it with :meth:`load`; use it as a context manager (or call :meth:`close`)
    to release the weights.
    """

    def __init__(self, directory: Path, weights: RuntimeModel, tokenizer: Qwen3Tokenizer, threads: int) -> None:
        parsed = weights.config
        _check_model_kind(directory, parsed)
        self.directory = directory
        self.threads = threads
        self.classify_num = int(parsed.classify_num)  # type: ignore[arg-type]
        self.step_ms = float(parsed.timestamp_segment_time_ms)  # type: ignore[arg-type]
        self.special = SpecialIds(
            audio_start=parsed.audio_start_token_id,
            audio_pad=parsed.audio_token_id,
            audio_end=parsed.audio_end_token_id,
            timestamp=int(parsed.timestamp_token_id),  # type: ignore[arg-type]
        )
        self._weights: RuntimeModel | None = weights
        self._tokenizer = tokenizer
        self._encoder = AudioEncoder(weights, parsed)
        self._decoder = Qwen3Decoder(weights, parsed, head=None)
        self._head = weights["thinker.lm_head.weight"]
        if self._head.shape[0] != self.classify_num:
            raise ModelKindError(
                f"{directory}: thinker.lm_head.weight has {self._head.shape[0]} rows but config.json "
                f"declares classify_num={self.classify_num}"
            )

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    def load(cls, alignment_directory: str | os.PathLike[str], threads: int = 4,
             cancel: Cancel = None) -> Qwen3ForcedAligner:
        """Load an aligner from publisher files or runtime files.

        Parameters
        ----------
        alignment_directory : path
            A Qwen3-ForcedAligner directory: the publisher's files (converted to
            runtime files on first load) or runtime files.
        threads : int
            Threads for the kernels and BLAS while aligning (>= 1).
        cancel : threading.Event-like, callable or None
            Checked before loading.
        """
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise ValueError(f"threads={threads!r} must be a positive integer")
        _check_cancel(cancel)
        directory = Path(alignment_directory)
        _check_model_kind(directory, load_config(directory))  # before converting anything
        tokenizer = Qwen3Tokenizer.load(directory)
        # FP32 runtime files, converted from the publisher files on first load
        weights = load_model(directory, "fp32")
        try:
            _check_cancel(cancel)
            return cls(directory, weights, tokenizer, threads)
        except BaseException:
            weights.close()
            raise

    def close(self) -> None:
        """Release the weights (memory maps) and buffers; the aligner is unusable after."""
        weights, self._weights = self._weights, None
        self._encoder = self._decoder = self._head = None  # type: ignore[assignment]
        if weights is not None:
            weights.close()

    def __enter__(self) -> Qwen3ForcedAligner:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- alignment ------------------------------------------------------------------------

    def align(self, audio: np.ndarray, text: str | Transcript, language: str,
              cancel: Cancel = None) -> Transcript:
        """Time the written units of ``text`` in ``audio``.

        Parameters
        ----------
        audio : ndarray[float32], shape (n_samples,)
            16 kHz mono PCM, more than 200 samples and at most 300 s.
        text : str or Transcript
            What is said. A Transcript is aligned by :meth:`align_transcript`.
        language : str
            One of zh, en, yue, fr, de, it, ja, ko, pt, ru, es (required).
        cancel : threading.Event-like, callable or None

        Returns
        -------
        Transcript
            ``text`` unchanged; one segment spanning the audio; ``words`` are the written
            units in order with times (seconds), confidence (mean probability of the two
            slot classes) and ``TimingMethod.FORCED_ALIGNER``, or None times where the
            prediction is invalid or the unit has nothing to say.
        """
        if isinstance(text, Transcript):
            return self.align_transcript(audio, text, language, cancel)
        language = check_language(language)
        units = _checked_units(text, language)
        pcm = _checked_pcm(audio)
        words = [Word(u.text) for u in units]
        timed = self._time_words(pcm, words, [u.spoken for u in units], keep_confidence=False, cancel=cancel)
        segment = Segment(0.0, pcm.shape[0] / SAMPLE_RATE, text, language)
        return Transcript(text=text, language=language, segments=(segment,), words=tuple(timed))

    def align_transcript(self, audio: np.ndarray, transcript: Transcript, language: str | None = None,
                         cancel: Cancel = None) -> Transcript:
        """Time an existing transcript's words, keeping everything but their times.

        Each word's text is split into units by the language's rules; its start is the
        first unit's start slot and its end the last unit's end slot (character slots
        projected back onto the caller's word boundaries). Word confidence, text,
        segments and the transcript text are kept as they are. A transcript without
        words gets words from its text, as :meth:`align` would make them.
        """
        language = check_language(language if language is not None else transcript.language)
        _checked_text_bytes(transcript.text)
        pcm = _checked_pcm(audio)
        if not transcript.words:
            units = _checked_units(transcript.text, language)
            timed = self._time_words(pcm, [Word(u.text) for u in units], [u.spoken for u in units],
                                     keep_confidence=False, cancel=cancel)
        else:
            spoken = [tuple(spoken_units(written_units(w.text, language))) for w in transcript.words]
            _check_unit_count(len(transcript.words), sum(len(s) for s in spoken))
            timed = self._time_words(pcm, list(transcript.words), spoken, keep_confidence=True, cancel=cancel)
        return Transcript(transcript.text, transcript.language, transcript.segments, tuple(timed))

    def timestamp_logits(self, audio: np.ndarray, units: list[str], cancel: Cancel = None) -> TimestampLogits:
        """The head's raw logits at every timestamp token (two per spoken unit).

        This is the model's direct output before any post-processing; the parity
        tests compare it with the reference toolkit's.

        Parameters
        ----------
        audio : ndarray[float32], shape (n_samples,)
        units : list of str
            Spoken units, already cleaned; at least one.
        """
        if not units:
            raise ValueError("timestamp_logits needs at least one spoken unit")
        if self._weights is None:
            raise RuntimeError("this Qwen3ForcedAligner is closed; load it again to align")
        pcm = _checked_pcm(audio)
        try:
            with thread_limit(self.threads):
                return self._forward(pcm, units, cancel)
        except RecognitionCancelled as exc:
            raise AlignmentCancelledError("alignment was cancelled by the caller's signal") from exc

    # -- internals ------------------------------------------------------------------------

    def _forward(self, pcm: np.ndarray, units: list[str], cancel: Cancel) -> TimestampLogits:
        _check_cancel(cancel)
        # audio: log-mel (up to 300 s) -> encoder -> one embedding per audio token
        mel = log_mel(pcm, max_seconds=MAX_SECONDS)
        audio_embeds = self._encoder.forward(mel, cancel=cancel)
        _check_cancel(cancel)
        # text: special ids around the audio, units each followed by two timestamps
        inputs = build_input(self._tokenizer, units, audio_embeds.shape[0], self.special)
        embeds = self._decoder.embed(inputs.ids)
        embeds[inputs.audio_offset : inputs.audio_offset + inputs.n_audio] = audio_embeds
        del audio_embeds
        # one causal pass; the classify head runs only at the timestamp rows
        hidden = causal_hidden_states(self._decoder, embeds, cancel)
        rows = np.ascontiguousarray(hidden[inputs.timestamp_positions])
        del hidden
        return TimestampLogits(inputs.ids, ops.linear(rows, self._head))

    def _time_words(self, pcm: np.ndarray, words: list[Word], spoken: list[tuple[str, ...]],
                    keep_confidence: bool, cancel: Cancel) -> list[Word]:
        """Run the model once over every spoken unit and time each word from its slots."""
        flat = [unit for group in spoken for unit in group]
        if not flat:
            _check_cancel(cancel)
            return [untimed(w, keep_confidence) for w in words]
        predictions = SlotPredictions.from_logits(self.timestamp_logits(pcm, flat, cancel).logits)
        clock = SlotClock(self.step_ms, pcm.shape[0] / SAMPLE_RATE)
        timed: list[Word] = []
        next_unit = 0
        for word, group in zip(words, spoken, strict=True):
            if not group:
                timed.append(untimed(word, keep_confidence))
                continue
            first, next_unit = next_unit, next_unit + len(group)
            timed.append(timed_word(word, first, next_unit - 1, predictions, clock, keep_confidence))
        return timed


def _check_model_kind(directory: Path, config: Qwen3Config) -> None:
    if config.model_type != ALIGNER_MODEL_TYPE:
        raise ModelKindError(
            f"{directory} holds a {config.model_type} model; Qwen3ForcedAligner needs a "
            f"{ALIGNER_MODEL_TYPE} checkpoint (Qwen/Qwen3-ForcedAligner-0.6B)"
        )


def _check_cancel(cancel: Cancel) -> None:
    try:
        raise_if_cancelled(cancel)
    except RecognitionCancelled as exc:
        raise AlignmentCancelledError("alignment was cancelled by the caller's signal") from exc


def _checked_pcm(audio: np.ndarray) -> np.ndarray:
    array = np.asarray(audio)
    if array.ndim == 1:
        n = array.shape[0]
        if n <= MIN_SAMPLES_EXCLUSIVE:
            raise AudioLengthError(
                f"audio has {n} samples; alignment needs more than {MIN_SAMPLES_EXCLUSIVE} samples "
                "of 16 kHz mono PCM"
            )
        if n > MAX_SAMPLES:
            raise AudioLengthError(
                f"audio has {n} samples ({n / SAMPLE_RATE:.2f} s); alignment allows at most "
                f"{MAX_SAMPLES} samples ({MAX_SECONDS} s) of 16 kHz mono PCM; align shorter pieces"
            )
    return validate_pcm(array, max_samples=MAX_SAMPLES)


def _checked_text_bytes(text: str) -> None:
    if not isinstance(text, str):
        raise TextEncodingError(f"text must be a str, not {type(text).__name__}")
    try:
        n_bytes = len(text.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise TextEncodingError(
            f"text is not valid Unicode at index {exc.start} (lone surrogate {text[exc.start]!r}); "
            "pass well-formed text"
        ) from exc
    if n_bytes > MAX_TEXT_BYTES:
        raise TextTooLongError(
            f"text is {n_bytes} bytes of UTF-8; alignment allows at most {MAX_TEXT_BYTES} (1 MiB)"
        )


def _check_unit_count(n_written: int, n_spoken: int) -> None:
    if max(n_written, n_spoken) > MAX_UNITS:
        raise TooManyUnitsError(
            f"text has {n_written} written units ({n_spoken} spoken units); alignment allows at most "
            f"{MAX_UNITS}; align it in shorter pieces"
        )


def _checked_units(text: str, language: str) -> list[WrittenUnit]:
    _checked_text_bytes(text)
    units = written_units(text, language)
    _check_unit_count(len(units), sum(len(u.spoken) for u in units))
    return units
