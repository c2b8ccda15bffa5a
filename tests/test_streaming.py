"""Streaming sessions: every final is the file path's recognition of the same samples."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import soxr

from onespeech.features import LiveChunker, SileroVad, VadOptions, load_audio, plan_chunks
from onespeech.features.errors import PcmShapeError
from onespeech.kernels.errors import ObjectClosedError
from onespeech.qwen3 import TimingMethod, UnsupportedLanguageError
from onespeech.speech.chunk import recognize_chunk, untimed_reason
from onespeech.speech.streaming import LiveSession, stream_file
from onespeech.speech.transcribe import TIMING_DISABLED, transcribe

# a short token budget keeps the tests fast; a final that reaches it says so in `finish`,
# exactly as the file path's per-chunk recognition does
BUDGET = 12


@pytest.fixture(scope="module")
def session(runtime_dirs, vad_path: Path):  # type: ignore[no-untyped-def]
    with LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path, threads=1, max_new_tokens=BUDGET) as live:
        yield live


@pytest.fixture(scope="module")
def joined_pcm(clips: dict[str, Path]) -> np.ndarray:
    return load_audio(clips["joined"])


def _run(session: LiveSession, pcm: np.ndarray, block: int, rate: int = 16000) -> list:
    session.reset()
    finals = []
    for start in range(0, pcm.shape[0], block):
        finals += session.push(pcm[start : start + block], rate)
    return finals + session.finish()


def test_each_final_is_the_offline_recognition_of_its_chunk(session: LiveSession, joined_pcm: np.ndarray) -> None:
    finals = _run(session, joined_pcm, 3001)
    assert len(finals) >= 5  # one per phrase region of the five clips
    for final in finals:
        start, end = round(final.start * 16000), round(final.end * 16000)
        assert final.end - final.start <= 30.0
        offline = recognize_chunk(session.recognizer, joined_pcm[start:end], start, end, language=None)
        assert final == replace(offline, untimed_reason=TIMING_DISABLED)  # as transcribe(..., aligner=None) says
    # finals are in order and never overlap
    assert all(a.end <= b.start for a, b in zip(finals, finals[1:], strict=False))


def test_finals_do_not_depend_on_the_block_size(session: LiveSession, clips: dict[str, Path]) -> None:
    pcm = load_audio(clips["flac"])
    whole = _run(session, pcm, pcm.shape[0])
    assert whole and _run(session, pcm, 160) == whole == _run(session, pcm, 7919)


def test_a_final_comes_with_the_block_that_closes_its_region(session: LiveSession, joined_pcm: np.ndarray) -> None:
    # one pass: the first phrase's final arrives long before the end of the audio
    session.reset()
    for start in range(0, joined_pcm.shape[0], 1600):
        finals = session.push(joined_pcm[start : start + 1600])
        if finals:
            assert finals[0].end <= (start + 1600) / 16000
            assert start + 1600 < joined_pcm.shape[0] / 2
            break
    else:
        pytest.fail("no final before the end of the audio")


def test_other_rates_go_through_the_streaming_resampler(session: LiveSession, clips: dict[str, Path]) -> None:
    pcm = load_audio(clips["flac"])
    at_22k = soxr.resample(pcm, 16000, 22050, quality="HQ").astype(np.float32)
    # soxr's stream gives a one-shot resample's samples, so pushing 22.05 kHz blocks equals
    # pushing the one-shot 16 kHz version
    want = _run(session, soxr.resample(at_22k, 22050, 16000, quality="HQ").astype(np.float32), 4000)
    assert want and _run(session, at_22k, 4410, rate=22050) == want


def test_int16_blocks_are_scaled(session: LiveSession, clips: dict[str, Path]) -> None:
    pcm = load_audio(clips["flac"])
    as_int16 = np.round(pcm * 32767).astype(np.int16)
    assert _run(session, as_int16, 3200) == _run(session, as_int16.astype(np.float32) / 32768, 3200)


@pytest.fixture(scope="module")
def timed_offline(runtime_dirs, vad_path: Path, clips: dict[str, Path]):  # type: ignore[no-untyped-def]
    """``transcribe``'s document of the joined clip (several chunks) with word timings."""
    # a forced language: the random model names none, and a timing stage needs one
    document = transcribe(clips["joined"], runtime_dirs.asr, language="en", aligner=runtime_dirs.aligner, vad=vad_path,
                          threads=1, progress=False, speakers=False)
    assert len(document.segments) >= 3
    assert all(s.timing_method is TimingMethod.FORCED_ALIGNER for s in document.segments)
    assert sum(w.start is not None for w in document.words) >= 10  # the aligner really timed words
    return document


def test_live_finals_with_an_aligner_are_transcribes_timed_segments(  # type: ignore[no-untyped-def]
    runtime_dirs, vad_path: Path, joined_pcm: np.ndarray, timed_offline
) -> None:
    with LiveSession(runtime_dirs.asr, language="en", aligner=runtime_dirs.aligner, vad=vad_path, threads=1,
                     chunking="file") as live:
        assert live.dispatcher is not None and live.dispatcher.stages[0].loaded  # held from the start: one pass
        finals = _run(live, joined_pcm, 4999)  # odd-sized blocks
    # text, language, word texts AND word times, timing: exactly the file path's, segment by segment
    assert finals == timed_offline.segments


def test_stream_file_gives_transcribes_segments(runtime_dirs, vad_path: Path, clips: dict[str, Path],  # type: ignore[no-untyped-def]
                                                timed_offline) -> None:
    streamed = list(stream_file(clips["joined"], runtime_dirs.asr, language="en", aligner=runtime_dirs.aligner,
                                vad=vad_path, threads=1))
    assert streamed == timed_offline.segments
    untimed = list(stream_file(clips["joined"], runtime_dirs.asr, language="en", aligner=None, vad=vad_path,
                               threads=1))
    assert untimed == [replace(s, words=[replace(w, start=None, end=None, confidence=None, timing_method=TimingMethod.NONE)
                                         for w in s.words], timing_method=TimingMethod.NONE,
                                 untimed_reason=TIMING_DISABLED) for s in timed_offline.segments]


@pytest.mark.parametrize("language", ["nl", None])
def test_untimable_finals_keep_the_offline_reason(  # type: ignore[no-untyped-def]
    runtime_dirs, vad_path: Path, clips: dict[str, Path], language: str | None
) -> None:
    # "nl": Qwen3-ASR recognizes Dutch, no timing stage times it, so the aligner is never loaded;
    # None: the aligner is loaded (any language may come), but the random model identifies none
    options = {"language": language, "aligner": runtime_dirs.aligner, "vad": vad_path, "threads": 1}
    with LiveSession(runtime_dirs.asr, chunking="file", **options) as live:
        assert live.dispatcher is not None and live.dispatcher.stages[0].loaded == (language is None)
        finals = _run(live, load_audio(clips["flac"]), 7001)
    document = transcribe(clips["flac"], runtime_dirs.asr, progress=False, speakers=False, **options)
    assert finals == document.segments
    assert finals and all(s.untimed_reason == untimed_reason(s.language) for s in finals)
    assert all(w.start is None for s in finals for w in s.words)


def test_long_unbroken_speech_is_cut_as_the_planner_cuts_it(joined_pcm: np.ndarray, vad_path: Path) -> None:
    # pauses of up to 5 s do not end a region: the speech becomes one region over 30 s
    options = VadOptions(min_silence_duration_ms=5000)
    vad = SileroVad.load(vad_path)
    want = []
    for region in vad.speech_regions(joined_pcm, options):
        want += [(c.start, c.end) for c in plan_chunks([region], joined_pcm.shape[0], pcm=joined_pcm)]
    assert any(end - start > 20 * 16000 for start, end in want)
    chunker, got, held = LiveChunker(vad, options), [], []
    for start in range(0, joined_pcm.shape[0], 4096):
        got += [(c.chunk.start, c.chunk.end) for c in chunker.feed(joined_pcm[start : start + 4096])]
        held.append(chunker.buffered_samples)
    got += [(c.chunk.start, c.chunk.end) for c in chunker.finish()]
    assert got == [(s, e) for s, e in want if e - s > 200]
    assert max(held) <= 31 * 16000 + 4096  # bounded memory: at most one open region of 31 s


def test_session_errors_say_what_is_wrong(session: LiveSession, runtime_dirs, vad_path: Path) -> None:  # type: ignore[no-untyped-def]
    session.reset()
    with pytest.raises(PcmShapeError, match="1-D"):
        session.push(np.zeros((10, 2), dtype=np.float32))
    session.reset()
    session.push(np.zeros(100, dtype=np.float32), 16000)
    with pytest.raises(ValueError, match="one session has one input rate"):
        session.push(np.zeros(100, dtype=np.float32), 8000)
    with pytest.raises(UnsupportedLanguageError):
        LiveSession(runtime_dirs.asr, language="tlh", vad=vad_path)
    with pytest.raises(FileNotFoundError):
        LiveSession(runtime_dirs.asr, aligner=runtime_dirs.asr.parent / "no-such-aligner", vad=vad_path)
    closed = LiveSession(runtime_dirs.asr, aligner=None, vad=vad_path)
    closed.close()
    with pytest.raises(ObjectClosedError):
        closed.push(np.zeros(10, dtype=np.float32))


def test_a_cancelled_push_loses_no_final_and_repeats_none(session: LiveSession, joined_pcm: np.ndarray,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    from onespeech.qwen3.errors import RecognitionCancelled
    from onespeech.speech import streaming

    want = _run(session, joined_pcm, joined_pcm.shape[0])
    assert len(want) >= 3
    real, calls = streaming.chunk_final, []

    def cancelled_once(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:  # the second chunk's recognition is cancelled
            raise RecognitionCancelled("cancelled")
        return real(*args, **kwargs)

    monkeypatch.setattr(streaming, "chunk_final", cancelled_once)
    session.reset()
    with pytest.raises(RecognitionCancelled):
        session.push(joined_pcm)  # the block is taken; its chunks wait for the next call
    assert session.samples_heard == joined_pcm.shape[0]
    # before: the first final and the cancelled chunk were gone
    assert session.finish() == want
