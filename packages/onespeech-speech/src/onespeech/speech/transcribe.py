"""transcribe(file) -> Document: the spec's file path and its memory lifetime.

For one file::

    decode in blocks (AudioFileSource: soundfile + soxr, as load_audio)
      -> AudioChunker: 30 s or less is one chunk; longer audio goes through the VAD
         stream and the VAD-first planner (chunks of at most 30 s)
      -> encode each chunk as soon as it closes and decode it in a batch with the
         next ones (ChunkBatch: a KV cache of its own per chunk, at most
         ``decode_batch`` chunks within ``decode_memory_mb``; the same bits as one
         at a time), keeping only its boundaries, text and written words
    release the recognizer
    replay the decoded audio (the file again, or the spool of a stream) through a
    fresh VAD with the same settings; the chunk boundaries must be identical
      -> the timing dispatcher picks the stage per segment language (the forced
         aligner, loaded on first use) and times the segment's words, shifted by the
         segment's start
    release the aligner
    with speakers: replay once more through the speaker stage, streamed (each VAD
    region embedded as it closes, only its partial embeddings kept), then attribute
    the turns to words and segments; remove the spool

No full-file PCM is held, no decoder state outlives a chunk's decoding (a batch
holds only its live chunks' caches), and the recognizer and the aligner are never loaded at the same time. A segment's text is exactly what
``Qwen3Recognizer.transcribe`` returns for the segment's samples, and its words'
times exactly what ``Qwen3ForcedAligner.align`` returns for them, plus the segment's
start.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import BinaryIO, cast

import numpy as np

from onespeech.align import default_dispatcher
from onespeech.align.timing import TimingDispatcher
from onespeech.features import AudioChunker, AudioFileSource, ClosedChunk, SileroVad, load_vad
from onespeech.features.pcm import SAMPLE_RATE
from onespeech.kernels.cancel import Cancel, check_cancel, raise_if_cancelled
from onespeech.kernels.errors import OperationCancelledError
from onespeech.kernels.threads import thread_limit
from onespeech.qwen3 import BatchDecoder, Qwen3Options, Qwen3Recognizer
from onespeech.speech.chunk import recognize_chunk, time_chunk, untimed_reason
from onespeech.speech.chunk_batch import ChunkBatch
from onespeech.speech.document import Document, Finish, ModelInfo, Segment, TimingMethod
from onespeech.speech.errors import ChunkLimitError, ReplayMismatchError, TranscriptionCancelledError
from onespeech.speech.options import DEFAULT_ALIGNER, DEFAULT_MODEL, TranscribeOptions
from onespeech.speech.progress import Progress, check_progress, progress_reporter

__all__ = ["DEFAULT_ALIGNER", "DEFAULT_MODEL", "TranscribeOptions", "Transcriber", "recognize_chunk", "transcribe"]

# Segment.untimed_reason when timing was off
TIMING_DISABLED = "aligner disabled"

Source = str | os.PathLike[str] | BinaryIO
_UNSET: object = object()


@dataclass
class _Model:
    """A model argument and, once resolved, its runtime directory."""

    name: str
    kind: str  # "asr" or "aligner" (onespeech.kernels.registry)
    directory: Path | None = None
    revision: str | None = None


class Transcriber:
    """Transcribes files with one set of options; loads models only while it needs them.

    Parameters
    ----------
    model : str or PathLike, optional
        Sugar for ``options.model`` (a catalog id or a local directory).
    options : TranscribeOptions, optional
        Every transcription option (:class:`onespeech.speech.options.TranscribeOptions`:
        model, language, aligner, context, precision, threads, max_new_tokens, decode_batch,
        decode_memory_mb, speakers, max_pause, vad, vad_options, catalog_dir); keyword arguments naming its fields
        change it, and an unknown keyword is a TypeError.
    progress : None, False or callable
        None: tqdm bars on stderr when it is a terminal; False: none; a callable gets
        ``(stage, done, total)`` in audio seconds for "decode", "recognize", "align", "speakers".
    cancel : threading.Event-like or None
        Once set, the transcription stops within one decoder step or one aligner
        forward and raises TranscriptionCancelledError.
    keep_loaded : bool
        Keep the recognizer (for the default context) and the aligner loaded between
        calls until ``close`` (a server worker, a session) instead of loading them for
        each file; a call with another ``context`` loads its own recognizer for that
        call. Both models are then held at once: the memory-lifetime separation of
        file transcription applies only with the default False.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] | None = None,
        *,
        options: TranscribeOptions | None = None,
        progress: Progress = None,
        cancel: Cancel = None,
        keep_loaded: bool = False,
        **changes: object,
    ) -> None:
        if model is not None:
            changes["model"] = model
        self.options = options = TranscribeOptions.build(options, **changes)
        self.recognizer_options = options.recognizer_options()
        self.aligner_options = options.aligner_options()
        check_progress(progress)
        check_cancel(cancel)
        self.max_pause = options.max_pause
        self.language = options.language
        self.progress = progress
        self.cancel = cancel
        self.speakers = options.speakers
        self.vad_options = options.vad_options
        self._model = _Model(options.model, "asr")
        self._aligner = _Model(options.aligner, "aligner") if options.aligner is not None else None
        self._vad = options.vad
        self._catalog_dir = options.catalog_dir
        self._closed = False
        self.keep_loaded = keep_loaded
        self._held_recognizer: Qwen3Recognizer | None = None
        self._held_dispatcher: TimingDispatcher | None = None
        # a decode batch shared with other Transcribers over the same weights (the server's
        # workers: continuous batching); None: each file decodes in a batch of its own
        self.shared_batch: BatchDecoder | None = None

    # -- public ------------------------------------------------------------------------

    def transcribe(
        self,
        source: Source,
        *,
        language: str | None | object = _UNSET,
        context: str | None | object = _UNSET,
        progress: Progress | object = _UNSET,
        cancel: Cancel | object = _UNSET,
        align: bool = True,
    ) -> Document:
        """Transcribe one file or binary stream (options default to the Transcriber's).

        ``align=False`` skips the timing pass for this call (words keep None times).

        Raises
        ------
        ChunkLimitError
            A chunk reached ``max_new_tokens``; names its time range, ``.partial`` holds
            the chunks before it.
        TranscriptionCancelledError
        ReplayMismatchError
            The timing replay planned other chunks than recognition did.
        PcmError, UnreadableAudioError, CorruptAudioError
            Bad audio (1..200 samples, nonfinite samples, undecodable data).
        """
        if self._closed:
            from onespeech.kernels.errors import ObjectClosedError

            raise ObjectClosedError("this Transcriber is closed; make a new one")
        options = self.recognizer_options
        if context is not _UNSET:
            if context is not None and not isinstance(context, str):
                raise TypeError(f"context must be a string or None, not {type(context).__name__}")
            options = replace(options, context=cast("str | None", context))
        language = self.language if language is _UNSET else language
        progress = self.progress if progress is _UNSET else progress
        cancel = self.cancel if cancel is _UNSET else cancel
        check_progress(progress)
        check_cancel(cancel)
        label = Path(os.fspath(source)).name if isinstance(source, (str, os.PathLike)) else "<stream>"
        report = progress_reporter(cast(Progress, progress), label)
        try:
            run = _FileRun(self, options, language, report, cancel)  # type: ignore[arg-type]
            return run.run(source, align=align)
        except TranscriptionCancelledError:
            raise
        except OperationCancelledError as error:
            raise TranscriptionCancelledError("transcription was cancelled by the caller's signal") from error
        finally:
            report.close()

    def recognizer(self) -> Qwen3Recognizer:
        """The held recognizer of the default context (``keep_loaded`` only), loaded on first use."""
        self._check_holds("a recognizer")
        if self._held_recognizer is None:
            self._held_recognizer = Qwen3Recognizer.load(self._resolve(self._model), self.recognizer_options)
        return self._held_recognizer

    def dispatcher(self) -> TimingDispatcher | None:
        """The held timing dispatcher (``keep_loaded`` only) with its stages loaded; None without an aligner."""
        self._check_holds("a timing stage")
        if self._aligner is None:
            return None
        dispatcher = self._acquire_dispatcher()
        dispatcher.load()
        return dispatcher

    def _check_holds(self, what: str) -> None:
        if not self.keep_loaded:
            raise ValueError(f"only a Transcriber with keep_loaded=True holds {what} between calls")
        if self._closed:
            from onespeech.kernels.errors import ObjectClosedError

            raise ObjectClosedError("this Transcriber is closed; make a new one")

    def close(self) -> None:
        """Release the models held with ``keep_loaded`` (otherwise models live only during a call)."""
        self._closed = True
        if self._held_recognizer is not None:
            self._held_recognizer.close()
            self._held_recognizer = None
        if self._held_dispatcher is not None:
            self._held_dispatcher.close()
            self._held_dispatcher = None

    def _acquire_recognizer(self, options: Qwen3Options, cancel: Cancel) -> Qwen3Recognizer:
        if self.keep_loaded and options == self.recognizer_options:
            return self.recognizer()
        return Qwen3Recognizer.load(self._resolve(self._model), options, cancel)

    def _acquire_batch(self, recognizer: Qwen3Recognizer) -> BatchDecoder:
        if self.shared_batch is not None:
            return self.shared_batch
        return recognizer.batch_decoder(self.options.batch_limits())

    def _release_recognizer(self, recognizer: Qwen3Recognizer) -> None:
        if recognizer is not self._held_recognizer:
            recognizer.close()

    def _acquire_dispatcher(self) -> TimingDispatcher:
        if self._held_dispatcher is not None:
            return self._held_dispatcher
        aligner = self._aligner
        assert aligner is not None
        dispatcher = default_dispatcher(lambda: self._resolve(aligner), self.aligner_options)
        if self.keep_loaded:
            self._held_dispatcher = dispatcher
        return dispatcher

    def _release_dispatcher(self, dispatcher: TimingDispatcher) -> None:
        if dispatcher is not self._held_dispatcher:
            dispatcher.close()

    def __enter__(self) -> Transcriber:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- models ------------------------------------------------------------------------

    def _resolve(self, model: _Model) -> Path:
        if model.directory is None:
            from onespeech.kernels.resolve import resolve_model

            precision = self.recognizer_options.precision
            found = resolve_model(model.name, precision, kind=model.kind, catalog_dir=self._catalog_dir)
            model.directory, model.revision = found.directory, found.revision
        return model.directory

    def _model_info(self, model: _Model) -> ModelInfo:
        return ModelInfo(model.name, model.revision, self.recognizer_options.precision.value)

    def _load_vad(self) -> SileroVad:
        # loaded once, on first need (short inputs never touch the VAD)
        self._vad = load_vad(self._vad)
        return self._vad


class _FileRun:
    """One file through the two passes (recognition, then timing)."""

    def __init__(self, owner: Transcriber, options: Qwen3Options, language: str | None,
                 report: Callable[[str, float, float], None], cancel: Cancel) -> None:
        self.owner = owner
        self.options = options
        self.language = language
        self.report = report
        self.cancel = cancel
        self.boundaries: list[tuple[int, int]] = []  # every chunk, in order
        self.segments: list[Segment] = []  # chunks with text
        self.segment_at: dict[int, int] = {}  # first sample of a chunk -> its segment's index

    def run(self, source: Source, align: bool = True) -> Document:
        owner = self.owner
        with AudioFileSource(source) as audio:  # removes the spool of a stream, also on error
            self.duration_hint = audio.duration_s
            n_samples = self._recognize(audio)
            segments = self.segments
            aligner_info = None
            if owner._aligner is not None and align:
                segments = self._time(audio, n_samples)
                aligner_info = owner._model_info(owner._aligner)
            else:
                segments = [replace(s, timing_method=TimingMethod.NONE, untimed_reason=TIMING_DISABLED) for s in segments]
            document = Document.from_segments(segments, n_samples / SAMPLE_RATE, owner._model_info(owner._model),
                                              aligner_info)
            self.segments = segments = []  # the document holds them now: no second copy of every word
            if owner.speakers is not False and document.segments:
                document = self._attribute_speakers(audio, document, n_samples)
        return replace(document, options=self._made_with(align))

    def _made_with(self, align: bool) -> dict[str, object]:
        """The options of this call (its language, context, speakers and aligner) that decide the output."""
        owner = self.owner
        return replace(owner.options, language=self.language, context=self.options.context, speakers=owner.speakers,
                       aligner=owner.options.aligner if align else None).record()

    # -- pass 3: speakers (after the recognizer and the aligner are released) -----------------

    def _attribute_speakers(self, audio: AudioFileSource, document: Document, n_samples: int) -> Document:
        from onespeech.features.speaker_model import load_speaker_encoder
        from onespeech.speech.speakers import DiarizationOptions, Diarizer, attribute_speakers

        self._check_cancel()
        total = n_samples / SAMPLE_RATE
        replayed = 0

        def replay() -> Iterator[np.ndarray]:
            # streamed: the stage keeps each closed region's embeddings, never the file's PCM
            nonlocal replayed
            for block in audio.blocks():
                self._check_cancel()
                replayed += block.shape[0]
                if replayed > n_samples:
                    break
                yield block
                self.report("speakers", replayed / SAMPLE_RATE, total)

        encoder = load_speaker_encoder(threads=self.options.threads)
        options = DiarizationOptions(max_pause=self.owner.max_pause)
        turns = Diarizer(encoder, self.owner._load_vad(), options)(replay(), self.owner.speakers, cancel=self.cancel)
        if replayed != n_samples:
            raise ReplayMismatchError(
                f"the speaker pass decoded {'at least ' if replayed > n_samples else ''}{replayed} samples, "
                f"recognition {n_samples}; the audio decoded differently the second time, so no speakers "
                "are assigned"
            )
        self.report("speakers", total, total)
        return attribute_speakers(document, turns)

    # -- pass 1: recognition ---------------------------------------------------------------

    def _recognize(self, audio: AudioFileSource) -> int:
        owner = self.owner
        self._check_cancel()
        recognizer = owner._acquire_recognizer(self.options, self.cancel)
        decoding: ChunkBatch | None = None
        try:
            recognizer.languages.resolve(self.language)  # an unknown language fails before decoding
            decoding = ChunkBatch(recognizer, owner._acquire_batch(recognizer), self.language, self.cancel)
            chunker = AudioChunker(owner._load_vad, owner.vad_options)
            with thread_limit(self.options.threads):
                for block in audio.blocks():
                    self._check_cancel()
                    self.report("decode", audio.position / SAMPLE_RATE, self.duration_hint)
                    for closed in chunker.feed(block):
                        self._recognize_chunk(decoding, closed)
                for closed in chunker.finish():
                    self._recognize_chunk(decoding, closed)
                self._recognized(decoding.finish())
            n_samples = chunker.n_samples
            self.report("decode", n_samples / SAMPLE_RATE, n_samples / SAMPLE_RATE)
            self.report("recognize", n_samples / SAMPLE_RATE, n_samples / SAMPLE_RATE)
            return n_samples
        finally:
            if decoding is not None:
                decoding.close()  # a shared batch forgets this file's unfinished chunks
            owner._release_recognizer(recognizer)  # before the aligner is ever loaded (unless both are held)

    def _recognize_chunk(self, decoding: ChunkBatch, closed: ClosedChunk) -> None:
        chunk = closed.chunk
        self.boundaries.append((chunk.start, chunk.end))
        self._recognized(decoding.add(closed.pcm, chunk.start, chunk.end))

    def _recognized(self, chunks: list[tuple[int, Segment]]) -> None:
        """Keep the segments of chunks whose decoding completed (in chunk order), reporting each."""
        for first_sample, segment in chunks:
            start, end = first_sample / SAMPLE_RATE, segment.end
            assert end is not None
            if segment.finish is Finish.MAX_NEW_TOKENS:
                partial = Document.from_segments(self.segments, start, self.owner._model_info(self.owner._model),
                                                 None)
                raise ChunkLimitError(
                    f"the chunk {start:.2f}-{end:.2f} s reached max_new_tokens="
                    f"{self.options.max_new_tokens} before the model ended its answer; raise max_new_tokens "
                    f"(up to 4096); the error's .partial holds the {len(self.segments)} segment(s) before it",
                    start, end, partial,
                )
            if segment.text:
                self.segment_at[first_sample] = len(self.segments)
                self.segments.append(segment)
            self.report("recognize", end, max(self.duration_hint, end))

    # -- pass 2: timing ----------------------------------------------------------------------

    def _time(self, audio: AudioFileSource, n_samples: int) -> list[Segment]:
        owner = self.owner
        assert owner._aligner is not None
        dispatcher = owner._acquire_dispatcher()
        timed = [s if dispatcher.select(s.language) is not None
                 else replace(s, timing_method=TimingMethod.NONE, untimed_reason=untimed_reason(s.language))
                 for s in self.segments]
        pending = {i for i, s in enumerate(timed) if dispatcher.select(s.language) is not None}
        if not pending:
            return timed  # nothing any stage can time: no replay, no aligner
        try:
            chunker = AudioChunker(owner._load_vad, owner.vad_options)
            replayed = 0

            def replay_chunk(closed: ClosedChunk) -> None:
                nonlocal replayed
                chunk = closed.chunk
                expected = self.boundaries[replayed] if replayed < len(self.boundaries) else None
                if expected != (chunk.start, chunk.end):
                    raise ReplayMismatchError(
                        f"the timing replay planned chunk {replayed} as samples {chunk.start}..{chunk.end}, "
                        f"but recognition used {expected}; the audio decoded differently the second time "
                        "(a file changed while it was read?), so no times are assigned"
                    )
                replayed += 1
                index = self.segment_at.get(chunk.start)
                if index is not None and index in pending:
                    timed[index] = time_chunk(dispatcher, timed[index], closed.pcm, cancel=self.cancel)
                self.report("align", chunk.end_s, n_samples / SAMPLE_RATE)

            with thread_limit(self.options.threads):
                for block in audio.blocks():
                    self._check_cancel()
                    for closed in chunker.feed(block):
                        replay_chunk(closed)
                for closed in chunker.finish():
                    replay_chunk(closed)
            if replayed != len(self.boundaries) or chunker.n_samples != n_samples:
                raise ReplayMismatchError(
                    f"the timing replay found {replayed} chunks in {chunker.n_samples} samples, recognition "
                    f"{len(self.boundaries)} chunks in {n_samples} samples"
                )
            self.report("align", n_samples / SAMPLE_RATE, n_samples / SAMPLE_RATE)
        finally:
            owner._release_dispatcher(dispatcher)
        return timed

    def _check_cancel(self) -> None:
        raise_if_cancelled(self.cancel, "transcription", TranscriptionCancelledError)


def transcribe(
    source: Source,
    model: str | os.PathLike[str] | None = None,
    *,
    options: TranscribeOptions | None = None,
    progress: Progress = None,
    cancel: Cancel = None,
    **changes: object,
) -> Document:
    """Transcribe an audio file or binary stream into a :class:`Document`.

    The default model is Qwen3-ASR-0.6B (this library runs the Qwen family only) and the
    default aligner Qwen3-ForcedAligner-0.6B; the first run downloads them. ``options``
    (:class:`TranscribeOptions`) and keyword arguments naming its fields say how; see
    :class:`Transcriber`. This is ``Transcriber(...).transcribe(source)``.
    """
    settings = TranscribeOptions.build(options, **changes)
    with Transcriber(model, options=settings, progress=progress, cancel=cancel) as transcriber:
        return transcriber.transcribe(source)
