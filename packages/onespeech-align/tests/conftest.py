"""Fixtures for onespeech-align: a tiny random aligner checkpoint and real speech."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

TINY_SEED = 7


@pytest.fixture(scope="session")
def tiny_aligner_dir(tmp_path_factory: pytest.TempPathFactory, shared_data: Path) -> Path:
    """A publisher-layout tiny Qwen3-ForcedAligner checkpoint (random bf16 weights)."""
    from onespeech_tools.checkpoints import make_checkpoint

    return make_checkpoint(tmp_path_factory.mktemp("aligner-tiny"), "tiny", TINY_SEED, kind="aligner",
                           data_dir=shared_data)


@pytest.fixture(scope="session")
def tiny_aligner(tiny_aligner_dir: Path):
    from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner

    with Qwen3ForcedAligner.load(tiny_aligner_dir, Qwen3AlignerOptions(threads=2)) as aligner:
        yield aligner


@pytest.fixture(scope="session")
def speech(shared_data: Path) -> np.ndarray:
    """5.855 s of real English speech (16 kHz mono float32)."""
    import soundfile as sf

    pcm, rate = sf.read(str(shared_data / "audio" / "picovoice_test.wav"), dtype="float32")
    assert rate == 16000
    return pcm


@pytest.fixture(scope="session")
def narrow_aligner(tiny_aligner_dir: Path):
    """The tiny aligner with head rows past class 60 zeroed, so slots land inside short audio.

    Random weights spread slots over all 5000 classes (0..400 s), which leaves almost
    every prediction beyond a few seconds of audio; this keeps the real forward pass
    but makes valid predictions common enough to check the valid branch.
    """
    from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner

    with Qwen3ForcedAligner.load(tiny_aligner_dir, Qwen3AlignerOptions(threads=2)) as aligner:
        head = np.array(aligner._head, copy=True)
        head[60:] = 0.0
        aligner._head = head
        yield aligner
