"""A model argument becomes a runtime directory in one place (``onespeech.kernels.resolve.resolve_model``):
a catalog id carries its pinned revision, a directory (however spelled) has none."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest


def test_transcriber_takes_a_directory_under_home(runtime_dirs: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:  # fmt: skip
    """``~/model`` was resolved as a directory, then looked up in the catalog for its revision."""
    from onespeech.speech import Transcriber

    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ONESPEECH_HOME", str(tmp_path / "cache"))
    (tmp_path / "asr").symlink_to(runtime_dirs.asr, target_is_directory=True)
    with Transcriber("~/asr", aligner=None, keep_loaded=True) as transcriber:
        recognizer = transcriber.recognizer()
        assert recognizer is transcriber.recognizer()
