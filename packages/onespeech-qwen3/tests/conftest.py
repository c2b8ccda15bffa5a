"""Fixtures of the qwen3 recognizer tests: a tiny seeded checkpoint, its config and weights."""

from __future__ import annotations

from pathlib import Path

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
