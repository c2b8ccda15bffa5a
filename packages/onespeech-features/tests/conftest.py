"""Helpers for the onespeech-features tests: reference observations and real clips."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def feature_cases(oracle_observations: Path) -> dict[str, Path]:
    """Observation files of tools/oracles/qwen3/oracle_features.py, by case name."""
    folder = oracle_observations / "features"
    index = folder / "index.json"
    if not index.is_file():
        pytest.skip(f"needs {index} (run `tox -e oracle` or tools/oracles/qwen3/oracle_features.py)")
    names = json.loads(index.read_text())["cases"]
    return {name: folder / f"{name}.npz" for name in names}


@pytest.fixture(scope="session")
def vad_cases(oracle_observations: Path) -> dict[str, Path]:
    """Observation files of tools/oracles/qwen3/oracle_vad.py, by case name."""
    folder = oracle_observations / "vad"
    index = folder / "index.json"
    if not index.is_file():
        pytest.skip(f"needs {index} (run `tox -e oracle` or tools/oracles/qwen3/oracle_vad.py)")
    names = json.loads(index.read_text())["cases"]
    return {name: folder / f"{name}.npz" for name in names}
