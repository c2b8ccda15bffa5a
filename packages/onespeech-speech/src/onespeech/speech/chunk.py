"""The recognition and timing of one chunk.

The chunks come from the chunkers of ``onespeech.features`` (``AudioChunker`` for
files, ``LiveChunker`` for live streams). :func:`recognize_chunk` recognizes one closed chunk with fresh decoder state, and
:func:`time_chunk` times its words through the timing dispatcher; file transcription
and streaming both call them, so both give the same segment (text and word times)
per chunk.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from onespeech.align.timing import TimingDispatcher
from onespeech.features.pcm import SAMPLE_RATE
from onespeech.kernels.cancel import Cancel
from onespeech.qwen3 import Qwen3Recognizer, RecognizedChunk, written_units
from onespeech.speech.document import Finish, Segment, TimingMethod, Word

__all__ = ["chunk_segment", "recognize_chunk", "time_chunk", "untimed_reason", "untimed_words"]


def recognize_chunk(
    recognizer: Qwen3Recognizer,
    pcm_chunk: np.ndarray,
    start_sample: int,
    end_sample: int,
    *,
    language: str | None,
    cancel: Cancel = None,
) -> Segment:
    """Recognize one closed chunk with fresh decoder state.

    ``Qwen3Recognizer.recognize_chunk`` (the step ``Qwen3Recognizer.transcribe`` takes
    per chunk) as a segment on the source's clock: reaching ``max_new_tokens`` is
    reported in ``Segment.finish`` (``Finish.MAX_NEW_TOKENS``), so the caller can name the
    chunk and keep what came before. Words carry their written forms and no times
(``untimed_reason`` "not timed" until a timing pass says more).

    Parameters
    ----------
    recognizer : Qwen3Recognizer
    pcm_chunk : ndarray[float32], shape (end_sample - start_sample,)
    start_sample, end_sample : int
        The chunk's range on the source's 16 kHz clock.
    language : str | None
        A tag or name forcing the language, or None to let the model identify it.
    cancel : threading.Event-like, callable or None
    """
    if pcm_chunk.shape != (end_sample - start_sample,):
        raise ValueError(f"pcm_chunk has shape {pcm_chunk.shape}; expected ({end_sample - start_sample},) for "
                         f"samples {start_sample}..{end_sample}")
    return chunk_segment(recognizer.recognize_chunk(pcm_chunk, language, cancel), start_sample, end_sample)


def chunk_segment(result: RecognizedChunk, start_sample: int, end_sample: int) -> Segment:
    """The segment of one chunk's recognition (untimed words), on the source's clock."""
    finish = Finish.END_TOKEN if result.finished else Finish.MAX_NEW_TOKENS
    return Segment(start_sample / SAMPLE_RATE, end_sample / SAMPLE_RATE, result.text, result.language,
                   untimed_words(result.text, result.language), finish, untimed_reason="not timed")


def untimed_words(text: str, language: str | None) -> tuple[Word, ...]:
    """The written units of ``text`` as words without times."""
    return tuple(Word(u.text) for u in written_units(text, language))


def time_chunk(dispatcher: TimingDispatcher, segment: Segment, pcm_chunk: np.ndarray, *,
               cancel: Cancel = None) -> Segment:
    """``segment`` with its words timed by the stage the dispatcher picks for its language.

    The words are the units the stage finds in the segment's text (the aligner's unit
    rules, exactly as ``Qwen3ForcedAligner.align`` takes them from the text), with
    times on the source's clock: the stage's times plus ``segment.start`` (None stays
    None). ``timing_method`` is the stage's method; when none applies (no language
    identified, no stage for the language) ``untimed_reason`` says why, the segment is
    returned with only that changed and no model is loaded for it.

    Parameters
    ----------
    dispatcher : TimingDispatcher
    segment : Segment
        A chunk's segment from :func:`recognize_chunk`.
    pcm_chunk : ndarray[float32]
        The chunk's samples (the ones ``segment`` was recognized from).
    cancel : threading.Event-like, callable or None
    """
    stage = dispatcher.select(segment.language)
    if stage is None:
        return replace(segment, timing_method=TimingMethod.NONE, untimed_reason=untimed_reason(segment.language))
    timing = dispatcher.time_text(pcm_chunk, segment.text, segment.language, cancel)
    if timing.stage is None:
        return replace(segment, timing_method=TimingMethod.NONE, untimed_reason=timing.reason or "not timed")
    offset = segment.start
    words = tuple(replace(w, start=_shift(w.start, offset), end=_shift(w.end, offset)) for w in timing.words)
    return replace(segment, words=words, timing_method=stage.method, untimed_reason=None)


def untimed_reason(language: str | None) -> str:
    """``Segment.untimed_reason`` of a segment whose language no timing stage supports."""
    if not language:
        return "no language identified, so no timing stage applies"
    return f"no timing stage for language {language!r}"


def _shift(value: float | None, offset: float) -> float | None:
    return None if value is None else value + offset
