"""Errors of the Qwen3 recognizer, and the cancellation check shared by its stages.

Bad input raises ``ValueError`` subclasses whose message names the value and what is
allowed; reaching ``max_new_tokens`` raises ``MaxNewTokensError`` (a ``RuntimeError``)
instead of returning truncated text; a cancelled call raises ``RecognitionCancelled``.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Protocol


class UnsupportedLanguageError(ValueError):
    """A language tag or name the model does not support."""


class ContextError(ValueError):
    """A biasing context that is too long or contains special tokens."""


class MaxNewTokensError(RuntimeError):
    """Generation reached max_new_tokens without the model ending its answer."""


class RecognitionCancelled(concurrent.futures.CancelledError):
    """The caller's cancellation signal was set while recognition ran."""


class _EventLike(Protocol):
    def is_set(self) -> bool: ...


# a threading.Event-like object, a callable returning True when cancelled, or None
Cancel = _EventLike | Callable[[], bool] | None


def is_cancel_signal(cancel: object) -> bool:
    """True if ``cancel`` is usable as a cancellation signal (None counts)."""
    return cancel is None or callable(getattr(cancel, "is_set", None)) or callable(cancel)


def raise_if_cancelled(cancel: Cancel) -> None:
    """Raise ``RecognitionCancelled`` if the signal is set.

    Parameters
    ----------
    cancel : threading.Event-like | callable | None
        An object with ``is_set()``, or a callable returning True once cancelled.
    """
    if cancel is None:
        return
    is_set = getattr(cancel, "is_set", None)
    cancelled = is_set() if callable(is_set) else cancel()  # type: ignore[operator]
    if cancelled:
        raise RecognitionCancelled("recognition was cancelled by the caller's signal")
