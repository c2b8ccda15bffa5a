"""Errors raised by onespeech.align.

Every bad input raises a ``ValueError`` subclass whose message names the value, the
limit and what is allowed. The aligner shares the checks of the layers below, and
their errors: PCM (``onespeech.features.PcmError``: too short, too long, nonfinite),
text (``onespeech.tokenizer.TextTooLongError``, ``InvalidTextError``), language tags
(``onespeech.qwen3.UnsupportedLanguageError``), the model kind
(``onespeech.qwen3.ModelKindError``), use after close
(``onespeech.kernels.ObjectClosedError``).
"""

from __future__ import annotations

from onespeech.kernels.errors import OperationCancelledError

__all__ = [
    "AlignmentCancelledError",
    "AlignmentInputError",
    "LanguageRequiredError",
    "TooManyTokensError",
    "TooManyUnitsError",
]


class AlignmentInputError(ValueError):
    """Base class for input only the forced aligner refuses."""


class LanguageRequiredError(AlignmentInputError):
    """Alignment was asked for without a language tag."""


class TooManyUnitsError(AlignmentInputError):
    """The text has more than 4096 units."""


class TooManyTokensError(AlignmentInputError):
    """The text's units tokenize to more ids than one alignment allows."""


class AlignmentCancelledError(OperationCancelledError):
    """The caller's cancellation signal was set while aligning."""
