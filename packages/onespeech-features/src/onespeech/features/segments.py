"""Speech regions from per-window speech probabilities (silero-vad's rules).

The rules are those of silero-vad's ``get_speech_timestamps`` (without its
``max_speech_duration_s`` split: the chunk planner splits long speech instead):

- speech starts at the first window with probability >= ``threshold``;
- it ends at the first window below ``neg_threshold`` (default threshold - 0.15)
  that begins a run of at least ``min_silence_duration_ms`` without a window back
  above ``threshold``;
- regions of ``min_speech_duration_ms`` or less are dropped;
- each region is padded by ``speech_pad_ms`` on both sides, except that two regions
  closer than twice the padding meet halfway.

``SpeechSegmenter`` applies them incrementally and returns a region as soon as no
later audio can change it, so feeding probabilities whole or in blocks of any size
gives the same regions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from onespeech.features.pcm import SAMPLE_RATE
from onespeech.features.spans import SampleSpan

WINDOW_SAMPLES = 512  # Silero VAD at 16 kHz: one speech probability per 32 ms
_SAMPLES_PER_MS = SAMPLE_RATE // 1000


@dataclass(frozen=True)
class VadOptions:
    """Segmentation settings.

    Attributes
    ----------
    threshold : float
        Windows with speech probability at or above this are speech (0 < t < 1).
    neg_threshold : float or None
        While in speech, windows below this count as silence; None means
        ``max(threshold - 0.15, 0.01)``.
    min_speech_duration_ms : int
        Regions of this length or shorter (before padding) are dropped.
    min_silence_duration_ms : int
        Silence shorter than this does not end a region.
    speech_pad_ms : int
        Padding added on each side of a region.
    """

    threshold: float = 0.5
    neg_threshold: float | None = None
    min_speech_duration_ms: int = 250
    min_silence_duration_ms: int = 100
    speech_pad_ms: int = 30

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError(f"threshold={self.threshold} is outside (0, 1)")
        if self.neg_threshold is not None and not 0.0 < self.neg_threshold <= self.threshold:
            raise ValueError(f"neg_threshold={self.neg_threshold} must be in (0, threshold={self.threshold}]")
        for name in ("min_speech_duration_ms", "min_silence_duration_ms", "speech_pad_ms"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}={value!r} must be a non-negative integer number of milliseconds")

    @property
    def exit_threshold(self) -> float:
        return self.neg_threshold if self.neg_threshold is not None else max(self.threshold - 0.15, 0.01)


@dataclass(frozen=True)
class SpeechRegion(SampleSpan):
    """A region of speech: samples ``start`` (inclusive) to ``end`` (exclusive) at 16 kHz."""


@dataclass
class _Pending:
    raw_start: int
    raw_end: int
    start: int  # padded start (final once the previous region is final)


class SpeechSegmenter:
    """Incremental speech segmentation over a stream of window probabilities."""

    def __init__(self, options: VadOptions | None = None) -> None:
        self.options = options if options is not None else VadOptions()
        self._pad = self.options.speech_pad_ms * _SAMPLES_PER_MS
        self._min_speech = self.options.min_speech_duration_ms * _SAMPLES_PER_MS
        self._min_silence = self.options.min_silence_duration_ms * _SAMPLES_PER_MS
        self._window = 0  # index of the next window
        self._triggered = False
        self._start = 0  # start of the open region
        self._temp_end = 0  # first silent window of the current silence run (0: none)
        self._open_start: int | None = None  # the padded start of the open region, once a neighbour fixed it
        self._pending: list[_Pending] = []  # closed regions not yet returned

    @property
    def horizon(self) -> int:
        """No region returned from now on starts before this sample.

        A caller that keeps the audio from here on (and any open chunk) holds every
        sample a later region can cover, so streamed audio can be dropped up to it.
        """
        if self._pending:
            return self._pending[0].start  # later moves of a padded start only go forward
        if self._triggered:
            return max(0, self._start - self._pad)
        return max(0, WINDOW_SAMPLES * self._window - self._pad)

    def feed(self, probabilities: Iterable[float]) -> list[SpeechRegion]:
        """Consume window probabilities; return the regions that are now final.

        Parameters
        ----------
        probabilities : iterable of float (e.g. ndarray[float32], shape (k,))
            The next windows' speech probabilities, in order.
        """
        threshold, exit_threshold = self.options.threshold, self.options.exit_threshold
        for p in map(float, probabilities):
            position = WINDOW_SAMPLES * self._window
            self._window += 1
            if p >= threshold and self._temp_end:
                self._temp_end = 0
            if p >= threshold and not self._triggered:
                self._triggered = True
                self._start = position
                self._open_start = None
                continue
            if p < exit_threshold and self._triggered:
                if not self._temp_end:
                    self._temp_end = position
                if position - self._temp_end >= self._min_silence:
                    self._close(self._temp_end)
        return self._release(n_samples=None)

    def finish(self, n_samples: int) -> list[SpeechRegion]:
        """End of the stream of ``n_samples`` samples: return the remaining regions."""
        if self._triggered and n_samples - self._start > self._min_speech:
            self._pending.append(_Pending(self._start, n_samples, self._padded_start()))
        self._triggered = False
        return self._release(n_samples=n_samples)

    def open_region(self) -> tuple[int, int] | None:
        """The region in progress once it is certain: ``(start, min_raw_end)``, else None.

        Certain means it is long enough to be kept whatever comes next and every
        earlier region is returned, so ``start`` (padded) is final and the region's
        end, once it closes, is at or after ``min_raw_end`` (its first silent window
        so far, or the next window). A streaming chunker cuts a long region in
        progress from this, so its memory stays bounded during unbroken speech.
        """
        if self._pending or not self._open_confirmed():
            return None
        return self._padded_start(), self._min_raw_end()

    def _min_raw_end(self) -> int:
        # the region ends at its first silent window: the current run's, or a later one
        return self._temp_end or WINDOW_SAMPLES * self._window

    def _open_confirmed(self) -> bool:
        """The open region is longer than the minimum whatever comes next (it will be returned)."""
        return self._triggered and self._min_raw_end() - self._start > self._min_speech

    def _padded_start(self) -> int:
        return self._open_start if self._open_start is not None else max(0, self._start - self._pad)

    def _close(self, end: int) -> None:
        if end - self._start > self._min_speech:
            self._pending.append(_Pending(self._start, end, self._padded_start()))
        self._triggered = False
        self._temp_end = 0

    def _release(self, n_samples: int | None) -> list[SpeechRegion]:
        out = []
        while self._pending:
            region = self._pending[0]
            if len(self._pending) > 1:
                following = self._pending[1]
                silence = following.raw_start - region.raw_end
                if silence < 2 * self._pad:  # close neighbours meet halfway
                    end = region.raw_end + silence // 2
                    following.start = max(0, following.raw_start - silence // 2)
                else:
                    end = region.raw_end + self._pad
            elif n_samples is not None:
                end = min(n_samples, region.raw_end + self._pad)
            elif self._open_confirmed():
                # the open region will be a region: its raw start fixes where the two meet
                silence = self._start - region.raw_end
                if silence < 2 * self._pad:
                    end = region.raw_end + silence // 2
                    self._open_start = max(0, self._start - silence // 2)
                else:
                    end = region.raw_end + self._pad
            else:
                # no neighbour yet: final once no later region can start within 2 pads
                earliest_next = self._start if self._triggered else WINDOW_SAMPLES * self._window
                if earliest_next - region.raw_end < 2 * self._pad:
                    break
                end = region.raw_end + self._pad
            out.append(SpeechRegion(region.start, end))
            self._pending.pop(0)
        return out
