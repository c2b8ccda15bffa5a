"""Errors of file transcription.

Everything the lower layers raise for bad input (``PcmError``, ``UnreadableAudioError``,
``UnsupportedLanguageError``, ``ContextError``, ``UnknownModelError``, download and
integrity errors) reaches the caller unchanged; this module adds what only the
pipeline can detect.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from onespeech.kernels.errors import OperationCancelledError
from onespeech.qwen3.errors import MaxNewTokensError

if TYPE_CHECKING:
    from onespeech.speech.document import Document

__all__ = ["ChunkLimitError", "ReplayMismatchError", "TranscriptionCancelled"]


class TranscriptionCancelled(OperationCancelledError):
    """The caller's cancel signal was set; the temporary spool and the models are released."""


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
