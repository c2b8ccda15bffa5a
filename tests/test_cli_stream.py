"""`onespeech stream -`: a WAV stream, raw S16LE (--rate) or an audio file on stdin, finals on stdout as they come."""

from __future__ import annotations

import io
import json
import sys
from pathlib import Path

import numpy as np
import pytest
import soundfile

from onespeech.features import load_audio
from onespeech.speech.cli import main
from onespeech.speech.commands.stream import text_line
from onespeech.speech.document import segment_dict
from onespeech.speech.streaming import LiveSession

BUDGET = 12  # tokens per chunk: keeps the tests fast (a final that reaches it says so)


@pytest.fixture(scope="module")
def pcm16(clips: dict[str, Path]) -> np.ndarray:
    return np.round(load_audio(clips["joined"])[: 20 * 16000] * 32767).astype(np.int16)


@pytest.fixture(scope="module")
def want(runtime_dirs, vad_path: Path, pcm16: np.ndarray) -> list:  # type: ignore[no-untyped-def]
    with LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path, threads=1, max_new_tokens=BUDGET) as session:
        return session.push(pcm16) + session.finish()


def _stream(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], runtime_dirs, vad_path: Path,  # type: ignore[no-untyped-def]
            data: bytes, *extra: str) -> list[str]:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    monkeypatch.setenv("ONESPEECH_VAD_MODEL", str(vad_path))
    status = main(["stream", "-", "-m", str(runtime_dirs.asr), "--aligner", "none", "--threads", "1",
                   "--max-new-tokens", str(BUDGET), *extra])
    out = capsys.readouterr()
    assert status == 0, out.err
    return out.out.splitlines()


def test_raw_pcm_prints_each_final_with_times(monkeypatch, capsys, runtime_dirs, vad_path, pcm16, want) -> None:  # type: ignore[no-untyped-def]
    lines = _stream(monkeypatch, capsys, runtime_dirs, vad_path, pcm16.astype("<i2").tobytes(), "--rate", "16000")
    assert len(want) >= 2
    assert lines == [text_line(s) for s in want]


def test_a_wav_stream_as_jsonl(monkeypatch, capsys, runtime_dirs, vad_path, pcm16, want) -> None:  # type: ignore[no-untyped-def]
    buffer = io.BytesIO()
    soundfile.write(buffer, pcm16, 16000, format="WAV", subtype="PCM_16")
    lines = _stream(monkeypatch, capsys, runtime_dirs, vad_path, buffer.getvalue(), "--format", "jsonl")
    records = [json.loads(line) for line in lines]
    assert [(r["start"], r["end"], r["text"], r["language"], r["finish"]) for r in records] == [
        (s.start, s.end, s.text, s.language, s.finish.value) for s in want
    ]


def test_raw_pcm_at_another_rate_is_resampled(monkeypatch, capsys, runtime_dirs, vad_path, pcm16) -> None:  # type: ignore[no-untyped-def]
    half = pcm16[::2].copy()  # played as 8 kHz
    with LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path, threads=1, max_new_tokens=BUDGET) as session:
        want = session.push(half, 8000) + session.finish()
    lines = _stream(monkeypatch, capsys, runtime_dirs, vad_path, half.astype("<i2").tobytes(), "--rate", "8000")
    assert lines == [text_line(s) for s in want]


def test_with_an_aligner_jsonl_has_the_sessions_timed_words(monkeypatch, capsys, runtime_dirs, vad_path, pcm16) -> None:  # type: ignore[no-untyped-def]
    with LiveSession(runtime_dirs.asr, language="en", aligner=runtime_dirs.aligner, vad=vad_path, threads=1,
                     max_new_tokens=BUDGET) as session:
        want = session.push(pcm16) + session.finish()
    assert sum(w.start is not None for s in want for w in s.words) >= 2
    lines = _stream(monkeypatch, capsys, runtime_dirs, vad_path, pcm16.astype("<i2").tobytes(), "--format", "jsonl",
                    "-l", "en", "--aligner", str(runtime_dirs.aligner), "--rate", "16000")
    assert [json.loads(line) for line in lines] == [segment_dict(s) for s in want]  # the segment as the Document JSON has it


def test_a_damaged_model_is_reported_without_a_traceback(monkeypatch, capsys, runtime_dirs, vad_path, tmp_path) -> None:  # type: ignore[no-untyped-def]
    import shutil

    damaged = tmp_path / "asr"
    shutil.copytree(runtime_dirs.asr, damaged)
    tensor_file = sorted(damaged.glob("*.ost"))[0]
    tensor_file.write_bytes(tensor_file.read_bytes()[:-4096])  # cut short, as an interrupted copy leaves it
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(b"")))
    monkeypatch.setenv("ONESPEECH_VAD_MODEL", str(vad_path))
    status = main(["stream", "-", "-m", str(damaged), "--aligner", "none", "--threads", "1", "--rate", "16000"])
    err = capsys.readouterr().err
    assert status == 1
    assert err.startswith("onespeech stream: ") and tensor_file.name in err and "Traceback" not in err


@pytest.mark.parametrize("clip", ["flac", "mp3"])
def test_an_audio_file_on_stdin_is_decoded_as_the_file_path_decodes_it(  # type: ignore[no-untyped-def]
        monkeypatch, capsys, runtime_dirs, vad_path, clips, clip: str) -> None:
    # before: FLAC or MP3 bytes were read as raw PCM: noise, nothing printed, exit status 0
    with LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path, threads=1, max_new_tokens=BUDGET) as session:
        want = session.push(load_audio(clips[clip])) + session.finish()
    assert want
    lines = _stream(monkeypatch, capsys, runtime_dirs, vad_path, clips[clip].read_bytes())
    assert lines == [text_line(s) for s in want]


@pytest.mark.parametrize(("data", "extra", "says"), [
    pytest.param(b"hello, this is not audio\n" * 20, (), "text", id="text"),
    pytest.param("Grüße, Welt\n".encode() * 30, ("--rate", "16000"), "text", id="utf-8 text as raw PCM"),
    pytest.param(np.random.default_rng(0).integers(0, 256, 70000, dtype=np.uint8).tobytes(), (), "libsndfile",
                 id="binary garbage"),
    pytest.param(b"", (), "empty", id="nothing"),
])
def test_stdin_that_is_not_audio_is_refused_naming_the_accepted_inputs(  # type: ignore[no-untyped-def]
        monkeypatch, capsys, runtime_dirs, vad_path, data: bytes, extra: tuple[str, ...], says: str) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    monkeypatch.setenv("ONESPEECH_VAD_MODEL", str(vad_path))
    status = main(["stream", "-", "-m", str(runtime_dirs.asr), "--aligner", "none", "--threads", "1", *extra])
    out = capsys.readouterr()
    assert status == 1 and out.out == ""
    assert out.err.startswith("onespeech stream: UnreadableAudioError: <stdin>: ") and says in out.err
    for accepted in ("WAV stream", "FLAC", "MP3", "raw 16-bit little-endian mono PCM with --rate"):
        assert accepted in out.err
    assert "Traceback" not in out.err
