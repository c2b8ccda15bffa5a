"""What the server runs on each worker: a Transcriber whose models stay loaded.

``load_shared`` loads what every worker shares read-only (the VAD) and makes sure the
speaker encoder is in the cache (each request with speakers loads it for its speaker
pass, as ``transcribe`` does); ``load_worker``
runs once in each worker thread: a ``Transcriber(keep_loaded=True)`` whose recognizer
and aligner (if any) are loaded at once and stay loaded until the server stops. A
request with its own prompt (context) loads a recognizer for that request (the
weights are memory-mapped, so this maps the same files again rather than copying them).
"""

from __future__ import annotations

from typing import Any, BinaryIO

from onespeech.kernels.cancel import Cancel
from onespeech.speech.server.config import ServerConfig
from onespeech.speech.server.errors import audio_too_long, bad_request


class Backend:
    """Model loading and the two kinds of work: a whole upload, and one live chunk."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.vad: Any = None
        self._languages: Any = None

    def load_shared(self) -> None:
        from onespeech.speech.streaming import load_vad

        self.vad = load_vad(self.config.vad)
        if self.config.speakers is not False:
            from onespeech.features.speaker_model import speaker_model_path

            # fetched and verified now: a server that cannot attribute speakers fails at start, not per request
            speaker_model_path()

    def load_worker(self) -> Any:
        from onespeech.speech.transcribe import Transcriber

        config = self.config
        transcriber = Transcriber(
            config.model, language=config.language, aligner=config.aligner, context=config.context,
            precision=config.precision, threads=config.threads, max_new_tokens=config.max_new_tokens,
            progress=False, speakers=config.speakers, vad=self.vad, keep_loaded=True,
        )
        try:
            recognizer = transcriber.recognizer()  # now, not at the first request
            transcriber.dispatcher()  # the aligner too: live finals are timed as they come
        except BaseException:
            transcriber.close()
            raise
        self._languages = recognizer.languages
        return transcriber

    def close_worker(self, transcriber: Any) -> None:
        transcriber.close()

    def check_language(self, language: str) -> None:
        from onespeech.qwen3 import UnsupportedLanguageError

        if self._languages is None:
            return  # no worker loaded yet: the worker checks it
        try:
            self._languages.resolve(language)
        except UnsupportedLanguageError as error:
            raise bad_request(str(error), "unsupported_language", "language") from None

    def transcribe(self, transcriber: Any, file: BinaryIO, *, language: str | None, context: str | None,
                   words: bool, speakers: str | int | bool, cancel: Cancel, **_: Any) -> Any:
        """The Document of one upload (word timings only when asked for: they cost an aligner pass).

        Speakers are attributed as ``transcribe`` does (the CLI's labels); the decoded
        length is held to ``max_audio_s`` as it decodes, since a header may not declare it.
        """
        max_audio_s = self.config.max_audio_s

        def guard(stage: str, done: float, total: float) -> None:
            if stage == "decode" and done > max_audio_s:
                raise audio_too_long(done, max_audio_s, at_least=True)

        # the worker's own Transcriber runs one job at a time: its speakers setting is this request's
        transcriber.speakers = speakers
        return transcriber.transcribe(file, language=language or self.config.language,
                                      context=context if context is not None else self.config.context,
                                      align=words, cancel=cancel, progress=guard)

    def recognize_chunk(self, transcriber: Any, closed: Any, *, language: str | None, cancel: Cancel) -> Any:
        """The final of one closed live chunk, as a ``LiveSession`` with the server's aligner gives it."""
        from onespeech.kernels.threads import thread_limit
        from onespeech.speech.streaming import chunk_final

        recognizer = transcriber.recognizer()
        with thread_limit(recognizer.options.threads):
            return chunk_final(recognizer, transcriber.dispatcher(), closed,
                               language=language or self.config.language, cancel=cancel)
