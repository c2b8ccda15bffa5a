"""Errors raised by onespeech.align.

Every bad input raises a ``ValueError`` subclass whose message names the value, the
limit and what is allowed. PCM problems that the features layer detects (nonfinite
samples, power overflow) keep their ``onespeech.features`` error types.
"""

from __future__ import annotations

import concurrent.futures


class AlignmentInputError(ValueError):
    """Base class for input the forced aligner refuses."""


class LanguageRequiredError(AlignmentInputError):
    """Alignment was asked for without a language tag."""


class UnsupportedLanguageError(AlignmentInputError):
    """The language tag is not one the forced aligner supports."""


class AudioLengthError(AlignmentInputError):
    """Audio has 200 samples or fewer, or is longer than 300 s of 16 kHz mono."""


class TextTooLongError(AlignmentInputError):
    """The text is longer than 1 MiB of UTF-8."""


class TooManyUnitsError(AlignmentInputError):
    """The text has more than 4096 units."""


class TextEncodingError(AlignmentInputError):
    """The text is not a str of well-formed Unicode (no lone surrogates)."""


class ModelKindError(ValueError):
    """The directory holds a model that is not a Qwen3-ForcedAligner (or is inconsistent)."""


class AlignmentCancelledError(concurrent.futures.CancelledError):
    """The caller's cancellation signal was set while aligning."""
