"""Recognition results shared by the recognizer, the aligner and the pipeline.

The one result model of the library: plain frozen dataclasses with times in seconds
on the source clock (``None`` when no timing stage supplied them). Low-level
recognition fills words with their written forms and ``None`` times; a timing stage
(the forced aligner) returns new objects with times and
``TimingMethod.FORCED_ALIGNER``. The speech layer's ``Document`` composes the same
``Segment`` and ``Word`` (filling ``words``, ``finish``, the timing fields and the
speakers); changes are new objects (``dataclasses.replace``), never edits.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from onespeech.qwen3.units import join_texts


class TimingMethod(enum.Enum):
    """Where a word's start/end times came from."""

    NONE = "none"  # no timing stage ran; start/end are None
    FORCED_ALIGNER = "forced_aligner"  # Qwen3-ForcedAligner slot predictions
    CTC = "ctc"  # CTC alignment (timing dispatcher fallback)
    DTW = "dtw"  # cross-attention DTW (timing dispatcher fallback)


class Finish(enum.Enum):
    """How the model's answer for a segment ended."""

    END_TOKEN = "end_token"  # the model ended its answer
    MAX_NEW_TOKENS = "max_new_tokens"  # the answer reached the token limit first


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
    speaker : str | None
        Speaker label once speakers are attributed (the speech layer's diarization).
    """

    text: str
    start: float | None = None
    end: float | None = None
    confidence: float | None = None
    timing_method: TimingMethod = TimingMethod.NONE
    speaker: str | None = None


@dataclass(frozen=True)
class Segment:
    """A stretch of the source recognised in one piece (one VAD chunk).

    Attributes
    ----------
    start, end : float
        Seconds on the source clock.
    text : str
        Exactly the chunk's transcript.
    language : str | None
        The short tag (``"en"``) or the model's name for a language without a known
        tag; None if unknown.
    words : tuple of Word
        The written units of ``text`` (``Transcript.words`` and ``Document.words`` are
        views of them). A list given here is kept as a tuple.
    finish : Finish
        How the model's answer ended.
    timing_method : TimingMethod
        The stage that timed the words (``NONE``: no stage did).
    untimed_reason : str | None
        Why no stage timed the words ("aligner disabled", "no timing stage for
        language 'nl'"); None when one did.
    speaker : str | None
        Speaker label once speakers are attributed.
    """

    start: float
    end: float
    text: str
    language: str | None = None
    words: tuple[Word, ...] = ()
    finish: Finish = Finish.END_TOKEN
    timing_method: TimingMethod = TimingMethod.NONE
    untimed_reason: str | None = None
    speaker: str | None = None

    def __post_init__(self) -> None:
        # frozen all the way down: a list of words (convenient to build) is kept as a tuple
        if isinstance(self.words, list):
            object.__setattr__(self, "words", tuple(self.words))


@dataclass(frozen=True)
class Transcript:
    """A recognised document: full text, its language and segments (which hold the words).

    ``language`` is the language covering the most segment time (ties: the first),
    None for empty or silent audio. ``words`` is a view of the segments' words, as
    ``Document.words`` is: the words are stored once, in their segments.
    """

    text: str
    language: str | None
    segments: tuple[Segment, ...] = ()

    def __post_init__(self) -> None:
        if isinstance(self.segments, list):
            object.__setattr__(self, "segments", tuple(self.segments))

    @property
    def words(self) -> tuple[Word, ...]:
        """All segments' words in order (the segments hold them; this is not a second copy)."""
        return tuple(word for segment in self.segments for word in segment.words)

    @classmethod
    def from_segments(cls, segments: Sequence[Segment]) -> Transcript:
        """The transcript of ``segments``: their texts joined, the language with the most time."""
        languages = languages_by_time(segments)
        return cls(join_texts((s.text, s.language) for s in segments), languages[0] if languages else None,
                   tuple(segments))

    @classmethod
    def empty(cls) -> Transcript:
        """The transcript of empty audio."""
        return cls(text="", language=None, segments=())


def languages_by_time(segments: Sequence[Segment]) -> list[str]:
    """Every segment language, most segment time first (ties: first appearance)."""
    time: dict[str, float] = {}
    for segment in segments:
        if segment.language:
            time[segment.language] = time.get(segment.language, 0.0) + segment.end - segment.start
    return sorted(time, key=lambda tag: -time[tag])  # stable: ties keep first appearance
