"""Streaming sessions: live audio (``LiveSession``) and file-segment streaming (``stream_file``).

Both are one-pass: audio goes through the streaming VAD once, each speech region
becomes a chunk as soon as it closes (see ``onespeech.features.LiveChunker``), and
the chunk is recognized at once by ``recognize_chunk`` and, with an aligner, its
words timed by ``time_chunk``: the functions file transcription uses for each of its
chunks. So every final is exactly what the offline path gives for the same samples
(text, language, word times, timing reason), and no final waits for the end of the
input. The models needed for finals (the recognizer, and the timing stage when an
aligner is given) are loaded when the session starts and stay loaded, both at once,
until it ends. Finals only: this model family declares no live partials.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator
from dataclasses import replace
from typing import BinaryIO

import numpy as np

from onespeech.align import default_dispatcher
from onespeech.align.timing import TimingDispatcher
from onespeech.features import (
    AudioChunker,
    AudioFileSource,
    ClosedChunk,
    LiveChunker,
    StreamResampler,
    load_vad,
)
from onespeech.features.pcm import SAMPLE_RATE
from onespeech.kernels.cancel import Cancel, check_cancel
from onespeech.kernels.threads import thread_limit
from onespeech.qwen3 import Qwen3Recognizer
from onespeech.speech.chunk import recognize_chunk, time_chunk
from onespeech.speech.document import Segment, TimingMethod
from onespeech.speech.errors import SessionFinishedError
from onespeech.speech.options import TranscribeOptions
from onespeech.speech.progress import Progress, check_progress, progress_reporter
from onespeech.speech.transcribe import TIMING_DISABLED

CHUNKING = ("region", "file")


class LiveSession:
    """A live recognition session: push audio blocks, get finals as their chunks close.

    Parameters
    ----------
    model : str or PathLike, optional
        Sugar for ``options.model``: the recognizer (loaded now, kept until ``close``).
    options : TranscribeOptions, optional
        As for ``transcribe``, with ``transcribe``'s defaults (``TranscribeOptions()``);
        keyword arguments naming its fields change it. With an aligner (the default,
        Qwen3-ForcedAligner-0.6B), each final's words are timed exactly as
        ``transcribe`` times its segments (the same timing dispatcher and per-language
        rule; a final in a language no stage supports keeps None times and says why in
        ``untimed_reason``); it is loaded now and held with the recognizer for the whole
        session. ``aligner=None``: finals without word times (``untimed_reason="aligner
        disabled"``) and only the recognizer in memory. ``speakers`` and ``max_pause``
        do not apply: finals carry no speakers.
    chunking : {"region", "file"}
        "region" (default): each VAD speech region is a chunk, recognized as soon as
        it closes (regions over 30 s are cut at their quietest point). "file": the
        file path's chunks (regions grouped up to 30 s, audio of at most 30 s as one
        chunk), so the finals are exactly ``transcribe``'s segments, but a chunk
        closes only when the next region does not fit in it or the audio ends.

    progress : None, False or callable
        The progress protocol of ``transcribe``: a callable gets ``("recognize",
        done_seconds, heard_seconds)`` after each chunk and once more when ``finish``
        returns (done = heard); None: a tqdm bar on a terminal; False: none.

    Use as a context manager, or call ``close``. ``push`` and ``finish`` return
    ``Segment`` objects with source-clock times in seconds from the first sample.
    After ``finish`` the session refuses ``push`` until ``reset``. One call at a time:
    ``push``, ``finish``, ``reset`` and ``close`` hold the session's lock, so calls
    from several threads are serialized (docs/streaming.md, "Limits").
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        options: TranscribeOptions | None = None,
        chunking: str = "region",
        progress: Progress = None,
        **changes: object,
    ) -> None:
        if chunking not in CHUNKING:
            raise ValueError(f"chunking={chunking!r}; use one of {CHUNKING}")
        check_progress(progress)
        if model is not None:
            changes["model"] = model
        self.options = settings = TranscribeOptions.build(options, **changes)
        language, aligner, threads, vad = settings.language, settings.aligner, settings.threads, settings.vad
        self._vad = load_vad(vad)
        self._dispatcher: TimingDispatcher | None = None
        self._recognizer = Qwen3Recognizer.load(settings.model, settings.recognizer_options())
        try:
            self._recognizer.languages.resolve(language)  # an unsupported tag fails now, not at the first final
            if aligner is not None:
                self._dispatcher = default_dispatcher(
                    aligner, settings.aligner_options())
                # one pass: the timing stage is loaded now and held, so no final waits for a model load
                # (a forced language that no stage can time loads nothing)
                with thread_limit(threads):
                    self._dispatcher.load(language)
        except BaseException:
            self._release()
            raise
        self.language = language
        self._chunking, self._vad_options = chunking, settings.vad_options
        self._progress = progress
        self._report = progress_reporter(False)  # a stream's own reporter starts with it (reset)
        self._closed = False
        # one caller at a time: blocks from several threads would interleave the resampler, the VAD
        # and the clock; a second caller waits for the first one's push to return
        self._lock = threading.Lock()
        self._pending: list[ClosedChunk] = []  # closed, not yet recognized (a cancelled call left them)
        self._ready: list[Segment] = []  # finals made by a call that was cancelled before it returned
        self._finished = False  # finish() was called: no push until reset()
        self.reset()

    @property
    def recognizer(self) -> Qwen3Recognizer:
        """The session's Qwen3Recognizer (loaded for the whole session)."""
        return self._recognizer

    @property
    def dispatcher(self) -> TimingDispatcher | None:
        """The session's timing dispatcher (its stage loaded for the whole session), or None without an aligner."""
        return self._dispatcher

    @property
    def samples_heard(self) -> int:
        """16 kHz samples received so far (the session clock)."""
        return self._chunker.n_samples

    def push(self, pcm: np.ndarray, sample_rate: int = SAMPLE_RATE, *, cancel: Cancel = None) -> list[Segment]:
        """Feed the next block; return the finals whose chunks closed with it.

        Parameters
        ----------
        pcm : ndarray, shape (n,)
            Mono samples: float in [-1, 1] or int16. Any length, including 0.
        sample_rate : int
            The block's rate, 1000 to 768000 Hz; resampled to 16 kHz when it differs.
            Fixed per session (until ``reset``).
        cancel : threading.Event-like, callable or None
            Stops a recognition in progress (raises ``RecognitionCancelled``).

        Raises
        ------
        SampleRateError, PcmShapeError, NonFiniteSampleError, PcmScaleError, ValueError
            The block or its rate is refused; the session is exactly as before the call.
        SessionFinishedError
            ``finish`` was called; ``reset()`` starts a new stream.
        RecognitionCancelled
            ``cancel`` was set. The block was taken: chunks not yet recognized stay
            pending and their finals come with the next ``push`` or ``finish``.
        """
        with self._lock:
            self._check_open()
            check_cancel(cancel)
            if self._finished:
                raise SessionFinishedError("this LiveSession's stream is finished (finish() was called); "
                                           "call reset() to start a new stream before pushing more audio")
            block = self._input.convert(pcm, sample_rate)  # refuses a bad block before anything changes
            self._pending += self._chunker.feed(block)
            return self._recognize(cancel)

    def finish(self, *, cancel: Cancel = None) -> list[Segment]:
        """End of the audio: return the finals of the chunks still open. The session stays loaded.

        After ``finish`` the session refuses ``push`` until ``reset``; calling ``finish``
        again returns the finals still pending (after a cancelled call), else nothing.
        """
        with self._lock:
            self._check_open()
            check_cancel(cancel)
            if not self._finished:
                self._pending += self._chunker.feed(self._input.flush()) + self._chunker.finish()
                self._finished = True
            finals = self._recognize(cancel)
            heard = self._chunker.n_samples / SAMPLE_RATE
            self._report("recognize", heard, heard)  # the stream is done: all it heard is recognized
            return finals

    def reset(self) -> None:
        """Start a new stream (clock back to 0, any rate) with the same loaded models.

        Finals still pending from a cancelled call are dropped with the old stream.
        """
        with self._lock:
            self._check_open()
            self._chunker: LiveChunker | AudioChunker = (
                LiveChunker(self._vad, self._vad_options) if self._chunking == "region"
                else AudioChunker(self._vad, self._vad_options))
            self._input = StreamResampler()
            self._report.close()
            self._report = progress_reporter(self._progress, "live")
            self._pending, self._ready, self._finished = [], [], False

    def close(self) -> None:
        """Release the models (after a push running in another thread has returned)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._release()
                self._report.close()

    def _release(self) -> None:
        self._recognizer.close()
        if self._dispatcher is not None:
            self._dispatcher.close()

    def __enter__(self) -> LiveSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _check_open(self) -> None:
        if self._closed:
            from onespeech.kernels.errors import ObjectClosedError

            raise ObjectClosedError("this LiveSession is closed; start a new one")

    def _recognize(self, cancel: Cancel) -> list[Segment]:
        """Finals of the pending chunks, in order; a chunk leaves the queue once its final is made."""
        with thread_limit(self._recognizer.options.threads):  # as file transcription limits both of its passes
            while self._pending:
                check_cancel(cancel)
                segment = chunk_final(self._recognizer, self._dispatcher, self._pending[0], language=self.language,
                                      cancel=cancel)
                del self._pending[0]
                heard = self._chunker.n_samples / SAMPLE_RATE
                self._report("recognize", min(segment.end, heard), heard)
                if segment.text:
                    self._ready.append(segment)
        ready, self._ready = self._ready, []
        return ready


def chunk_final(
    recognizer: Qwen3Recognizer, dispatcher: TimingDispatcher | None, closed: ClosedChunk, *,
    language: str | None, cancel: Cancel,
) -> Segment:
    """The final of one closed chunk: the file path's segment for it.

    ``recognize_chunk`` on its samples, then, with a dispatcher, ``time_chunk`` (the file
    path's timing of one chunk); without one, ``untimed_reason`` is "aligner disabled" as in
    ``transcribe(..., aligner=None)``. A chunk with no text is returned untimed.
    """
    segment = recognize_chunk(recognizer, closed.pcm, closed.chunk.start, closed.chunk.end, language=language,
                              cancel=cancel)
    if not segment.text:
        return segment
    if dispatcher is None:
        return replace(segment, timing_method=TimingMethod.NONE, untimed_reason=TIMING_DISABLED)
    return time_chunk(dispatcher, segment, closed.pcm, cancel=cancel)


def stream_file(
    source: str | os.PathLike[str] | BinaryIO,
    model: str | os.PathLike[str] | None = None,
    *,
    options: TranscribeOptions | None = None,
    chunking: str = "file",
    cancel: Cancel = None,
    progress: Progress = None,
    **changes: object,
) -> Iterator[Segment]:
    """File-segment streaming: yield each final as its chunk closes while the file is decoded.

    The file is read once, block by block (no whole-file PCM is held); the session's
    models (the recognizer and, with an aligner, the timing stage) are loaded before
    the first block, held together, and released when the iterator ends or is closed.
    Same finals as a ``LiveSession`` with the same options fed the decoded audio. The
    options (``options`` and keyword arguments naming its fields) and their defaults
    are ``transcribe``'s: ``aligner`` is Qwen3-ForcedAligner-0.6B (None: no
    word times) and ``chunking="file"``, so the finals are ``transcribe``'s segments
    (text, language, word times, timing), each yielded as soon as its chunk closes;
    unlike ``transcribe``, a chunk that reaches ``max_new_tokens`` is yielded with
    ``finish=Finish.MAX_NEW_TOKENS`` rather than raised. ``progress`` is ``LiveSession``'s.
    """
    check_cancel(cancel)
    settings = TranscribeOptions.build(options, **({"model": model} if model is not None else {}), **changes)
    with AudioFileSource(source) as audio, LiveSession(options=settings, chunking=chunking,
                                                          progress=progress) as session:
        for block in audio.blocks():
            yield from session.push(block, cancel=cancel)
        yield from session.finish(cancel=cancel)
