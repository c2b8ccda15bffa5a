"""The one progress protocol: ``progress(stage, done_seconds, total_seconds)`` in audio seconds.

``progress`` as every caller takes it (``transcribe``, ``Transcriber``, ``diarize``,
``transcribe_corpus``): None draws tqdm bars on stderr when stderr is a terminal
(nothing otherwise), False reports nothing, a callable receives every event; anything
else is a TypeError. Stages are "decode", "recognize", "align" and "speakers" (a file;
``diarize`` reports "speakers" too) and "batch" (the files of a corpus).
"""

from __future__ import annotations

import sys
from collections.abc import Callable

#: Called as ``progress(stage, done_seconds, total_seconds)``, stage one of :data:`STAGES`.
ProgressCallback = Callable[[str, float, float], None]
#: What ``progress`` accepts: a callback, True or None (a bar on a terminal), or False (none).
Progress = ProgressCallback | bool | None

#: The stages progress is reported for, in order.
STAGES = ("decode", "recognize", "align", "speakers", "batch")

__all__ = ["STAGES", "Progress", "ProgressCallback", "progress_reporter"]


def check_progress(progress: object) -> None:
    """Raise ``TypeError`` unless ``progress`` is None, False or a callable."""
    if progress is None or progress is False or callable(progress):
        return
    raise TypeError(f"progress={progress!r} must be None (bars on a terminal), False or a callable "
                    "(stage, done, total)")


class _Silent:
    def __call__(self, stage: str, done: float, total: float) -> None:
        pass

    def close(self) -> None:
        pass


class _Callback(_Silent):
    def __init__(self, callback: ProgressCallback) -> None:
        self._callback = callback

    def __call__(self, stage: str, done: float, total: float) -> None:
        self._callback(stage, done, total)


class _Bars(_Silent):
    """One tqdm bar per stage, in seconds of audio."""

    def __init__(self, label: str) -> None:
        self._label = label
        self._bars: dict = {}

    def __call__(self, stage: str, done: float, total: float) -> None:
        from tqdm import tqdm

        bar = self._bars.get(stage)
        if bar is None:
            bar = self._bars[stage] = tqdm(total=round(total, 1), unit="s", desc=f"{self._label} {stage}",
                                           file=sys.stderr, leave=False)
        bar.total = round(max(total, done), 1)
        bar.n = round(done, 1)
        bar.refresh()

    def close(self) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


def progress_reporter(progress: Progress, label: str = "") -> _Silent:
    """A reporter for ``progress`` (see the module docstring); call ``close()`` when done."""
    check_progress(progress)
    if callable(progress):
        return _Callback(progress)
    if progress is None and getattr(sys.stderr, "isatty", lambda: False)():
        return _Bars(label)
    return _Silent()
