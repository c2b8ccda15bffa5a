"""Errors of the Qwen3 recognizer and its model files.

Bad input raises ``ValueError`` subclasses whose message names the value and what is
allowed; reaching ``max_new_tokens`` raises ``MaxNewTokensError`` (a ``RuntimeError``)
instead of returning truncated text; a cancelled call raises ``RecognitionCancelled``
(an ``onespeech.kernels.OperationCancelledError``). Damaged model files raise
``ModelIntegrityError`` subclasses naming the file to remove.
"""

from __future__ import annotations

from onespeech.kernels.cancel import Cancel, raise_if_cancelled
from onespeech.kernels.errors import ModelIntegrityError, ModelKindError, OperationCancelledError

__all__ = [
    "ConfigError",
    "ContextError",
    "ConversionError",
    "MaxNewTokensError",
    "ModelKindError",
    "RecognitionCancelled",
    "RecognitionCancelledError",
    "SafetensorsError",
    "UnsupportedLanguageError",
    "raise_if_recognition_cancelled",
]


class UnsupportedLanguageError(ValueError):
    """A language tag or name the model does not support."""


class ContextError(ValueError):
    """A biasing context that is too long or contains special tokens."""


class MaxNewTokensError(RuntimeError):
    """Generation reached max_new_tokens without the model ending its answer."""


class RecognitionCancelledError(OperationCancelledError):
    """The caller's cancellation signal was set while recognition ran."""


RecognitionCancelled = RecognitionCancelledError  # the name before the *CancelledError style; kept for imports


class ConfigError(ValueError):
    """A model configuration file is missing a field or holds a wrong value."""


class SafetensorsError(ModelIntegrityError, ValueError):
    """A safetensors file or index is malformed.

    A ``ModelIntegrityError`` (the message names the file to remove) and a
    ``ValueError`` (the input is bad), with ``.path`` and ``.reason``.
    """


class ConversionError(ModelIntegrityError, ValueError):
    """The publisher files cannot be converted (missing/extra tensor, wrong shape or dtype)."""


def raise_if_recognition_cancelled(cancel: Cancel) -> None:
    """Raise ``RecognitionCancelledError`` if the signal is set (the model stages' check).

    Parameters
    ----------
    cancel : threading.Event-like | callable | None
        An object with ``is_set()``, or a callable returning True once cancelled.
    """
    raise_if_cancelled(cancel, "recognition", RecognitionCancelledError)
