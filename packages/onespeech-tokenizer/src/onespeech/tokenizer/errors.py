"""Exceptions raised by onespeech.tokenizer.

Every error is a ``TokenizerError`` (a ``ValueError``) so callers can catch bad
tokenizer input in one place; each subclass names one limit or rule of the spec,
and its message says the value found, the limit and what is allowed.
"""

from __future__ import annotations


class TokenizerError(ValueError):
    """Base class: bad tokenizer files, bad text or bad token ids."""


class TokenizerFileError(TokenizerError):
    """A tokenizer file is missing, malformed or inconsistent with the others."""


class FileTooLargeError(TokenizerFileError):
    """A tokenizer file exceeds the 16 MiB per-file limit."""


class VocabularyLimitError(TokenizerFileError):
    """A vocabulary id or the merge count reaches the 200,000 limit."""


class TextTooLongError(TokenizerError):
    """Input text is longer than 1 MiB of UTF-8."""


class InvalidTextError(TokenizerError):
    """Input text is not valid Unicode (it holds a lone UTF-16 surrogate) or is not a str."""


class SpecialTokenNotAllowedError(TokenizerError):
    """Text spells a special token and the caller did not pass ``allow_special=True``."""


class UnknownTokenIdError(TokenizerError):
    """A token id passed to ``decode``/``id_to_token`` is not in the vocabulary."""
