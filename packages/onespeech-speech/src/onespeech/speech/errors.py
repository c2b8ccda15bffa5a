"""Errors of file transcription.

Everything the lower layers raise for bad input (``PcmError``, ``UnreadableAudioError``,
``UnsupportedLanguageError``, ``ContextError``, ``UnknownModelError``, download and
integrity errors) reaches the caller unchanged; this module adds what only the
pipeline can detect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onespeech.features.errors import (
    CheckpointFormatError,
    CheckpointRefusedError,
    EncoderWeightsError,
    SpeakerModelNotFoundError,
    TorchCheckpointError,
)
from onespeech.kernels.errors import OperationCancelledError
from onespeech.qwen3.errors import MaxNewTokensError

if TYPE_CHECKING:
    from pathlib import Path

    from onespeech.speech.document import Document

# The speaker encoder's errors are defined beside the encoder in onespeech.features.errors;
# they reach callers through transcribe() and diarize(), so they stay importable here.
__all__ = [
    "CheckpointFormatError",
    "CheckpointRefusedError",
    "ChunkLimitError",
    "DocumentFormatError",
    "EncoderWeightsError",
    "ManifestError",
    "OutputPathError",
    "ReplayMismatchError",
    "SessionFinishedError",
    "SpeakerModelNotFoundError",
    "TorchCheckpointError",
    "TranscriptionCancelled",
    "TranscriptionCancelledError",
]


class TranscriptionCancelledError(OperationCancelledError):
    """The caller's cancel signal was set; the temporary spool and the models are released."""


TranscriptionCancelled = TranscriptionCancelledError  # the name before the *CancelledError style; kept for imports


class ChunkLimitError(MaxNewTokensError):
    """A chunk reached ``max_new_tokens`` before the model ended its answer.

    Attributes
    ----------
    start, end : float
        The chunk's time range in seconds on the file's clock.
    partial : Document
        The chunks recognized before this one (untimed: timing runs after recognition).
    """

    def __init__(self, message: str, start: float, end: float, partial: Document) -> None:
        super().__init__(message)
        self.start = start
        self.end = end
        self.partial = partial


class ReplayMismatchError(RuntimeError):
    """Replaying the audio through a fresh VAD did not give the recorded chunk boundaries.

    The timing pass would then cut different audio than was recognized, so the
    pipeline stops rather than assign times to the wrong words.
    """


class DocumentFormatError(ValueError):
    """A document dictionary or JSON text that is not a Document of this version."""


class ManifestError(ValueError):
    """A manifest line that names no usable file; ``line`` is 1-based."""

    def __init__(self, manifest: Path, line: int, reason: str):
        super().__init__(f"{manifest}:{line}: {reason}")
        self.manifest = manifest
        self.line = line
        self.reason = reason


class OutputPathError(ValueError):
    """Outputs that cannot be written safely, found before any work: the output folder is
    not a writable folder, an output would overwrite an input or another input's output,
    or an output path would leave the output folder. The message names the paths."""


class SessionFinishedError(ValueError):
    """Audio pushed to a live session after its ``finish()``; ``reset()`` starts a new stream."""
