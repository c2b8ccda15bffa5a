"""The API boundary: wrong cancellation signals, closed objects, unbounded text."""

from __future__ import annotations

import numpy as np
import pytest
import soundfile as sf

from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner, TooManyTokensError
from onespeech.features import AudioFileSource
from onespeech.kernels import ObjectClosedError
from onespeech.qwen3 import Qwen3Options, Qwen3Recognizer
from onespeech.qwen3.transcript import Transcript

PCM = np.full(16000, 0.01, np.float32)
NOT_A_SIGNAL = "not a cancellation signal"


@pytest.fixture(scope="module")
def recognizer(tiny_asr_dir):
    with Qwen3Recognizer.load(tiny_asr_dir, Qwen3Options(threads=1, max_new_tokens=4)) as rec:
        yield rec


@pytest.fixture(scope="module")
def aligner(tiny_aligner_dir):
    with Qwen3ForcedAligner.load(tiny_aligner_dir, Qwen3AlignerOptions(threads=1)) as model:
        yield model


@pytest.mark.parametrize("cancel", [True, 1, "yes"])
def test_recognizer_refuses_a_cancel_that_is_no_signal(recognizer, tiny_asr_dir, cancel) -> None:
    with pytest.raises(TypeError, match=NOT_A_SIGNAL):
        recognizer.transcribe(PCM, cancel=cancel)
    with pytest.raises(TypeError, match=NOT_A_SIGNAL):
        recognizer.recognize(PCM, None, 4, cancel)
    with pytest.raises(TypeError, match=NOT_A_SIGNAL):
        Qwen3Recognizer.load(tiny_asr_dir, cancel=cancel)


@pytest.mark.parametrize("cancel", [True, 1, "yes"])
def test_aligner_refuses_a_cancel_that_is_no_signal(aligner, tiny_aligner_dir, cancel) -> None:
    with pytest.raises(TypeError, match=NOT_A_SIGNAL):
        aligner.align(PCM, "hello", "en", cancel=cancel)
    with pytest.raises(TypeError, match=NOT_A_SIGNAL):
        aligner.align_transcript(PCM, Transcript("hello", "en"), cancel=cancel)
    with pytest.raises(TypeError, match=NOT_A_SIGNAL):
        aligner.timestamp_logits(PCM, ["hello"], cancel=cancel)
    with pytest.raises(TypeError, match=NOT_A_SIGNAL):
        Qwen3ForcedAligner.load(tiny_aligner_dir, cancel=cancel)


def test_closed_recognizer_raises_the_closed_object_error(tiny_asr_dir) -> None:
    rec = Qwen3Recognizer.load(tiny_asr_dir, Qwen3Options(threads=1, max_new_tokens=4))
    rec.close()
    for call in (lambda: rec.transcribe(PCM), lambda: rec.generate(PCM), lambda: rec.transcribe(PCM[:0])):
        with pytest.raises(ObjectClosedError, match="closed"):
            call()


def test_closed_aligner_raises_the_closed_object_error(tiny_aligner_dir) -> None:
    model = Qwen3ForcedAligner.load(tiny_aligner_dir, Qwen3AlignerOptions(threads=1))
    model.close()
    for call in (
        lambda: model.align(PCM, "hello", "en"),
        lambda: model.align(PCM, "-- !", "en"),  # nothing to say: used to return without the model
        lambda: model.align_transcript(PCM, Transcript("hello", "en")),
        lambda: model.timestamp_logits(PCM, ["hello"]),
    ):
        with pytest.raises(ObjectClosedError, match="closed"):
            call()


def test_closed_audio_file_source_raises_the_closed_object_error(tmp_path) -> None:
    path = tmp_path / "tone.wav"
    sf.write(path, PCM, 16000)
    source = AudioFileSource(path)
    assert source.read_all().shape == PCM.shape
    source.close()
    with pytest.raises(ObjectClosedError, match="closed"):
        source.read_all()


def test_a_one_mib_word_is_refused_before_the_model_runs(run_case, tiny_aligner_dir) -> None:
    # one whitespace unit of 1 MiB of digits: each digit is a token (1,048,576 ids);
    # unbounded, this ran ~131k decoder positions for hours, so the case has a time cap
    result = run_case(
        """
        import numpy as np
        from onespeech.align import Qwen3AlignerOptions, Qwen3ForcedAligner
        with Qwen3ForcedAligner.load(args["model"], Qwen3AlignerOptions(threads=1)) as aligner:
            aligner.align(np.full(16000, 0.01, np.float32), "7" * (1 << 20), "en")
        """,
        args={"model": str(tiny_aligner_dir)},
        timeout_s=60,
    )
    result.expect_error(TooManyTokensError.__name__, match="more than 16384 ids")
