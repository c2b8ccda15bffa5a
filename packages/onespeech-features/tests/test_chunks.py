import numpy as np
import pytest

from onespeech.features import MAX_CHUNK_SAMPLES, Chunk, SpeechRegion, plan_chunks

S = 16000  # samples per second


def _regions(*pairs_s: tuple[float, float]) -> list[SpeechRegion]:
    return [SpeechRegion(int(a * S), int(b * S)) for a, b in pairs_s]


def test_no_speech_gives_no_chunks() -> None:
    assert plan_chunks([], 10 * S) == []


def test_short_audio_is_one_chunk_from_first_to_last_speech() -> None:
    chunks = plan_chunks(_regions((1, 3), (4, 9), (12, 20)), 25 * S)
    assert chunks == [Chunk(1 * S, 20 * S)]


def test_regions_are_grouped_greedily_and_cut_inside_silences() -> None:
    regions = _regions((0, 10), (11, 21), (22, 29.5), (31, 41), (42, 52), (53, 70))
    chunks = plan_chunks(regions, 70 * S)
    assert chunks == [Chunk(0, int(29.5 * S)), Chunk(31 * S, 52 * S), Chunk(53 * S, 70 * S)]
    speech_edges = {r.start for r in regions} | {r.end for r in regions}
    for chunk in chunks:
        assert chunk.n_samples <= MAX_CHUNK_SAMPLES
        assert chunk.start in speech_edges and chunk.end in speech_edges


def test_exactly_30_seconds_is_one_chunk() -> None:
    assert plan_chunks(_regions((2, 32)), 40 * S) == [Chunk(2 * S, 32 * S)]


def test_long_unbroken_speech_is_split_at_its_quietest_point() -> None:
    rng = np.random.default_rng(0)
    pcm = (0.3 * rng.standard_normal(80 * S)).astype(np.float32)
    quiet = int(27.25 * S)
    pcm[quiet - 800 : quiet + 800] *= 0.01  # a 100 ms dip at 27.25 s
    chunks = plan_chunks(_regions((0, 80)), 80 * S, pcm=pcm)
    assert chunks[0] == Chunk(0, quiet)
    assert all(c.n_samples <= MAX_CHUNK_SAMPLES for c in chunks)
    assert [c.start for c in chunks[1:]] == [c.end for c in chunks[:-1]]  # contiguous pieces
    assert chunks[-1].end == 80 * S


def test_long_speech_without_pcm_is_split_evenly() -> None:
    chunks = plan_chunks(_regions((0, 70)), 70 * S)
    assert [c.n_samples for c in chunks] == [373333, 373333, 373334]


def test_split_never_leaves_a_tiny_remainder() -> None:
    pcm = np.ones(31 * S, dtype=np.float32)
    pcm[-10:] = 0.0  # the quietest place is at the very end, but the rest must keep 1 s
    chunks = plan_chunks(_regions((0, 31)), 31 * S, pcm=pcm)
    assert len(chunks) == 2 and chunks[1].n_samples >= S and chunks[0].n_samples <= MAX_CHUNK_SAMPLES


@pytest.mark.parametrize("seed", range(20))
def test_random_plans_respect_the_bound_and_cover_all_speech(seed: int) -> None:
    rng = np.random.default_rng(seed)
    edges = np.sort(rng.choice(np.arange(0, 300 * S, 160), size=2 * int(rng.integers(1, 30)), replace=False))
    regions = [SpeechRegion(int(a), int(b)) for a, b in edges.reshape(-1, 2)]
    pcm = rng.standard_normal(300 * S).astype(np.float32)
    chunks = plan_chunks(regions, 300 * S, pcm=pcm)
    assert all(0 < c.n_samples <= MAX_CHUNK_SAMPLES for c in chunks)
    assert all(a.end <= b.start for a, b in zip(chunks[:-1], chunks[1:], strict=True))
    for region in regions:  # every speech sample is inside a chunk
        covered = sum(max(0, min(c.end, region.end) - max(c.start, region.start)) for c in chunks)
        assert covered == region.n_samples
    assert plan_chunks(regions, 300 * S, pcm=pcm) == chunks  # deterministic


def test_invalid_regions_are_refused() -> None:
    with pytest.raises(ValueError, match="before the previous region ends"):
        plan_chunks(_regions((0, 5), (4, 8)), 10 * S)
    with pytest.raises(ValueError, match="outside"):
        plan_chunks(_regions((5, 12)), 10 * S)
    with pytest.raises(ValueError, match="empty"):
        plan_chunks([SpeechRegion(5, 5)], 10 * S)
    with pytest.raises(ValueError, match="pcm has shape"):
        plan_chunks(_regions((0, 5)), 10 * S, pcm=np.zeros(5, dtype=np.float32))
    with pytest.raises(ValueError, match="max_samples"):
        plan_chunks(_regions((0, 5)), 10 * S, max_samples=1000)


def _random_plan_input(seed: int) -> tuple[list[SpeechRegion], np.ndarray]:
    """Regions with gaps and some unbroken stretches longer than 30 s, over noise with dips."""
    rng = np.random.default_rng(seed)
    regions, position = [], int(rng.integers(0, 3 * S))
    for _ in range(int(rng.integers(3, 12))):
        length = int(rng.choice([rng.integers(S // 4, 8 * S), rng.integers(31 * S, 75 * S)], p=[0.8, 0.2]))
        regions.append(SpeechRegion(position, position + length))
        position += length + int(rng.integers(1, 4 * S))
    pcm = (0.2 * rng.standard_normal(position)).astype(np.float32)
    for dip in rng.integers(0, position, size=20):
        pcm[max(0, dip - 800) : dip + 800] *= 0.01
    return regions, pcm


@pytest.mark.parametrize("seed", range(8))
def test_chunk_planner_streamed_equals_plan_chunks(seed: int) -> None:
    from onespeech.features import ChunkPlanner

    regions, pcm = _random_plan_input(seed)
    expected = plan_chunks(regions, pcm.shape[0], pcm=pcm)
    planner, got = ChunkPlanner(), []
    for region in regions:
        # the planner only sees audio from the open chunk (or this region) on
        keep = region.start if planner.open_start is None else planner.open_start
        got.extend(planner.add(region, pcm[keep:], pcm_offset=keep))
        assert all(c.end <= region.end for c in got)
    got.extend(planner.finish())
    assert got == expected
    assert planner.finish() == []


def test_chunk_planner_refuses_unsorted_regions() -> None:
    from onespeech.features import ChunkPlanner

    planner = ChunkPlanner()
    planner.add(SpeechRegion(5 * S, 6 * S))
    with pytest.raises(ValueError, match="before the previous region ends"):
        planner.add(SpeechRegion(4 * S, 7 * S))
