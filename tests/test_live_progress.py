"""Live sessions report progress by the one protocol: ("recognize", done_seconds, heard_seconds) per final."""

from __future__ import annotations

from pathlib import Path

import pytest

from onespeech.features import load_audio
from onespeech.speech.streaming import LiveSession


def test_a_session_reports_each_final(runtime_dirs, vad_path: Path, clips: dict[str, Path]) -> None:  # type: ignore[no-untyped-def]
    pcm = load_audio(clips["joined"])
    events: list[tuple[str, float, float]] = []
    with LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path, threads=1, max_new_tokens=4,
                     progress=lambda *event: events.append(event)) as session:
        for start in range(0, pcm.shape[0], 16000):
            session.push(pcm[start : start + 16000])
        session.finish()
    assert events and {stage for stage, _, _ in events} == {"recognize"}
    assert all(0 <= done <= total for _, done, total in events)
    assert events[-1][2] == pytest.approx(pcm.shape[0] / 16000)
    with pytest.raises(TypeError, match="progress"):
        LiveSession(runtime_dirs.asr, vad=vad_path, progress="yes")  # type: ignore[arg-type]
