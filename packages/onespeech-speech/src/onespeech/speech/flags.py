"""Command-line flag types: numbers within a range (or "auto"), speaker counts, a model or "none".

They live below both :mod:`onespeech.speech.options` (whose fields name their flags)
and :mod:`onespeech.speech.cli` (which adds them to the parsers), so the options type
can describe its flags without importing the command line.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["AutoOr", "Flag", "NumberOption", "model_or_none", "speakers_type"]


@dataclass(frozen=True)
class Flag:
    """How an option field appears on the command line (``field(metadata={"flag": Flag(...)})``).

    ``help`` may name ``{default}``, filled with the parser's default. ``group`` says
    which commands get it: "model" (every command that transcribes) or "speakers"
    (the commands that attribute speakers).
    """

    names: tuple[str, ...]
    help: str
    type: Callable[[str], object] | None = None
    metavar: str | None = None
    choices: tuple[str, ...] | None = None
    group: str = "model"


class NumberOption:
    """An argparse ``type`` for a numeric option: a finite number from ``low`` to ``high``.

    Every numeric option of every verb uses one of these, so ``inf``, ``nan``, ``-5``,
    ``0`` or ``1e-9`` meet the same one-line usage error naming what is allowed
    (``argument --max-upload-mb: 'inf' is not allowed; give a number from 0.01 to 2048 (MiB)``)
    instead of a traceback or a nonsense limit.
    """

    def __init__(self, low: float, high: float, *, whole: bool = False, unit: str = "") -> None:
        self.low, self.high, self.whole, self.unit = low, high, whole, unit
        self.__name__ = "whole number" if whole else "number"  # argparse names the type in its messages

    def allowed(self) -> str:
        unit = f" ({self.unit})" if self.unit else ""
        if self.whole:
            return f"a whole number from {int(self.low)} to {int(self.high)}{unit}"
        return f"a number from {self.low:g} to {self.high:g}{unit}"

    def __call__(self, text: str) -> float:
        value = self._parse(text.strip())
        if value is None or not self.low <= value <= self.high:
            raise argparse.ArgumentTypeError(f"{text!r} is not allowed; give {self.allowed()}")
        return value

    def _parse(self, text: str) -> float | None:
        if not text.isascii() or "_" in text or len(text) > 40:  # Python also reads other digits and 1_000
            return None
        if self.whole:
            return int(text) if text.lstrip("+-").isdigit() else None
        try:
            value = float(text)
        except ValueError:
            return None
        return value if math.isfinite(value) else None


class AutoOr:
    """An argparse ``type``: "auto" (any case) gives None, the option's automatic value; else ``number``'s.

    ``--decode-memory-mb x`` meets ``'x' is not allowed; give auto or a whole number
    from 1 to 1048576 (MiB)``.
    """

    def __init__(self, number: NumberOption) -> None:
        self.number = number
        self.__name__ = f"auto or {number.__name__}"

    def __call__(self, text: str) -> float | None:
        if text.strip().lower() == "auto":
            return None
        try:
            return self.number(text)
        except argparse.ArgumentTypeError:
            raise argparse.ArgumentTypeError(
                f"{text!r} is not allowed; give auto or {self.number.allowed()}"
            ) from None


MAX_WHOLE = 2**31 - 1
positive_int = NumberOption(1, MAX_WHOLE, whole=True)  # any count with no tighter bound of its own
threads_option = NumberOption(1, 1024, whole=True, unit="threads")
max_new_tokens_option = NumberOption(1, 4096, whole=True, unit="tokens per chunk")
workers_option = NumberOption(1, 1024, whole=True, unit="workers")
max_pause_option = NumberOption(0, 3600, unit="seconds")
decode_batch_option = NumberOption(1, 256, whole=True, unit="chunks")
decode_memory_option = AutoOr(NumberOption(1, 1 << 20, whole=True, unit="MiB"))


def model_or_none(text: str) -> str | None:
    """A model id or directory; "none" (any case) turns the model off."""
    return None if text.strip().lower() == "none" else text


def speakers_type(off: bool = True) -> Callable[[str], str | int | bool]:
    """The argparse type of --speakers: "auto", a count, and (``off``) "off" meaning False."""
    from onespeech.speech.speakers.diarize import MAX_SPEAKERS

    allowed = f"'auto', a number of speakers from 1 to {MAX_SPEAKERS}" + (" or 'off'" if off else "")

    def parse(text: str) -> str | int | bool:
        word = text.strip().lower()
        if word == "auto":
            return "auto"
        if off and word == "off":
            return False
        try:
            count = int(word)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r}: use {allowed}") from None
        if not 1 <= count <= MAX_SPEAKERS:
            raise argparse.ArgumentTypeError(f"{count}: use {allowed}")
        return count

    return parse
