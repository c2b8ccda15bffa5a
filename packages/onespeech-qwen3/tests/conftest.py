"""Fixtures of the qwen3 recognizer tests: a tiny seeded checkpoint, its config and weights, and a
recognizer on a copy of it for each test module."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

TINY_SEED = 0


@pytest.fixture(scope="session")
def tiny_checkpoint(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A publisher-layout tiny Qwen3-ASR checkpoint (seeded random bf16 weights)."""
    from onespeech_tools.checkpoints import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("tiny-asr"), "tiny", seed=TINY_SEED, kind="asr", data_dir=shared_data)


@pytest.fixture(scope="session")
def tiny_config(tiny_checkpoint: Path):
    from onespeech.qwen3.config import load_config

    return load_config(tiny_checkpoint)


@pytest.fixture(scope="session")
def tiny_weights(tiny_checkpoint: Path):
    """The tiny checkpoint's tensors, memory-mapped (bf16 as uint16)."""
    from onespeech.qwen3.safetensors import open_checkpoint

    checkpoint = open_checkpoint(tiny_checkpoint)
    yield checkpoint
    checkpoint.close()


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path):
    from onespeech.tokenizer import Qwen3Tokenizer

    return Qwen3Tokenizer.load(tokenizer_dir)


class FakeVad:
    """Speech at fixed sample ranges, scored per 512-sample window as the streaming VAD does.

    The recognizer's chunker runs the streaming VAD and the segmenter (tested with the
    real network in onespeech-features); this stand-in gives probability 1 to every
    window starting inside one of ``regions`` and 0 elsewhere, so the regions the
    segmenter finds are these, give or take its 30 ms padding.
    """

    def __init__(self, regions: list[tuple[int, int]]) -> None:
        self.regions = regions
        self.calls = 0  # streams started

    def stream(self) -> _FakeVadStream:
        self.calls += 1
        return _FakeVadStream(self.regions)


class _FakeVadStream:
    _WINDOW = 512

    def __init__(self, regions: list[tuple[int, int]]) -> None:
        self._regions = regions
        self._n = 0
        self._scored = 0  # windows returned so far

    def feed(self, pcm: np.ndarray) -> np.ndarray:
        self._n += pcm.shape[0]
        return self._score(self._n // self._WINDOW)

    def finish(self) -> np.ndarray:
        return self._score(-(-self._n // self._WINDOW))

    def _score(self, windows: int) -> np.ndarray:
        starts = np.arange(self._scored, windows) * self._WINDOW
        self._scored = max(self._scored, windows)
        speech = np.zeros(starts.shape[0], dtype=np.float32)
        for a, b in self._regions:
            speech[(starts >= a) & (starts < b)] = 1.0
        return speech


@pytest.fixture()
def fake_vad() -> type[FakeVad]:
    return FakeVad


@pytest.fixture(scope="module")
def model_dir(tiny_checkpoint: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A copy of the tiny checkpoint for one test module (converted in place on first load)."""
    target = tmp_path_factory.mktemp("recognizer") / "model"
    shutil.copytree(tiny_checkpoint, target)
    return target


@pytest.fixture(scope="module")
def recognizer(model_dir: Path):  # type: ignore[no-untyped-def]
    """A recognizer on the module's copy, 8 new tokens at most, one thread."""
    from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer

    with Qwen3Recognizer.load(model_dir, Qwen3Options(max_new_tokens=8, threads=1)) as rec:
        yield rec
