"""Writers show speakers: [SPEAKER_00] prefixes in txt/srt/vtt, a tsv column, the JSON field."""

from __future__ import annotations

import io
import json

from onespeech.speech.document import Document, Finish, Segment, Speaker, TimingMethod, Word
from onespeech.speech.writers import get_writer, subtitle_cues


def _doc(speakers: bool) -> Document:
    def w(text: str, start: float, end: float, who: str) -> Word:
        return Word(text, start, end, 0.9, TimingMethod.FORCED_ALIGNER, who if speakers else None)

    one = Segment(0.0, 3.0, "hello there", "en", [w("hello", 0.1, 0.5, "SPEAKER_00"), w("there", 0.6, 1.0, "SPEAKER_00")],
                  Finish.END_TOKEN, TimingMethod.FORCED_ALIGNER,
                  speaker="SPEAKER_00" if speakers else None)  # fmt: skip
    two = Segment(3.0, 6.0, "yes no", "en", [w("yes", 3.1, 3.5, "SPEAKER_01"), w("no", 4.0, 4.4, "SPEAKER_00")],
                  Finish.END_TOKEN, TimingMethod.FORCED_ALIGNER,
                  speaker="SPEAKER_01" if speakers else None)  # fmt: skip
    doc = Document.from_segments([one, two], 6.0)
    if speakers:
        doc.speakers = [Speaker("SPEAKER_00", 2.0), Speaker("SPEAKER_01", 1.0)]
    return doc


def _write(fmt: str, doc: Document) -> str:
    out = io.StringIO()
    get_writer(fmt).write(doc, out)
    return out.getvalue()


def test_txt_prefixes_each_segment() -> None:
    assert _write("txt", _doc(True)) == "[SPEAKER_00] hello there\n[SPEAKER_01] yes no\n"
    assert _write("txt", _doc(False)) == "hello there\nyes no\n"


def test_tsv_has_a_speaker_column_when_there_are_speakers() -> None:
    assert _write("tsv", _doc(True)).splitlines() == [
        "start\tend\ttext\tspeaker",
        "0\t3000\thello there\tSPEAKER_00",
        "3000\t6000\tyes no\tSPEAKER_01",
    ]
    assert _write("tsv", _doc(False)).splitlines()[0] == "start\tend\ttext"


def test_subtitles_prefix_cues_and_split_them_at_a_change_of_speaker() -> None:
    cues = subtitle_cues(_doc(True))
    assert [(c.speaker, c.lines) for c in cues] == [
        ("SPEAKER_00", ("hello there",)),
        ("SPEAKER_01", ("yes",)),
        ("SPEAKER_00", ("no",)),
    ]
    srt = _write("srt", _doc(True))
    assert "00:00:00,100 --> 00:00:01,000\n[SPEAKER_00] hello there\n" in srt
    assert "[SPEAKER_01] yes" in _write("vtt", _doc(True))
    assert "[" not in _write("srt", _doc(False))


def test_json_carries_speakers() -> None:
    data = json.loads(_write("json", _doc(True)))
    assert data["speakers"] == [
        {"label": "SPEAKER_00", "duration": 2.0},
        {"label": "SPEAKER_01", "duration": 1.0},
    ]
    words = [w for s in data["segments"] for w in s["words"]]
    assert [w["speaker"] for w in words] == ["SPEAKER_00", "SPEAKER_00", "SPEAKER_01", "SPEAKER_00"]
