"""Fixtures for the tokenizer tests: the real Qwen3-ASR tokenizer files, loaded once."""

from __future__ import annotations

from pathlib import Path

import pytest

from onespeech.tokenizer import Qwen3Tokenizer


@pytest.fixture(scope="session")
def tokenizer(tokenizer_dir: Path) -> Qwen3Tokenizer:
    return Qwen3Tokenizer.load(tokenizer_dir)
