"""The rules of file transcription around the composition: lifetime, spool, cancel, limits."""

from __future__ import annotations

import io
import tempfile
import threading
from pathlib import Path

import numpy as np
import pytest
import soundfile

from onespeech.align import Qwen3ForcedAligner
from onespeech.features import PcmTooShortError
from onespeech.qwen3 import Qwen3Recognizer, TimingMethod
from onespeech.speech import (
    ChunkLimitError,
    Document,
    ReplayMismatchError,
    Transcriber,
    TranscriptionCancelled,
)

BUDGET = 256


@pytest.fixture
def make(runtime_dirs, vad_path):  # type: ignore[no-untyped-def]
    def build(**kwargs) -> Transcriber:  # type: ignore[no-untyped-def]
        options = {"aligner": runtime_dirs.aligner, "max_new_tokens": BUDGET, "threads": 1, "progress": False,
                   "vad": vad_path, "language": "en", **kwargs}
        return Transcriber(runtime_dirs.asr, **options)

    return build


class _Unseekable(io.RawIOBase):
    """A pipe-like stream: read only."""

    def __init__(self, data: bytes) -> None:
        self._data = io.BytesIO(data)

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:  # type: ignore[no-untyped-def]
        chunk = self._data.read(len(buffer))
        buffer[: len(chunk)] = chunk
        return len(chunk)


@pytest.fixture
def spool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private temporary directory for the spool (other processes spool to the shared one)."""
    path = tmp_path / "tmp"
    path.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(path))
    return path


def _spools(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.glob("onespeech-spool-*"))


def _record_loads(monkeypatch: pytest.MonkeyPatch, model_class: type) -> tuple[list, list]:
    """The instances of ``model_class`` loaded and closed from now on, in order."""
    opened: list = []
    closed: list = []
    real_load, real_close = model_class.load, model_class.close
    monkeypatch.setattr(model_class, "load", classmethod(
        lambda cls, *a, **k: opened.append(real_load.__func__(cls, *a, **k)) or opened[-1]))
    monkeypatch.setattr(model_class, "close", lambda self: closed.append(self) or real_close(self))
    return opened, closed


def test_stream_is_spooled_replayed_and_removed(make, clips, spool_dir) -> None:  # type: ignore[no-untyped-def]
    by_path = make().transcribe(clips["flac"])
    assert _spools(spool_dir) == []  # a path is read in place
    seen: set[str] = set()
    by_stream = make(progress=lambda *_: seen.update(_spools(spool_dir))).transcribe(
        _Unseekable(Path(clips["flac"]).read_bytes()))
    assert by_stream == by_path
    assert any(w.start is not None for w in by_stream.words)  # the timing replay read the spool again
    assert len(seen) == 1  # one spool while the stream was transcribed ...
    assert list(spool_dir.iterdir()) == []  # ... and nothing left


def test_cancel_stops_and_leaves_nothing_behind(make, clips, monkeypatch, spool_dir) -> None:  # type: ignore[no-untyped-def]
    opened, closed = _record_loads(monkeypatch, Qwen3Recognizer)
    cancel = threading.Event()
    steps = []
    seen: set[str] = set()

    def progress(stage: str, done: float, total: float) -> None:
        steps.append(stage)
        seen.update(_spools(spool_dir))
        if stage == "decode" and done > 20:
            cancel.set()  # mid-file: the first chunks were recognized already

    with pytest.raises(TranscriptionCancelled):
        make(progress=progress, cancel=cancel).transcribe(_Unseekable(Path(clips["joined"]).read_bytes()))
    assert "align" not in steps
    assert opened and closed == opened  # the recognizer was released
    assert len(seen) == 1 and list(spool_dir.iterdir()) == []  # the stream's spool was removed


def test_cancel_during_timing_releases_the_aligner(make, clips, monkeypatch, spool_dir) -> None:  # type: ignore[no-untyped-def]
    opened, closed = _record_loads(monkeypatch, Qwen3ForcedAligner)
    cancel = threading.Event()
    aligned: list[float] = []

    def progress(stage: str, done: float, total: float) -> None:
        if stage == "align":
            aligned.append(done)
            cancel.set()  # the first timing event: the aligner is loaded and a chunk was timed

    with pytest.raises(TranscriptionCancelled):
        make(progress=progress, cancel=cancel).transcribe(_Unseekable(Path(clips["joined"]).read_bytes()))
    assert len(aligned) == 1  # stopped at the next check (a finished pass reports once per chunk and at its end)
    assert opened and closed == opened  # the aligner was released
    assert list(spool_dir.iterdir()) == []  # the stream's spool was removed


def test_cancel_inside_a_decode_step(make, clips) -> None:  # type: ignore[no-untyped-def]
    calls = {"n": 0}

    def cancel() -> bool:  # a callable signal, set after a few checks (inside the decoder loop)
        calls["n"] += 1
        return calls["n"] > 30

    with pytest.raises(TranscriptionCancelled):
        make(cancel=cancel).transcribe(clips["flac"])


def test_chunk_limit_names_the_chunk_and_keeps_what_came_before(make, clips, runtime_dirs) -> None:  # type: ignore[no-untyped-def]
    full = make(aligner=None).transcribe(clips["joined"])
    lengths = []
    from onespeech.features import load_audio

    pcm = load_audio(clips["joined"])
    with Qwen3Recognizer.load(runtime_dirs.asr) as recognizer:
        for s in full.segments:
            lengths.append(len(recognizer.generate(pcm[round(s.start * 16000) : round(s.end * 16000)], "en", BUDGET)))
    # a budget the first chunk fits in and a later one does not
    budget = lengths[0] + 1  # its ids and the end token
    failing = next((i for i, n in enumerate(lengths) if n >= budget), None)
    assert failing is not None and len(lengths) >= 3, f"the joined clip no longer exercises this: {lengths}"
    with pytest.raises(ChunkLimitError) as info:
        make(max_new_tokens=budget).transcribe(clips["joined"])
    segment = full.segments[failing]
    assert f"{segment.start:.2f}-{segment.end:.2f} s" in str(info.value)
    assert (info.value.start, info.value.end) == (segment.start, segment.end)
    partial = info.value.partial
    assert isinstance(partial, Document)
    assert [s.text for s in partial.segments] == [s.text for s in full.segments[:failing]]


def test_empty_audio_gives_an_empty_document(make, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "empty.wav"
    soundfile.write(path, np.zeros(0, dtype=np.float32), 16000)
    document = make().transcribe(path)
    assert (document.text, document.segments, document.duration, document.language) == ("", [], 0.0, None)


def test_too_short_audio_gets_the_pcm_error(make, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "short.wav"
    soundfile.write(path, np.full(150, 0.1, dtype=np.float32), 16000)
    with pytest.raises(PcmTooShortError):
        make().transcribe(path)


def test_nonfinite_and_overflowing_samples_get_the_pcm_errors(make, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onespeech.features import NonFiniteSampleError, PcmPowerOverflowError

    pcm = np.full(5 * 16000, 0.1, dtype=np.float32)
    pcm[70000] = np.nan
    path = tmp_path / "nan.wav"
    soundfile.write(path, pcm, 16000, subtype="FLOAT")
    with pytest.raises(NonFiniteSampleError, match="sample 70000 is nan"):
        make().transcribe(path)
    soundfile.write(path, np.full(16000, 3e38, dtype=np.float32), 16000, subtype="FLOAT")
    with pytest.raises(PcmPowerOverflowError):
        make().transcribe(path)


def test_aligner_none_skips_timing_and_never_loads_it(make, clips, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(Qwen3ForcedAligner, "load", classmethod(lambda *a, **k: pytest.fail("aligner loaded")))
    document = make(aligner=None).transcribe(clips["flac"])
    assert document.aligner is None and document.segments
    assert all(s.untimed_reason == "aligner disabled" for s in document.segments)
    assert all(w.start is None and w.timing_method is TimingMethod.NONE for w in document.words)


def test_recognizer_and_aligner_are_never_loaded_together(make, clips, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    live: set[int] = set()
    events = []
    real_rec_load, real_rec_close = Qwen3Recognizer.load.__func__, Qwen3Recognizer.close
    real_al_load, real_al_close = Qwen3ForcedAligner.load.__func__, Qwen3ForcedAligner.close

    def rec_load(cls, *a, **k):  # type: ignore[no-untyped-def]
        obj = real_rec_load(cls, *a, **k)
        live.add(id(obj))
        events.append("recognizer loaded")
        return obj

    def al_load(cls, *a, **k):  # type: ignore[no-untyped-def]
        assert not live, "the recognizer is still loaded"
        events.append("aligner loaded")
        return real_al_load(cls, *a, **k)

    def rec_close(self):  # type: ignore[no-untyped-def]
        live.discard(id(self))
        events.append("recognizer closed")
        real_rec_close(self)

    def al_close(self):  # type: ignore[no-untyped-def]
        events.append("aligner closed")
        real_al_close(self)

    monkeypatch.setattr(Qwen3Recognizer, "load", classmethod(rec_load))
    monkeypatch.setattr(Qwen3Recognizer, "close", rec_close)
    monkeypatch.setattr(Qwen3ForcedAligner, "load", classmethod(al_load))
    monkeypatch.setattr(Qwen3ForcedAligner, "close", al_close)
    make().transcribe(clips["joined"])
    assert events == ["recognizer loaded", "recognizer closed", "aligner loaded", "aligner closed"]


def test_a_file_changed_between_the_passes_is_a_replay_mismatch(make, clips, tmp_path) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "changing.flac"
    path.write_bytes(Path(clips["flac"]).read_bytes())
    replacement = Path(clips["wav16"]).read_bytes()

    def progress(stage: str, done: float, total: float) -> None:
        if stage == "recognize" and done >= total:
            path.write_bytes(replacement)  # another program rewrites the file after recognition

    with pytest.raises(ReplayMismatchError, match="recognition"):
        make(progress=progress).transcribe(path)


@pytest.mark.parametrize("seconds", [5.0, 20.0])
def test_a_file_changed_before_the_speaker_pass_is_a_replay_mismatch(make, clips, tmp_path, seconds) -> None:  # type: ignore[no-untyped-def]
    path = tmp_path / "changing.flac"
    path.write_bytes(Path(clips["flac"]).read_bytes())
    pcm, rate = soundfile.read(clips["flac"], dtype="float32")
    replacement = tmp_path / "replacement.flac"
    soundfile.write(replacement, np.resize(pcm, (int(seconds * rate),) + pcm.shape[1:]), rate)

    def progress(stage: str, done: float, total: float) -> None:
        if stage == "align" and done >= total:
            path.write_bytes(replacement.read_bytes())  # rewritten after timing, before the speaker pass

    with pytest.raises(ReplayMismatchError, match="speaker pass decoded .* samples, recognition 176000"):
        make(progress=progress).transcribe(path)


def test_progress_events(make, clips) -> None:  # type: ignore[no-untyped-def]
    events: list[tuple[str, float, float]] = []
    document = make(progress=lambda *e: events.append(e)).transcribe(clips["joined"])
    stages = [e[0] for e in events]
    assert set(stages) == {"decode", "recognize", "align", "speakers"}
    assert stages.index("align") > max(i for i, s in enumerate(stages) if s == "recognize")
    assert stages.index("speakers") > max(i for i, s in enumerate(stages) if s == "align")
    for stage in ("decode", "recognize", "align", "speakers"):
        done = [d for s, d, _ in events if s == stage]
        assert done == sorted(done)
        assert [(d, t) for s, d, t in events if s == stage][-1] == (document.duration, document.duration)
    assert all(0 <= d <= t for _, d, t in events)


def test_bad_options_fail_before_any_work(runtime_dirs) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValueError, match="max_new_tokens"):
        Transcriber(runtime_dirs.asr, max_new_tokens=0)
    with pytest.raises(ValueError, match="precision"):
        Transcriber(runtime_dirs.asr, precision="fp8")
    with pytest.raises(TypeError, match="progress"):
        Transcriber(runtime_dirs.asr, progress="yes")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cancel"):
        Transcriber(runtime_dirs.asr, cancel=3)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="speakers"):
        Transcriber(runtime_dirs.asr, speakers="many")
