import dataclasses
import json

import pytest

from onespeech.speech.document import (
    DOCUMENT_VERSION,
    Document,
    DocumentFormatError,
    Finish,
    ModelInfo,
    Segment,
    Speaker,
    TimingMethod,
    Word,
)


def _segment(start: float, end: float, text: str, language: str | None, timed: bool = True) -> Segment:
    words = [
        Word(t, start + 0.1 * i if timed else None, start + 0.1 * i + 0.05 if timed else None, 0.5 if timed else None,
             TimingMethod.FORCED_ALIGNER if timed else TimingMethod.NONE)
        for i, t in enumerate(text.split())
    ]
    if timed:
        return Segment(start, end, text, language, words, Finish.END_TOKEN, TimingMethod.FORCED_ALIGNER)
    return Segment(start, end, text, language, words, Finish.END_TOKEN, TimingMethod.NONE, "aligner disabled")


def test_from_segments_joins_texts_and_ranks_languages_by_time() -> None:
    segments = [
        _segment(0.0, 2.0, "hello there", "en"),
        _segment(2.5, 7.5, "guten Tag", "de"),
        _segment(8.0, 9.0, "bye", "en"),
    ]
    doc = Document.from_segments(segments, 10.0, ModelInfo("Qwen/Qwen3-ASR-0.6B", "a" * 40, "fp32"))
    assert doc.text == "hello there guten Tag bye"
    assert doc.language == "de"  # 5 s of German against 3 s of English
    assert doc.languages == ["de", "en"]
    assert [w.text for w in doc.words] == ["hello", "there", "guten", "Tag", "bye"]
    assert doc.duration == 10.0 and doc.aligner is None and doc.speakers == []


def test_character_languages_join_without_space() -> None:
    segments = [_segment(0, 1, "你好", "zh"), _segment(1, 2, "世界", "zh"), _segment(2, 3, "ok", "en")]
    assert Document.from_segments(segments, 3.0).text == "你好世界 ok"


def test_empty_document() -> None:
    doc = Document.from_segments([], 0.0)
    assert (doc.text, doc.language, doc.languages, doc.segments, doc.words) == ("", None, [], [], [])


def test_json_round_trip_is_exact() -> None:
    segments = [_segment(0.0, 1.5, "a b c", "en"), _segment(2.0, 4.0, "d", None, timed=False)]
    doc = Document.from_segments(segments, 4.25, ModelInfo("m", None, "bf16"), ModelInfo("/x/aligner", None, "bf16"))
    doc.speakers = [Speaker("SPEAKER_00", 1.5)]
    data = json.loads(doc.to_json())
    assert data["version"] == DOCUMENT_VERSION
    assert Document.from_dict(data) == doc
    assert Document.from_json(doc.to_json(indent=None)) == doc


def test_from_dict_refuses_other_versions_and_missing_fields() -> None:
    data = Document.from_segments([], 0.0).to_dict()
    with pytest.raises(DocumentFormatError, match="version 99 is not supported"):
        Document.from_dict({**data, "version": 99})
    del data["segments"]
    with pytest.raises(DocumentFormatError, match="segments"):
        Document.from_dict(data)
    with pytest.raises(DocumentFormatError, match="JSON object"):
        Document.from_dict([])  # type: ignore[arg-type]
    with pytest.raises(DocumentFormatError, match="not JSON"):
        Document.from_json("{")


def test_words_are_a_view_of_the_segments_words_not_a_second_copy() -> None:
    doc = Document.from_segments([_segment(0.0, 1.5, "a b", "en"), _segment(2.0, 4.0, "c", "en")], 4.0)
    assert "words" not in {f.name for f in dataclasses.fields(doc)}
    assert doc.words == [w for s in doc.segments for w in s.words]
    doc.segments[1] = dataclasses.replace(doc.segments[1], words=(Word("z"),))
    assert [w.text for w in doc.words] == ["a", "b", "z"]  # follows the segments
    assert "words" not in doc.to_dict()
    assert Document.from_dict(doc.to_dict()).words == doc.words


def test_segments_and_words_are_frozen_with_enums() -> None:
    segment = _segment(0.0, 1.5, "a b", "en")
    assert isinstance(segment.words, tuple)  # the list given is kept as a tuple
    with pytest.raises(dataclasses.FrozenInstanceError):
        segment.text = "x"  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        segment.words[0].speaker = "S"  # type: ignore[misc]
    data = Document.from_segments([segment], 2.0).to_dict()["segments"][0]
    assert (data["finish"], data["timing_method"], data["untimed_reason"]) == ("end_token", "forced_aligner", None)
    assert data["words"][0]["timing_method"] == "forced_aligner"
    assert Segment(0.0, 1.0, "x").finish is Finish.END_TOKEN
