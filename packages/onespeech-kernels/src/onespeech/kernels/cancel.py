"""Cancellation signals: what callers may pass as ``cancel`` and how it is checked.

A signal is a ``threading.Event``-like object (``is_set()``), a callable returning
True once cancelled, or None. Entry points check the kind with :func:`check_cancel`
before any work, so a wrong argument fails there with a ``TypeError`` instead of
deep inside a model; long loops call :func:`raise_if_cancelled` between steps.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Protocol

from .errors import OperationCancelledError

__all__ = ["Cancel", "CancelEvent", "check_cancel", "is_cancelled", "raise_if_cancelled"]


class CancelEvent(Protocol):
    """Anything with ``is_set()``, such as ``threading.Event``."""

    def is_set(self) -> bool: ...


#: What ``cancel`` accepts: an Event-like object, a callable returning True once cancelled, or None.
Cancel = CancelEvent | Callable[[], bool] | None


def check_cancel(cancel: object) -> None:
    """Raise ``TypeError`` unless ``cancel`` is None, has ``is_set()`` or is callable."""
    if cancel is None or callable(getattr(cancel, "is_set", None)) or callable(cancel):
        return
    raise TypeError(
        f"cancel={cancel!r} ({type(cancel).__name__}) is not a cancellation signal; pass a "
        "threading.Event-like object, a callable returning True once cancelled, or None"
    )


def is_cancelled(cancel: Cancel) -> bool:
    """True once the signal is set (always False for None)."""
    if cancel is None:
        return False
    is_set = getattr(cancel, "is_set", None)
    if callable(is_set):
        return bool(is_set())
    return bool(cancel())  # type: ignore[operator]


def raise_if_cancelled(
    cancel: Cancel, what: str = "the operation", error: type[OperationCancelledError] = OperationCancelledError
) -> None:
    """Raise ``error`` if the signal is set: the one cancel check of every layer.

    Parameters
    ----------
    cancel : threading.Event-like | callable | None
    what : str
        Names the operation in the message (``"download"``, ``"recognition"``...).
    error : subclass of OperationCancelledError
        The layer's own cancel error (``RecognitionCancelledError``, ``AlignmentCancelledError``,
        ``TranscriptionCancelledError``); every one shares the base ``OperationCancelledError``.
    """
    if is_cancelled(cancel):
        raise error(f"{what} was cancelled by the caller's signal")
