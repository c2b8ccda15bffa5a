"""Synthetic test signals (numpy only)."""

from __future__ import annotations

import numpy as np

SAMPLE_RATE = 16000


def tone(seconds: float, seed: int = 0, hz: float = 220.0) -> np.ndarray:
    """A float32 sine at ``hz`` with a little seeded noise, ``seconds`` long at 16 kHz."""
    rng = np.random.default_rng(seed)
    t = np.arange(int(seconds * SAMPLE_RATE)) / SAMPLE_RATE
    return (0.3 * np.sin(2 * np.pi * hz * t) + 0.05 * rng.standard_normal(t.size)).astype(np.float32)
