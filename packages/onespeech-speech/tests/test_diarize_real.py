"""The speaker stage with the real encoder and VAD on clips joined into a conversation."""

from __future__ import annotations

import threading
from itertools import pairwise
from pathlib import Path

import numpy as np
import pytest

from onespeech.kernels.errors import OperationCancelledError
from onespeech.speech.speakers.convert import convert_resemblyzer
from onespeech.speech.speakers.diarize import Diarizer
from onespeech.speech.speakers.encoder import SpeakerEncoder

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
    diarizer(pcm, 2, progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1][0] == seen[-1][1] and all(a <= b for (a, _), (b, _) in pairwise(seen))
    stop = threading.Event()
    stop.set()
    with pytest.raises(OperationCancelledError):
        diarizer(pcm, 2, cancel=stop)
    with pytest.raises(TypeError, match="not a cancellation signal"):
        diarizer(pcm, 2, cancel="no")


def test_silence_has_no_turns(diarizer: Diarizer) -> None:
    assert diarizer(np.zeros(3 * SR, np.float32), "auto") == []
