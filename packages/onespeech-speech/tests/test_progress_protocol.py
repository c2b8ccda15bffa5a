"""One progress protocol: diarize, batch and live sessions report (stage, done_seconds, total_seconds)."""

from __future__ import annotations

import inspect
from pathlib import Path

import numpy as np
import pytest

from onespeech.speech.speakers.diarize import diarize


def test_diarize_reports_seconds_under_the_speakers_stage(shared_data: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from onespeech.features import load_audio

    monkeypatch.setenv("ONESPEECH_VAD_MODEL", str(shared_data / "models" / "silero_vad.onnx"))
    pcm = load_audio(shared_data / "audio" / "picovoice_test.wav")
    events: list[tuple[str, float, float]] = []
    diarize(pcm, 1, progress=lambda *event: events.append(event), threads=1)
    assert events and {stage for stage, _, _ in events} == {"speakers"}
    assert [done for _, done, _ in events] == sorted(done for _, done, _ in events)
    assert events[-1][1] == events[-1][2] == pytest.approx(pcm.shape[0] / 16000)


@pytest.mark.parametrize("bad", ["yes", 3])
def test_every_caller_refuses_what_is_not_the_protocol(bad: object, tmp_path: Path) -> None:
    from onespeech.speech.batch import transcribe_corpus

    with pytest.raises(TypeError, match="progress"):
        diarize(np.zeros(16000, np.float32), 1, progress=bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="progress"):
        transcribe_corpus([tmp_path], tmp_path / "out", progress=bad)  # type: ignore[arg-type]


def test_the_callers_default_to_bars_on_a_terminal() -> None:
    from onespeech.speech.batch import transcribe_corpus
    from onespeech.speech.streaming import LiveSession, stream_file
    from onespeech.speech.transcribe import Transcriber, transcribe

    for call in (transcribe, Transcriber, diarize, transcribe_corpus, LiveSession, stream_file):
        assert inspect.signature(call).parameters["progress"].default is None, call
