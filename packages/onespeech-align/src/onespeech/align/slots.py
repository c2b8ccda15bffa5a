"""From timestamp-class logits to word times.

The aligner's head scores ``classify_num`` (5000) classes at every ``<timestamp>``
token; class ``k`` means ``k * timestamp_segment_time`` ms (80 ms). Each spoken unit
is followed by two timestamp tokens: its start slot, then its end slot. A written
word spanning several spoken units takes the start slot of its first unit and the
end slot of its last one (character slots projected onto written-word boundaries).

These are the model's direct predictions: no monotonic repair across words (the
reference toolkit's ``fix_timestamp`` is deliberately not applied), no
interpolation. A pair whose end precedes its start, or whose end lies beyond the
audio, keeps ``None`` times.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from onespeech.qwen3 import TimingMethod, Word


@dataclass(frozen=True)
class SlotPredictions:
    """Argmax slots and their probabilities, two per spoken unit.

    Attributes
    ----------
    slots : ndarray[int64], shape (2 * n_units,)
        Argmax class per timestamp token: start, end, start, end, ...
    probabilities : ndarray[float32], shape (2 * n_units,)
        Softmax probability of each argmax class.
    """

    slots: np.ndarray
    probabilities: np.ndarray

    @classmethod
    def from_logits(cls, logits: np.ndarray) -> SlotPredictions:
        """Argmax and its softmax probability per row of ``logits`` (n_timestamps, n_classes)."""
        logits = np.asarray(logits, dtype=np.float32)
        slots = logits.argmax(axis=-1).astype(np.int64)
        top = np.take_along_axis(logits, slots[:, None], axis=-1)[:, 0].astype(np.float64)
        # p(argmax) = 1 / sum(exp(l - l_max)), computed stably in float64
        denom = np.exp(logits.astype(np.float64) - top[:, None]).sum(axis=-1)
        return cls(slots, (1.0 / denom).astype(np.float32))


@dataclass(frozen=True)
class SlotClock:
    """How slots map to seconds for one input.

    Attributes
    ----------
    step_ms : float
        Milliseconds per class (the config's ``timestamp_segment_time``).
    duration_s : float
        Audio duration; an end after it is not a valid prediction.
    """

    step_ms: float
    duration_s: float

    def seconds(self, slot: int) -> float:
        return slot * self.step_ms / 1000.0


def timed_word(
    word: Word, first_unit: int, last_unit: int, predictions: SlotPredictions, clock: SlotClock,
    keep_confidence: bool,
) -> Word:
    """``word`` with the times of spoken units ``first_unit..last_unit`` (inclusive).

    The start is the first unit's start slot, the end the last unit's end slot.
    Confidence is the mean of those two slots' probabilities, unless
    ``keep_confidence`` (the transcript overload keeps the caller's confidence).
    Invalid pairs (end before start, end beyond the audio) clear the times.
    """
    start_slot = int(predictions.slots[2 * first_unit])
    end_slot = int(predictions.slots[2 * last_unit + 1])
    start, end = clock.seconds(start_slot), clock.seconds(end_slot)
    if end_slot < start_slot or end > clock.duration_s:
        return untimed(word, keep_confidence)
    if keep_confidence:
        confidence = word.confidence
    else:
        pair = predictions.probabilities[[2 * first_unit, 2 * last_unit + 1]]
        confidence = float(pair.astype(np.float64).mean())
    return replace(word, start=start, end=end, confidence=confidence, timing_method=TimingMethod.FORCED_ALIGNER)


def untimed(word: Word, keep_confidence: bool) -> Word:
    """``word`` without times (no valid prediction, or nothing spoken to time)."""
    confidence = word.confidence if keep_confidence else None
    return replace(word, start=None, end=None, confidence=confidence, timing_method=TimingMethod.NONE)
