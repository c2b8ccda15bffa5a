"""The speaker stage with the real encoder and VAD on clips joined into a conversation."""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from onespeech.features import SpeechRegionStream
from onespeech.features.resemblyzer_convert import convert_resemblyzer
from onespeech.features.speaker_encoder import BATCH, HOP, SpeakerEncoder, partial_slices
from onespeech.features.speaker_mel import mel_frames, normalize_volume
from onespeech.kernels.errors import OperationCancelledError
from onespeech.speech.speakers.diarize import Diarizer, turns_from_partials
from onespeech.speech.speakers.segmentation import RegionPartials

SR = 16000


@pytest.fixture(scope="module")
def diarizer(shared_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Diarizer:
    from onespeech.features import SileroVad

    tmp = tmp_path_factory.mktemp("diarize")
    encoder = SpeakerEncoder.load(
        convert_resemblyzer(shared_data / "models" / "resemblyzer_pretrained.pt", tmp / "enc.tensors"),
        threads=1,
    )
    return Diarizer(encoder, SileroVad.load(shared_data / "models" / "silero_vad.onnx", cache_dir=tmp))


@pytest.fixture(scope="module")
def conversation(shared_data: Path) -> tuple[np.ndarray, list[float]]:
    from onespeech.features import load_audio

    a = load_audio(shared_data / "audio" / "librispeech_test-clean_1995-1837-0001.wav")
    b = load_audio(shared_data / "audio" / "picovoice_test_fr.wav")
    pause = np.zeros(SR // 2, np.float32)
    pcm = np.concatenate([a, pause, b, pause, a[: 5 * SR]])
    return pcm, [a.size / SR, (a.size + pause.size + b.size) / SR]


@pytest.mark.parametrize("speakers", ["auto", 2])
def test_two_speakers_and_their_changes(diarizer: Diarizer, conversation: tuple, speakers: object) -> None:
    pcm, changes = conversation
    turns = diarizer(pcm, speakers)
    assert all(t.start < t.end for t in turns)
    assert all(x.end <= y.start for x, y in pairwise(turns))
    runs = []  # (speaker, first start, last end) of consecutive turns of one speaker
    for t in turns:
        if runs and runs[-1][0] == t.speaker:
            runs[-1][2] = t.end
        else:
            runs.append([t.speaker, t.start, t.end])
    assert [r[0] for r in runs] == ["SPEAKER_00", "SPEAKER_01", "SPEAKER_00"]
    # each turn lies in one clip's span (give or take the VAD's padding) and has that clip's speaker
    spans = [
        (0.0, changes[0], "SPEAKER_00"),
        (changes[0], changes[1], "SPEAKER_01"),
        (changes[1], 1e9, "SPEAKER_00"),
    ]
    for t in turns:
        owner = [who for a, b, who in spans if a - 0.1 <= t.start and t.end <= b + 0.1]
        assert owner == [t.speaker], (t, changes)


def test_one_speaker(diarizer: Diarizer, conversation: tuple) -> None:
    pcm, changes = conversation
    turns = diarizer(pcm[: int(changes[0] * SR)], "auto")
    assert {t.speaker for t in turns} == {"SPEAKER_00"}


def test_progress_and_cancel(diarizer: Diarizer, conversation: tuple) -> None:
    pcm, _ = conversation
    seen = []
    diarizer(pcm, 2, progress=lambda stage, done, total: seen.append((stage, done, total)))
    # the one progress protocol: (stage, done seconds, total seconds), as transcribe and diarize report
    assert seen and {stage for stage, _, _ in seen} == {"speakers"}
    assert seen[-1][1] == seen[-1][2] == pcm.shape[0] / SR
    assert all(a <= b for (_, a, _), (_, b, _) in pairwise(seen))
    with pytest.raises(TypeError, match="progress="):
        diarizer(pcm, 2, progress="yes")  # type: ignore[arg-type]
    stop = threading.Event()
    stop.set()
    with pytest.raises(OperationCancelledError):
        diarizer(pcm, 2, cancel=stop)
    with pytest.raises(TypeError, match="not a cancellation signal"):
        diarizer(pcm, 2, cancel="no")


def test_silence_has_no_turns(diarizer: Diarizer) -> None:
    assert diarizer(np.zeros(3 * SR, np.float32), "auto") == []


# -- the streamed stage against the whole-array stage it replaced -------------------------------------


def _whole_array_partials(diarizer: Diarizer, pcm: np.ndarray) -> list[RegionPartials]:
    """The stage before it streamed: VAD regions of the whole array, then every region's
    partials from slices of that array, batched across regions (flushed at >= BATCH queued)."""
    regions = diarizer.regions(pcm)
    plans = [partial_slices(end - start, rate=diarizer.options.partial_rate) for start, end in regions]
    out = np.empty((sum(map(len, plans)), 256), dtype=np.float32)
    pending: list[np.ndarray] = []
    filled = queued = 0
    for (start, end), slices in zip(regions, plans, strict=True):
        wav = normalize_volume(pcm[start:end])
        wav = np.pad(wav, (0, max(0, slices[-1][1] * HOP - wav.shape[0])))
        mel = mel_frames(wav)
        pending.append(np.stack([mel[a:b] for a, b in slices]))
        queued += len(slices)
        if queued >= BATCH or (start, end) == regions[-1]:
            batch = diarizer.encoder.embed_partials(np.concatenate(pending))
            out[filled : filled + batch.shape[0]] = batch
            filled += batch.shape[0]
            pending.clear()
            queued = 0
    result, k = [], 0
    for (start, end), slices in zip(regions, plans, strict=True):
        frames = np.array(slices, dtype=np.int64)
        m = len(slices)
        result.append(RegionPartials(start, end, start + frames[:, 0] * HOP, start + frames[:, 1] * HOP, out[k : k + m]))
        k += m
    return result


@pytest.fixture(scope="module")
def long_conversation(shared_data: Path, diarizer: Diarizer) -> np.ndarray:
    """A four-speaker conversation of the evaluation's kind, with 20 turns (2.5 min: two encoder batches)."""
    from onespeech.features import load_audio
    from onespeech_tools.conversations import CLIPS, ConversationSpec, build_conversation, prepare_clip

    def vad(pcm: np.ndarray) -> list[tuple[int, int]]:
        return [(r.start, r.end) for r in diarizer.vad.speech_regions(pcm) if r.end > r.start]

    spec = ConversationSpec("four_mixed", ("fr", "es", "it", "aishell0764"), 20, ("pause", "none", "overlap"))
    clips = {name: prepare_clip(load_audio(shared_data / "audio" / CLIPS[name]), vad) for name in spec.speakers}
    return build_conversation(clips, vad, spec, 0).pcm


def test_streamed_stage_equals_the_whole_array_stage(diarizer: Diarizer, long_conversation: np.ndarray) -> None:
    pcm = long_conversation
    reference = _whole_array_partials(diarizer, pcm)
    assert len(reference) > 10 and sum(r.embeddings.shape[0] for r in reference) > BATCH  # a batch spans regions
    streamed = diarizer.embed(pcm[k : k + 7919] for k in range(0, pcm.size, 7919))  # odd blocks
    assert [(r.start, r.end) for r in streamed] == [(r.start, r.end) for r in reference]
    for got, want in zip(streamed, reference, strict=True):
        assert np.array_equal(got.partial_starts, want.partial_starts)
        assert np.array_equal(got.partial_ends, want.partial_ends)
        assert np.array_equal(got.embeddings, want.embeddings)  # the same batches: bit for bit
    for count in (None, 4):
        want_turns = turns_from_partials(reference, count, diarizer.options)
        assert len(want_turns) > 10
        assert turns_from_partials(streamed, count, diarizer.options) == want_turns
    # the public call on the whole array (cut into blocks inside): the same turns
    assert diarizer(pcm, "auto") == turns_from_partials(reference, None, diarizer.options)


def test_the_stream_holds_only_the_open_region(diarizer: Diarizer, long_conversation: np.ndarray) -> None:
    pcm, block = long_conversation, 8192
    stream = SpeechRegionStream(diarizer.vad, diarizer.vad_options)
    regions, held = [], []
    for k in range(0, pcm.size, block):
        regions += stream.feed(pcm[k : k + block])
        stream.release(stream.horizon)
        held.append(stream.buffer.end - stream.buffer.start)
    regions += stream.finish()
    assert [(r.start, r.end) for r in regions] == [
        (r.start, r.end) for r in diarizer.vad.speech_regions(pcm, diarizer.vad_options)
    ]
    longest = max(r.n_samples for r in regions)
    # the open region, the pause that may end it (0.25 s), its padding and one block: never the whole audio
    assert max(held) <= longest + SR // 4 + 2 * 480 + 2 * block < pcm.size // 4, (max(held), longest)
