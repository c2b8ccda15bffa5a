import dataclasses

import pytest

from onespeech.qwen3.transcript import Finish, Segment, TimingMethod, Transcript, Word


def test_results_are_frozen() -> None:
    word = Word("hello")
    with pytest.raises(dataclasses.FrozenInstanceError):
        word.start = 1.0  # type: ignore[misc]


def test_word_defaults_have_no_timing() -> None:
    word = Word("hello")
    assert (word.start, word.end, word.confidence, word.timing_method) == (None, None, None, TimingMethod.NONE)


def test_empty_transcript() -> None:
    empty = Transcript.empty()
    assert (empty.text, empty.language, empty.segments, empty.words) == ("", None, (), ())


def test_replace_keeps_other_fields() -> None:
    segment = Segment(0.0, 1.5, "hi", "en")
    assert dataclasses.replace(segment, end=2.0) == Segment(0.0, 2.0, "hi", "en")
    assert TimingMethod.FORCED_ALIGNER.value == "forced_aligner"


def test_one_result_model_segment_defaults_and_frozen_words() -> None:
    segment = Segment(0.0, 1.0, "hi", "en", [Word("hi")])
    assert segment.words == (Word("hi"),)  # a list is kept as a tuple
    assert (segment.finish, segment.timing_method, segment.untimed_reason, segment.speaker) == (
        Finish.END_TOKEN, TimingMethod.NONE, None, None)
    assert Word("hi").speaker is None and Finish.MAX_NEW_TOKENS.value == "max_new_tokens"
    with pytest.raises(dataclasses.FrozenInstanceError):
        segment.words = ()  # type: ignore[misc]


def test_transcript_words_are_a_view_of_the_segments_words() -> None:
    first = Segment(0.0, 1.0, "hello world", "en", (Word("hello"), Word("world")))
    second = Segment(1.5, 2.0, "你好", "zh", (Word("你"), Word("好")))
    transcript = Transcript.from_segments([first, second])
    assert transcript.words == first.words + second.words  # stored once, in the segments
    assert transcript.segments == (first, second) and transcript.text == "hello world 你好"
    assert transcript.language == "en"  # the most segment time
    assert "words" not in {f.name for f in dataclasses.fields(Transcript)}
    retimed = dataclasses.replace(transcript, segments=(dataclasses.replace(first, words=()), second))
    assert retimed.words == second.words  # no second copy to fall out of step


def test_languages_by_time_most_time_first_ties_keep_order() -> None:
    from onespeech.qwen3.transcript import languages_by_time

    segments = [Segment(0.0, 1.0, "a", "de"), Segment(1.0, 3.0, "b", "en"), Segment(3.0, 4.0, "c", "fr"),
                Segment(4.0, 5.0, "d", None)]
    assert languages_by_time(segments) == ["en", "de", "fr"]
    assert Transcript.from_segments([]).language is None
