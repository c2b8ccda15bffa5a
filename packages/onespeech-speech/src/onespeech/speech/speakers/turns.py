"""Turns: one speaker's stretch of speech until another speaker speaks.

The speaker stage labels stretches of speech (VAD regions, cut where the speaker
changes); a conversation's turn holds many of them, separated by the pauses a speaker
makes while talking. :func:`build_turns` joins consecutive stretches of one speaker
into one turn, pauses included, as long as no pause is longer than ``max_pause``
seconds. A change of speaker, or a longer pause, ends the turn; the pause before a
change of speaker belongs to no turn (nobody speaks in it).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["DEFAULT_MAX_PAUSE", "Turn", "build_turns", "check_max_pause"]

DEFAULT_MAX_PAUSE = 2.0  #: seconds: longer pauses end a turn even without a change of speaker


@dataclass(frozen=True)
class Turn:
    """One speaker's turn: file seconds ``start`` to ``end``."""

    start: float
    end: float
    speaker: str


def check_max_pause(max_pause: object) -> float:
    """``max_pause`` as a float: a finite number of seconds >= 0."""
    if isinstance(max_pause, bool) or not isinstance(max_pause, int | float) or not math.isfinite(max_pause):
        raise ValueError(f"max_pause={max_pause!r} must be a finite number of seconds >= 0")
    if max_pause < 0:
        raise ValueError(f"max_pause={max_pause!r} must be >= 0 seconds")
    return float(max_pause)


def build_turns(spans: Iterable[tuple[int, int, int]], max_pause: int | float) -> list[tuple[int, int, int]]:
    """Join ``(start, end, speaker)`` spans (ordered, non-overlapping) into turns.

    Consecutive spans of one speaker whose pause (the next start minus the previous
    end, in the spans' own unit) is at most ``max_pause`` become one turn covering the
    pause; a different speaker or a longer pause starts a new turn. Every span lies in
    exactly one turn; turns are ordered and do not overlap.

    Raises
    ------
    ValueError
        A span ends before it starts, spans overlap or are out of order, or
        ``max_pause`` is negative.
    """
    limit = check_max_pause(max_pause)
    turns: list[tuple[int, int, int]] = []
    previous_end = None
    for start, end, speaker in spans:
        if end < start:
            raise ValueError(f"span {start}..{end} ends before it starts")
        if previous_end is not None and start < previous_end:
            raise ValueError(f"span {start}..{end} starts before the previous span ends ({previous_end})")
        previous_end = end
        if turns and turns[-1][2] == speaker and start - turns[-1][1] <= limit:
            turns[-1] = (turns[-1][0], end, speaker)
        else:
            turns.append((start, end, speaker))
    return turns
