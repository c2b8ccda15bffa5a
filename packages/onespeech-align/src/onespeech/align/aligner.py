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
become word times and ``onespeech.qwen3.written_units`` for what a unit is.

One aligner may be shared by threads: its calls are serialized by a lock.
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from onespeech.features.mel import log_mel
from onespeech.features.pcm import ALIGNMENT_MAX_SAMPLES, ALIGNMENT_MAX_SECONDS, SAMPLE_RATE, validate_pcm
from onespeech.kernels.cancel import Cancel, check_cancel, raise_if_cancelled
from onespeech.kernels.errors import ObjectClosedError
from onespeech.kernels.precision import Precision
from onespeech.kernels.resolve import resolve
from onespeech.kernels.threads import check_threads, thread_limit
from onespeech.qwen3 import (
    ModelKindError,
    Qwen3Backbone,
    Qwen3Config,
    RecognitionCancelledError,
    Segment,
    TimingMethod,
    Transcript,
    Word,
    WrittenUnit,
    load_config,
    options_from,
    spoken_units,
    written_units,
)
from onespeech.tokenizer import Qwen3Tokenizer, check_text

from .errors import AlignmentCancelledError, TooManyUnitsError
from .inputs import SpecialIds, build_input, encode_units
from .languages import check_language
from .slots import SlotClock, SlotPredictions, timed_word, untimed

MAX_UNITS = 4096


@dataclass(frozen=True)
class Qwen3AlignerOptions:
    """Options of a Qwen3ForcedAligner.

    Attributes
    ----------
    precision : Precision
        FLOAT32 (default), BFLOAT16 (bf16 storage, float32 accumulation, operator
        outputs rounded to bfloat16, as for the recognizer) or INT8 (int8 Linear weights,
        as for the recognizer; the head stays float); "fp32"/"bf16"/"int8" are accepted.
    threads : int | None
        Threads for BLAS and kernels; None: OMP_NUM_THREADS, else the CPUs available.
    """

    precision: Precision = Precision.FLOAT32
    threads: int | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "precision", Precision.parse(self.precision))
        if self.threads is not None:
            check_threads(self.threads)


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
    to release the weights. Safe to share between threads: calls are serialized.
    """

    def __init__(
        self, directory: Path, backbone: Qwen3Backbone, tokenizer: Qwen3Tokenizer, options: Qwen3AlignerOptions
    ) -> None:
        parsed = backbone.config
        _check_model_kind(directory, parsed)
        self.directory = directory
        self.options = options
        self.classify_num = _declared(parsed.classify_num, "classify_num", directory)
        self.step_ms = float(_declared(parsed.timestamp_segment_time_ms, "timestamp_segment_time", directory))
        self.special = SpecialIds(
            audio_start=parsed.audio_start_token_id,
            audio_pad=parsed.audio_token_id,
            audio_end=parsed.audio_end_token_id,
            timestamp=_declared(parsed.timestamp_token_id, "timestamp_token_id", directory),
        )
        self._tokenizer = tokenizer
        head = backbone.tensor("thinker.lm_head.weight")  # the classify head: one row per 80 ms slot
        if head.shape[0] != self.classify_num:
            raise ModelKindError(
                f"{directory}: thinker.lm_head.weight has {head.shape[0]} rows but config.json "
                f"declares classify_num={self.classify_num}"
            )
        self._backbone: Qwen3Backbone | None = backbone
        self._head: np.ndarray | None = head
        self._lock = threading.RLock()

    # -- lifecycle ------------------------------------------------------------------------

    @classmethod
    def load(
        cls,
        alignment_directory: str | os.PathLike[str],
        options: Qwen3AlignerOptions | None = None,
        cancel: Cancel = None,
        *,
        precision: Precision | str | None = None,
        threads: int | None = None,
    ) -> Qwen3ForcedAligner:
        """Load an aligner from publisher files or runtime files.

        ``load(directory, threads=4)`` (the spec's form) is ``load(directory,
        Qwen3AlignerOptions(threads=4))``; give options or keywords, not both.

        Parameters
        ----------
        alignment_directory : path or catalog id
            A Qwen3-ForcedAligner directory: the publisher's files (converted to
            runtime files of the precision there on first load) or runtime files; or
            a catalog id such as ``"Qwen/Qwen3-ForcedAligner-0.6B"`` (resolved through
            the model cache: missing publisher files are downloaded and verified first).
        options : Qwen3AlignerOptions, optional
            Precision and threads.
        cancel : threading.Event-like, callable or None
            Checked before and after loading.
        precision, threads
            The fields of ``Qwen3AlignerOptions``, instead of ``options``.

        Raises
        ------
        ModelKindError
            The directory or catalog id holds another kind of model (a Qwen3-ASR checkpoint).
        UnknownModelError, FileNotFoundError
            Neither a catalog id nor an existing directory.
        ModelIntegrityError
            A damaged file (the message names the file to remove).
        AlignmentCancelledError
        TypeError
            Both ``options`` and a keyword, or ``options`` of another type.
        """
        options = options_from(Qwen3AlignerOptions, options, "Qwen3ForcedAligner.load",
                               precision=precision, threads=threads)
        check_cancel(cancel)
        _check_cancel(cancel)
        directory = Path(alignment_directory)
        if directory.is_dir():
            _check_model_kind(directory, load_config(directory))  # before converting anything
        # a catalog id or a directory to its runtime files (an unknown id raises UnknownModelError,
        # a missing path FileNotFoundError)
        directory = resolve(str(alignment_directory), options.precision, kind="aligner", cancel=cancel)
        _check_cancel(cancel)
        tokenizer = Qwen3Tokenizer.load(directory)
        backbone = Qwen3Backbone.load(directory, options.precision, kind="aligner", threads=options.threads,
                                      output_head=None)
        try:
            _check_cancel(cancel)
            return cls(directory, backbone, tokenizer, options)
        except BaseException:
            backbone.close()
            raise

    def close(self) -> None:
        """Release the weights (memory maps) and buffers; the aligner is unusable after."""
        with self._lock:
            backbone, self._backbone, self._head = self._backbone, None, None
            if backbone is not None:
                backbone.close()

    def _check_open(self) -> None:
        if self._backbone is None:
            raise ObjectClosedError("this Qwen3ForcedAligner is closed; load it again to align")

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

        Raises
        ------
        LanguageRequiredError, UnsupportedLanguageError
        PcmError
            200 samples or fewer, more than 300 s, nonfinite or power-overflowing PCM.
        TextTooLongError, InvalidTextError
            More than 1 MiB of UTF-8, or not valid Unicode.
        TooManyUnitsError, TooManyTokensError
            More than 4096 units, or units that tokenize to more than 16384 ids.
        AlignmentCancelledError
        ObjectClosedError
        """
        if isinstance(text, Transcript):
            return self.align_transcript(audio, text, language, cancel)
        n_samples, language, words = self._align_text(audio, text, language, cancel)
        segment = Segment(0.0, n_samples / SAMPLE_RATE, text, language, words,
                          timing_method=TimingMethod.FORCED_ALIGNER)
        return Transcript(text=text, language=language, segments=(segment,))

    def align_words(self, audio: np.ndarray, text: str, language: str, cancel: Cancel = None) -> tuple[Word, ...]:
        """The written units of ``text`` as words timed in ``audio``: ``align(audio, text, language).words``.

        For callers that hold text, language and samples (the speech layer's chunks)
        and need only the words; times are seconds from the first sample of ``audio``.
        Takes the same arguments and raises the same errors as :meth:`align`.
        """
        return self._align_text(audio, text, language, cancel)[2]

    def align_transcript(self, audio: np.ndarray, transcript: Transcript, language: str | None = None,
                         cancel: Cancel = None) -> Transcript:
        """Time an existing transcript's words, keeping everything but their times.

        Each word's text is split into units by the language's rules; its start is the
        first unit's start slot and its end the last unit's end slot (character slots
        projected back onto the caller's word boundaries). Word confidence, text,
        segments and the transcript text are kept as they are; the timed words go back
        into the segments that held them. A transcript without words gets words from
        its text, as :meth:`align` would make them: each segment's from its own text
        (one segment spanning the audio when it has none).
        """
        check_cancel(cancel)
        self._check_open()
        language = check_language(language if language is not None else transcript.language)
        check_text(transcript.text)
        pcm = _checked_pcm(audio)
        segments = transcript.segments or (Segment(0.0, pcm.shape[0] / SAMPLE_RATE, transcript.text, language),)
        if not transcript.words:
            per_segment = [written_units(s.text, language) for s in segments]
            units = [u for group in per_segment for u in group]
            _check_unit_count(len(units), sum(len(u.spoken) for u in units))
            timed = self._time_words(pcm, [Word(u.text) for u in units], [u.spoken for u in units],
                                     keep_confidence=False, cancel=cancel)
            counts = [len(group) for group in per_segment]
        else:
            words = transcript.words
            spoken = [tuple(spoken_units(written_units(w.text, language))) for w in words]
            _check_unit_count(len(words), sum(len(s) for s in spoken))
            timed = self._time_words(pcm, list(words), spoken, keep_confidence=True, cancel=cancel)
            counts = [len(s.words) for s in segments]
        return Transcript(transcript.text, transcript.language, _refill(segments, timed, counts))

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
        check_cancel(cancel)
        pcm = _checked_pcm(audio)
        with self._lock:
            self._check_open()
            try:
                with thread_limit(self.options.threads):
                    return self._forward(pcm, units, cancel)
            except RecognitionCancelledError as exc:
                raise AlignmentCancelledError("alignment was cancelled by the caller's signal") from exc

    # -- internals ------------------------------------------------------------------------

    def _align_text(self, audio: np.ndarray, text: str, language: str,
                    cancel: Cancel) -> tuple[int, str, tuple[Word, ...]]:
        """(samples, language tag, timed words) of ``text`` in ``audio``."""
        check_cancel(cancel)
        self._check_open()
        language = check_language(language)
        units = _checked_units(text, language)
        pcm = _checked_pcm(audio)
        words = [Word(u.text) for u in units]
        timed = self._time_words(pcm, words, [u.spoken for u in units], keep_confidence=False, cancel=cancel)
        return pcm.shape[0], language, tuple(timed)

    def _forward(self, pcm: np.ndarray, units: list[str], cancel: Cancel) -> TimestampLogits:
        backbone, head = self._backbone, self._head
        assert backbone is not None and head is not None  # open: checked by the caller
        _check_cancel(cancel)
        # text first: its ids are bounded before any model work
        unit_ids = encode_units(self._tokenizer, units)
        # audio: log-mel (up to 300 s) -> encoder -> one embedding per audio token
        mel = log_mel(pcm, max_seconds=ALIGNMENT_MAX_SECONDS)
        audio_embeds = backbone.encode_audio(mel, cancel=cancel)
        _check_cancel(cancel)
        # special ids around the audio, units each followed by two timestamps
        inputs = build_input(unit_ids, audio_embeds.shape[0], self.special)
        embeds = backbone.embed_prompt(inputs.ids, audio_embeds, inputs.audio_offset)
        del audio_embeds
        # one causal pass (one layer's keys and values in memory); the last layer and
        # the classify head run only at the timestamp rows
        rows = backbone.hidden_states(embeds, cancel, rows=inputs.timestamp_positions)
        return TimestampLogits(inputs.ids, backbone.linear(rows, head))

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
    if not config.is_aligner:
        raise ModelKindError(
            f"{directory} holds a {config.model_type} model; Qwen3ForcedAligner needs a "
            "qwen3_forced_aligner checkpoint (Qwen/Qwen3-ForcedAligner-0.6B)"
        )


def _declared(value: int | None, name: str, directory: Path) -> int:
    """An aligner config value (``load_config`` requires it of every aligner config)."""
    if value is None:
        raise ModelKindError(f"{directory}/config.json declares no {name}; is it a Qwen3-ForcedAligner config?")
    return value


def _check_cancel(cancel: Cancel) -> None:
    raise_if_cancelled(cancel, "alignment", AlignmentCancelledError)


def _checked_pcm(audio: np.ndarray) -> np.ndarray:
    return validate_pcm(audio, max_samples=ALIGNMENT_MAX_SAMPLES, allow_empty=False)


def _check_unit_count(n_written: int, n_spoken: int) -> None:
    if max(n_written, n_spoken) > MAX_UNITS:
        raise TooManyUnitsError(
            f"text has {n_written} written units ({n_spoken} spoken units); alignment allows at most "
            f"{MAX_UNITS}; align it in shorter pieces"
        )


def _refill(segments: tuple[Segment, ...], words: list[Word], counts: list[int]) -> tuple[Segment, ...]:
    """The segments holding the timed words, ``counts[i]`` of them in segment ``i``, in order."""
    out, first = [], 0
    for segment, count in zip(segments, counts, strict=True):
        out.append(replace(segment, words=tuple(words[first : first + count])))
        first += count
    return tuple(out)


def _checked_units(text: str, language: str) -> list[WrittenUnit]:
    check_text(text)
    units = written_units(text, language)
    _check_unit_count(len(units), sum(len(u.spoken) for u in units))
    return units
