"""Settings of the transcription server."""

from __future__ import annotations

import os
from dataclasses import dataclass

from onespeech.speech.transcribe import DEFAULT_ALIGNER, DEFAULT_MODEL

DEFAULT_MAX_UPLOAD_BYTES = 25 * 1024 * 1024  # OpenAI's own upload limit


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

    def __post_init__(self) -> None:
        for name in ("workers", "max_queue", "max_upload_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}; it must be a positive whole number")

    @property
    def model_ids(self) -> tuple[str, ...]:
        """Names a request may give as ``model``."""
        return tuple(name for name in (str(self.model), self.model_alias) if name)
