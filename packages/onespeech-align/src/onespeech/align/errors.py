"""Errors raised by onespeech.align.

Every bad input raises a ``ValueError`` subclass whose message names the value, the
limit and what is allowed. PCM problems that the features layer detects (nonfinite
samples, power overflow) keep their ``onespeech.features`` error types.
"""

from __future__ import annotations


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


class TranscriptMismatchError(AlignmentInputError):
    """A transcript's words cannot be found, in order, in its text."""


class AlignmentCancelledError(RuntimeError):
    """The caller's cancellation token was set while aligning."""
