"""Settings of the transcription server."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field, fields
from pathlib import Path

from onespeech.speech.options import TranscribeOptions

DEFAULT_MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # OpenAI's own upload limit
# a slow-loris body holds a connection and its parser until this passes; 25 MiB in 120 s needs ~1.7 Mbit/s
DEFAULT_READ_TIMEOUT_S = 120.0
DEFAULT_IDLE_TIMEOUT_S = 60.0  # a WebSocket that sends nothing for this long is closed
# a request holds a worker for its whole audio: 25 min (a 0.36 MB FLAC of silence declared 2 h otherwise)
DEFAULT_MAX_AUDIO_S = 1500.0


@dataclass(frozen=True, init=False)
class ServerConfig:
    """What ``onespeech serve`` runs: the transcription options and the server's own settings.

    ``ServerConfig(options, workers=2, ...)``; keyword arguments naming a
    :class:`TranscribeOptions` field (``model=``, ``aligner=``, ...) change ``options``,
    as ``transcribe``'s do, and any other unknown keyword is a TypeError.

    Attributes
    ----------
    options : TranscribeOptions
        The model (``/v1/models`` lists it and requests must name it, or
        ``model_alias``), the aligner (None disables word timings), and the defaults
        of requests: ``language`` for requests that name none, ``context`` for
        requests with no prompt, ``speakers`` for requests with no ``speakers`` field
        (default "auto", as the CLI). ``vad`` is loaded once and shared by the workers.
    workers : int
        Worker threads, each with its own loaded models.
    max_queue : int
        Requests allowed to wait for a worker; more get 503 with Retry-After.
    max_upload_bytes : int
        Largest request body; larger gets 413 before it is read.
    model_alias : str or None
        Another name clients may send as ``model`` (e.g. ``whisper-1``).
    read_timeout_s : float
        A request body must arrive whole within this many seconds of its headers;
        later is 408 and the connection is closed.
    idle_timeout_s : float
        A WebSocket session that sends no frame for this long is closed.
    max_audio_s : float
        Longest audio a request may hold (checked from the file header before it
        is queued, and again while it decodes); longer is 400 ``audio_too_long``.
    api_key : str or None
        When set, every endpoint but ``/health`` needs ``Authorization: Bearer <key>``.
    """

    options: TranscribeOptions = field(default_factory=TranscribeOptions)
    workers: int = 1
    max_queue: int = 4
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    model_alias: str | None = None
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    max_audio_s: float = DEFAULT_MAX_AUDIO_S
    api_key: str | None = field(default=None, repr=False)  # never in a log line

    def __init__(self, options: TranscribeOptions | None = None, **keywords: object) -> None:
        own = {f.name: f for f in fields(self) if f.name != "options"}
        option_changes = {k: v for k, v in keywords.items() if k not in own}
        object.__setattr__(self, "options", TranscribeOptions.build(options, **option_changes))
        for name, spec in own.items():
            value = keywords[name] if name in keywords else spec.default
            object.__setattr__(self, name, value)
        self._check()

    def _check(self) -> None:
        for name in ("workers", "max_queue", "max_upload_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}; it must be a positive whole number")
        for name in ("read_timeout_s", "idle_timeout_s", "max_audio_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"{name}={value!r}; it must be a positive finite number of seconds")
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()):
            raise ValueError("api_key must be a nonblank string or None")

    @property
    def model_id(self) -> str:
        """The served model's name: its catalog id, or the name of its local directory.

        A directory's full path is never shown to clients (``/v1/models``, ``/health``
        and error messages name the model by this id).
        """
        model = self.options.model
        if os.path.isdir(model):
            return Path(model).resolve().name or "local-model"
        return model

    @property
    def model_ids(self) -> tuple[str, ...]:
        """Names a request may give as ``model``."""
        return tuple(name for name in (self.model_id, self.model_alias) if name)
