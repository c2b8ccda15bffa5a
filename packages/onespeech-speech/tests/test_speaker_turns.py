"""Turns: one speaker's stretch until another speaks, pauses up to max_pause included."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onespeech.speech.speakers.formats import turns_json, turns_rttm
from onespeech.speech.speakers.turns import Turn, build_turns, check_max_pause

# (pause before the span, its length, its speaker): a pause of 0 is a change without a pause
_span_parts = st.lists(
    st.tuples(st.integers(0, 60), st.integers(1, 40), st.integers(0, 3)), min_size=0, max_size=40
)


def _spans(parts: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    spans, t = [], 0
    for pause, length, speaker in parts:
        t += pause
        spans.append((t, t + length, speaker))
        t += length
    return spans


@settings(max_examples=300, deadline=None)
@given(_span_parts, st.integers(0, 50))
def test_turns_join_a_speakers_short_pauses_and_split_at_long_ones_or_changes(
    parts: list[tuple[int, int, int]], max_pause: int
) -> None:
    spans = _spans(parts)
    turns = build_turns(spans, max_pause)
    # ordered and never overlapping
    assert all(t[0] <= t[1] for t in turns)
    assert all(x[1] <= y[0] for x, y in pairwise(turns))
    # every span lies in a turn of its own speaker
    for start, end, speaker in spans:
        assert any(t[0] <= start and end <= t[1] and t[2] == speaker for t in turns), (start, end, speaker)
    # inside a turn: only its speaker's spans, and no pause longer than max_pause
    for t in turns:
        inside = [s for s in spans if t[0] <= s[0] and s[1] <= t[1]]
        assert all(s[2] == t[2] for s in inside)
        assert inside[0][0] == t[0] and inside[-1][1] == t[1]
        assert all(y[0] - x[1] <= max_pause for x, y in pairwise(inside))
    # consecutive turns: another speaker, or a pause longer than max_pause between them
    for x, y in pairwise(turns):
        assert x[2] != y[2] or y[0] - x[1] > max_pause
    # nothing but pauses is added: the turns cover exactly the spans and the pauses joined
    assert sum(t[1] - t[0] for t in turns) == sum(s[1] - s[0] for s in spans) + sum(
        y[0] - x[1] for x, y in pairwise(spans) if any(t[0] <= x[0] and y[1] <= t[1] for t in turns)
    )


def test_a_speakers_pauses_belong_to_the_turn() -> None:
    spans = [(0, 10, 0), (12, 20, 0), (25, 30, 0), (31, 40, 1), (40, 45, 0)]
    assert build_turns(spans, 2) == [(0, 20, 0), (25, 30, 0), (31, 40, 1), (40, 45, 0)]
    assert build_turns(spans, 5) == [(0, 30, 0), (31, 40, 1), (40, 45, 0)]
    assert build_turns(spans, 0) == [(0, 10, 0), (12, 20, 0), (25, 30, 0), (31, 40, 1), (40, 45, 0)]


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "2", True, None])
def test_max_pause_is_checked(bad: object) -> None:
    with pytest.raises(ValueError, match="max_pause"):
        check_max_pause(bad)


def test_spans_out_of_order_are_refused() -> None:
    with pytest.raises(ValueError, match="before the previous span ends"):
        build_turns([(0, 10, 0), (5, 12, 1)], 1.0)
    with pytest.raises(ValueError, match="ends before it starts"):
        build_turns([(10, 5, 0)], 1.0)


def test_rttm_and_json_of_turns() -> None:
    turns = [Turn(0.5, 2.25, "SPEAKER_00"), Turn(2.5, 4.0, "SPEAKER_01")]
    assert turns_rttm(turns, "my talk") == (
        "SPEAKER my_talk 1 0.500 1.750 <NA> <NA> SPEAKER_00 <NA> <NA>\n"
        "SPEAKER my_talk 1 2.500 1.500 <NA> <NA> SPEAKER_01 <NA> <NA>\n"
    )
    import json

    body = json.loads(turns_json(turns, "my talk.wav"))
    assert body == {
        "file": "my talk.wav",
        "speakers": ["SPEAKER_00", "SPEAKER_01"],
        "turns": [
            {"start": 0.5, "end": 2.25, "speaker": "SPEAKER_00"},
            {"start": 2.5, "end": 4.0, "speaker": "SPEAKER_01"},
        ],
    }
    assert turns_rttm([], "x") == ""


@pytest.mark.parametrize(
    ("keywords", "message"),
    [
        ({"speakers": 65}, "from 1 to 64"),
        ({"speakers": 0}, "from 1 to 64"),
        ({"max_pause": -1.0}, "max_pause"),
        ({"max_pause": float("nan")}, "max_pause"),
    ],
)
def test_diarize_and_transcriber_check_speaker_options_before_loading(keywords: dict, message: str) -> None:
    import numpy as np

    from onespeech.speech import Transcriber, diarize

    with pytest.raises(ValueError, match=message):
        diarize(np.zeros(16000, np.float32), **keywords)
    with pytest.raises(ValueError, match=message.replace("from 1 to 64", r"1\.\.64")):
        Transcriber("no-such-model-dir", **keywords)
