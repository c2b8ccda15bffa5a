"""A growable window of a 16 kHz stream's samples: append at the end, release from the start.

The streaming chunkers and the region stream keep only the audio a later chunk or
region can still need; this buffer holds it in one array, so appends are amortized
O(1) and a released stretch is not copied again.
"""

from __future__ import annotations

import numpy as np

__all__ = ["SampleBuffer"]

_MIN_CAPACITY = 1 << 16


class SampleBuffer:
    """Samples ``start`` to ``end`` of a stream in one growable array (amortized O(1) append)."""

    def __init__(self) -> None:
        self._data = np.zeros(_MIN_CAPACITY, dtype=np.float32)
        self._head = 0  # index in _data of sample `start`
        self.start = 0
        self.end = 0

    def append(self, pcm: np.ndarray) -> None:
        n = pcm.shape[0]
        used = self.end - self.start
        if self._head + used + n > self._data.shape[0]:
            capacity = max(_MIN_CAPACITY, 2 * (used + n))
            # grow, or shrink once a long stretch was released, so a long region's peak is not kept for good
            if capacity > self._data.shape[0] or 2 * capacity <= self._data.shape[0]:
                data = np.zeros(capacity, dtype=np.float32)
            else:
                data = self._data
            data[:used] = self._data[self._head : self._head + used]  # numpy copies overlapping ranges correctly
            self._data, self._head = data, 0
        self._data[self._head + used : self._head + used + n] = pcm
        self.end += n

    def drop_before(self, sample: int) -> None:
        drop = min(max(0, sample - self.start), self.end - self.start)
        self._head += drop
        self.start += drop

    def held(self) -> np.ndarray:
        return self._data[self._head : self._head + self.end - self.start]

    def view(self, start: int, end: int) -> np.ndarray:
        if not self.start <= start <= end <= self.end:
            raise RuntimeError(f"samples {start}..{end} are not held (held: {self.start}..{self.end})")
        return self._data[self._head + start - self.start : self._head + end - self.start]
