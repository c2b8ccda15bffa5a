"""Streamed audio -> recognition chunks, and the recognition of one chunk.

:class:`AudioChunker` is the spec's chunking over a stream of 16 kHz blocks: 30 s or
less of audio is one chunk; longer audio goes through the Silero VAD and the
VAD-first chunk planner (chunks of at most 30 s), each chunk handed out as soon as
the planner closes it. It keeps only the audio a later chunk can still need, so
memory does not grow with the file. Its chunks are exactly those that
``Qwen3Recognizer.transcribe`` plans for the whole audio at once.

:func:`recognize_chunk` recognizes one closed chunk with fresh decoder state, and
:func:`time_chunk` times its words through the timing dispatcher; file transcription
and streaming both call them, so both give the same segment (text and word times)
per chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from onespeech.align.timing import TimingDispatcher
from onespeech.features import (
    Chunk,
    ChunkPlanner,
    SileroVad,
    SpeechRegion,
    SpeechSegmenter,
    VadOptions,
    VadStream,
)
from onespeech.features.pcm import (
    MAX_CHUNK_SAMPLES,
    MIN_SAMPLES_EXCLUSIVE,
    SAMPLE_RATE,
    StreamedPcm,
)
from onespeech.kernels.cancel import Cancel
from onespeech.qwen3 import Qwen3Recognizer, written_units
from onespeech.speech.document import Finish, Segment, TimingMethod, Word
from onespeech.speech.region_stream import SampleBuffer

__all__ = ["AudioChunker", "ClosedChunk", "recognize_chunk", "time_chunk", "untimed_reason", "untimed_words"]


@dataclass(frozen=True)
class ClosedChunk:
    """A chunk's sample range and its samples (a copy owned by the caller)."""

    chunk: Chunk
    pcm: np.ndarray


class AudioChunker:
    """Feed 16 kHz mono blocks, get recognition chunks as they close.

    Parameters
    ----------
    vad : SileroVad or callable returning one
        Scores the audio (a fresh stream per chunker); a callable is called only
        when the audio turns out longer than one chunk.
    options : VadOptions, optional
        Segmentation settings (the timing replay must use the same).
    max_samples : int
        Chunk bound (480000, 30 s); audio of at most this length is one chunk.
    """

    def __init__(
        self,
        vad: SileroVad | Callable[[], SileroVad],
        options: VadOptions | None = None,
        max_samples: int = MAX_CHUNK_SAMPLES,
    ) -> None:
        self._vad = vad
        self._stream: VadStream | None = None  # started once the audio exceeds one chunk
        self._segmenter = SpeechSegmenter(options)
        self._planner = ChunkPlanner(max_samples)
        self._max = max_samples
        self._buffer = SampleBuffer()  # the audio a chunk can still need (amortized O(1) appends)
        # values are checked per block, the length (> 200 samples) once on the whole audio:
        # the last block of an ordinary file may hold only a few samples
        self._checks = StreamedPcm()

    @property
    def n_samples(self) -> int:
        """Samples fed so far."""
        return self._checks.n_samples

    @property
    def buffered_samples(self) -> int:
        """Samples held for chunks that have not closed yet."""
        return self._buffer.end - self._buffer.start

    def feed(self, block: np.ndarray) -> list[ClosedChunk]:
        """Add the next samples (any number, including 0); return the chunks they close (source order).

        Raises
        ------
        PcmShapeError, NonFiniteSampleError, PcmPowerOverflowError
            The block is not 1-D float PCM, holds a NaN or infinity (named by its index in
            the audio), or the audio's power so far overflows float32.
        """
        pcm = self._checks.block(block)
        self._buffer.append(pcm)
        if self._stream is None:
            if self.n_samples <= self._max:
                return []  # may still be one chunk: no VAD needed yet, keep everything
            vad = self._vad() if callable(self._vad) else self._vad
            self._stream = vad.stream()
            pcm = self._buffer.held()  # everything so far (nothing was dropped yet)
        regions = self._segmenter.feed(self._stream.feed(pcm))
        return self._plan(regions, final=False)

    def finish(self) -> list[ClosedChunk]:
        """End of the audio: the remaining chunks.

        Audio of at most ``max_samples`` is one chunk ``(0, n)`` (empty audio: none).
        A VAD chunk of 200 samples or fewer holds no speech to speak of and is dropped,
        as ``Qwen3Recognizer.transcribe`` drops it.

        Raises
        ------
        PcmTooShortError
            The audio holds 1 to 200 samples.
        """
        self._checks.finish()
        if self._stream is None:
            return [self._closed(Chunk(0, self.n_samples))] if self.n_samples else []
        regions = self._segmenter.feed(self._stream.finish()) + self._segmenter.finish(self.n_samples)
        return self._plan(regions, final=True)

    # -- internals ---------------------------------------------------------------------

    def _plan(self, regions: list[SpeechRegion], final: bool) -> list[ClosedChunk]:
        pcm, offset = self._buffer.held(), self._buffer.start
        closed = []
        for region in regions:
            closed.extend(self._planner.add(region, pcm, offset))
        if final:
            closed.extend(self._planner.finish())
        out = [self._closed(c) for c in closed if c.n_samples > MIN_SAMPLES_EXCLUSIVE]
        self._buffer.drop_before(self._keep_from())
        return out

    def _keep_from(self) -> int:
        open_start = self._planner.open_start
        horizon = self._segmenter.horizon
        return horizon if open_start is None else min(open_start, horizon)

    def _closed(self, chunk: Chunk) -> ClosedChunk:
        return ClosedChunk(chunk, self._buffer.view(chunk.start, chunk.end).copy())


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
    result = recognizer.recognize_chunk(pcm_chunk, language, cancel)
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
