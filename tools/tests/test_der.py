"""The diarization error rate on cases worked out by hand, and its invariances."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from onespeech_tools.der import diarization_error_rate as der


def test_the_reference_itself_and_renamed_labels_score_zero() -> None:
    reference = [(0.0, 4.0, "A"), (4.0, 9.0, "B"), (9.5, 12.0, "A")]
    assert der(reference, reference, collar=0.0) == 0.0
    renamed = [(s, e, {"A": "x", "B": "y"}[label]) for s, e, label in reference]
    assert der(reference, renamed, collar=0.0) == 0.0


def test_missed_false_alarm_and_confusion_each_over_reference_speech() -> None:
    reference = [(0.0, 10.0, "A")]
    assert der(reference, [(0.0, 8.0, "A")], collar=0.0) == pytest.approx(0.2)  # 2 s missed
    assert der(reference, [(0.0, 10.0, "A"), (10.0, 12.0, "B")], collar=0.0) == pytest.approx(0.2)  # 2 s false alarm
    # one reference speaker split into two: the mapping keeps the longer half, the other is confusion
    assert der(reference, [(0.0, 6.0, "x"), (6.0, 10.0, "y")], collar=0.0) == pytest.approx(0.4)


def test_two_speakers_swapped_for_a_stretch_is_confusion_of_that_stretch() -> None:
    reference = [(0.0, 5.0, "A"), (5.0, 10.0, "B")]
    hypothesis = [(0.0, 4.0, "1"), (4.0, 10.0, "2")]  # 4-5 s given to B's speaker
    assert der(reference, hypothesis, collar=0.0) == pytest.approx(0.1)


def test_the_collar_hides_boundary_errors_within_half_of_it() -> None:
    reference = [(0.0, 10.0, "A")]
    assert der(reference, [(0.0, 9.9, "A")], collar=0.25) == 0.0  # 0.1 s short, inside the 0.125 s half-collar
    assert der(reference, [(0.0, 9.5, "A")], collar=0.25) > 0.0  # 0.5 s short is not


def test_overlap_is_skipped_or_scored_for_every_speaker() -> None:
    reference = [(0.0, 10.0, "A"), (5.0, 10.0, "B")]
    hypothesis = [(0.0, 10.0, "A")]
    assert der(reference, hypothesis, collar=0.0, skip_overlap=True) == 0.0
    # scored: 10 s of A and 5 s of B; B's 5 s are missed
    assert der(reference, hypothesis, collar=0.0, skip_overlap=False) == pytest.approx(5 / 15)


def test_a_reference_without_scored_speech_is_refused() -> None:
    with pytest.raises(ValueError, match="no scored speech"):
        der([], [(0.0, 1.0, "A")])


segments = st.lists(
    st.tuples(st.integers(0, 300), st.integers(1, 200), st.sampled_from("ABC")), min_size=1, max_size=6
).map(lambda xs: [(s / 10, (s + d) / 10, label) for s, d, label in xs])


@settings(max_examples=50, deadline=None)
@given(reference=segments, hypothesis=segments, names=st.permutations(["p", "q", "r"]))
def test_der_is_non_negative_and_does_not_depend_on_hypothesis_names(reference, hypothesis, names) -> None:  # type: ignore[no-untyped-def]
    value = der(reference, hypothesis, collar=0.0, skip_overlap=False)
    renamed = [(s, e, dict(zip("ABC", names, strict=True))[label]) for s, e, label in hypothesis]
    assert value >= 0.0
    assert der(reference, renamed, collar=0.0, skip_overlap=False) == pytest.approx(value)
    assert der(reference, reference, collar=0.0, skip_overlap=False) == 0.0
