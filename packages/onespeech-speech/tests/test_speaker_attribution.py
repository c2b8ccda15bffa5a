"""attribute_speakers: words by largest overlap, segments by their words' time, labels by first appearance."""

from __future__ import annotations

import pytest

from onespeech.speech.document import Document, Finish, Segment, Speaker, TimingMethod, Word
from onespeech.speech.speakers.attribution import attribute_speakers
from onespeech.speech.speakers.diarize import Turn


def _word(text: str, start: float | None, end: float | None) -> Word:
    return Word(text, start, end, None if start is None else 0.9, TimingMethod.FORCED_ALIGNER if start is not None else TimingMethod.NONE)


def _doc(segments: list[Segment]) -> Document:
    return Document.from_segments(segments, 20.0)


def _seg(start: float, end: float, words: list[Word]) -> Segment:
    return Segment(start, end, " ".join(w.text for w in words), "en", words, Finish.END_TOKEN, TimingMethod.FORCED_ALIGNER)


def test_words_take_the_speaker_overlapping_them_most() -> None:
    # the diarizer's labels are renamed by first appearance in the document: B speaks first
    turns = [Turn(0.0, 2.0, "SPEAKER_07"), Turn(2.0, 5.0, "SPEAKER_03"), Turn(6.0, 9.0, "SPEAKER_07")]
    words = [_word("a", 0.5, 1.0), _word("b", 1.8, 2.6), _word("c", 3.0, 3.5), _word("d", 5.2, 5.4),
             _word("e", 5.8, 6.5)]  # fmt: skip
    doc = attribute_speakers(_doc([_seg(0.0, 7.0, words)]), turns)
    # b: 0.2 s with 07, 0.6 s with 03; d: in no turn, nearest is 03 (0.2 s) over 07 (0.6 s); e: 0.5 s with 07
    assert [w.speaker for w in doc.words] == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_01", "SPEAKER_01", "SPEAKER_00"]
    assert doc.segments[0].speaker == "SPEAKER_01"  # b + c + d = 1.3 s against a + e = 1.0 s
    assert doc.words == [w for s in doc.segments for w in s.words]
    assert doc.speakers == [Speaker("SPEAKER_00", 5.0), Speaker("SPEAKER_01", 3.0)]


def test_segments_follow_their_words_and_untimed_words_their_segment() -> None:
    turns = [Turn(0.0, 4.0, "SPEAKER_00"), Turn(4.0, 10.0, "SPEAKER_01")]
    timed = _seg(0.0, 6.0, [_word("x", 1.0, 3.5), _word("y", 4.5, 5.0)])
    untimed = _seg(5.0, 9.0, [_word("p", None, None), _word("q", None, None)])
    doc = attribute_speakers(_doc([timed, untimed]), turns)
    assert doc.segments[0].speaker == "SPEAKER_00"  # 2.5 s of its words' time against 0.5 s
    assert [w.speaker for w in doc.segments[0].words] == ["SPEAKER_00", "SPEAKER_01"]
    assert doc.segments[1].speaker == "SPEAKER_01"  # no timed words: the segment's own span
    assert [w.speaker for w in doc.segments[1].words] == ["SPEAKER_01", "SPEAKER_01"]


def test_speakers_absent_from_the_text_are_listed_last() -> None:
    turns = [Turn(0.0, 1.0, "SPEAKER_00"), Turn(2.0, 8.0, "SPEAKER_01")]
    doc = attribute_speakers(_doc([_seg(2.0, 8.0, [_word("only", 3.0, 4.0)])]), turns)
    assert doc.segments[0].speaker == "SPEAKER_00"
    assert doc.speakers == [Speaker("SPEAKER_00", 6.0), Speaker("SPEAKER_01", 1.0)]


def test_no_turns_leaves_the_document_without_speakers() -> None:
    doc = _doc([_seg(0.0, 1.0, [_word("a", 0.1, 0.2)])])
    out = attribute_speakers(doc, [])
    assert out.speakers == [] and out.words[0].speaker is None


def test_the_input_is_not_modified() -> None:
    doc = _doc([_seg(0.0, 1.0, [_word("a", 0.1, 0.2)])])
    attribute_speakers(doc, [Turn(0.0, 1.0, "SPEAKER_00")])
    assert doc.words[0].speaker is None and doc.segments[0].speaker is None and doc.speakers == []


def test_json_round_trip_keeps_speakers() -> None:
    doc = attribute_speakers(_doc([_seg(0.0, 1.0, [_word("a", 0.1, 0.2)])]), [Turn(0.0, 1.0, "SPEAKER_00")])
    assert Document.from_json(doc.to_json()) == doc


@pytest.mark.parametrize(
    "turns",
    [[Turn(1.0, 1.0, "SPEAKER_00")], [Turn(0.0, 2.0, "SPEAKER_00"), Turn(1.0, 3.0, "SPEAKER_01")]],
)
def test_bad_turns_are_refused(turns: list[Turn]) -> None:
    with pytest.raises(ValueError, match="turn"):
        attribute_speakers(_doc([]), turns)
