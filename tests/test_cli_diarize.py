"""``onespeech diarize``: RTTM and JSON turns per file, written atomically, with the real encoder and VAD."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from onespeech.speech.cli import main

SR = 16000


@pytest.fixture(scope="module")
def two_voices(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    import soundfile

    from onespeech.features import load_audio

    a = load_audio(shared_data / "audio" / "librispeech_test-clean_1995-1837-0001.wav")
    b = load_audio(shared_data / "audio" / "picovoice_test_fr.wav")
    pause = np.zeros(SR // 2, np.float32)
    path = tmp_path_factory.mktemp("diarize") / "two voices.wav"
    soundfile.write(str(path), np.concatenate([a, pause, b]), SR)
    return path


def test_diarize_writes_rttm_and_json_turns(
    two_voices: Path, vad_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    monkeypatch.setenv("ONESPEECH_VAD_MODEL", str(vad_path))
    out = tmp_path / "out"
    missing = tmp_path / "missing.wav"
    code = main(["diarize", str(two_voices), str(missing), "-f", "rttm,json", "-o", str(out), "--threads", "1"])
    assert code == 1  # the missing file failed; the other was written
    err = capsys.readouterr().err
    assert "missing.wav" in err and "2 speakers" in err
    assert sorted(p.name for p in out.iterdir()) == ["two voices.rttm", "two voices.turns.json"]  # no temporaries
    umask = os.umask(0)
    os.umask(umask)
    assert all((p.stat().st_mode & 0o777) == 0o666 & ~umask for p in out.iterdir())  # as any new file
    lines = (out / "two voices.rttm").read_text(encoding="utf-8").splitlines()
    fields = [line.split(" ") for line in lines]
    assert lines and all(len(f) == 10 for f in fields)
    assert all(f[0] == "SPEAKER" and f[1] == "two_voices" and f[2] == "1" for f in fields)
    assert all(f[5:7] == ["<NA>", "<NA>"] and f[8:] == ["<NA>", "<NA>"] for f in fields)
    starts, durations = [float(f[3]) for f in fields], [float(f[4]) for f in fields]
    assert all(d > 0 for d in durations) and starts == sorted(starts)
    assert [f[7] for f in fields] == ["SPEAKER_00", "SPEAKER_01"]  # one turn each: their pauses are inside
    body = json.loads((out / "two voices.turns.json").read_text(encoding="utf-8"))
    assert body["file"] == str(two_voices) and body["speakers"] == ["SPEAKER_00", "SPEAKER_01"]
    assert [(t["start"], round(t["end"] - t["start"], 3), t["speaker"]) for t in body["turns"]] == [
        (s, d, f[7]) for s, d, f in zip(starts, durations, fields, strict=True)
    ]
    change = 8.73 + 0.25  # the French reader starts after the first clip and half the pause
    assert body["turns"][0]["end"] < change < body["turns"][1]["start"]


def test_diarize_with_a_given_count_and_json_only(
    two_voices: Path, vad_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ONESPEECH_VAD_MODEL", str(vad_path))
    assert main(["diarize", str(two_voices), "-f", "json", "-o", str(tmp_path), "--speakers", "1", "-q"]) == 0
    body = json.loads((tmp_path / "two voices.turns.json").read_text(encoding="utf-8"))
    assert body["speakers"] == ["SPEAKER_00"] and len(body["turns"]) == 1
    assert not (tmp_path / "two voices.rttm").exists()
