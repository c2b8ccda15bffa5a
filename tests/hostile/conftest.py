"""Tiny seeded checkpoints for the hostile-input suite (each test copies what it edits)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from onespeech_tools.checkpoints import make_checkpoint


@pytest.fixture(scope="session")
def tiny_asr_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("hostile-asr"), "tiny", seed=0, kind="asr", data_dir=shared_data)


@pytest.fixture(scope="session")
def tiny_aligner_dir(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_checkpoint(tmp_path_factory.mktemp("hostile-aligner"), "tiny", seed=7, kind="aligner",
                           data_dir=shared_data)


@pytest.fixture
def asr_copy(tiny_asr_dir: Path, tmp_path: Path) -> Path:
    """A private copy of the tiny ASR checkpoint (publisher files only) to edit."""
    target = tmp_path / "asr"
    target.mkdir()
    for item in tiny_asr_dir.iterdir():
        if item.is_file() and not item.name.startswith(("manifest", "fp32-", "bf16-", "install", ".")):
            shutil.copyfile(item, target / item.name)
    return target
