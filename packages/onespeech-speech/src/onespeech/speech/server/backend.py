"""What the server runs on each worker: a Transcriber whose models stay loaded.

``load_shared`` loads what the live chunkers share read-only (the VAD) and makes sure the
speaker encoder is in the cache (each request with speakers loads it for its speaker
pass, as ``transcribe`` does); ``load_worker``
runs once in each worker thread: a ``Transcriber(keep_loaded=True)`` whose recognizer
and aligner (if any) are loaded at once and stay loaded until the server stops. A
request with its own prompt (context) loads a recognizer for that request (the
weights are memory-mapped, so this maps the same files again rather than copying them).

Continuous batching: every worker's file path decodes in one shared decode batch
(``onespeech.qwen3.BatchDecoder``, bounded by ``decode_batch`` and
``decode_memory_mb``; the first worker's recognizer makes it as the file path makes
its own, so an auto ``decode_memory_mb`` is a quarter of that recognizer's weights,
which all workers map from the same files), so while one request decodes, another's
chunks join the running batch at its next step and leave it when they end; each request's
document is the same bits as serving it alone. Each request still encodes and
prefills its chunks in its own worker. ``decode_stats`` counts the steps (and
those that advanced more than one request), as ``/health`` shows them.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, BinaryIO

from onespeech.kernels.cancel import Cancel
from onespeech.speech.server.config import ServerConfig
from onespeech.speech.server.errors import audio_too_long, bad_request

if TYPE_CHECKING:
    from onespeech.features import ClosedChunk, SileroVad
    from onespeech.qwen3 import BatchDecoder
    from onespeech.qwen3.languages import Languages
    from onespeech.speech.document import Document, Segment
    from onespeech.speech.transcribe import Transcriber


class Backend:
    """Model loading and the two kinds of work: a whole upload, and one live chunk."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.vad: SileroVad | None = None
        self._languages: Languages | None = None
        self._batch: BatchDecoder | None = None
        self._batch_owner: Transcriber | None = None  # its recognizer's decoder runs the shared steps
        self._open_workers = 0
        self._batch_lock = threading.Lock()

    def load_shared(self) -> None:
        from onespeech.features import load_vad

        self.vad = load_vad(self.config.options.vad)
        if self.config.options.speakers is not False:
            from onespeech.features.speaker_model import speaker_model_path

            # fetched and verified now: a server that cannot attribute speakers fails at start, not per request
            speaker_model_path()

    def shared_vad(self) -> SileroVad:
        """The VAD that ``load_shared`` loaded (live chunking on every connection uses it)."""
        if self.vad is None:
            raise RuntimeError("Backend.load_shared() has not run: the server loads the shared VAD at startup")
        return self.vad

    def load_worker(self) -> Transcriber:
        from onespeech.speech.transcribe import Transcriber

        # the options as configured (a document records them as the CLI's would); the transcriber loads
        # its own copy of the small VAD for files over 30 s, the live chunkers share load_shared's
        transcriber = Transcriber(options=self.config.options, progress=False, keep_loaded=True)
        try:
            recognizer = transcriber.recognizer()  # now, not at the first request
            transcriber.dispatcher()  # the aligner too: live finals are timed as they come
        except BaseException:
            transcriber.close()
            raise
        self._languages = recognizer.languages
        with self._batch_lock:
            if self._batch is None:
                self._batch = recognizer.batch_decoder(self.config.options.batch_limits())
                self._batch_owner = transcriber
            self._open_workers += 1
        transcriber.shared_batch = self._batch
        return transcriber

    def close_worker(self, transcriber: Transcriber) -> None:
        with self._batch_lock:
            self._open_workers -= 1
            closing = [transcriber]
            if transcriber is self._batch_owner:
                if self._open_workers > 0:
                    return  # the others still step the shared batch on its decoder: closed with the last one
            elif self._open_workers == 0 and self._batch_owner is not None:
                closing.append(self._batch_owner)
            if self._open_workers == 0:
                self._batch = self._batch_owner = None
        for worker in closing:
            worker.close()

    def decode_stats(self) -> dict[str, int]:
        """Decode steps of the shared batch so far, and those that advanced more than one request."""
        batch = self._batch
        if batch is None:
            return {"decode_steps": 0, "shared_decode_steps": 0}
        return {"decode_steps": batch.steps, "shared_decode_steps": batch.shared_steps}

    def check_language(self, language: str) -> None:
        from onespeech.qwen3 import UnsupportedLanguageError

        if self._languages is None:
            return  # no worker loaded yet: the worker checks it
        try:
            self._languages.resolve(language)
        except UnsupportedLanguageError as error:
            raise bad_request(str(error), "unsupported_language", "language") from None

    def transcribe(self, transcriber: Transcriber, file: BinaryIO, *, language: str | None, context: str | None,
                   words: bool, speakers: str | int | bool, cancel: Cancel) -> Document:
        """The Document of one upload (word timings only when asked for: they cost an aligner pass).

        Speakers are attributed as ``transcribe`` does (the CLI's labels); the decoded
        length is held to ``max_audio_s`` as it decodes, since a header may not declare it.
        """
        max_audio_s = self.config.max_audio_s
        options = self.config.options

        def guard(stage: str, done: float, total: float) -> None:
            if stage == "decode" and done > max_audio_s:
                raise audio_too_long(done, max_audio_s, at_least=True)

        # the worker's own Transcriber runs one job at a time: its speakers setting is this request's
        transcriber.speakers = speakers
        return transcriber.transcribe(file, language=language or options.language,
                                      context=context if context is not None else options.context,
                                      align=words, cancel=cancel, progress=guard)

    def recognize_chunk(self, transcriber: Transcriber, closed: ClosedChunk, *, language: str | None,
                        cancel: Cancel) -> Segment:
        """The final of one closed live chunk, as a ``LiveSession`` with the server's aligner gives it."""
        from onespeech.kernels.threads import thread_limit
        from onespeech.speech.streaming import chunk_final

        recognizer = transcriber.recognizer()
        with thread_limit(recognizer.options.threads):
            return chunk_final(recognizer, transcriber.dispatcher(), closed,
                               language=language or self.config.options.language, cancel=cancel)
