"""Qwen3 byte-level BPE tokenizer (stdlib only).

>>> tok = Qwen3Tokenizer.load("path/to/model")  # vocab.json, merges.txt, tokenizer_config.json
>>> tok.decode(tok.encode("Hello, world!"))
'Hello, world!'
"""

from .errors import (
    FileTooLargeError,
    InvalidTextError,
    SpecialTokenNotAllowedError,
    TextTooLongError,
    TokenizerError,
    TokenizerFileError,
    UnknownTokenIdError,
    VocabularyLimitError,
)
from .tokenizer import MAX_TEXT_BYTES, Qwen3Tokenizer, check_text

__version__ = "0.1.0"

__all__ = [
    "MAX_TEXT_BYTES",
    "FileTooLargeError",
    "InvalidTextError",
    "Qwen3Tokenizer",
    "SpecialTokenNotAllowedError",
    "TextTooLongError",
    "TokenizerError",
    "TokenizerFileError",
    "UnknownTokenIdError",
    "VocabularyLimitError",
    "check_text",
]
