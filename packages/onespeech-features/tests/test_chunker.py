from pathlib import Path

import numpy as np
import pytest

from onespeech.features import AudioChunker, SileroVad, load_audio, plan_chunks

S = 16000


@pytest.fixture(scope="module")
def vad(shared_data: Path) -> SileroVad:
    return SileroVad.load(shared_data / "models" / "silero_vad.onnx")


@pytest.fixture(scope="module")
def long_pcm(shared_data: Path) -> np.ndarray:
    audio = shared_data / "audio"
    pieces = []
    for name in ("jfk.flac", "picovoice_test.wav", "librispeech_test-clean_1995-1837-0001.wav", "jfk.flac",
                 "picovoice_test_de.wav", "jfk.flac", "jfk.flac"):
        pieces += [load_audio(audio / name), np.zeros(2 * S, dtype=np.float32)]
    return np.concatenate(pieces)


def _run(chunker: AudioChunker, pcm: np.ndarray, block: int) -> tuple[list, int]:
    closed, kept = [], 0
    for i in range(0, pcm.shape[0], block):
        closed += chunker.feed(pcm[i : i + block])
        kept = max(kept, chunker.buffered_samples)
    return closed + chunker.finish(), kept


@pytest.mark.parametrize("block", [4000, 65536, 300_000])
def test_streamed_chunks_are_the_whole_file_plan(vad: SileroVad, long_pcm: np.ndarray, block: int) -> None:
    expected = plan_chunks(vad.speech_regions(long_pcm), long_pcm.shape[0], pcm=long_pcm)
    closed, kept = _run(AudioChunker(vad), long_pcm, block)
    assert [c.chunk for c in closed] == expected
    assert len(expected) >= 3
    for c in closed:
        assert np.array_equal(c.pcm, long_pcm[c.chunk.start : c.chunk.end])
    # only what a later chunk can need is kept: about one chunk, never the whole file
    assert kept <= 30 * S + 2 * block + 4 * S < long_pcm.shape[0]


def test_30_seconds_or_less_is_one_chunk_without_the_vad(long_pcm: np.ndarray) -> None:
    def no_vad() -> SileroVad:
        raise AssertionError("the VAD is not needed for 30 s or less")

    pcm = long_pcm[: 30 * S]
    closed, _ = _run(AudioChunker(no_vad), pcm, 7000)
    assert [(c.chunk.start, c.chunk.end) for c in closed] == [(0, 30 * S)]
    assert np.array_equal(closed[0].pcm, pcm)
    assert AudioChunker(no_vad).finish() == []
