"""Transcriber(keep_loaded=True): the same documents, with the models loaded once (servers, sessions)."""

from __future__ import annotations

from pathlib import Path

import pytest

from onespeech.kernels.errors import ObjectClosedError
from onespeech.speech.transcribe import Transcriber


def test_held_models_give_the_same_documents(runtime_dirs, vad_path: Path, clips: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    options = {"aligner": runtime_dirs.aligner, "language": "en", "vad": vad_path, "threads": 1, "progress": False,
               "speakers": False}
    with Transcriber(runtime_dirs.asr, **options) as fresh:
        want = fresh.transcribe(clips["flac"])
    assert any(w.start is not None for w in want.words)
    held = Transcriber(runtime_dirs.asr, keep_loaded=True, **options)
    recognizer = held.recognizer()
    assert held.transcribe(clips["flac"]) == want
    assert held.transcribe(clips["flac"]) == want  # the held aligner is reused too
    assert held.recognizer() is recognizer
    dispatcher = held.dispatcher()
    assert dispatcher is not None and dispatcher.stages[0].loaded and held.dispatcher() is dispatcher
    untimed = held.transcribe(clips["flac"], align=False)
    assert untimed.text == want.text and all(w.start is None for w in untimed.words)
    held.close()
    with pytest.raises(ObjectClosedError):
        held.recognizer()
    with pytest.raises(ObjectClosedError):
        recognizer.transcribe(load_first_second(clips["flac"]))


def test_only_a_keep_loaded_transcriber_hands_out_its_recognizer(runtime_dirs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="keep_loaded=True"):
        Transcriber(runtime_dirs.asr).recognizer()
    with pytest.raises(ValueError, match="keep_loaded=True"):
        Transcriber(runtime_dirs.asr).dispatcher()
    assert Transcriber(runtime_dirs.asr, aligner=None, keep_loaded=True).dispatcher() is None


def load_first_second(path: Path):  # type: ignore[no-untyped-def]
    from onespeech.features import load_audio

    return load_audio(path)[:16000]
