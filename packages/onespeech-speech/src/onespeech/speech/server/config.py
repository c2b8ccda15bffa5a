"""Settings of the transcription server."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from onespeech.speech.transcribe import DEFAULT_ALIGNER, DEFAULT_MODEL, _check_speakers

DEFAULT_MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # OpenAI's own upload limit
# a slow-loris body holds a connection and its parser until this passes; 25 MiB in 120 s needs ~1.7 Mbit/s
DEFAULT_READ_TIMEOUT_S = 120.0
DEFAULT_IDLE_TIMEOUT_S = 60.0  # a WebSocket that sends nothing for this long is closed
# a request holds a worker for its whole audio: 25 min (a 0.36 MB FLAC of silence declared 2 h otherwise)
DEFAULT_MAX_AUDIO_S = 1500.0


@dataclass(frozen=True)
class ServerConfig:
    """What ``onespeech serve`` runs.

    Attributes
    ----------
    model : str
        Catalog id or directory of the recognizer; ``/v1/models`` lists it and
        requests must name it (or ``model_alias``).
    aligner : str or None
        Catalog id or directory of the forced aligner; None disables word timings.
    language : str or None
        Language for requests that name none (None: identified per chunk).
    precision, threads, max_new_tokens, context
        As for ``transcribe`` (``context`` is the default when a request has no prompt).
    workers : int
        Worker threads, each with its own loaded models.
    max_queue : int
        Requests allowed to wait for a worker; more get 503 with Retry-After.
    max_upload_bytes : int
        Largest request body; larger gets 413 before it is read.
    vad : str or None
        Path of ``silero_vad.onnx`` (default: the catalog's Silero VAD).
    model_alias : str or None
        Another name clients may send as ``model`` (e.g. ``whisper-1``).
    speakers : "auto", int or False
        Speaker attribution for requests that send no ``speakers`` field, as
        ``transcribe``'s ``speakers`` (default "auto", as the CLI).
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

    model: str = DEFAULT_MODEL
    aligner: str | None = DEFAULT_ALIGNER
    language: str | None = None
    precision: str = "fp32"
    threads: int | None = None
    max_new_tokens: int = 512
    context: str | None = None
    workers: int = 1
    max_queue: int = 4
    max_upload_bytes: int = DEFAULT_MAX_UPLOAD_BYTES
    vad: str | os.PathLike[str] | None = None
    model_alias: str | None = None
    speakers: str | int | bool = "auto"
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
    idle_timeout_s: float = DEFAULT_IDLE_TIMEOUT_S
    max_audio_s: float = DEFAULT_MAX_AUDIO_S
    api_key: str | None = field(default=None, repr=False)  # never in a log line

    def __post_init__(self) -> None:
        for name in ("workers", "max_queue", "max_upload_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}; it must be a positive whole number")
        for name in ("read_timeout_s", "idle_timeout_s", "max_audio_s"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) \
                    or value <= 0:
                raise ValueError(f"{name}={value!r}; it must be a positive finite number of seconds")
        _check_speakers(self.speakers)
        if self.api_key is not None and (not isinstance(self.api_key, str) or not self.api_key.strip()):
            raise ValueError("api_key must be a nonblank string or None")

    @property
    def model_id(self) -> str:
        """The served model's name: its catalog id, or the name of its local directory.

        A directory's full path is never shown to clients (``/v1/models``, ``/health``
        and error messages name the model by this id).
        """
        model = os.fspath(self.model)
        if os.path.isdir(model):
            return Path(model).resolve().name or "local-model"
        return model

    @property
    def model_ids(self) -> tuple[str, ...]:
        """Names a request may give as ``model``."""
        return tuple(name for name in (self.model_id, self.model_alias) if name)
