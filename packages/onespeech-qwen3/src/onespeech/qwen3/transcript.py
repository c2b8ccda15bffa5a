"""Recognition results shared by the recognizer, the aligner and the pipeline.

Plain frozen dataclasses with times in seconds on the source clock (``None`` when
no timing stage supplied them). Low-level recognition fills words with their
written forms and ``None`` times; a timing stage (the forced aligner) returns new
objects with times and ``TimingMethod.FORCED_ALIGNER``.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass


class TimingMethod(enum.Enum):
    """Where a word's start/end times came from."""

    NONE = "none"  # no timing stage ran; start/end are None
    FORCED_ALIGNER = "forced_aligner"  # Qwen3-ForcedAligner slot predictions
    CTC = "ctc"  # CTC alignment (timing dispatcher fallback)
    DTW = "dtw"  # cross-attention DTW (timing dispatcher fallback)


@dataclass(frozen=True)
class Word:
    """One written unit of the transcript.

    Attributes
    ----------
    text : str
        The written form, as it appears in the transcript text.
    start, end : float | None
        Seconds on the source clock; None when no timing stage supplied them.
    confidence : float | None
        Timing-stage confidence in 0..1 (not a probability that the word was spoken).
    timing_method : TimingMethod
        Where the times came from.
    """

    text: str
    start: float | None = None
    end: float | None = None
    confidence: float | None = None
    timing_method: TimingMethod = TimingMethod.NONE


@dataclass(frozen=True)
class Segment:
    """A stretch of the source recognised in one piece (one VAD chunk).

    ``start``/``end`` are seconds on the source clock; ``language`` is the short tag
    (``"en"``) or the model's name for a language without a known tag, None if unknown.
    """

    start: float | None
    end: float | None
    text: str
    language: str | None = None


@dataclass(frozen=True)
class Transcript:
    """A recognised document: full text, its language, segments and words.

    ``language`` is the language covering the most segment time (ties: the first),
    None for empty or silent audio.
    """

    text: str
    language: str | None
    segments: tuple[Segment, ...] = ()
    words: tuple[Word, ...] = ()

    @classmethod
    def empty(cls) -> Transcript:
        """The transcript of empty audio."""
        return cls(text="", language=None, segments=(), words=())
