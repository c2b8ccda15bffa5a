import numpy as np
import pytest

from onespeech.features import SileroVad, SpeechRegion, SpeechSegmenter, VadOptions


def _silero_batch(probs: list[float], n_samples: int, options: VadOptions) -> list[tuple[int, int]]:
    """silero-vad's get_speech_timestamps rules over a whole probability list (no max length)."""
    window, pad = 512, options.speech_pad_ms * 16
    min_speech, min_silence = options.min_speech_duration_ms * 16, options.min_silence_duration_ms * 16
    threshold, neg = options.threshold, options.exit_threshold
    triggered, temp_end, speeches, current = False, 0, [], {}
    for i, p in enumerate(probs):
        if p >= threshold and temp_end:
            temp_end = 0
        if p >= threshold and not triggered:
            triggered = True
            current["start"] = window * i
            continue
        if p < neg and triggered:
            if not temp_end:
                temp_end = window * i
            if window * i - temp_end < min_silence:
                continue
            current["end"] = temp_end
            if current["end"] - current["start"] > min_speech:
                speeches.append(current)
            current, temp_end, triggered = {}, 0, False
    if current and n_samples - current["start"] > min_speech:
        current["end"] = n_samples
        speeches.append(current)
    for i, speech in enumerate(speeches):
        if i == 0:
            speech["start"] = int(max(0, speech["start"] - pad))
        if i != len(speeches) - 1:
            silence = speeches[i + 1]["start"] - speech["end"]
            if silence < 2 * pad:
                speech["end"] += int(silence // 2)
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - silence // 2))
            else:
                speech["end"] = int(min(n_samples, speech["end"] + pad))
                speeches[i + 1]["start"] = int(max(0, speeches[i + 1]["start"] - pad))
        else:
            speech["end"] = int(min(n_samples, speech["end"] + pad))
    return [(s["start"], s["end"]) for s in speeches]


def _segment(probs, n_samples, options=None, block=None):  # type: ignore[no-untyped-def]
    segmenter = SpeechSegmenter(options)
    regions = []
    step = block or max(1, len(probs))
    for i in range(0, len(probs), step):
        regions += segmenter.feed(probs[i : i + step])
    regions += segmenter.finish(n_samples)
    return [(r.start, r.end) for r in regions]


def test_one_region_is_padded_by_30_ms() -> None:
    probs = [0.0] * 10 + [0.9] * 20 + [0.0] * 20
    # speech windows 10..29 -> samples 5120..15360, padded by 480
    assert _segment(probs, 50 * 512) == [(5120 - 480, 15360 + 480)]


def test_short_silence_does_not_split() -> None:
    # 3 silent windows (1536 samples) < 100 ms (1600 samples): one region
    probs = [0.9] * 20 + [0.1] * 3 + [0.9] * 20 + [0.0] * 10
    assert _segment(probs, 53 * 512) == [(0, 43 * 512 + 480)]


def test_close_regions_meet_halfway() -> None:
    opts = VadOptions(speech_pad_ms=100)  # 1600 samples of padding
    probs = [0.0] * 5 + [0.9] * 20 + [0.0] * 5 + [0.9] * 20 + [0.0] * 10
    # raw regions (2560, 12800) and (15360, 25600): gap 2560 < 2 * 1600, so each gets 1280
    assert _segment(probs, 60 * 512, opts) == [(2560 - 1600, 12800 + 1280), (15360 - 1280, 25600 + 1600)]


def test_short_speech_is_dropped() -> None:
    # 7 windows = 3584 samples <= 250 ms (4000 samples)
    assert _segment([0.0] * 5 + [0.9] * 7 + [0.0] * 10, 22 * 512) == []


def test_speech_open_at_the_end_runs_to_the_last_sample() -> None:
    probs = [0.0] * 5 + [0.9] * 20
    assert _segment(probs, 25 * 512 - 100) == [(2560 - 480, 25 * 512 - 100)]


def test_hysteresis_uses_the_exit_threshold() -> None:
    # 0.4 is below the threshold but above threshold - 0.15: speech continues
    probs = [0.9] * 10 + [0.4] * 10 + [0.9] * 10 + [0.0] * 10
    assert _segment(probs, 40 * 512) == [(0, 30 * 512 + 480)]


@pytest.mark.parametrize("seed", range(40))
def test_incremental_segmenter_equals_silero_rules_for_any_blocks(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 600))
    # runs of speech-like and silence-like probabilities
    probs = np.repeat(rng.uniform(0, 1, n // 5 + 1), rng.integers(1, 12, n // 5 + 1))[:n].tolist()
    n_samples = 512 * len(probs) - int(rng.integers(0, 512))
    options = VadOptions(
        threshold=float(rng.uniform(0.2, 0.8)),
        min_speech_duration_ms=int(rng.choice([0, 100, 250])),
        min_silence_duration_ms=int(rng.choice([0, 50, 100, 500])),
        speech_pad_ms=int(rng.choice([0, 30, 200, 400])),
    )
    want = _silero_batch(probs, n_samples, options)
    for block in (None, 1, 2, 7, 64):
        assert _segment(probs, n_samples, options, block) == want


def test_regions_on_speech_are_the_same_whole_or_streamed(shared_data, tmp_path) -> None:  # type: ignore[no-untyped-def]
    from onespeech.features import load_audio

    vad = SileroVad.load(shared_data / "models" / "silero_vad.onnx", cache_dir=tmp_path)
    pcm = load_audio(shared_data / "audio" / "jfk.flac")
    whole = vad.speech_regions(pcm)
    assert len(whole) == 4 and all(isinstance(r, SpeechRegion) for r in whole)
    # the four phrases of the clip
    assert [round(r.start_s, 1) for r in whole] == [0.3, 3.3, 5.4, 8.2]
    stream, segmenter, regions = vad.stream(), SpeechSegmenter(), []
    for start in range(0, pcm.shape[0], 3001):
        regions += segmenter.feed(stream.feed(pcm[start : start + 3001]))
    regions += segmenter.feed(stream.finish()) + segmenter.finish(pcm.shape[0])
    assert regions == whole


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"threshold": 0.0}, "threshold"),
        ({"threshold": 1.0}, "threshold"),
        ({"neg_threshold": 0.7}, "neg_threshold"),
        ({"min_speech_duration_ms": -1}, "min_speech_duration_ms"),
        ({"speech_pad_ms": 1.5}, "speech_pad_ms"),
    ],
)
def test_invalid_options_are_refused(kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        VadOptions(**kwargs)


def test_default_exit_threshold() -> None:
    assert VadOptions().exit_threshold == pytest.approx(0.35)
    assert VadOptions(threshold=0.1).exit_threshold == 0.01


@pytest.mark.parametrize("seed", range(20))
def test_horizon_is_never_after_a_later_region_start(seed: int) -> None:
    rng = np.random.default_rng(1000 + seed)
    n = int(rng.integers(1, 600))
    probs = np.repeat(rng.uniform(0, 1, n // 5 + 1), rng.integers(1, 12, n // 5 + 1))[:n]
    options = VadOptions(min_silence_duration_ms=int(rng.choice([0, 100, 500])),
                         speech_pad_ms=int(rng.choice([0, 30, 400])))
    segmenter = SpeechSegmenter(options)
    horizons, regions = [], []
    for k in range(0, n, 3):
        regions.extend(segmenter.feed(probs[k : k + 3]))
        horizons.append((len(regions), segmenter.horizon))
    regions.extend(segmenter.finish(512 * n))
    for released, horizon in horizons:
        # every region returned after this point starts at or after the horizon
        assert all(r.start >= horizon for r in regions[released:])
    assert [h for _, h in horizons] == sorted(h for _, h in horizons)  # it never moves back


@pytest.mark.parametrize("seed", range(30))
def test_the_open_region_is_the_next_region_once_certain(seed: int) -> None:
    # what the chunkers cut a long region in progress from: its start is the start the region gets,
    # its end comes at or after min_end, and every earlier region has been returned
    rng = np.random.default_rng(2000 + seed)
    n = int(rng.integers(1, 600))
    probs = np.repeat(rng.uniform(0, 1, n // 5 + 1), rng.integers(1, 12, n // 5 + 1))[:n]
    options = VadOptions(min_speech_duration_ms=int(rng.choice([0, 100, 250])),
                         min_silence_duration_ms=int(rng.choice([0, 100, 500])),
                         speech_pad_ms=int(rng.choice([0, 30, 400])))
    step = int(rng.choice([1, 3, 16]))
    segmenter = SpeechSegmenter(options)
    seen, regions = [], []
    for k in range(0, n, step):
        regions.extend(segmenter.feed(probs[k : k + step]))
        open_region = segmenter.open_region()
        if open_region is not None:
            assert open_region[1] <= 512 * min(k + step, n)  # never past the windows scored
            seen.append((len(regions), *open_region))
    regions.extend(segmenter.finish(512 * n))
    assert [(r.start, r.end) for r in regions] == _segment(probs.tolist(), 512 * n, options)  # released early, same
    for released, start, min_end in seen:
        following = regions[released]  # the next region returned is the open one
        assert following.start == start and following.end >= min_end
