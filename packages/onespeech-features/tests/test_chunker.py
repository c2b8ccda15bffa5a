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


# -- one planner: the file path is a live stream that ends at EOF ------------------------------

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from onespeech.features import LiveChunker, VadOptions  # noqa: E402

_CLIPS = ("jfk.flac", "picovoice_test.wav", "librispeech_test-clean_1995-1837-0001.wav", "picovoice_test_de.wav")


@pytest.fixture(scope="module")
def clip_pool(shared_data: Path) -> list[np.ndarray]:
    return [load_audio(shared_data / "audio" / name) for name in _CLIPS]


@st.composite
def _audio(draw: st.DrawFn, pool: list[np.ndarray]) -> np.ndarray:
    """Up to 4 stretches of real speech (any start, 0.5..12 s) between silences of 0..2 s."""
    pieces = []
    for _ in range(draw(st.integers(1, 4))):
        pieces.append(np.zeros(draw(st.integers(0, 2 * S)), np.float32))
        clip = pool[draw(st.integers(0, len(pool) - 1))]
        length = draw(st.integers(S // 2, min(12 * S, clip.shape[0])))
        start = draw(st.integers(0, clip.shape[0] - length))
        pieces.append(clip[start : start + length] * np.float32(draw(st.sampled_from([0.3, 1.0]))))
    pieces.append(np.zeros(draw(st.integers(0, S)), np.float32))
    return np.concatenate(pieces)


def _feed(chunker, pcm: np.ndarray, blocks: list[int]) -> tuple[list, int]:  # type: ignore[no-untyped-def]
    closed, start, i, held = [], 0, 0, 0
    while start < pcm.shape[0]:
        size = blocks[i % len(blocks)]
        closed += chunker.feed(pcm[start : start + size])
        held = max(held, chunker.buffered_samples)
        start, i = start + size, i + 1
    closed += chunker.finish()
    for c in closed:
        assert np.array_equal(c.pcm, pcm[c.chunk.start : c.chunk.end])
    return [(c.chunk.start, c.chunk.end) for c in closed], held


def _runs(file_chunks: list[tuple[int, int]], live_chunks: list[tuple[int, int]]) -> bool:
    """Every file chunk is a run of consecutive live chunks, and every live chunk is in one."""
    i = 0
    for start, end in file_chunks:
        if i >= len(live_chunks) or live_chunks[i][0] != start:
            return False
        while i < len(live_chunks) and live_chunks[i][1] <= end:
            i += 1
        if live_chunks[i - 1][1] != end:
            return False
    return i == len(live_chunks)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                 HealthCheck.too_slow, HealthCheck.data_too_large])
@given(data=st.data(), max_seconds=st.integers(2, 8), min_silence_ms=st.sampled_from([100, 400, 1500, 4000]),
       blocks=st.lists(st.integers(160, 40000), min_size=1, max_size=4))
def test_file_and_live_chunks_are_one_plan_for_any_blocks(  # type: ignore[no-untyped-def]
    vad: SileroVad, clip_pool: list[np.ndarray], data, max_seconds: int, min_silence_ms: int, blocks: list[int]
) -> None:
    pcm = data.draw(_audio(clip_pool))
    options, bound = VadOptions(min_silence_duration_ms=min_silence_ms), max_seconds * S
    regions = vad.speech_regions(pcm, options)
    # the same blocks into both chunkers, and the one planner over the whole audio
    file_chunks, file_held = _feed(AudioChunker(vad, options, bound), pcm, blocks)
    live_chunks, live_held = _feed(LiveChunker(vad, options, bound), pcm, blocks)
    whole = [(c.start, c.end) for c in plan_chunks(regions, pcm.shape[0], pcm, bound)]
    pieces = [(c.start, c.end) for c in plan_chunks(regions, pcm.shape[0], pcm, bound, group=False)]
    if pcm.shape[0] <= bound:
        assert file_chunks == [(0, pcm.shape[0])]  # the spec: audio up to the bound is one chunk
    else:
        assert file_chunks == [c for c in whole if c[1] - c[0] > 200]
        assert _runs(file_chunks, live_chunks)  # the same boundaries, grouped
    assert live_chunks == [c for c in pieces if c[1] - c[0] > 200]
    assert all(end - start <= bound for start, end in file_chunks + live_chunks)
    # memory, however long a region runs (the file path held a whole unbroken region before): live, the
    # region in progress up to its next certain cut (bound + 1 s, its silence so far) and a block; the file
    # path, one open chunk more
    tail = S + min_silence_ms * 16 + 2 * max(blocks) + S  # the last S: padding and the VAD's window lag
    assert live_held <= bound + tail
    assert file_held <= 2 * bound + tail


@pytest.mark.parametrize("bound_seconds", [5, 10])
def test_unbroken_speech_is_cut_while_it_runs_on_the_file_path(
    vad: SileroVad, long_pcm: np.ndarray, bound_seconds: int
) -> None:
    # pauses of up to 5 s do not end a region: the whole input is one region of speech. The file path
    # used to hold it whole until it closed; it is now cut in progress, exactly where the plan cuts it
    options, bound = VadOptions(min_silence_duration_ms=5000), bound_seconds * S
    regions = vad.speech_regions(long_pcm, options)
    assert max(r.n_samples for r in regions) > 3 * bound
    closed, held = _feed(AudioChunker(vad, options, bound), long_pcm, [4096])
    assert closed == [(c.start, c.end) for c in plan_chunks(regions, long_pcm.shape[0], long_pcm, bound)]
    assert held <= 2 * bound + 8 * S < long_pcm.shape[0] // 2
