"""Slot rules: argmax per timestamp, 80 ms steps, invalid pairs, confidence, no repair."""

from __future__ import annotations

import numpy as np
import pytest

from onespeech.align.slots import SlotClock, SlotPredictions, timed_word, untimed
from onespeech.qwen3.transcript import TimingMethod, Word


def _logits(slots: list[int], n_classes: int = 5000, peak: float = 8.0) -> np.ndarray:
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(len(slots), n_classes)).astype(np.float32)
    logits[np.arange(len(slots)), slots] = peak
    return logits


def test_predictions_take_argmax_and_its_softmax_probability():
    logits = _logits([3, 10, 4999])
    pred = SlotPredictions.from_logits(logits)
    assert pred.slots.tolist() == [3, 10, 4999]
    e = np.exp(logits.astype(np.float64) - logits.max(axis=1, keepdims=True))
    want = (e / e.sum(axis=1, keepdims=True))[np.arange(3), [3, 10, 4999]]
    np.testing.assert_allclose(pred.probabilities, want, rtol=1e-6)


@pytest.mark.parametrize(("slots", "start", "end"), [([0, 0], 0.0, 0.0), ([3, 7], 0.24, 0.56), ([125, 125], 10.0, 10.0)])
def test_times_are_slot_times_80_ms(slots, start, end):
    pred = SlotPredictions.from_logits(_logits(slots))
    word = timed_word(Word("x"), 0, 0, pred, SlotClock(80, 10.0), keep_confidence=False)
    assert (word.start, word.end, word.timing_method) == (start, end, TimingMethod.FORCED_ALIGNER)


def test_confidence_is_mean_of_the_two_slot_probabilities():
    pred = SlotPredictions.from_logits(_logits([2, 5]))
    word = timed_word(Word("x"), 0, 0, pred, SlotClock(80, 10.0), keep_confidence=False)
    assert word.confidence == pytest.approx(float(pred.probabilities.astype(np.float64).mean()))
    assert 0.0 < word.confidence <= 1.0


def test_reversed_bounds_leave_times_none():
    pred = SlotPredictions.from_logits(_logits([9, 8]))
    word = timed_word(Word("x"), 0, 0, pred, SlotClock(80, 10.0), keep_confidence=False)
    assert (word.start, word.end, word.confidence, word.timing_method) == (None, None, None, TimingMethod.NONE)


def test_end_beyond_audio_leaves_times_none_but_end_at_duration_is_valid():
    pred = SlotPredictions.from_logits(_logits([1, 4]))  # end 0.32 s
    assert timed_word(Word("x"), 0, 0, pred, SlotClock(80, 0.32), False).end == 0.32
    assert timed_word(Word("x"), 0, 0, pred, SlotClock(80, 0.3199), False).end is None


def test_multi_unit_word_spans_first_start_to_last_end():
    # units: (2, 4), (3, 9): the word takes start of unit 0 and end of unit 1
    pred = SlotPredictions.from_logits(_logits([2, 4, 3, 9]))
    word = timed_word(Word("ab"), 0, 1, pred, SlotClock(80, 10.0), keep_confidence=False)
    assert (word.start, word.end) == (0.16, 0.72)
    assert word.confidence == pytest.approx(float(np.mean(pred.probabilities[[0, 3]].astype(np.float64))))


def test_no_monotonic_repair_overlaps_are_kept():
    # word 2 starts before word 1 ends, and before word 1 starts: kept as predicted
    pred = SlotPredictions.from_logits(_logits([10, 20, 5, 15]))
    clock = SlotClock(80, 10.0)
    w1 = timed_word(Word("a"), 0, 0, pred, clock, False)
    w2 = timed_word(Word("b"), 1, 1, pred, clock, False)
    assert (w1.start, w1.end, w2.start, w2.end) == (0.8, 1.6, 0.4, 1.2)


def test_transcript_overload_keeps_confidence_and_other_fields():
    pred = SlotPredictions.from_logits(_logits([1, 2, 9, 3]))
    clock = SlotClock(80, 10.0)
    word = Word("hi", start=None, end=None, confidence=0.25)
    timed = timed_word(word, 0, 0, pred, clock, keep_confidence=True)
    assert (timed.text, timed.confidence, timed.start, timed.end) == ("hi", 0.25, 0.08, 0.16)
    invalid = timed_word(word, 1, 1, pred, clock, keep_confidence=True)
    assert (invalid.confidence, invalid.start) == (0.25, None)
    assert untimed(Word("x", 1.0, 2.0, 0.5, TimingMethod.CTC), True) == Word("x", None, None, 0.5, TimingMethod.NONE)

