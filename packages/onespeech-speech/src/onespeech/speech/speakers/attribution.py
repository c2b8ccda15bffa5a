"""Speakers onto a Document: words by largest time overlap, segments by their words' time.

The rules (WhisperX's ``assign_word_speakers``, with its ``fill_nearest`` for words that
fall between turns, so every timed word gets a speaker):

- a timed word takes the speaker whose turns overlap it longest; a word overlapping no
  turn takes the speaker of the nearest turn;
- a segment takes the speaker holding most of its timed words' time (a word of zero
  duration counts as a tiny duration, so a segment of such words still votes); a
  segment without timed words takes the speaker overlapping its own span longest
  (nearest turn when none does); its untimed words take the segment's speaker;
- labels are renumbered ``SPEAKER_00``, ``SPEAKER_01``, ... in order of first
  appearance in the document (then, for speakers no word or segment got, in order of
  their first turn), and ``Document.speakers`` lists every speaker with its total
  turn time.

Without turns (no speech found) the document comes back unchanged, with no speakers.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from onespeech.speech.document import Document, Segment, Speaker, Word
from onespeech.speech.speakers.diarize import Turn, speaker_label

__all__ = ["attribute_speakers"]

_TINY = 1e-3  # seconds a zero-length word counts for in its segment's vote


class _Timeline:
    """Turns as arrays for overlap queries."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self.starts = np.array([t.start for t in turns], dtype=np.float64)
        self.ends = np.array([t.end for t in turns], dtype=np.float64)
        self.names = [t.speaker for t in turns]

    def speaker(self, start: float, end: float) -> str:
        overlap = np.minimum(self.ends, end) - np.maximum(self.starts, start)
        totals: dict[str, float] = {}
        for name, amount in zip(self.names, overlap.tolist(), strict=True):
            if amount > 0:
                totals[name] = totals.get(name, 0.0) + amount
        if totals:
            return max(totals, key=lambda n: totals[n])  # ties: the earlier turn's speaker
        gap = np.maximum(self.starts - end, start - self.ends)  # distance to each turn
        return self.names[int(np.argmin(gap))]


def _relabel(word: Word, order: dict[str, str]) -> Word:
    assert word.speaker is not None  # every word was given one above
    return replace(word, speaker=order[word.speaker])


def attribute_speakers(document: Document, turns: Sequence[Turn]) -> Document:
    """A copy of ``document`` with speakers on every segment and word (see the module docstring).

    Parameters
    ----------
    document : Document
    turns : sequence of Turn
        The speaker stage's output (``diarize``): ordered, non-overlapping, file seconds.

    Raises
    ------
    ValueError
        The turns are not ordered and non-overlapping, or one has ``end <= start``.
    """
    turns = list(turns)
    for k, t in enumerate(turns):
        if not t.end > t.start:
            raise ValueError(f"turn {k} ({t.start}..{t.end} s) must end after it starts")
        if k and t.start < turns[k - 1].end:
            raise ValueError(
                f"turn {k} starts at {t.start} s, before turn {k - 1} ends ({turns[k - 1].end} s)"
            )
    if not turns:
        return replace(document, speakers=[])
    timeline = _Timeline(turns)
    raw_segments: list[tuple[Segment, list[Word], str]] = []
    for segment in document.segments:
        words = []
        time: dict[str, float] = {}
        for word in segment.words:
            if word.start is None or word.end is None:
                words.append(word)
                continue
            who = timeline.speaker(word.start, word.end)
            words.append(replace(word, speaker=who))
            time[who] = time.get(who, 0.0) + max(word.end - word.start, _TINY)
        if time:
            seg_speaker = max(time, key=lambda n: time[n])
        else:
            seg_speaker = timeline.speaker(segment.start, segment.end)
        words = [w if w.speaker is not None else replace(w, speaker=seg_speaker) for w in words]
        raw_segments.append((segment, words, seg_speaker))

    order: dict[str, str] = {}
    for _, words, seg_speaker in raw_segments:
        for name in [*(w.speaker for w in words), seg_speaker]:
            if name is not None and name not in order:
                order[name] = speaker_label(len(order))
    for name in timeline.names:
        if name not in order:
            order[name] = speaker_label(len(order))
    segments = [
        replace(segment, speaker=order[seg_speaker], words=tuple(_relabel(w, order) for w in words))
        for segment, words, seg_speaker in raw_segments
    ]
    durations: dict[str, float] = {}
    for t in turns:
        durations[order[t.speaker]] = durations.get(order[t.speaker], 0.0) + (t.end - t.start)
    speakers = [Speaker(label, round(durations[label], 3)) for label in sorted(durations)]
    return replace(document, segments=segments, speakers=speakers)
